"""The machine: physical peaks per device (die), the interconnect levels, and named efficiency factors.

A *device* is what the software sees: one die. A *card* is what is sold and counted in published
figures: an Atlas 800I A2 card holds one 910B die, a CloudMatrix384 "card" is one 910C package
of two dies. Every figure moeplan prints says whether it is per device or per card.

The interconnect is a list of levels, innermost first. Level *i* joins `devices_per_group`
devices (counted from the first device, cumulative), so a two-level machine (A2: 8-device HCCS
full mesh, then RoCE between nodes) and a flat supernode (CM384: package SIO, node UB,
supernode UB) are both one list. The last level may leave `devices_per_group` unset: it then
spans any number of devices (scale-out networks).

Physical peaks and efficiencies are separate fields; every efficiency carries its source.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Strict(BaseModel):
    """Base for every spec: unknown keys are errors, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Factor(Strict):
    """A dimensionless factor (an efficiency, a fraction of peak) and where its value comes from."""

    value: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    source: str = Field(min_length=1)


class Seconds(Strict):
    """A fixed time cost and where its value comes from."""

    value: NonNegFloat
    source: str = Field(min_length=1)


class Bytes(Strict):
    """A byte count and where its value comes from."""

    value: NonNegFloat
    source: str = Field(min_length=1)


class PeakFlops(Strict):
    """Peak dense math throughput of one device (die), in operations per second."""

    bf16: PositiveFloat
    fp16: PositiveFloat
    int8: PositiveFloat
    source: str = Field(min_length=1)


class LinkLevel(Strict):
    """One level of the interconnect, as seen from one device."""

    name: str = Field(min_length=1)
    devices_per_group: int | None = Field(
        default=None, ge=2, description="devices joined at this level (cumulative); None: unbounded"
    )
    bandwidth_bytes_per_s: PositiveFloat = Field(
        description="per device, per direction, to peers reached at this level"
    )
    latency_s: NonNegFloat
    source: str = Field(min_length=1)


class Efficiencies(Strict):
    """Fractions of physical peak reached by each kind of work; each names its source."""

    matmul: Factor = Field(description="dense GEMMs (INT8 or BF16) on the cube units")
    attention_compute: Factor = Field(description="attention kernel, fraction of BF16 peak")
    hbm_bandwidth: Factor
    link_bandwidth: Factor


class FixedCosts(Strict):
    """Per-launch and per-step costs on top of the roofline (they set the step at small batch)."""

    matrix_op: Seconds
    vector_op: Seconds
    collective: Seconds
    mtp_framework_per_step: Seconds


class MemoryReserve(Strict):
    """HBM a device cannot give to weights and KV cache."""

    comm_buffers: Bytes
    runtime_reserve: Bytes


class Overlap(Strict):
    """Which of the report's overlaps the software stack on this machine performs."""

    decode_shared_expert_with_dispatch: bool = Field(
        default=True,
        description="gating and shared-expert compute run concurrently with MoE dispatch/combine",
    )
    prefill_micro_batch_efficiency: Factor = Field(
        description="fraction of the shorter of compute/communication hidden by two micro-batches",
    )
    decode_micro_batch_efficiency: Factor = Field(
        default=Factor(value=1.0, source="default: ideal two-stream overlap of decode micro-batches"),
        description="fraction of the shorter of compute/MoE communication hidden by two decode micro-batches",
    )


class HardwareSpec(Strict):
    """A machine: its device, how devices form cards and nodes, links, and named efficiencies."""

    schema_version: int = Field(default=1, ge=1, le=1)
    name: str = Field(min_length=1)
    description: str = ""
    device_name: str = Field(min_length=1)
    card_name: str = Field(min_length=1)
    devices_per_card: int = Field(ge=1, le=64)
    devices_per_node: int = Field(ge=1, le=4096)
    max_devices: int | None = Field(
        default=None, ge=1, description="devices in the largest machine an instance may span"
    )
    peak_flops_per_s: PeakFlops
    hbm_bytes: PositiveFloat = Field(description="HBM capacity per device")
    hbm_bandwidth_bytes_per_s: PositiveFloat = Field(description="HBM bandwidth per device")
    hbm_source: str = Field(min_length=1)
    levels: list[LinkLevel] = Field(min_length=1, max_length=8)
    efficiency: Efficiencies
    fixed_costs: FixedCosts
    memory: MemoryReserve
    overlap: Overlap
    kv_transfer_bandwidth_bytes_per_s: PositiveFloat = Field(
        description="per device, prefill-to-decode KV-cache transfer bandwidth"
    )

    @model_validator(mode="after")
    def _levels_nest(self) -> HardwareSpec:
        sizes = [lvl.devices_per_group for lvl in self.levels]
        for i, size in enumerate(sizes):
            if size is None and i != len(sizes) - 1:
                raise ValueError(
                    f"levels[{i}] ({self.levels[i].name}) leaves devices_per_group unset; only the "
                    "last (outermost) level may be unbounded"
                )
        bounded = [s for s in sizes if s is not None]
        for a, b in zip(bounded, bounded[1:], strict=False):
            if b <= a or b % a:
                raise ValueError(
                    "levels must nest: each level's devices_per_group must be a larger multiple "
                    f"of the previous one (got {a} then {b})"
                )
        if self.devices_per_card > 1 and bounded and bounded[0] % self.devices_per_card:
            raise ValueError("levels[0].devices_per_group must be a multiple of devices_per_card")
        if self.devices_per_node % self.devices_per_card:
            raise ValueError("devices_per_node must be a multiple of devices_per_card")
        if self.max_devices is not None and sizes[-1] is not None and self.max_devices > sizes[-1]:
            raise ValueError(
                f"max_devices {self.max_devices} exceeds the outermost level's devices_per_group {sizes[-1]}"
            )
        return self

    def group_sizes(self, n_devices: int) -> list[int]:
        """Devices of an n-device contiguous group reached by each level (cumulative, capped at n)."""
        out = []
        for lvl in self.levels:
            size = lvl.devices_per_group
            out.append(n_devices if size is None else min(n_devices, size))
        out[-1] = n_devices
        return out

    def cards(self, devices: int) -> float:
        """Cards occupied by `devices` devices."""
        return devices / self.devices_per_card
