"""The throughput-latency frontier of a sweep: curves, their Pareto points, structure changes,
and the published deployments to compare them with.

x is tokens/s per user (1000 / TPOT), y output tokens/s per card: the deployment's (prefill and
decode cards together) when the sweep plans both phases, the decode cards' when it plans decode
only. Published figures (validation/) are decode-only per card, so they are comparable
with the decode-only frontier and an upper bound for the deployment one.

`--y-axis cost` or `energy` puts the plan's cost per million output tokens or joules per output
token (its `economics` block: the cards' price or power at its predicted throughput) on y
instead; lower is better there, so the Pareto front is the points no other point beats in x and
undercuts in y. Published rows carry no price or power, so those pictures have no published
overlay.

A curve is one machine, or one value of the second swept parameter; along it the plan's
structure (decode EP size, MTP depth, P:D device ratio) changes at some points, which the plot
annotates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.costmodel.reference import published_rows
from planner.errors import PlannerError
from planner.search.sweep import SweepResult
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan
from planner.specs.validation import StoredFigure

PD_RATIO_STEP = 0.10  # a P:D ratio change under 10% is not worth an annotation


Y_AXES = ("tokens-per-card", "cost", "energy")
# the economics figure each priced or powered y axis reads
ECONOMICS_FIGURE = {"cost": "cost_per_million_output_tokens", "energy": "joules_per_output_token"}


@dataclass(frozen=True)
class FrontierPoint:
    """One feasible sweep point on the frontier plane, with its plan's structure; y is in the
    unit of the sweep's y axis (`y_label`)."""

    x_tokens_per_s_per_user: float
    y: float
    values: dict[str, object]
    structure: dict[str, str]


@dataclass
class Curve:
    """The points of one machine (or one value of the second parameter), sorted by x."""

    name: str
    hardware: str
    points: list[FrontierPoint]
    front: list[int] = field(default_factory=list)
    changes: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class PublishedPoint:
    """A published decode deployment on the frontier plane."""

    id: str
    hardware: str
    x_tokens_per_s_per_user: float
    y: float  # decode output tokens/s per card
    note: str


def pareto_front(xy: list[tuple[float, float]], lower_y_better: bool = False) -> list[int]:
    """Indices of the points no other point beats in both x and y (ties kept once), by x; with
    `lower_y_better` (cost, energy) a smaller y beats a larger one."""
    if lower_y_better:
        xy = [(x, -y) for x, y in xy]
    order = sorted(range(len(xy)), key=lambda i: (-xy[i][0], -xy[i][1], i))
    front, best_y = [], float("-inf")
    for i in order:
        if xy[i][1] > best_y:
            front.append(i)
            best_y = xy[i][1]
    return sorted(front, key=lambda i: xy[i][0])


def structure_of(plan: Plan) -> dict[str, str]:
    """What the plot annotates: decode EP size (of the FFN side for AFD instances), MTP depth, and
    the P:D device ratio."""
    out: dict[str, str] = {}
    d, p = plan.decode_phase, plan.prefill_phase
    if plan.afd is not None:
        out["EP"] = f"{plan.afd.moe.ep} AFD" if plan.afd.moe is not None else "- AFD"
        out["MTP"] = str(plan.afd.mtp_tokens)
        if p is not None:
            out["P:D"] = f"1:{plan.afd.total_devices / p.total_devices:.1f}"
        return out
    if d is not None:
        out["EP"] = str(d.moe.ep) if d.moe is not None else "-"
        out["MTP"] = str(d.mtp_tokens)
    if plan.is_colocated:
        out["P:D"] = "colocated"
    elif d is not None and p is not None:
        out["P:D"] = f"1:{d.total_devices / p.total_devices:.1f}"
    return out


def _ratio(text: str) -> float | None:
    """The D of '1:D' (None for 'colocated')."""
    head, _, tail = text.partition(":")
    return float(tail) if head == "1" and tail else None


def structure_changes(points: list[FrontierPoint]) -> list[tuple[int, str]]:
    """(index, annotation) where EP, MTP or (by more than 10%) the P:D ratio changes; the first
    point is annotated with the whole structure."""
    out: list[tuple[int, str]] = []
    prev: dict[str, str] | None = None
    for i, pt in enumerate(points):
        s = pt.structure
        if prev is None:
            out.append((i, " ".join(f"{k}{v}" if k != "P:D" else f"P:D {v}" for k, v in s.items())))
        else:
            parts = [f"{k}{prev.get(k)}->{s[k]}" for k in ("EP", "MTP") if k in s and s[k] != prev.get(k)]
            if "P:D" in s and "P:D" in prev:
                a, b = _ratio(prev["P:D"]), _ratio(s["P:D"])
                moved = (a is None) != (b is None) or (
                    a is not None and b is not None and abs(b - a) > PD_RATIO_STEP * max(a, 1e-9)
                )
                if moved:
                    parts.append(f"P:D {prev['P:D']}->{s['P:D']}")
            if parts:
                out.append((i, " ".join(parts)))
        prev = s
    return out


