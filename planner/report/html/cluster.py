"""The cluster drawn: nodes and their devices as a grid, each device coloured by its instance and role.

Instances sit on nodes as the launch exports place them (`planner.report.launch.common.allocate`:
instances of a node or more start on a node boundary, smaller ones are packed into nodes), so the
drawing is the deployment `--emit` writes. A device is one die as the software sees it; on a
machine of several dies per card (CloudMatrix384's 910C package) the dies of a card are framed
together. Devices of the card budget (or of a partly used node) that the plan leaves free are
drawn grey.

Roles (`ROLES`) give the hue, the instance the shade: instance i of n of a role is one of n
lightnesses, interleaved so that neighbouring instances differ most. A role is a kind of
instance (prefill, decode, colocated) or, for attention-FFN disaggregation, a side of one:
`device_roles` says which role each device of an instance plays, the one place a new
structure's sides are added.
"""

from __future__ import annotations

import colorsys
import math
from dataclasses import dataclass, field

from planner.report.html.experts import ExpertLayer
from planner.report.html.plans_table import Section
from planner.specs.hardware import HardwareSpec
from planner.specs.plan import ParallelLayout, PhasePlan, Plan

CELL_SIZES = ((128, 36), (512, 28))  # px per device: (up to this many devices drawn, size); else CELL
CELL = 20
GAP = 2
CARD_GAP = 3  # extra space between the cards of a node (dies of a card sit together)
NODE_PAD = 5
NODE_LABEL_H = 14
NODE_GAP = 12
MAX_WIDTH = 1180
MAX_DRAWN_DEVICES = 4096  # beyond this, alike instances are left out and the caption counts them
IDLE_FILL = "#e9ecef"
LIGHTNESS = (0.34, 0.70)


@dataclass(frozen=True)
class Role:
    """A kind of device in the drawing: its name, hue, and what it does."""

    key: str
    label: str
    hue: float  # degrees
    tag: str  # the letter in each cell
    description: str


ROLES: dict[str, Role] = {
    "prefill": Role("prefill", "prefill", 212.0, "P", "prefill instances: prompts in, KV cache out"),
    "decode": Role("decode", "decode", 28.0, "D", "decode instances: one token per sequence per step"),
    "colocated": Role(
        "colocated", "colocated", 280.0, "C", "colocated instances: prefill and decode take turns on the same devices"
    ),
    # attention-FFN disaggregation (issue 21): an instance's attention side and its expert side
    "attention": Role("attention", "attention side (AFD)", 168.0, "A", "attention, KV cache and dense layers"),
    "ffn": Role("ffn", "expert side (AFD)", 350.0, "F", "routed experts"),
}


def device_roles(role: str, phase: PhasePlan) -> list[str]:
    """The role each device of one instance plays (its index in the instance -> a key of ROLES).

    Every device of a prefill, decode or colocated instance plays the instance's role. An AFD
    instance (once plans carry one) splits its devices into the attention and the expert side.
    """
    return [role] * phase.devices


def instance_colour(role: str, index: int, count: int) -> str:
    """The fill of instance `index` of `count` of a role: the role's hue, the instance's lightness."""
    hue = ROLES[role].hue / 360.0 if role in ROLES else 0.0
    order = _interleaved(count)
    lo, hi = LIGHTNESS
    light = (lo + hi) / 2 if count == 1 else lo + (hi - lo) * order.index(index) / (count - 1)
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.62)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _interleaved(count: int) -> list[int]:
    """Instance indices in order of lightness, so that consecutive instances are far apart in it."""
    half = (count + 1) // 2
    out = []
    for i in range(half):
        out.append(i)
        if i + half < count:
            out.append(i + half)
    return out


def text_is_dark(fill: str) -> bool:
    """Whether text on `fill` reads better dark (by its perceived lightness)."""
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b > 150


