"""One page per command: what `plan`, `evaluate`, `sweep` and `simulate` hand over as `--html FILE`.

Each builder takes the command's public results (the search's `SearchOutcome`, an evaluated plan
and its `Prediction`, a `SweepResult`, a simulated run's `SimResult`) plus the lines the terminal
printed for them (the verdict, the lead of rank 1, what binds, which engines run it), so the page
says what the terminal says, word for word, and adds what a terminal cannot draw. A new command
adds a builder here and, where it has new parts, a block in the template; the plan parts
(`_plan_detail`) are shared.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from planner.costmodel.prediction import Prediction
from planner.ranking.compare import pd_cards
from planner.report.fidelity_report import COLUMNS as FIDELITY_COLUMNS
from planner.report.fidelity_report import NUMERIC_COLUMNS as FIDELITY_NUMERIC
from planner.report.html.cluster import ROLES, ClusterDrawing, cluster_drawing, instance_colour
from planner.report.html.experts import ExpertDrawing, ExpertLayer, expert_drawing, expert_layer
from planner.report.html.plans_table import Figure, RowGroup, grouped_rows, plan_row, plan_sections
from planner.report.html.sureness import BandRow, Fidelity, bands, fidelity_for
from planner.report.plan_report import alternative_price, cards_of, headline, price_basis
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import SLO, AfdPlan, Plan, Workload

if TYPE_CHECKING:
    import numpy as np

    from planner.search.plan_search import SearchOutcome
    from planner.search.request import PlanRequest
    from planner.search.sweep import SweepResult
    from planner.simulate.run import SimResult

GIB = 1024.0**3


@dataclass
class PlanPage:
    """What `moeplan plan --html` shows: the search's outcome and the terminal's lines about it."""

    outcome: SearchOutcome
    command: str
    plans_json: str  # the `plan --json` document
    verdict: str
    lead: list[str]
    why: str
    engines: str
    notes: list[str] = field(default_factory=list)
    space: str = ""  # the named limits of the space the verdict holds over (the line under it)
    loads: np.ndarray | None = None
    html_name: str = "report.html"  # the page's own file, for the line that reads its plans back
    checks: list[Any] = field(default_factory=list)  # `--simulate`: planner.ranking.simulated.SimulatedCheck
    check_lines: list[str] = field(default_factory=list)  # how `--rate` was sized by simulation


@dataclass
class EvaluatePage:
    """What `moeplan evaluate PLAN --html` shows."""

    plan: Plan  # with `predicted`
    prediction: Prediction
    model: ModelSpec
    hw: HardwareSpec
    prefill_hw: HardwareSpec | None
    source: str  # the PLAN argument
    command: str
    plans_json: str
    lines: list[str] = field(default_factory=list)  # imbalance model, ITL note, engines
    problems: list[str] = field(default_factory=list)  # what --check would fail it for
    loads: np.ndarray | None = None
    html_name: str = "report.html"


@dataclass
class SimulatePage:
    """What `moeplan simulate PLAN --html` shows: the run, and the plan as the evaluate page shows it."""

    result: SimResult
    plan: Plan  # the plan simulated (--decode-concurrency applied), with `predicted`
    prediction: Prediction
    model: ModelSpec
    hw: HardwareSpec
    prefill_hw: HardwareSpec | None
    source: str  # the PLAN argument
    claimed_rate: bool  # the traffic's rate is the one the plan claims
    command: str
    plans_json: str
    summary_json: str  # the run's `--json` document, without the per-request lists
    lines: list[str] = field(default_factory=list)  # imbalance model, engines
    loads: np.ndarray | None = None
    html_name: str = "report.html"


@dataclass
class SweepPage:
    """What `moeplan sweep --html` shows."""

    result: SweepResult
    rows: list[dict[str, object]]  # planner.report.sweep_report.sweep_rows
    title: str
    frontier_svg: bytes | None
    command: str
    plans_json: str
    status_line: str
    html_name: str = "report.html"


# ---- the question -------------------------------------------------------------------------------


def workload_text(w: Workload) -> str:
    """The workload in words."""
    text = f"{w.input_tokens:,} prompt + {w.output_tokens:,} completion tokens"
    if w.lengths:
        text += f" (means of {len(w.lengths)} length bins; TTFT judged at the p{w.slo_percentile or 90:g} prompt)"
    if w.prefix_hit_rate:
        text += f", {w.prefix_hit_rate:.0%} of prompt tokens hit a prefix cache"
    return text + f"; MTP draft tokens accepted {w.mtp_acceptance:.0%} of the time"


def slo_text(slo: SLO | None) -> str:
    """The SLOs in words."""
    if slo is None or (slo.tpot_ms is None and slo.ttft_ms is None and slo.max_itl_ms is None):
        return "none"
    parts = []
    if slo.tpot_ms is not None:
        judged = " for the SLO-percentile request at its own MTP acceptance" if slo.tpot_at_percentile else ""
        parts.append(f"TPOT{judged} ≤ {slo.tpot_ms:g} ms")
    if slo.ttft_ms is not None:
        parts.append(f"TTFT ≤ {slo.ttft_ms:,.0f} ms")
    if slo.max_itl_ms is not None:
        default = slo.tpot_ms is not None and slo.max_itl_ms == 3 * slo.tpot_ms
        parts.append(
            f"longest gap between two tokens ≤ {slo.max_itl_ms:g} ms" + (" (3× TPOT, the default)" if default else "")
        )
    return ", ".join(parts)


def machine_text(hw: HardwareSpec) -> str:
    text = f"{hw.name}: {hw.description or hw.card_name}"
    if hw.is_announced:
        text += " (announced: its figures are vendor claims)"
    return text


def model_text(model: ModelSpec, given: str) -> str:
    text = model.name if given == model.name else f"{model.name} ({given})"
    if model.moe is not None:
        m = model.moe
        text += f": {model.num_layers} layers, {m.routed_experts} routed experts (top-{m.experts_per_token})"
        text += f", {m.shared_experts} shared" if m.shared_experts else ""
    return text


def request_question(req: PlanRequest, model: ModelSpec, hw: HardwareSpec) -> list[tuple[str, str]]:
    """What `moeplan plan` was asked, row by row."""
    rows = [("model", model_text(model, req.model))]
    if req.is_mixed:
        from planner.specs.catalog import load_hardware

        rows.append(("machines", f"prefill on {machine_text(load_hardware(req.prefill_hw_name))}"))
        rows.append(("", f"decode on {machine_text(load_hardware(req.decode_hw_name))}"))
    else:
        rows.append(("machine", machine_text(hw)))
    rows.append(("number formats", req.quantization))
    rows.append(("workload", workload_text(req.workload)))
    rows.append(("SLOs", slo_text(req.slo)))
    if req.rate_per_s is not None:
        budget = f"the fewest cards that serve {req.rate_per_s:g} requests/s ({req.budget_text()})"
    else:
        figure = "input" if req.phase == "prefill" else "output"
        per = {
            "total": "tokens/s within it",
            "cost": "tokens per cost unit",
            "energy": "tokens per joule",
        }.get(req.objective, "tokens/s per card")
        budget = f"{req.budget_text()} ({hw.card_name}); the plan with the most {figure} {per}"
    rows.append(("budget", budget))
    engine = (
        f"{req.engine}: only what it runs"
        if req.engine
        else "any: the search is not limited to one engine (the engines line says which run rank 1)"
    )
    rows.append(("engine", engine))
    searched = {"both": "prefill and decode", "decode": "decode only", "prefill": "prefill only"}[req.phase]
    if req.phase == "both":
        searched += ", colocated and disaggregated" if req.colocated else ", disaggregated only (--no-colocated)"
    rows.append(("searched", searched))
    rows.append(("HBM", f"plans fill at most {req.hbm_utilization:g} of each device's HBM"))
    if req.pessimistic_factors:
        rows.append(("--robust", "searched with every factor at the slow end of its range"))
    return rows


def plan_question(plan: Plan, model: ModelSpec, hw: HardwareSpec, source: str) -> list[tuple[str, str]]:
    """What `moeplan evaluate` was asked about a plan file."""
    return [
        ("plan", source),
        ("model", model_text(model, plan.model)),
        ("machine", machine_text(hw)),
        ("number formats", plan.quantization),
        ("workload", workload_text(plan.workload)),
        ("SLOs", slo_text(plan.slo)),
        ("HBM", f"the plan fills at most {plan.hbm_utilization:g} of each device's HBM"),
    ]


# ---- the answer ---------------------------------------------------------------------------------


def instances_text(plan: Plan, hw: HardwareSpec, prefill_hw: HardwareSpec | None = None) -> str:
    """The plan's instances in words: '1 prefill instance of 16 cards and 1 decode instance of 32 cards'."""
    parts = []
    for role, section, machine in (
        ("colocated", plan.colocated, hw),
        ("prefill", plan.prefill, prefill_hw or hw),
        ("decode", plan.decode, hw),
        ("AFD decode", plan.afd, hw),
    ):
        if section is None:
            continue
        n = section.instances
        what = f"{machine.cards(section.devices):g} cards"
        if isinstance(section, AfdPlan):
            what += f" ({section.attention_devices} attention + {section.ffn_devices} FFN devices)"
        parts.append(f"{n} {role} instance{'s' if n != 1 else ''} of {what}")
    return " and ".join(parts)


