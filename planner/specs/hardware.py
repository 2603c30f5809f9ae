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

Peaks are listed per number format (`peak_flops_per_s.<format>`); a format the chip lacks is
left out, and a quantisation scheme that needs it is refused naming that field
(`specs.quantization.check_scheme_on_hardware`). Machines that are announced but not shipping
carry `status: announced`: their figures are vendor claims, and every command that plans or
evaluates on them says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def _admits_bool(annotation: object) -> bool:
    """Whether a field's type takes true/false (bool itself, or a union or literal holding it)."""
    if annotation is bool or isinstance(annotation, bool):
        return True
    return any(_admits_bool(arg) for arg in get_args(annotation))


class Strict(BaseModel):
    """Base for every spec: unknown keys are errors, values are checked on assignment, and a
    true/false given for a number is an error (pydantic would read it as 1 or 0: `tpot_ms: true` was
    an SLO of 1 ms)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: object, info: ValidationInfo) -> object:
        name = info.field_name
        if isinstance(value, bool) and name is not None and not _admits_bool(cls.model_fields[name].annotation):
            raise ValueError(f"give a number, not {str(value).lower()}")
        return value


class FactorRange(Strict):
    """How far a factor may be from its value: the band every prediction carries comes from these."""

    low: NonNegFloat
    high: NonNegFloat
    derived: str = Field(min_length=1, description="how the range was derived (leave-one-out spread, source)")

    @model_validator(mode="after")
    def _ordered(self) -> FactorRange:
        if self.low > self.high:
            raise ValueError(f"range low {self.low} exceeds high {self.high}; swap them")
        return self


class Factor(Strict):
    """A dimensionless factor (an efficiency, a fraction of peak) and where its value comes from."""

    value: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
    source: str = Field(min_length=1)
    fitted_on: str | None = Field(
        default=None,
        description="'published': fitted to the validation/ store (the leave-one-out of `moeplan fidelity` "
        "refits it); otherwise the measurements file `moeplan calibrate` fitted it to",
    )
    range: FactorRange | None = None

    @model_validator(mode="after")
    def _range_holds_value(self) -> Factor:
        if self.range is not None and not self.range.low <= self.value <= self.range.high:
            raise ValueError(f"value {self.value} lies outside its range [{self.range.low}, {self.range.high}]")
        if self.range is not None and self.range.high > 1:
            raise ValueError(f"range high {self.range.high} exceeds 1 (a fraction of peak)")
        return self


class Seconds(Strict):
    """A fixed time cost and where its value comes from."""

    value: NonNegFloat
    source: str = Field(min_length=1)
    fitted_on: str | None = Field(default=None, description="as for Factor")
    range: FactorRange | None = None

    @model_validator(mode="after")
    def _range_holds_value(self) -> Seconds:
        if self.range is not None and not self.range.low <= self.value <= self.range.high:
            raise ValueError(f"value {self.value} lies outside its range [{self.range.low}, {self.range.high}]")
        return self


class Bytes(Strict):
    """A byte count and where its value comes from."""

    value: NonNegFloat
    source: str = Field(min_length=1)


MATH_FORMATS = ("bf16", "fp16", "int8", "fp8", "mxfp8", "hif8", "mxfp4")


class PeakFlops(Strict):
    """Peak dense math throughput of one device (die) per number format, in operations per second.

    Only BF16 is required (the attention core runs in BF16); a format left out is one the chip
    does not support, and schemes that need it are refused. W4A8 (INT4 weights, INT8
    activations) runs on the INT8 path after dequantisation, so it uses `int8`.
    """

    bf16: PositiveFloat
    fp16: PositiveFloat | None = None
    int8: PositiveFloat | None = None
    fp8: PositiveFloat | None = Field(default=None, description="FP8 (E4M3/E5M2)")
    mxfp8: PositiveFloat | None = Field(default=None, description="OCP microscaling FP8 (32-element blocks)")
    hif8: PositiveFloat | None = Field(default=None, description="Huawei HiFloat8")
    mxfp4: PositiveFloat | None = Field(default=None, description="OCP microscaling FP4 (32-element blocks)")
    source: str = Field(min_length=1)

    def get(self, fmt: str) -> float | None:
        """Peak of math format `fmt` (None when the chip does not list it)."""
        return getattr(self, fmt, None) if fmt in MATH_FORMATS else None

    def listed(self) -> dict[str, float]:
        """The formats this chip lists, with their peaks."""
        return {f: v for f in MATH_FORMATS if (v := getattr(self, f)) is not None}


class CoreCount(Strict):
    """Compute cores of one device and where the count comes from."""

    value: int = Field(ge=1, le=4096)
    source: str = Field(min_length=1)


class PricePerCard(Strict):
    """What one card costs, in the user's cost units (any currency, or per hour), and whence."""

    value: PositiveFloat
    source: str = Field(min_length=1)


