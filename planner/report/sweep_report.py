"""The sweep's table (best plan per point), its CSV and JSON exports, and a terminal chart of the
frontier for when no --plot file is asked for."""

from __future__ import annotations

import csv
import io
import json

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from planner.ranking.binding import binding_tags, request_bindings
from planner.ranking.compare import pd_cards, plan_devices
from planner.ranking.frontier import Curve, PublishedPoint
from planner.report.plan_report import (
    compact_afd,
    compact_experts,
    compact_layouts,
    decode_cell,
    draft_label,
    headline,
    kilo_tokens,
    plans_document,
)
from planner.report.table_counts import tables_built_text
from planner.search.sweep import SweepPoint, SweepResult
from planner.specs.catalog import load_hardware
from planner.specs.plan import PhasePlan

GIB = 1024.0**3
CSV_COLUMNS = [
    "status",
    "cards",
    "pd",
    "decode_layouts",
    "decode_concurrency_per_device",
    "decode_mtp_tokens",
    "prefill_layouts",
    "prefill_batch_tokens",
    "prefill_micro_batches",
    "tpot_ms",
    "tpot_at_acceptance_percentile_ms",
    "ttft_ms",
    "output_tokens_per_s_per_card",
    "prefill_tokens_per_s_per_card",
    "decode_tokens_per_s_per_card",
    "tokens_per_s_per_user",
    "requests_per_s",
    "cost_per_million_output_tokens",
    "joules_per_output_token",
    "binds",
    "runs_on",
    "message",
]


SIM_COLUMNS = ["sim_rate_per_s", "sim_ttft_ms", "sim_tpot_ms", "sim_slo_percentile", "sim_meets_slo"]


def _columns(rows: list[dict[str, object]]) -> list[str]:
    """The CSV columns, with `sweep --simulate`'s when the rows carry them."""
    return CSV_COLUMNS + [c for c in SIM_COLUMNS if any(c in row for row in rows)]


def point_row(pt: SweepPoint) -> dict[str, object]:
    """One point's figures by CSV column (blank where the point is infeasible or the phase "
    "absent)."""
    row: dict[str, object] = {k: "" for k in CSV_COLUMNS}
    row["status"] = pt.status
    row["message"] = pt.message
    if pt.plan is None:
        row["binds"] = pt.binding_tag
        return row
    plan, hw = pt.plan, load_hardware(pt.request.hardware)
    pred = plan.predicted or {}
    d, p, s = pred.get("decode") or {}, pred.get("prefill") or {}, pred.get("system") or {}
    row["cards"] = hw.cards(plan_devices(plan))
    row["pd"] = pd_cards(plan, hw, ":")
    c = pred.get("colocated") if plan.is_colocated else None
    a = pred.get("afd") or {}
    if plan.afd is not None:
        row["decode_layouts"] = "AFD " + compact_afd(plan.afd)
        row["decode_concurrency_per_device"] = plan.afd.concurrency_per_device
        row["decode_mtp_tokens"] = plan.afd.mtp_tokens
        row["tpot_ms"] = a.get("tpot_ms", "")
        row["tpot_at_acceptance_percentile_ms"] = a.get("tpot_at_acceptance_percentile_ms") or ""
        row["decode_tokens_per_s_per_card"] = a.get("tokens_per_s_per_card", "")
        row["tokens_per_s_per_user"] = a.get("tokens_per_s_per_user", "")
    if plan.decode_phase is not None:
        row["decode_layouts"] = compact_layouts(plan.decode_phase)
        row["decode_concurrency_per_device"] = plan.decode_phase.concurrency_per_device
        row["decode_mtp_tokens"] = plan.decode_phase.mtp_tokens
        row["tpot_ms"] = d.get("tpot_ms", "")
        row["tpot_at_acceptance_percentile_ms"] = d.get("tpot_at_acceptance_percentile_ms") or ""
        row["decode_tokens_per_s_per_card"] = d.get("tokens_per_s_per_card", "")
        row["tokens_per_s_per_user"] = d.get("tokens_per_s_per_user", "")
    if plan.prefill_phase is not None:
        row["prefill_layouts"] = compact_layouts(plan.prefill_phase)
        row["prefill_batch_tokens"] = plan.prefill_phase.batch_tokens
        row["prefill_micro_batches"] = plan.prefill_phase.micro_batches
        row["ttft_ms"] = p.get("ttft_ms", "")
    if c:
        # the phases' own latencies ignore that they share devices: report the colocated ones
        row["tpot_ms"], row["ttft_ms"] = c["tpot_ms"], c["ttft_ms"]
        row["tpot_at_acceptance_percentile_ms"] = c.get("tpot_at_acceptance_percentile_ms") or ""
        row["tokens_per_s_per_user"] = c["tokens_per_s_per_user"]
        row["decode_tokens_per_s_per_card"] = ""
    # a prefill-only plan emits no output tokens: its figure is the prompt tokens its cards take in
    decodes = plan.decode_phase is not None or plan.afd is not None or plan.is_colocated
    row["output_tokens_per_s_per_card"] = round(headline(plan), 4) if decodes else ""
    if p:
        row["prefill_tokens_per_s_per_card"] = p.get("tokens_per_s_per_card", "")
    row["requests_per_s"] = s.get("requests_per_s", "")
    e = pred.get("economics") or {}
    for key in ("cost_per_million_output_tokens", "joules_per_output_token"):
        row[key] = "" if e.get(key) is None else e[key]
    row["binds"] = binding_tags(request_bindings(plan, pt.request))
    row["runs_on"] = pt.runs_on
    return row