def sweep_metric(result: SweepResult) -> str:
    """'deployment' (both phases), 'decode' or 'prefill': what the sweep's plans cover."""
    phases = {pt.request.phase for pt in result.points}
    if phases == {"decode"}:
        return "decode"
    if phases == {"prefill"}:
        return "prefill"
    return "deployment"


def _xy(plan: Plan, metric: str, y_axis: str = "tokens-per-card") -> tuple[float, float] | None:
    pred = plan.predicted or {}
    d = pred.get("decode") or pred.get("afd")
    if not d:
        return None
    if y_axis in ECONOMICS_FIGURE:
        xy = _xy(plan, metric)
        y = (pred.get("economics") or {}).get(ECONOMICS_FIGURE[y_axis])
        return None if xy is None or y is None else (xy[0], float(y))
    c = pred.get("colocated") if plan.is_colocated else None
    if c and pred.get("system"):
        # a colocated instance's TPOT includes its decode stalls during prefill
        return float(c["tokens_per_s_per_user"]), float(pred["system"]["output_tokens_per_s_per_card"])
    if metric == "deployment" and pred.get("system"):
        return float(d["tokens_per_s_per_user"]), float(pred["system"]["output_tokens_per_s_per_card"])
    return float(d["tokens_per_s_per_user"]), float(d["tokens_per_s_per_card"])


def series_flag(result: SweepResult) -> str | None:
    """The flag curves are drawn per: the machine if swept, else the second swept flag."""
    swept = result.swept
    if "hardware" in swept:
        return "hardware"
    return swept[1] if len(swept) > 1 else None


def sweep_curves(result: SweepResult, y_axis: str = "tokens-per-card") -> list[Curve]:
    """One curve per machine or per value of the second parameter, feasible points only (with a
    cost or energy y axis, those whose plan has that figure)."""
    metric = sweep_metric(result)
    flag = series_flag(result)
    groups: dict[str, list] = {}
    hw_of: dict[str, str] = {}
    for pt in result.points:
        key = str(pt.values.get(flag, "")) if flag else ""
        groups.setdefault(key, [])
        hw_of.setdefault(key, load_hardware(pt.request.hardware).name)
        if pt.plan is None:
            continue
        xy = _xy(pt.plan, metric, y_axis)
        if xy is None:
            continue
        groups[key].append(FrontierPoint(xy[0], xy[1], dict(pt.values), structure_of(pt.plan)))
    curves = []
    for key, pts in groups.items():
        pts.sort(key=lambda p: (p.x_tokens_per_s_per_user, p.y))
        name = key if flag == "hardware" else (f"{flag} {key}" if flag else hw_of[key])
        budgets = {p.values.get("max-cards") for p in pts} - {None}
        if flag == "hardware" and len(budgets) == 1:
            name += f", <= {budgets.pop():g} cards"
        curve = Curve(name, hw_of[key], pts)
        curve.front = pareto_front([(p.x_tokens_per_s_per_user, p.y) for p in pts], y_axis in ECONOMICS_FIGURE)
        curve.changes = structure_changes([pts[i] for i in curve.front])
        curve.changes = [(curve.front[i], text) for i, text in curve.changes]
        curves.append(curve)
    return curves


def _architecture(model: ModelSpec) -> dict:
    """A model's spec without its name: DeepSeek-R1 and -V3 share one architecture."""
    return model.model_dump(exclude={"name"})


def published_points(model: ModelSpec, hardware_names: set[str]) -> list[PublishedPoint]:
    """Published decode deployments of this architecture on these machines, placed on the plane.

    A row of decode tokens/s per card gives y, and x = y / sequences per card. A row that
    publishes only a TPOT (the low-latency points) gives x = 1000 / TPOT, and y = sequences per
    card / TPOT. Plans without a TPOT SLO (a theoretical no-latency figure) have no x and are left
    out.
    """
    rows = published_rows()
    by_plan: dict[str, dict[str, StoredFigure]] = {}
    for row in rows:
        by_plan.setdefault(row.plan, {})[row.metric] = row
    out = []
    arch = _architecture(model)
    for plan_name, metrics in by_plan.items():
        try:
            plan, _ = load_plan(plan_name)
            hw = load_hardware(plan.hardware)
            plan_model = load_model(plan.model)
        except PlannerError:
            continue
        if plan.decode_phase is None or plan.slo is None or plan.slo.tpot_ms is None:
            continue
        if hw.name not in hardware_names or _architecture(plan_model) != arch:
            continue
        seqs_per_card = plan.decode_phase.concurrency_per_device * hw.devices_per_card
        w = plan.workload
        note = f"{w.input_tokens}+{w.output_tokens}, MTP acceptance {w.mtp_acceptance:g}"
        tokens = metrics.get("decode.tokens_per_s_per_card")
        tpot = metrics.get("decode.tpot_ms")
        if tokens is not None:
            y = tokens.published
            out.append(PublishedPoint(tokens.id, hw.name, y / seqs_per_card, y, note))
        elif tpot is not None:
            x = 1000.0 / tpot.published
            out.append(PublishedPoint(tpot.id, hw.name, x, seqs_per_card * x, note))
    return out