def headline_label(plan: Plan) -> str:
    """What the headline figure counts: output tokens per card, or input tokens for prefill alone."""
    decodes = plan.decode_phase is not None or plan.afd is not None
    return "output tokens/s per card" if decodes else "input tokens/s per card"


def answer_sentence(plan: Plan, hw: HardwareSpec, prefill_hw: HardwareSpec | None = None) -> str:
    """The plan and its figures in one sentence (each figure with its band where it has one)."""
    row = plan_row(plan, hw, None, prefill_hw)
    text = instances_text(plan, hw, prefill_hw)
    if len(row.sections) > 1 or row.sections[0].instances > 1:
        text += f" ({row.cards:g} cards in all)"
    figures = []
    if row.requests_per_s.value is not None:
        figures.append(f"{row.requests_per_s.value:,.2f} requests/s")
    head = f"{row.headline.text} {headline_label(plan)}"
    if row.headline.band_text:
        head += f" (band {row.headline.band_text})"
    figures.append(head)
    if row.tpot_ms.value is not None:
        figures.append(f"TPOT {row.tpot_ms.text} ms")
    if row.ttft_ms.value is not None:
        figures.append(f"TTFT {row.ttft_ms.text} ms")
    single = len(row.sections) == 1 and row.sections[0].instances == 1
    decodes = plan.decode_phase is not None or plan.afd is not None
    verb = ("serve" if decodes else "process") + ("s" if single else "")
    text += f" {verb} " + ", ".join(figures)
    if not row.fits:
        text += "; it overflows HBM"
    elif row.meets_slos is True:
        text += ", within HBM and every SLO"
    elif row.meets_slos is False:
        text += "; it misses an SLO"
    return text + "."