def _value_text(v: object) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def sweep_rows(result: SweepResult) -> list[dict[str, object]]:
    """Every point: its swept values first, then its figures."""
    return [{**{k: pt.values[k] for k in pt.values}, **point_row(pt)} for pt in result.points]


def short_layouts(phase: PhasePlan) -> str:
    """Attention and experts only (the table's width): e.g. DP48xTP2|EP48x6 A2A+S8."""
    parts = [phase.attention.short()]
    if phase.moe is not None:
        parts.append(compact_experts(phase.moe, phase.shared_expert))
    return "|".join(parts)


ECONOMICS_COLUMNS = {
    "cost": ("cost/M out", "cost_per_million_output_tokens"),
    "energy": ("J/out tok", "joules_per_output_token"),
}


def sweep_table(
    result: SweepResult, rows: list[dict[str, object]] | None = None, y_axis: str = "tokens-per-card"
) -> Table:
    """One row per point: the values swept, then the best plan's choices and figures (with a cost
    or energy y axis, that figure too).

    Infeasible points say why below the table ([n] in the row), so that the long diagnosis does
    not squeeze the layout columns.
    """
    rows = rows if rows is not None else sweep_rows(result)
    notes: list[str] = []
    keys = list(result.points[0].values) if result.points else []
    fixed = ", ".join(f"{k} {_value_text(v)}" for k, v in result.fixed.items() if k not in keys)
    table = Table(
        title=f"Best plan per point ({escape(fixed)})" if fixed else "Best plan per point",
        caption_justify="left",
        caption="layouts: attention|experts (all modules in --csv/--json); B: sequences per "
        "device; K: 1,024 tokens per forward; binds: D:/P: decode/prefill, cards: the card "
        "budget, grid: the search space, !: broken, ?: may bind",
    )
    phases = {pt.request.phase for pt in result.points}
    has_d, has_p = phases != {"prefill"}, phases != {"decode"}
    for k in keys:
        table.add_column(k, justify="right", no_wrap=True)
    cols = [("cards", "right"), ("P:D cards" if has_d and has_p else "instances x cards", "left")]
    cols += [("decode", "left")] if has_d else []
    cols += [("prefill", "left")] if has_p else []
    cols += [("TPOT ms", "right")] if has_d else []
    cols += [("TTFT ms", "right")] if has_p else []
    cols += [("tok/s/card" if has_d else "prompt tok/s/card", "right"), ("tok/s/user", "right")]
    economics = ECONOMICS_COLUMNS.get(y_axis)
    cols += [(economics[0], "right")] if economics else []
    cols += [("binds", "left")]
    for name, just in cols:
        wraps = name in ("decode", "prefill", "binds")
        table.add_column(name, justify=just, no_wrap=not wraps)  # type: ignore[arg-type]
    for pt, row in zip(result.points, rows, strict=True):
        values = [_value_text(pt.values[k]) for k in keys]
        if pt.plan is None:
            notes.append(pt.message)
            cells: list[object] = ["-"] * (len(cols) - 1)
            cells[2] = Text(f"infeasible [{len(notes)}]", style="red")
            table.add_row(*values, *cells, Text(str(row["binds"]), style="red"))  # type: ignore[arg-type]
            continue
        d, p = pt.plan.decode_phase, pt.plan.prefill_phase
        cells = [
            f"{row['cards']:g}",
            str(row["pd"]) if has_d and has_p else str(row["pd"]).strip("-:"),
        ]
        if has_d and pt.plan.afd is not None:
            cells.append(decode_cell(pt.plan))
        elif has_d:
            mb = f" mb{d.micro_batches}" if d and d.micro_batches > 1 else ""
            spec = draft_label(pt.plan, d.mtp_tokens) if d else ""
            cells.append(f"{short_layouts(d)} B{d.concurrency_per_device} {spec}{mb}" if d else "-")
        if has_p:
            same = "(same) " if pt.plan.is_colocated else (f"{short_layouts(p)} " if p else "")
            cells.append(f"{same}{kilo_tokens(p.batch_tokens)} mb{p.micro_batches}" if p else "-")
        if has_d:
            cells.append(f"{row['tpot_ms']:.1f}" if row["tpot_ms"] != "" else "-")
        if has_p:
            cells.append(f"{row['ttft_ms']:.0f}" if row["ttft_ms"] != "" else "-")
        per_card = row["output_tokens_per_s_per_card"] if has_d else row["prefill_tokens_per_s_per_card"]
        cells += [
            f"{per_card:.1f}" if per_card != "" else "-",
            f"{row['tokens_per_s_per_user']:.1f}" if row["tokens_per_s_per_user"] != "" else "-",
        ]
        if economics:
            cells.append(f"{row[economics[1]]:.4g}" if row[economics[1]] != "" else "-")
        cells.append(str(row["binds"]))
        table.add_row(*values, *cells)  # type: ignore[arg-type]
    if notes:
        table.caption = (
            (table.caption or "")
            + "\n"
            + "\n".join(f"[{i}] infeasible: {escape(m)}" for i, m in enumerate(notes, start=1))
        )
    return table


