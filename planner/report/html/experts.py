"""The expert layer of an instance: which experts sit on which device, hot experts and copies marked.

The placement is the one the launch exports write (`planner.report.launch.common.placement_for`:
`planner.placement.optimize_placement` on the measured loads of `--loads`, or on the default
skew model's popularity, which is synthetic: which expert is hot in real traffic is not known
then, and the page says so). One layer is drawn: under the default model every MoE layer has the
same popularity and so the same placement; with measured loads, the layer whose busiest device
carries the most over the mean.

Marks: a *hot* expert takes at least `HOT_RATIO` times the mean expert's load; a *redundant copy*
is a slot of an expert placed on more than one device (the placement splits its tokens evenly
over its copies). A slot's colour is the load it serves (its expert's load over its copies)
against the mean slot's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.specs.model import ModelSpec
from planner.specs.plan import PhasePlan

HOT_RATIO = 1.5
SLOT = 17  # px: one expert slot
SLOT_GAP = 1
DEVICE_PAD = 4
DEVICE_LABEL_H = 12
DEVICE_GAP = 6
MAX_WIDTH = 1180
MAX_SLOT_COLS = 8
# slot colours: blue at half the mean slot's load or less, white at the mean, red at twice or more
COLD, MEAN, HOT = (103, 169, 207), (247, 247, 247), (214, 96, 77)


@dataclass(frozen=True)
class ExpertLayer:
    """One instance kind's expert placement at one layer, with the loads it was made from."""

    role: str
    layer: int
    layers: int
    device_experts: list[list[int]]  # EP device -> expert id per slot
    expert_loads: list[float]  # per expert, this layer
    replica_counts: list[int]
    dedicated_shared_devices: int
    synthetic: bool  # loads from the default skew model, not measured

    def experts_of(self, local_device: int) -> list[int] | None:
        """Experts on the instance's device `local_device` (None: a dedicated shared-expert device)."""
        return self.device_experts[local_device] if local_device < len(self.device_experts) else None


def expert_layer(role: str, phase: PhasePlan, model: ModelSpec, loads: np.ndarray | None = None) -> ExpertLayer | None:
    """The placement of `phase`'s expert slots at the layer the page draws (None for a dense model)."""
    if phase.moe is None or model.moe is None:
        return None
    from planner.report.launch.common import default_loads, placement_for

    layer_loads = loads if loads is not None else default_loads(model)
    placement = placement_for(model, phase, layer_loads)
    layer = 0
    if loads is not None:  # the layer whose busiest device carries the most over the mean
        from planner.placement import device_loads

        per_device = device_loads(layer_loads, placement)
        layer = int(np.argmax(per_device.max(axis=1) / np.maximum(per_device.mean(axis=1), 1e-12)))
    return ExpertLayer(
        role=role,
        layer=layer,
        layers=placement.layers,
        device_experts=placement.layer_lists(layer),
        expert_loads=[float(x) for x in np.asarray(layer_loads, dtype=np.float64)[layer]],
        replica_counts=[int(c) for c in placement.replica_counts[layer]],
        dedicated_shared_devices=phase.shared_expert.dedicated_devices,
        synthetic=loads is None,
    )


@dataclass
class SlotCell:
    x: float
    y: float
    expert: int
    fill: str
    dark_text: bool
    hot: bool
    copies: int
    title: str


@dataclass
class DeviceBox:
    x: float
    y: float
    w: float
    h: float
    label: str
    slots: list[SlotCell] = field(default_factory=list)
    shared: bool = False


@dataclass
class ExpertDrawing:
    """The SVG geometry of one expert layer, and what the caption says."""

    role: str
    width: float
    height: float
    devices: list[DeviceBox]
    slot: int
    facts: list[str]


def _slot_fill(ratio: float) -> tuple[str, bool]:
    """Colour of a slot serving `ratio` x the mean slot load (and whether its text should be dark)."""
    t = min(1.0, max(-1.0, math.log2(max(ratio, 1e-9))))  # 0.5x -> -1, 1x -> 0, 2x -> 1
    end = HOT if t > 0 else COLD
    rgb = tuple(round(m + (e - m) * abs(t)) for m, e in zip(MEAN, end, strict=True))
    return "#{:02x}{:02x}{:02x}".format(*rgb), abs(t) < 0.75