def tiles(plan: Plan, hw: HardwareSpec, prefill_hw: HardwareSpec | None = None) -> list[tuple[str, Figure, str]]:
    """The headline figures as tiles: (label, figure, unit)."""
    row = plan_row(plan, hw, None, prefill_hw)
    out = [("cards", Figure(row.cards, digits=0), row.pd)]
    out.append((headline_label(plan), row.headline, "whole deployment"))
    if row.requests_per_s.value is not None:
        out.append(("requests/s", row.requests_per_s, ""))
    if row.tpot_ms.value is not None:
        out.append(("TPOT", row.tpot_ms, "ms"))
    if row.ttft_ms.value is not None:
        out.append(("TTFT", row.ttft_ms, "ms"))
    if row.hbm_free_gib.value is not None:
        out.append(("HBM free", row.hbm_free_gib, "GiB per device"))
    return out


# ---- the plan drawn -----------------------------------------------------------------------------


@dataclass
class PlanDetail:
    """The pictures and bands of one plan."""

    clusters: list[ClusterDrawing]
    experts: list[ExpertDrawing]
    time_svg: Any
    hbm_svg: Any
    bands: list[BandRow]
    band_method: str
    fidelity: list[Fidelity]
    imbalance: str


def _machines(plan: Plan, hw: HardwareSpec, prefill_hw: HardwareSpec | None) -> list[tuple[HardwareSpec, Plan]]:
    """(machine, the plan's phases on it): one entry, or two for prefill and decode on two machines."""
    if prefill_hw is None or prefill_hw == hw or plan.prefill is None or plan.decode is None:
        return [(hw, plan)]
    return [(prefill_hw, plan.model_copy(update={"decode": None})), (hw, plan.model_copy(update={"prefill": None}))]


