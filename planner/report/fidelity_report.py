"""Predicted vs published, in-sample and leave-one-out: a rich table, a Markdown table, JSON."""

from __future__ import annotations

import json

from rich.table import Table

from planner.costmodel.fidelity import FidelityReport, FidelityRow

# the columns of the Markdown table and the HTML report (row_cells), and those aligned right
COLUMNS = ("row", "figure", "published", "predicted", "error", "leave-one-out", "band", "tolerance", "determines")
NUMERIC_COLUMNS = ("published", "predicted", "error", "leave-one-out", "tolerance")


def _predicted(r) -> str:
    """The prediction as the figure is written: ratios of two runs to four places."""
    return f"{r.predicted:.4f}" if r.row.figure.ratio_to else f"{r.predicted:.1f}"


def _tolerance(r) -> str:
    """The tolerance; for a ratio of two runs, also in points of the ratio."""
    if r.row.figure.ratio_to:
        return f"±{r.row.tolerance * r.row.published:.2f}"
    return f"±{r.row.tolerance:.0%}"


def _short(name: str) -> str:
    return name.split(".", 1)[1]


def _loo(r: FidelityRow) -> str:
    if r.loo_error is None:
        return "-"
    if r.used_for_fit:
        mark = ""
    elif r.chosen:  # not refitted here, but a parameter (the skew sigma) was chosen on this row
        mark = " (in-sample)"
    else:
        mark = " (oos)"
    return f"{r.loo_error:+.1%}{mark}" + (" *" if r.loo_undetermined else "")


def _band(r: FidelityRow) -> str:
    if r.band is None:
        return "-"
    mark = "" if r.in_band else " [red]misses[/]"
    return f"{r.band[0]:.4g}-{r.band[1]:.4g}{mark}"


def _determines(r: FidelityRow) -> str:
    if not r.used_for_fit:
        if r.chosen:
            return f"{r.chosen} (chosen on it; not refitted here)"
        return "(validation: not fitted to)"
    return ", ".join(_short(n) for n in r.fitted_factors) or "none"


def fidelity_table(report: FidelityReport) -> Table:
    """One row per published figure, with its leave-one-out error and the factors it determines."""
    table = Table(
        title="Cost model vs published figures",
        caption="error: shipped factors (in-sample for fit rows); leave-one-out: factors refitted without the "
        "row (and the other rows of its plan); (oos): out-of-sample, the row was never fitted to, so its error "
        "is the leave-one-out error; (in-sample): not refitted here, but a parameter was chosen on it; "
        "*: a factor only this deployment determines was kept (see below)",
    )
    cols = (*COLUMNS[:-1], "within", COLUMNS[-1])
    for col in cols:
        right = col in NUMERIC_COLUMNS
        table.add_column(col, justify="right" if right else "left")
    for r in report.rows:
        ok = "[green]yes[/]" if abs(r.error) <= r.row.tolerance else "[red]NO[/]"
        table.add_row(
            r.row.id,
            r.row.unit,
            f"{r.row.published:g}",
            _predicted(r),
            f"{r.error:+.1%}",
            _loo(r),
            _band(r),
            _tolerance(r),
            ok,
            _determines(r),
        )
    return table


def fit_lines(report: FidelityReport) -> list[str]:
    """Per machine: the refitted factors, their leave-one-out spread, and the worst row."""
    lines = []
    for m in report.machines.values():
        if not m.names or m.full is None:
            lines.append(
                f"{m.hardware}: no hardware factor is fitted to published rows (its rows are out-of-sample for them; "
                "imbalance-model parameters are not refitted here)"
            )
            continue
        spread = m.spread()
        cells = [
            f"{_short(n)} {m.full.values[n]:.3f} (leave-one-out {spread[n][0]:.3f}-{spread[n][1]:.3f})" for n in m.names
        ]
        lines.append(f"{m.hardware}: refitted on {len(m.full.labels)} rows: " + "; ".join(cells))
        for n, why in m.full.undetermined.items():
            lines.append(f"  {_short(n)}: {why}")
        for n in m.names:
            rows = m.determined_by(n)
            plans = {r.plan for r in report.rows if r.row.id in rows}
            if len(plans) <= 1:
                lines.append(
                    f"  {_short(n)} rests on one deployment only ({', '.join(rows) or 'no row'}): "
                    "fitted to a single measurement"
                )
    for r in report.rows:
        if r.loo_undetermined:
            lines.append(
                f"* {r.row.id}: without it no other deployment determines "
                f"{', '.join(_short(n) for n in r.loo_undetermined)} (kept at the full fit's value)"
            )
    banded = [r for r in report.rows if r.band is not None]
    if banded:
        inside = sum(1 for r in banded if r.in_band)
        lines.append(f"published figure inside the prediction's band: {inside} of {len(banded)} rows")
    worst = report.worst_loo()
    if worst is not None and worst.loo_error is not None:
        lines.append(f"worst leave-one-out error: {worst.row.id} {worst.loo_error:+.1%}")
    for fig, why in report.not_compared:
        lines.append(f"not compared: {fig.id} ({fig.published:g} {fig.unit}): {why}")
    return lines


def fidelity_markdown(report: FidelityReport) -> str:
    """The same as a Markdown table (the README's)."""
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report.rows:
        lines.append("| " + " | ".join(row_cells(r).values()) + " |")
    if report.not_compared:
        lines += ["", "| not compared | figure | published | why |", "|---|---|---:|---|"]
        for fig, why in report.not_compared:
            lines.append(f"| {fig.id} | {fig.unit} | {fig.published:g} | {why} |")
    return "\n".join(lines) + "\n"


def row_cells(r: FidelityRow) -> dict[str, str]:
    """One row's cells as plain text, by column (the Markdown table's and the HTML report's)."""
    return {
        "row": r.row.id,
        "figure": r.row.unit,
        "published": f"{r.row.published:g}",
        "predicted": _predicted(r),
        "error": f"{r.error:+.1%}",
        "leave-one-out": _loo(r),
        "band": _band(r).replace("[red]misses[/]", "(misses)"),
        "tolerance": _tolerance(r),
        "determines": _determines(r),
    }


def fidelity_json(report: FidelityReport) -> str:
    """{"rows": [...], "fits": {...}}: every row with its in-sample and leave-one-out figures."""
    fits = {}
    for m in report.machines.values():
        if m.full is None:
            continue
        spread = m.spread()
        fits[m.hardware] = {
            n: {
                "value": round(m.full.values[n], 6),
                "interval": [round(x, 6) for x in m.full.intervals[n]],
                "loo_range": [round(x, 6) for x in spread[n]],
                "undetermined": m.full.undetermined.get(n),
                "determined_by": m.determined_by(n),
            }
            for n in m.names
        }
    not_compared = [
        {"name": f.id, "metric": f.metric, "published": f.published, "unit": f.unit, "why": why}
        for f, why in report.not_compared
    ]
    doc = {"rows": [r.as_json() for r in report.rows], "fits": fits, "not_compared": not_compared}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