def rank_in(layout: ParallelLayout, local: int) -> str:
    """Device `local`'s place in a layout: TP groups are consecutive devices (TP innermost, as the
    engines number ranks)."""
    if layout.tp == 1:
        return f"DP rank {local}"
    if layout.dp == 1:
        return f"TP rank {local}"
    return f"DP {local // layout.tp}, TP {local % layout.tp}"


@dataclass
class Cell:
    """One device."""

    x: float
    y: float
    fill: str
    dark_text: bool
    role: str  # a key of ROLES, or "idle"
    instance: str  # e.g. "decode-2" ("" when idle)
    label: str
    title: str
    shared_expert: bool = False


@dataclass
class NodeBox:
    x: float
    y: float
    w: float
    h: float
    label: str
    cards: list[tuple[float, float, float, float]] = field(default_factory=list)  # frames of multi-die cards


@dataclass
class LegendEntry:
    """One kind of instance: its colours (one per instance drawn) and its layouts in full."""

    role: str
    label: str
    colours: list[tuple[str, str]]  # (instance label, fill)
    section: Section
    drawn: int


@dataclass
class ClusterDrawing:
    """The SVG geometry of one machine's devices, the legend and the caption."""

    machine: str
    width: float
    height: float
    nodes: list[NodeBox]
    cells: list[Cell]
    legend: list[LegendEntry]
    facts: list[str]
    cell: int = CELL

    @property
    def drawn_devices(self) -> int:
        return sum(1 for c in self.cells if c.role != "idle")


def cell_size(devices: int) -> int:
    """Pixels per device: small clusters are drawn large enough to read."""
    return next((size for most, size in CELL_SIZES if devices <= most), CELL)