def _plan_detail(
    plan: Plan,
    prediction: Prediction,
    model: ModelSpec,
    hw: HardwareSpec,
    prefill_hw: HardwareSpec | None,
    loads: np.ndarray | None,
    budget_devices: int | None,
) -> PlanDetail:
    from planner.report.html.charts import HbmBar, TimeBar, hbm_chart, time_chart
    from planner.report.html.cluster import plan_cluster_sections
    from planner.report.html.render import inline_svg

    table_sections = plan_sections(plan, hw, model, prefill_hw)
    imbalance = {
        "decode": prediction.decode.moe_imbalance if prediction.decode else None,
        "prefill": prediction.prefill.moe_imbalance if prediction.prefill else None,
    }
    imbalance["colocated"] = imbalance["decode"]
    layers: dict[str, ExpertLayer] = {}
    experts = []
    for role, phase in plan_cluster_sections(plan):
        layer = expert_layer(role, phase, model, loads)
        if layer is not None:
            layers[role] = layer
            drawing = expert_drawing(layer, imbalance.get(role))
            experts.append(drawing)
    machines = _machines(plan, hw, prefill_hw)
    clusters = [
        cluster_drawing(machine, part, table_sections, layers, budget_devices if len(machines) == 1 else None)
        for machine, part in machines
    ]
    time_bars, hbm_bars = [], []
    u = prediction.uncertainty
    colocated = prediction.colocated is not None

    def band(block: str, figure: str) -> tuple[float, float] | None:
        b = u.bands.get(block, {}).get(figure) if u is not None else None
        return (b.low, b.high) if b is not None else None

    if prediction.decode is not None:
        d = prediction.decode
        title = "Decode step of the colocated instance (alone)" if colocated else "Decode step"
        time_bars.append(TimeBar(title, d.breakdown_ms, d.step_ms, band("decode", "step_ms"), d.moe_imbalance))
    if prediction.prefill is not None:
        p = prediction.prefill
        title = "Prefill forward of the colocated instance (alone)" if colocated else "Prefill forward"
        time_bars.append(TimeBar(title, p.breakdown_ms, p.forward_ms, band("prefill", "forward_ms"), p.moe_imbalance))
    blocks: list[tuple[str, Any]] = []
    if prediction.colocated is not None:
        blocks.append(("colocated device (prefill batch included)", prediction.colocated))
    else:
        if prediction.prefill is not None:
            blocks.append(("prefill device", prediction.prefill))
        if prediction.decode is not None:
            blocks.append(("decode device", prediction.decode))
    for label, block in blocks:
        role = getattr(block, "hbm_role", None) or (prediction.decode.hbm_role if prediction.decode else "")
        hbm_bars.append(
            HbmBar(
                f"{label} ({role})" if role else label,
                block.hbm_breakdown_bytes,
                block.hbm_capacity_bytes,
                block.hbm_bytes_per_device + block.hbm_free_bytes,
            )
        )
    band_rows, method = bands(prediction)
    fidelity = [fidelity_for(machine) for machine, _ in machines]
    return PlanDetail(
        clusters=clusters,
        experts=experts,
        time_svg=inline_svg(time_chart(time_bars)) if time_bars else None,
        hbm_svg=inline_svg(hbm_chart(hbm_bars)) if hbm_bars else None,
        bands=band_rows,
        band_method=method,
        fidelity=fidelity,
        imbalance=prediction.imbalance_model,
    )


# ---- the pages ----------------------------------------------------------------------------------


def _common(kind: str, title: str, command: str, plans_json: str) -> dict[str, Any]:
    from planner import __version__
    from planner.report.html.render import script_json

    # a page says when it was made; SOURCE_DATE_EPOCH (reproducible builds' convention) pins it
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = datetime.fromtimestamp(int(epoch), UTC) if epoch and epoch.isdigit() else datetime.now(UTC)
    return {
        "kind": kind,
        "title": title,
        "command": command,
        "plans_json": script_json(plans_json),
        "version": __version__,
        "generated": when.strftime("%Y-%m-%d %H:%M UTC"),
        "roles": ROLES,
        "role_colour": lambda role: instance_colour(role, 0, 1) if role in ROLES else "#8c959f",
        "fidelity_columns": FIDELITY_COLUMNS,
        "fidelity_numeric": FIDELITY_NUMERIC,
        "groups": [],
        "alternatives": [],
        "detail": None,
        "lines": [],
        "lead": [],
        "sweep": None,
        "frontier_svg": None,
        "tiles": [],
        "problems": [],
        "evaluate_hint": "",
        "headline_label": "output tokens/s per card",
        "simulation": None,
        "checks": None,
    }