class CardPower(Strict):
    """Electrical power one card draws while serving, in watts, and what the figure covers."""

    value: PositiveFloat = Field(description="watts per card")
    basis: Literal["card", "all-in", "assumption"] = Field(
        description="card: the card alone (datasheet); all-in: the card's share of the whole system (hosts, "
        "network, optics) as the source states it; assumption: no published figure, a stated guess"
    )
    source: str = Field(min_length=1)


class NodePower(Strict):
    """Power a node draws besides its cards (hosts, NICs, fans), in watts, where published."""

    value: NonNegFloat = Field(description="watts per node on top of its cards")
    source: str = Field(min_length=1)


class PricePerCardHour(Strict):
    """What one card-hour costs the user (their price: moeplan ships none)."""

    value: PositiveFloat = Field(description="price of one card for one hour")
    currency: str = Field(min_length=1, max_length=16, description="the unit of value: USD, CNY, EUR, credits, ...")
    source: str = Field(min_length=1, description="where the price comes from (a quote, a contract, a cloud list)")


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
    decode_kv_read_bandwidth: Factor | None = Field(
        default=None,
        description="the decode attention kernel's KV-cache read, fraction of HBM peak (a paged-KV streaming kernel "
        "such as FlashMLA reaches more of the peak than GEMMs that read weights at small M); default hbm_bandwidth's",
    )
    prefill_attention_compute: Factor | None = Field(
        default=None,
        description="the prefill attention kernel (non-absorbed, FlashAttention-style over the prompt), fraction of "
        "BF16 peak; a different kernel from decode's (absorbed MLA, KV read): default the decode kernel's figure",
    )