def _node_columns(hw: HardwareSpec, cell: int) -> int:
    """Devices per row inside a node box: the whole node when it fits, else whole cards per row."""
    dpc = hw.devices_per_card
    fit = int((MAX_WIDTH - 2 * NODE_PAD) // (cell + GAP + CARD_GAP / dpc))
    if hw.devices_per_node <= fit:
        return hw.devices_per_node
    return max(dpc, fit // dpc * dpc)


def _cell_offset(hw: HardwareSpec, local: int, cols: int, cell: int) -> tuple[float, float]:
    """Position of the node's device `local` inside its node box."""
    col, row = local % cols, local // cols
    card = col // hw.devices_per_card
    x = NODE_PAD + col * (cell + GAP) + card * CARD_GAP
    y = NODE_LABEL_H + NODE_PAD + row * (cell + GAP)
    return x, y


def _drawn_instances(sections: list[tuple[str, PhasePlan]]) -> dict[str, int]:
    """How many instances of each role to draw: all of them unless the plan exceeds MAX_DRAWN_DEVICES."""
    total = sum(p.total_devices for _, p in sections)
    if total <= MAX_DRAWN_DEVICES:
        return {role: p.instances for role, p in sections}
    return {
        role: max(1, min(p.instances, int(MAX_DRAWN_DEVICES * p.total_devices / total) // p.devices))
        for role, p in sections
    }


def _with_instances(plan: Plan, drawn: dict[str, int]) -> Plan:
    """The plan with only `drawn[role]` instances of each role (no validation: a drawing aid)."""
    update = {
        role: section.model_copy(update={"instances": drawn[role]})
        for role, section in (("colocated", plan.colocated), ("prefill", plan.prefill), ("decode", plan.decode))
        if section is not None and role in drawn
    }
    return plan.model_copy(update=update)


def cluster_drawing(
    hw: HardwareSpec,
    plan: Plan,
    table_sections: list[Section],
    layers: dict[str, ExpertLayer],
    budget_devices: int | None = None,
) -> ClusterDrawing:
    """Draw the instances of `plan` on `hw`'s nodes (a plan whose phases run on two machines is
    drawn once per machine, each time with that machine's phases only).

    `table_sections`: the plan's kinds of instances as the table describes them (the legend);
    `layers`: per role, its expert placement (each device's experts in its tooltip);
    `budget_devices`: devices of the card budget, drawn free where the plan leaves them.
    """
    from planner.engines.plan_view import plan_view
    from planner.report.launch.common import allocate

    phases = plan_cluster_sections(plan)
    drawn = _drawn_instances(phases)
    slots = allocate(plan_view(_with_instances(plan, drawn)), hw, max_instances=None)
    described = {s.role: s for s in table_sections}
    sections = [(role, phase, described[role]) for role, phase in phases]
    dpn = hw.devices_per_node
    used_nodes = 1 + max((n for s in slots for n, _ in s.nodes), default=-1)
    budget_nodes = math.ceil(budget_devices / dpn) if budget_devices else 0
    n_nodes = max(used_nodes, budget_nodes if budget_nodes * dpn <= MAX_DRAWN_DEVICES else used_nodes)
    cell = cell_size(n_nodes * dpn)
    cols = _node_columns(hw, cell)
    node_rows = math.ceil(dpn / cols)
    last_card_x = _cell_offset(hw, cols - 1, cols, cell)[0]
    node_w = last_card_x + cell + NODE_PAD
    node_h = NODE_LABEL_H + NODE_PAD + node_rows * (cell + GAP) - GAP + NODE_PAD
    per_row = max(1, int((MAX_WIDTH + NODE_GAP) // (node_w + NODE_GAP)))
    per_row = math.ceil(n_nodes / math.ceil(n_nodes / per_row)) if n_nodes else 1
    nodes = []
    for n in range(n_nodes):
        x, y = (n % per_row) * (node_w + NODE_GAP), (n // per_row) * (node_h + NODE_GAP)
        box = NodeBox(x, y, node_w, node_h, f"node {n}")
        if hw.devices_per_card > 1:
            for first in range(0, dpn, hw.devices_per_card):
                cx, cy = _cell_offset(hw, first, cols, cell)
                w = hw.devices_per_card * (cell + GAP) - GAP
                box.cards.append((x + cx - 2, y + cy - 2, w + 4, cell + 4))
        nodes.append(box)
    taken: dict[tuple[int, int], Cell] = {}
    by_role = {r: p for r, p, _ in sections}
    for slot in slots:
        phase = by_role[slot.role]
        roles = device_roles(slot.role, phase)
        count = drawn[slot.role]
        total = phase.instances
        colour = instance_colour(slot.role, slot.instance, count)
        layer = layers.get(slot.role)
        local = 0
        for node, devices in slot.nodes:
            for d in devices:
                role = roles[local]
                fill = colour if role == slot.role else instance_colour(role, slot.instance, count)
                shared = phase.moe is not None and local >= phase.moe.ep and phase.shared_expert.dedicated_devices > 0
                title = _device_title(hw, slot.role, slot.instance, total, node, d, local, phase, layer, shared)
                ox, oy = _cell_offset(hw, d, cols, cell)
                box = nodes[node]
                taken[(node, d)] = Cell(
                    box.x + ox,
                    box.y + oy,
                    fill,
                    text_is_dark(fill),
                    role,
                    f"{slot.role}-{slot.instance + 1}",
                    f"{ROLES[slot.role].tag}{slot.instance + 1}",
                    title,
                    shared,
                )
                local += 1
    cells = []
    for n in range(n_nodes):
        for d in range(dpn):
            if (n, d) in taken:
                cells.append(taken[(n, d)])
                continue
            ox, oy = _cell_offset(hw, d, cols, cell)
            free = f"node {n}, device {d}: not used by the plan"
            cells.append(Cell(nodes[n].x + ox, nodes[n].y + oy, IDLE_FILL, True, "idle", "", "", free))
    legend = []
    for role, _, section in sections:
        count = drawn[role]
        colours = [(f"{ROLES[role].tag}{i + 1}", instance_colour(role, i, count)) for i in range(count)]
        legend.append(LegendEntry(role, ROLES[role].label, colours, section, count))
    rows = math.ceil(n_nodes / per_row) if n_nodes else 0
    width = min(n_nodes, per_row) * (node_w + NODE_GAP) - NODE_GAP if n_nodes else 0
    height = rows * (node_h + NODE_GAP) - NODE_GAP if n_nodes else 0
    facts = _facts(hw, sections, drawn, n_nodes, budget_devices, used_nodes)
    return ClusterDrawing(hw.name, width, height, nodes, cells, legend, facts, cell)


def _device_title(
    hw: HardwareSpec,
    role: str,
    instance: int,
    instances: int,
    node: int,
    device: int,
    local: int,
    phase: PhasePlan,
    layer: ExpertLayer | None,
    shared: bool,
) -> str:
    """The tooltip of one device: where it is and its place in every module's layout."""
    card = device // hw.devices_per_card
    where = f"node {node}, device {device}" + (f" (card {card} of the node)" if hw.devices_per_card > 1 else "")
    parts = [
        f"{ROLES[role].label} instance {instance + 1} of {instances}, device {local} of its {phase.devices}",
        where,
    ]
    parts.append(f"attention {rank_in(ParallelLayout(dp=phase.attention.dp, tp=phase.attention.tp), local)}")
    if phase.dense_ffn is not None:
        parts.append(f"dense FFN {rank_in(phase.dense_ffn, local)}")
    if shared:
        parts.append("experts: the shared expert (a dedicated device)")
    elif layer is not None:
        experts = layer.experts_of(local)
        if experts is not None:
            parts.append(f"experts (layer {layer.layer}): " + ", ".join(str(e) for e in experts))
    parts.append(f"LM head {rank_in(phase.lm_head_layout, local)}")
    return "\n".join(parts)


def _facts(
    hw: HardwareSpec,
    sections: list[tuple[str, PhasePlan, Section]],
    drawn: dict[str, int],
    n_nodes: int,
    budget_devices: int | None,
    used_nodes: int,
) -> list[str]:
    dies = "dies" if hw.devices_per_card > 1 else "devices"
    used = sum(p.total_devices for _, p, _ in sections)
    lines = [
        f"{hw.description or hw.name}: {n_nodes} node{'s' if n_nodes != 1 else ''} of {hw.devices_per_node} {dies} "
        "drawn "
        f"({hw.device_name}"
        + (f"; {hw.devices_per_card} dies per {hw.card_name}, framed together" if hw.devices_per_card > 1 else "")
        + f"). The plan uses {used:,} {dies} ({hw.cards(used):g} cards) on {used_nodes} node"
        + ("s" if used_nodes != 1 else "")
        + "."
    ]
    for role, phase, _ in sections:
        if drawn[role] < phase.instances:
            lines.append(
                f"{phase.instances - drawn[role]} more {ROLES[role].label} instances like these are not drawn "
                f"(the drawing stops near {MAX_DRAWN_DEVICES:,} devices)."
            )
    if budget_devices and budget_devices > used:
        shown = " (grey)" if n_nodes * hw.devices_per_node >= budget_devices else ""
        lines.append(
            f"The card budget holds {hw.cards(budget_devices):g} cards; the plan leaves "
            f"{hw.cards(budget_devices - used):g} of them free{shown}."
        )
    lines.append(
        "Instances are placed on nodes as --emit places them: instances of a node or more from a node boundary, "
        "smaller ones packed into nodes. Hover a device for its place in every module's layout (TP groups are "
        "consecutive devices)."
    )
    return lines


def plan_cluster_sections(plan: Plan) -> list[tuple[str, PhasePlan]]:
    """(role, section) of every kind of instance of the plan, prefill first (as they are placed)."""
    from planner.engines.plan_view import plan_view
    from planner.report.launch.common import sections

    return sections(plan_view(plan))