def expert_drawing(layer: ExpertLayer, moe_imbalance: float | None) -> ExpertDrawing:
    """Device boxes (EP devices, then dedicated shared-expert devices) with their slots."""
    ep = len(layer.device_experts)
    slots = len(layer.device_experts[0]) if ep else 0
    cols = max(1, min(slots, MAX_SLOT_COLS))
    rows = max(1, math.ceil(slots / cols))
    box_w = max(2 * DEVICE_PAD + cols * SLOT + (cols - 1) * SLOT_GAP, 44)  # (room for the label)
    box_h = DEVICE_LABEL_H + DEVICE_PAD + rows * SLOT + (rows - 1) * SLOT_GAP + DEVICE_PAD
    n_boxes = ep + layer.dedicated_shared_devices
    per_row = max(1, int((MAX_WIDTH + DEVICE_GAP) // (box_w + DEVICE_GAP)))
    per_row = math.ceil(n_boxes / math.ceil(n_boxes / per_row))  # rows of even length
    loads = np.asarray(layer.expert_loads, dtype=np.float64)
    counts = np.maximum(np.asarray(layer.replica_counts), 1)
    mean_expert = float(loads.mean()) if loads.size else 0.0
    per_copy = loads / counts
    total_slots = ep * slots
    mean_slot = float(loads.sum() / total_slots) if total_slots else 0.0
    device_load = [float(sum(per_copy[e] for e in experts)) for experts in layer.device_experts]
    mean_device = float(np.mean(device_load)) if device_load else 0.0
    boxes = []
    for i in range(n_boxes):
        bx = (i % per_row) * (box_w + DEVICE_GAP)
        by = (i // per_row) * (box_h + DEVICE_GAP)
        if i >= ep:
            boxes.append(DeviceBox(bx, by, box_w, box_h, f"{i}: shared", shared=True))
            continue
        ratio = device_load[i] / mean_device if mean_device else 1.0
        box = DeviceBox(bx, by, box_w, box_h, f"{i}: {ratio:.2f}×")
        for k, e in enumerate(layer.device_experts[i]):
            served = per_copy[e] / mean_slot if mean_slot else 1.0
            fill, dark = _slot_fill(served)
            hot = mean_expert > 0 and loads[e] >= HOT_RATIO * mean_expert
            copies = int(counts[e])
            title = (
                f"expert {e} on device {i}: {loads[e] / mean_expert if mean_expert else 0:.2f}× the mean expert's load"
                + (" (hot)" if hot else "")
                + (f"; {copies} copies, this one serves 1/{copies} of its tokens" if copies > 1 else "")
            )
            sx = bx + DEVICE_PAD + (k % cols) * (SLOT + SLOT_GAP)
            sy = by + DEVICE_LABEL_H + DEVICE_PAD + (k // cols) * (SLOT + SLOT_GAP)
            box.slots.append(SlotCell(sx, sy, int(e), fill, dark, bool(hot), copies, title))
        boxes.append(box)
    rows_of_boxes = math.ceil(n_boxes / per_row) if n_boxes else 0
    width = min(n_boxes, per_row) * (box_w + DEVICE_GAP) - DEVICE_GAP if n_boxes else 0
    height = rows_of_boxes * (box_h + DEVICE_GAP) - DEVICE_GAP if n_boxes else 0
    hot = int((loads >= HOT_RATIO * mean_expert).sum()) if mean_expert else 0
    redundant = total_slots - len(loads)
    replicated = int((counts > 1).sum())
    busiest = max(device_load) / mean_device if mean_device else 1.0
    facts = [
        f"MoE layer {layer.layer} of {layer.layers}: {len(loads)} routed experts in {ep} devices × {slots} slots; "
        f"{redundant} redundant {'copy' if redundant == 1 else 'copies'} ({replicated} experts placed more than once); "
        f"{hot} hot experts (at least {HOT_RATIO:g}× the mean expert's load).",
        f"On the loads it was placed from, the busiest device serves {busiest:.3f}× the mean device's tokens"
        + (
            f"; the cost model's engine imbalance for this layout is {moe_imbalance:.3f}× (drift between placement "
            "windows and per-step spread included, see planner/costmodel/imbalance.py)."
            if moe_imbalance
            else "."
        ),
    ]
    if layer.synthetic:
        facts.append(
            "Loads: the default skew model (log-normal expert popularity), the same for every layer, so every layer "
            "has this placement. It is synthetic: which expert is hot in your traffic is unknown; give --loads FILE "
            "(measured expert loads) to place from your own."
        )
    else:
        facts.append("Loads: measured (--loads); the layer drawn is the one whose busiest device carries the most.")
    if layer.dedicated_shared_devices:
        facts.append(
            f"The last {layer.dedicated_shared_devices} devices run the shared expert only (drawn last; the engine "
            "decides which devices they are)."
        )
    return ExpertDrawing(layer.role, width, height, boxes, SLOT, facts)