def _value(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _quoted(path: str) -> str:
    import shlex

    return shlex.quote(path)


def _budget_devices(req: PlanRequest, hw: HardwareSpec) -> int | None:
    """Devices of the card budget, when the search had one budget on one machine."""
    if req.is_mixed or req.rate_per_s is not None or not math.isfinite(req.max_cards):
        return None
    return int(req.max_cards * hw.devices_per_card)


def plan_html(page: PlanPage) -> str:
    """The page of `moeplan plan --html`."""
    from planner.report.html.render import render_page

    outcome = page.outcome
    req, hw, model = outcome.request, outcome.hw, outcome.model
    prefill_hw = None
    if req.is_mixed:
        from planner.specs.catalog import load_hardware

        prefill_hw = load_hardware(req.prefill_hw_name)
    best = outcome.plans[0]
    prediction = Prediction.model_validate(best.predicted)
    where = f"prefill {req.prefill_hw_name} / decode {req.decode_hw_name}" if req.is_mixed else hw.name
    ctx = _common("plan", f"moeplan plan: {model.name} on {where}", page.command, page.plans_json)
    ctx["question"] = request_question(req, model, hw)
    ctx["answer"] = "Best plan (rank 1): " + answer_sentence(best, hw, prefill_hw)
    ctx["tiles"] = tiles(best, hw, prefill_hw)
    ctx["headline_label"] = headline_label(best)
    ctx["groups"] = grouped_rows(outcome.plans, hw, model, prefill_hw, outcome.variants or None)
    ctx["alternatives"] = _alternatives(outcome, hw)
    req = outcome.request
    ctx["price_basis"] = price_basis(req.rate_per_s is not None, req.objective == "total" and req.rate_per_s is None)
    ctx["lines"] = [page.verdict, *([page.space] if page.space else []), page.why, page.engines]
    ctx["lines"] += [f"note: {n}" for n in page.notes]
    if page.checks:
        from planner.report.html.simulated import checks_view

        ctx["checks"] = checks_view(page.checks, page.check_lines)
        first = page.checks[0]
        ctx["lines"].append(f"rank {first.rank}, simulated at {first.rate_per_s:.4g} req/s: {first.verdict.line()}")
    ctx["lead"] = page.lead
    ctx["detail"] = _plan_detail(best, prediction, model, hw, prefill_hw, page.loads, _budget_devices(req, hw))
    ctx["detail_of"] = "rank 1"
    ctx["evaluate_hint"] = f"moeplan evaluate {_quoted(page.html_name)} --rank N    # N: a rank of the table"
    return render_page(ctx)


def _alternatives(outcome: SearchOutcome, hw: HardwareSpec) -> list[dict[str, str]]:
    """The best plan of each other structure, as the terminal's table has it, layouts in full."""
    if not outcome.alternatives:
        return []
    req = outcome.request
    by_cards, by_total = req.rate_per_s is not None, req.objective == "total" and req.rate_per_s is None
    out = []
    for alt in outcome.alternatives:
        if alt.plan is None:
            out.append(
                {
                    "label": alt.label,
                    "cards": "-",
                    "pd": "-",
                    "plan": alt.reason or "none fits",
                    "value": "-",
                    "price": "-",
                }
            )
            continue
        value = headline(alt.plan)
        price = alternative_price(alt.plan, outcome.plans[0], hw, by_cards, by_total)
        if alt.rank is not None:
            price += f" (rank {alt.rank})"
        sections = plan_sections(alt.plan, hw, outcome.model)
        text = "; ".join(
            f"{s.role}: "
            + ", ".join(f"{m} {lay}" for m, lay in s.layouts)
            + ("; " + "; ".join(x for x in s.settings if x) if s.settings else "")
            for s in sections
        )
        out.append(
            {
                "label": alt.label,
                "cards": f"{cards_of(alt.plan, hw):g}",
                "pd": pd_cards(alt.plan, hw),
                "plan": text,
                "value": f"{value:,.1f}",
                "price": price,
            }
        )
    return out


def evaluate_html(page: EvaluatePage) -> str:
    """The page of `moeplan evaluate PLAN --html`."""
    from planner.report.html.render import render_page

    plan, hw = page.plan, page.hw
    ctx = _common("evaluate", f"moeplan evaluate: {page.source}", page.command, page.plans_json)
    ctx["question"] = plan_question(plan, page.model, hw, page.source)
    ctx["answer"] = "This plan: " + answer_sentence(plan, hw, page.prefill_hw)
    ctx["tiles"] = tiles(plan, hw, page.prefill_hw)
    ctx["headline_label"] = headline_label(plan)
    ctx["groups"] = [RowGroup(plan_row(plan, hw, page.model, page.prefill_hw), [])]
    ctx["lines"] = page.lines
    ctx["problems"] = page.problems
    ctx["detail"] = _plan_detail(plan, page.prediction, page.model, hw, page.prefill_hw, page.loads, None)
    ctx["detail_of"] = "the plan"
    ctx["evaluate_hint"] = f"moeplan evaluate {_quoted(page.html_name)}"
    return render_page(ctx)


def simulate_html(page: SimulatePage) -> str:
    """The page of `moeplan simulate PLAN --html`."""
    from planner.report.html.render import render_page
    from planner.report.html.simulated import run_answer, run_question, run_tiles, simulation_view

    plan, hw, result = page.plan, page.hw, page.result
    ctx = _common("simulate", f"moeplan simulate: {page.source}", page.command, page.plans_json)
    ctx["question"] = plan_question(plan, page.model, hw, page.source) + run_question(result, page.claimed_rate)
    ctx["answer"] = run_answer(result)
    ctx["tiles"] = run_tiles(result)
    ctx["headline_label"] = headline_label(plan)
    ctx["groups"] = [RowGroup(plan_row(plan, hw, page.model, page.prefill_hw), [])]
    ctx["lines"] = page.lines
    ctx["simulation"] = simulation_view(result, page.summary_json)
    ctx["detail"] = _plan_detail(plan, page.prediction, page.model, hw, page.prefill_hw, page.loads, None)
    ctx["detail_of"] = "the plan"
    ctx["evaluate_hint"] = f"moeplan evaluate {_quoted(page.html_name)}"
    return render_page(ctx)


@dataclass
class SweepRow:
    """One point of a sweep: its values and its best plan (or why there is none)."""

    number: int
    values: list[str]
    row: Any  # PlanRow, or None when infeasible
    binds: str
    message: str
    per_user: Figure


def sweep_html(page: SweepPage) -> str:
    """The page of `moeplan sweep --html`."""
    from planner.report.html.plans_table import plan_row
    from planner.report.html.render import inline_svg, render_page
    from planner.specs.catalog import load_hardware, load_model

    result = page.result
    first = result.points[0].request
    model = load_model(first.model)
    ctx = _common("sweep", f"moeplan sweep: {model.name}", page.command, page.plans_json)
    keys = list(result.points[0].values)
    machines = sorted({load_hardware(pt.request.hardware).name for pt in result.points})
    swept = ", ".join(
        f"--{a.flag} "
        + (
            ", ".join(_value(v) for v in a.values)
            if len(a.values) <= 8
            else f"{_value(a.values[0])} to {_value(a.values[-1])} ({len(a.values)} values)"
        )
        for a in result.axes
    )
    fixed = ", ".join(f"{k} {_value(v)}" for k, v in result.fixed.items() if k not in keys)
    ctx["question"] = [
        ("model", model_text(model, first.model)),
        ("machines", ", ".join(machines)),
        ("swept", swept or "-"),
        ("fixed", fixed or "-"),
        ("phase", first.phase),
    ]
    rows = []
    feasible = []
    for i, (pt, r) in enumerate(zip(result.points, page.rows, strict=True), start=1):
        values = [_value(pt.values[k]) for k in keys]
        per_user = r.get("tokens_per_s_per_user")
        row = None
        if pt.plan is not None:
            hw = load_hardware(pt.request.hardware)
            row = plan_row(pt.plan, hw, model)
            feasible.append((headline(pt.plan), i, values))
        rows.append(
            SweepRow(
                i,
                values,
                row,
                str(r.get("binds") or ""),
                pt.message if pt.plan is None else "",
                Figure(per_user if isinstance(per_user, float | int) else None),
            )
        )
    ok = len(feasible)
    label = "input tokens/s per card" if first.phase == "prefill" else "output tokens/s per card"
    ctx["headline_label"] = label
    answer = f"{ok} of {len(rows)} points are feasible"
    if feasible:
        best, number, values = max(feasible)
        at = ", ".join(f"{k} {v}" for k, v in zip(keys, values, strict=True))
        answer += f"; the most {label} is {best:,.1f}, at point {number}" + (f" ({at})" if at else "")
    ctx["answer"] = answer + "."
    ctx["sweep"] = {"columns": keys, "rows": rows, "title": page.title, "status": page.status_line}
    ctx["frontier_svg"] = inline_svg(page.frontier_svg) if page.frontier_svg else None
    ctx["evaluate_hint"] = f"moeplan evaluate {_quoted(page.html_name)} --rank N"
    return render_page(ctx)