class FixedCosts(Strict):
    """Per-launch and per-step costs on top of the roofline (they set the step at small batch)."""

    matrix_op: Seconds
    vector_op: Seconds
    collective: Seconds
    mtp_framework_per_step: Seconds
    sparse_attention_per_sequence: Seconds | None = Field(
        default=None,
        description="per sequence and sparse-attention layer (DSA, CSA) of a decode step: what a stack whose indexer "
        "and top-k run sequence by sequence pays on top of the roofline (launches, per-request metadata); none where "
        "the file states none (kernels that take a step's sequences in one batched launch)",
    )


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
        default=Factor(
            value=1.0,
            source="default: ideal two-stream overlap of decode micro-batches (SGLang's two-batch overlap, "
            "LMSYS blog 2025-05-05)",
            range=FactorRange(
                low=0.5,
                high=1.0,
                derived="ideal overlap is an assumption: the fast end; the slow end hides half the shorter stream "
                "(+-50% rule of approximate figures)",
            ),
        ),
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
    ai_cores_per_device: CoreCount | None = Field(
        default=None,
        description="the device's matrix (cube) cores, which a decode attention kernel that gives every "
        "(sequence, KV head) one core leaves idle at small batches (plans with decode_attention_kv_split: false)",
    )
    levels: list[LinkLevel] = Field(min_length=1, max_length=8)
    efficiency: Efficiencies
    fixed_costs: FixedCosts
    memory: MemoryReserve
    overlap: Overlap
    kv_transfer_bandwidth_bytes_per_s: PositiveFloat = Field(
        description="per device, prefill-to-decode KV-cache transfer bandwidth"
    )
    status: Literal["shipping", "announced"] = Field(
        default="shipping", description="announced: figures are vendor claims, not measured parts"
    )
    status_source: str = Field(default="", description="where the status (and announcement date) comes from")
    price_per_card: PricePerCard | None = Field(
        default=None, description="cost units per card; enables --max-cost and cost-weighted mixed plans"
    )
    power_w_per_card: CardPower | None = Field(
        default=None, description="watts per card while serving: joules per token and the energy objective"
    )
    node_power_w: NodePower | None = Field(
        default=None, description="watts per node besides its cards (hosts, NICs), where published"
    )
    price_per_card_hour: PricePerCardHour | None = Field(
        default=None,
        description="the user's price of one card-hour: cost per million tokens and the cost objective "
        "(no catalog machine carries one; see docs/examples/priced-a3.yaml)",
    )
    engine_machines: dict[str, str] = Field(
        default_factory=dict,
        description="engine -> the catalog machine whose factors are fitted on that engine's runs of this "
        "hardware, where this file's factors are another software stack's (validation/_fit.yaml)",
    )

    attention_machines: dict[str, str] = Field(
        default_factory=dict,
        description="attention layer kind (dsa, csa, hca, ...) -> the catalog machine whose factors are fitted on "
        "the measured runs of models with that kind on this hardware, where no such run is among this file's "
        "(validation/_fit.yaml)",
    )

    def attention_machine_warning(self, layer_kinds: Iterable[str]) -> str | None:
        """The warning for a model with `layer_kinds` when another file holds the factors fitted on this
        hardware's measured runs of such layers (None when none of its kinds is named)."""
        named = sorted(k for k in layer_kinds if self.attention_machines.get(k, self.name) != self.name)
        if not named:
            return None
        others = sorted({self.attention_machines[k] for k in named})
        return (
            f"hardware '{self.name}': no measured run of a model with {', '.join(named)} attention layers is "
            f"among those its factors are fitted on; the ones measured on this hardware are fitted in "
            f"{', '.join(repr(o) for o in others)}, another software stack (plan with --hardware {others[0]} to "
            "use its factors; docs/fidelity.md)."
        )

    @property
    def is_announced(self) -> bool:
        """True when the machine is announced but not shipping (its figures are vendor claims)."""
        return self.status == "announced"

    def announced_warning(self) -> str | None:
        """The warning to print when planning on this machine (None when it ships)."""
        if not self.is_announced:
            return None
        src = f" ({self.status_source})" if self.status_source else ""
        fitted = any(
            isinstance(f, Factor) and f.fitted_on
            for f in (getattr(self.efficiency, n) for n in type(self.efficiency).model_fields)
        )
        efficiencies = (
            "its efficiencies are fitted on a few measured runs (each factor's source names the runs, the machine "
            "they ran on and their software stack)"
            if fitted
            else "its efficiencies are not measured"
        )
        return (
            f"hardware '{self.name}' is announced, not shipping{src}: its peaks, memory and links are vendor "
            f"claims and {efficiencies}; treat the figures as estimates."
        )

    def engine_machine_warning(self, engine: str) -> str | None:
        """The warning to print when planning for `engine` on this machine while another file holds the
        factors fitted on that engine's runs of it (None when this file's are the ones)."""
        other = self.engine_machines.get(engine)
        if other is None or other == self.name:
            return None
        return (
            f"hardware '{self.name}': its efficiency factors are fitted on another software stack's runs; "
            f"{engine}'s measured runs on this hardware are fitted in '{other}': plan with --hardware {other} "
            "for the factors of the engine you will launch (docs/fidelity.md)."
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
        for i, size in enumerate(sizes):
            if size is not None and self.devices_per_node % size and size % self.devices_per_node:
                raise ValueError(
                    f"levels[{i}] ({self.levels[i].name}): devices_per_group {size} neither divides devices_per_node "
                    f"{self.devices_per_node} nor is a multiple of it; a level's groups tile the nodes"
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
