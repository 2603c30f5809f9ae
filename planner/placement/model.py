"""A placement of physical expert replicas onto devices, and the device loads it produces.

A `Placement` holds, for every MoE layer, which logical expert sits in each slot of each device:
an integer array `device_experts[layer, device, slot]`. Every device has the same number of slots
(vllm-ascend needs that), every logical expert has at least one replica, and no device holds two
replicas of one expert (a second copy on the same device would split nothing). The replica count
of an expert is how many slots hold it. Load model (DeepSeek EPLB's): the tokens routed to an
expert split evenly over its replicas, so a device's load is the sum over its slots of
`expert load / replica count`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.errors import BadInputError


@dataclass(frozen=True, eq=False)
class Placement:
    """For each layer, device -> logical expert id per slot; plus replica counts per expert.

    `device_experts` has shape [layers, devices, slots_per_device]; `replica_counts` (derived,
    shape [layers, experts]) counts the slots of each logical expert in each layer.
    """

    device_experts: np.ndarray
    num_experts: int
    replica_counts: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ids = np.asarray(self.device_experts)
        if ids.ndim != 3 or min(ids.shape) < 1:
            raise BadInputError(
                f"a placement needs shape [layers, devices, slots] with every size >= 1; got shape {list(ids.shape)}."
            )
        if not np.issubdtype(ids.dtype, np.integer):
            raise BadInputError("a placement holds integer logical expert ids.")
        if self.num_experts < 1:
            raise BadInputError("a placement needs at least one logical expert.")
        ids = ids.astype(np.int64, copy=True)
        ids.setflags(write=False)
        object.__setattr__(self, "device_experts", ids)
        validate_ids(ids, self.num_experts)
        counts = np.zeros((ids.shape[0], self.num_experts), dtype=np.int64)
        for layer in range(ids.shape[0]):
            counts[layer] = np.bincount(ids[layer].ravel(), minlength=self.num_experts)
        counts.setflags(write=False)
        object.__setattr__(self, "replica_counts", counts)

    @property
    def layers(self) -> int:
        """MoE layers placed."""
        return int(self.device_experts.shape[0])

    @property
    def devices(self) -> int:
        """Devices (dies) of the expert-parallel group."""
        return int(self.device_experts.shape[1])

    @property
    def slots_per_device(self) -> int:
        """Physical expert slots on every device."""
        return int(self.device_experts.shape[2])

    @property
    def redundant_slots(self) -> int:
        """Physical slots beyond one per logical expert (per layer)."""
        return self.devices * self.slots_per_device - self.num_experts

    def layer_lists(self, layer: int) -> list[list[int]]:
        """Layer `layer` as device -> list of logical expert ids (one per slot)."""
        return [[int(e) for e in row] for row in self.device_experts[layer]]

    def same_as(self, other: Placement) -> bool:
        """True when both place the same experts in the same slots."""
        return (
            self.num_experts == other.num_experts
            and self.device_experts.shape == other.device_experts.shape
            and bool(np.array_equal(self.device_experts, other.device_experts))
        )


def validate_ids(ids: np.ndarray, num_experts: int, source: str = "placement") -> None:
    """Raise BadInputError unless every id is a valid expert, every expert has a replica and
    no device holds an expert twice. `ids` has shape [layers, devices, slots]."""
    bad = (ids < 0) | (ids >= num_experts)
    if bad.any():
        layer, device, slot = (int(v) for v in np.argwhere(bad)[0])
        raise BadInputError(
            f"{source}: layer {layer} device {device} slot {slot} holds expert "
            f"{int(ids[layer, device, slot])}; expert ids must be in 0..{num_experts - 1}."
        )
    layers, devices, slots = ids.shape
    for layer in range(layers):
        counts = np.bincount(ids[layer].ravel(), minlength=num_experts)
        missing = np.flatnonzero(counts == 0)
        if missing.size:
            shown = ", ".join(str(int(e)) for e in missing[:8])
            more = f" and {missing.size - 8} more" if missing.size > 8 else ""
            raise BadInputError(
                f"{source}: layer {layer} has no replica of expert(s) {shown}{more}; every "
                f"logical expert needs at least one slot."
            )
        if slots > 1:
            ordered = np.sort(ids[layer], axis=1)
            dup = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
            if dup.size:
                device = int(dup[0])
                row = ordered[device]
                expert = int(row[1:][row[1:] == row[:-1]][0])
                raise BadInputError(
                    f"{source}: layer {layer} device {device} holds expert {expert} twice; a "
                    f"device holds at most one replica of an expert."
                )


def replica_loads(loads: np.ndarray, replica_counts: np.ndarray) -> np.ndarray:
    """Load of one replica of each logical expert, [layers, experts]: load / replica count."""
    return np.asarray(loads, dtype=np.float64) / np.maximum(replica_counts, 1)


def slot_loads(loads: np.ndarray, placement: Placement) -> np.ndarray:
    """Load of every physical slot, [layers, devices, slots]."""
    loads = _check_loads(loads, placement)
    per_replica = replica_loads(loads, placement.replica_counts)
    layers = placement.layers
    flat = placement.device_experts.reshape(layers, -1)
    return np.take_along_axis(per_replica, flat, axis=1).reshape(placement.device_experts.shape)


def device_loads(loads: np.ndarray, placement: Placement) -> np.ndarray:
    """Load (tokens) each device serves in each layer, [layers, devices]."""
    return slot_loads(loads, placement).sum(axis=2)


def _check_loads(loads: np.ndarray, placement: Placement) -> np.ndarray:
    loads = np.asarray(loads, dtype=np.float64)
    expected = (placement.layers, placement.num_experts)
    if loads.shape != expected:
        raise BadInputError(
            f"loads have shape {list(loads.shape)} but the placement needs {list(expected)} (layers x experts)."
        )
    return loads