def sweep_csv(result: SweepResult, rows: list[dict[str, object]] | None = None) -> str:
    """CSV: one line per point, swept values first (stable column order)."""
    rows = rows if rows is not None else sweep_rows(result)
    keys = list(result.points[0].values) if result.points else []
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=keys + _columns(rows), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return buf.getvalue()


def sweep_document(result: SweepResult, rows: list[dict[str, object]] | None = None) -> str:
    """JSON: the swept flags, fixed values, every point (with its plan) and the table reuse."""
    rows = rows if rows is not None else sweep_rows(result)
    points = []
    for pt, row in zip(result.points, rows, strict=True):
        entry: dict[str, object] = {"values": pt.values, "status": pt.status}
        if pt.plan is not None:
            columns = _columns(rows)
            # (the CSV's blank cells are null here)
            entry["summary"] = {
                k: (None if v == "" else v) for k, v in row.items() if k in columns and k not in ("status", "message")
            }
            entry["plan"] = pt.plan.model_dump(mode="json", exclude_none=True)
        else:
            entry["binds"] = pt.binding_tag
            entry["message"] = pt.message
        points.append(entry)
    doc = {
        "swept": {a.flag: list(a.values) for a in result.axes},
        "fixed": result.fixed,
        "points": points,
        "table_cache": {
            "hits": result.cache_hits,
            "misses": result.cache_misses,
            "read_from_disk": result.cache_loaded,
        },
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def sweep_plans_document(result: SweepResult) -> str:
    """The sweep's plans as a `plan --json` document, each numbered by its point (1 = the first
    point; infeasible points have no plan), so `evaluate FILE --rank N` reads point N's plan."""
    plans = [
        pt.plan.model_copy(update={"rank": number})
        for number, pt in enumerate(result.points, start=1)
        if pt.plan is not None
    ]
    return plans_document(plans, "SWEEP")


def cache_line(result: SweepResult) -> str:
    """Status line: points, feasibility, time, and the table cache's effect."""
    ok = sum(1 for p in result.points if p.status == "ok")
    total = result.cache_hits + result.cache_misses
    share = f" ({result.cache_hits / total:.0%} of lookups)" if total else ""
    return (
        f"{len(result.points)} point{'s' if len(result.points) != 1 else ''} ({ok} feasible) in "
        f"{result.seconds:.2f} s; cost tables: "
        f"{tables_built_text(result.cache_misses, result.cache_loaded)}, {result.cache_hits} reused{share}."
    )


CHART_MARKS = "ox+#%@&=~"


def _tick(value: float) -> str:
    """A y tick: whole numbers for tokens/s, three figures for the small cost and energy figures."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def terminal_chart(
    curves: list[Curve],
    published: list[PublishedPoint],
    y_label: str,
    width: int = 64,
    height: int = 16,
) -> str:
    """The frontier as a character scatter: one mark per curve, '*' for published points."""
    pts = [
        (p.x_tokens_per_s_per_user, p.y, CHART_MARKS[i % len(CHART_MARKS)])
        for i, c in enumerate(curves)
        for p in c.points
    ]
    pts += [(p.x_tokens_per_s_per_user, p.y, "*") for p in published]
    if not pts:
        return "(no feasible point with a decode phase to chart)"
    x_max = max(x for x, _, _ in pts) * 1.05
    y_max = max(y for _, y, _ in pts) * 1.05
    grid = [[" "] * width for _ in range(height)]
    for x, y, mark in pts:
        col = min(width - 1, int(x / x_max * (width - 1))) if x_max > 0 else 0
        row = height - 1 - (min(height - 1, int(y / y_max * (height - 1))) if y_max > 0 else 0)
        cell = grid[row][col]
        grid[row][col] = mark if cell in (" ", mark) or mark == "*" else "&"
    ticks_y = [
        _tick(y_max * (height - 1 - r) / (height - 1)) if r % 5 == 0 or r == height - 1 else "" for r in range(height)
    ]
    label_w = max(4, *(len(t) for t in ticks_y))
    lines = [f"{y_label}"]
    for r, cells in enumerate(grid):
        lines.append(f"{ticks_y[r]:>{label_w}} |" + "".join(cells))
    lines.append(" " * label_w + " +" + "-" * width)
    ticks = [0.0, x_max / 2, x_max]
    axis = f"{ticks[0]:<.0f}".ljust(width // 2) + f"{ticks[1]:.0f}".ljust(width - width // 2) + f"{ticks[2]:.0f}"
    lines.append(" " * (label_w + 2) + axis)
    lines.append(" " * (label_w + 2) + "tokens/s per user (1000 / TPOT)")
    legend = [f"{CHART_MARKS[i % len(CHART_MARKS)]} {c.name}" for i, c in enumerate(curves)]
    if published:
        legend.append(
            "* published: " + ", ".join(f"{p.id} ({p.x_tokens_per_s_per_user:.0f}, {p.y:.0f})" for p in published)
        )
    lines.append("   ".join(legend))
    return "\n".join(lines)
