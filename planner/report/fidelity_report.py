"""Predicted vs measured, in-sample and leave-one-out: a rich table, a Markdown table, JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from statistics import median

from rich.table import Table

from planner.costmodel.fidelity import FidelityReport, FidelityRow
from planner.costmodel.uncertainty import BAND_LEVEL, BAND_Z
from planner.specs.validation import KnownMiss

# the columns of the tables (rich, Markdown) and of the HTML report (row_cells), and those aligned right
COLUMNS = (
    "row",
    "machine",
    "figure",
    "measured",
    "predicted",
    "error",
    "leave-one-out",
    "band",
    "tolerance",
    "fitted to",
)
NUMERIC_COLUMNS = ("measured", "predicted", "error", "leave-one-out", "tolerance")

TABLE_CAPTION = (
    "error: under the shipped factors and imbalance parameters (one joint fit of every machine group on the rows "
    "marked fit); leave-one-out: every parameter refitted without the row's deployment; (oos): nothing was "
    "fitted on the row (a holdout row, or a machine no group fits); *: a parameter only this deployment "
    "determines stayed at the full fit's value in its leave-one-out; band: every factor and imbalance parameter "
    f"at the slow / fast end of its range, widened by {BAND_Z:.3f} times the group's held-out RMS error (the "
    f"{BAND_LEVEL:.0%} point of a normal error) over the other figures"
)


# the multiples of the held-out error the summary also counts the bands' coverage at: 0 (the factor corners
# alone), 1 (the 68% point of a normal error, the widening until 2026-12-04) and 1.96 (its 95% point)
COVERAGE_CHECK_Z = (0.0, 1.0, 1.96)


def _short(name: str) -> str:
    if name.startswith("chosen: "):
        return name
    return name.split(":", 1)[-1].split(".", 1)[-1]


def _loo(r: FidelityRow) -> str:
    return f"{r.loo_error:+.1%}" + (" (oos)" if r.out_of_sample else "") + (" *" if r.loo_undetermined else "")


def _band(r: FidelityRow, markup: bool = True) -> str:
    if r.band is None:
        return "-"
    miss = ("[red]misses[/]" if markup else "(misses)") if not r.in_band else ""
    return f"{r.band[0]:.4g}-{r.band[1]:.4g}" + (f" {miss}" if miss else "")


def _fitted(r: FidelityRow) -> str:
    if not r.fitted_to:
        return "nothing (out-of-sample)"
    return ", ".join(sorted({_short(n) for n in r.fitted_to}))


def _value(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def fidelity_table(report: FidelityReport) -> Table:
    """One row per measured figure."""
    title = "Cost model vs measured deployments (validation/)"
    return _rows_table(report, title, TABLE_CAPTION, COLUMNS, "leave-one-out")


def _rows_table(report: FidelityReport, title: str, caption: str, columns: tuple[str, ...], judged: str) -> Table:
    """The rows' `columns`, the `judged` error in red where it is outside the row's tolerance, the band
    marked where it misses the measured figure."""
    table = Table(title=title, caption=caption)
    for col in columns:
        table.add_column(col, justify="right" if col in NUMERIC_COLUMNS else "left")
    for r in report.rows:
        cells = row_cells(r)
        error = r.loo_error if judged == "leave-one-out" else r.error
        if abs(error) > r.row.tolerance:
            cells[judged] = f"[red]{cells[judged]}[/]"
        cells["band"] = _band(r)
        table.add_row(*(cells[c] for c in columns))
    return table


def row_cells(r: FidelityRow) -> dict[str, str]:
    """One row's cells as plain text, by column (the Markdown table's and the HTML report's)."""
    return {
        "row": r.row.id,
        "machine": r.hardware,
        "figure": r.row.unit,
        "measured": f"{r.row.published:g}",
        "predicted": _value(r.predicted),
        "error": f"{r.error:+.1%}",
        "leave-one-out": _loo(r),
        "band": _band(r, markup=False),
        "tolerance": f"±{r.row.tolerance:.0%}",
        "fitted to": _fitted(r),
    }


def _distinct_models(names: set[str]) -> set[str]:
    """The models among `names`, a catalog entry that differs from another only in its context counted as that
    one (planner.specs.catalog.context_variant_base): the same weights and forward."""
    from planner.specs.catalog import context_variant_base

    return {context_variant_base(n) for n in names}


def summary_lines(report: FidelityReport) -> list[str]:
    """The headline figures: rows, leave-one-out median and worst, band coverage, rows outside tolerance."""
    rows = report.rows
    lines = []
    if report.stale:
        lines.append(
            "note: the shipped fit outcome is older than the rows, catalogs or code: the leave-one-out refits were "
            "recomputed now (run benchmarks/calibrate_factors.py to refresh the shipped factors)"
        )
    machines = sorted({r.hardware for r in rows})
    models = _distinct_models({r.row.row.model or r.plan for r in rows})
    worst = report.worst_loo()
    lines.append(
        f"{len(rows)} measured figures on {len(machines)} machines ({', '.join(machines)}), {len(models)} models; "
        f"leave-one-out |error|: median {report.median_loo():.1%}"
        + (f", worst {worst.row.id} {worst.loo_error:+.1%}" if worst is not None else "")
    )
    cover = band_coverage(report)
    if cover.rows:
        unbanded = [r.row.id for r in rows if r.band is None]
        other = ", ".join(f"{n} at {z}" for z, n in cover.inside_at_z.items())
        lines.append(
            f"measured figure inside the prediction's {BAND_LEVEL:.0%} band (its corners widened by {BAND_Z:.3f} "
            f"times the group's held-out RMS error, without the row's own): {cover.inside} of {cover.rows} rows "
            f"({cover.inside / cover.rows:.0%}); widened by other multiples of that error: {other}"
            + (f" ({len(unbanded)} without a band: {', '.join(unbanded)})" if unbanded else "")
        )
    misses = report.misses()
    if misses:
        lines.append(
            f"outside their tolerance leave-one-out ({len(misses)}): "
            + "; ".join(f"{r.row.id} {r.loo_error:+.1%} (±{r.row.tolerance:.0%})" for r in misses)
        )
    kept = [r for r in rows if r.loo_undetermined]
    for r in kept:
        lines.append(
            f"* {r.row.id}: without its deployment no other row determines "
            f"{', '.join(_short(n) for n in r.loo_undetermined)} (kept at the full fit's value)"
        )
    return lines


def fit_lines(report: FidelityReport) -> list[str]:
    """Summary, then every fitted value with its leave-one-out range, then the figures not compared."""
    lines = summary_lines(report)
    for name, value in report.values.items():
        vals = [v[name] for v in report.loo_values if name in v] + [value]
        lines.append(f"  {name}: {value:.4g} (leave-one-out {min(vals):.4g}-{max(vals):.4g})")
    for fig, why in report.not_compared:
        lines.append(f"not compared: {fig.id} ({fig.published:g} {fig.unit}): {why}")
    return lines


def fidelity_markdown(report: FidelityReport) -> str:
    """The same as Markdown tables (docs/fidelity.md's)."""
    lines = [f"- {ln}" for ln in summary_lines(report) if not ln.startswith("*")]
    lines += [
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---:" if c in NUMERIC_COLUMNS else "---" for c in COLUMNS) + "|",
    ]
    for r in report.rows:
        lines.append("| " + " | ".join(row_cells(r).values()) + " |")
    if report.not_compared:
        lines += ["", "| not compared | figure | measured | why |", "|---|---|---:|---|"]
        for fig, why in report.not_compared:
            lines.append(f"| {fig.id} | {fig.unit} | {fig.published:g} | {why} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class BandCoverage:
    """How many banded rows hold their measured figure, each band widened without the row's own error: at the
    shipped width (`BAND_Z` held-out errors, the `BAND_LEVEL` band) and at each of `COVERAGE_CHECK_Z`."""

    rows: int
    inside: int
    inside_at_z: dict[str, int]

    def as_json(self) -> dict[str, object]:
        """The `band_coverage` block of `moeplan fidelity --json`."""
        return {"level": BAND_LEVEL, "z": round(BAND_Z, 4), "rows": self.rows, "inside": self.inside,
                "inside_at_z": self.inside_at_z}  # fmt: skip


def band_coverage(report: FidelityReport) -> BandCoverage:
    """The report's `BandCoverage`."""
    banded = [r for r in report.rows if r.band is not None]
    at = {f"{z:g}": sum(1 for r in banded if r.in_band_at(z)) for z in COVERAGE_CHECK_Z}
    return BandCoverage(len(banded), sum(1 for r in banded if r.in_band), at)


def _half_width(rows: list[FidelityRow]) -> float:
    """Median half-width of the rows' shipped bands over their predictions: how sharp a band is, beside how
    often it holds (a band wide enough holds everything and says little)."""
    return median((r.band[1] - r.band[0]) / (2.0 * r.predicted) for r in rows if r.band is not None)


def coverage_lines(report: FidelityReport) -> list[str]:
    """`moeplan fidelity --coverage`: by machine group, the rows inside their bands at the corners alone, at
    1 error, at the shipped `BAND_Z` and at 1.96 (each band widened without its row's own error), with the
    group's held-out RMS error and median band half-width; then every row outside its shipped band."""
    from planner.costmodel.store_fit import fit_config

    config = fit_config()
    multiples = sorted({*COVERAGE_CHECK_Z, BAND_Z})  # the shipped width exactly, labelled to 3 decimals
    groups: dict[str, list[FidelityRow]] = {}
    for r in report.rows:
        if r.band is not None:
            groups.setdefault(config.group_of(r.hardware) or "(no group)", []).append(r)
    widths = "  ".join(f"{'x' + format(round(z, 3), 'g'):>9}" for z in multiples)
    lines = [f"{'group':<20} {'rows':>4} {'held-out RMS':>12} {'half-width':>10}  {widths}"]

    def line(name: str, rows: list[FidelityRow], rms: str) -> str:
        counts = "  ".join(f"{sum(1 for r in rows if r.in_band_at(z)):>4}/{len(rows):<4}" for z in multiples)
        return f"{name:<20} {len(rows):>4} {rms:>12} {_half_width(rows):>10.0%}   {counts}".rstrip()

    for name in sorted(groups):
        # each row's error is over the group's other figures: the largest of them is printed
        lines.append(line(name, groups[name], f"{max(r.heldout_rms for r in groups[name]):.1%}"))
    every = [r for rows in groups.values() for r in rows]
    if not every:
        return ["no measured row carries a band"]
    lines.append(line("every group", every, "-"))
    lines += [
        "held-out RMS: the largest over the group's rows (each row's is over the others; a group with fewer",
        "than three other figures takes the largest group's); x: the multiple of it the corners are widened by",
        f"(x0: the corners alone; x{round(BAND_Z, 3):g}: the shipped {BAND_LEVEL:.0%} band); half-width: the shipped "
        "bands' median",
        "half-width over the prediction (a band wide enough holds everything and says little)",
    ]
    for r in every:
        if not r.in_band and r.band is not None:
            lines.append(
                f"  outside its band: {r.row.id} ({r.hardware}): measured {r.row.published:g}, "
                f"band {r.band[0]:.4g}-{r.band[1]:.4g}" + (" (known miss)" if r.row.known_miss else "")
            )
    if report.stale:
        lines.append("(the shipped fit is out of date: leave-one-out recomputed now; run calibrate_factors.py)")
    return lines


def fidelity_json(report: FidelityReport) -> str:
    """{"rows": [...], "band_coverage": {...}, "fitted": {...}, "not_compared": [...]}: every row, in-sample and
    leave-one-out."""
    ranges = {}
    for name, value in report.values.items():
        vals = [v[name] for v in report.loo_values if name in v] + [value]
        ranges[name] = {"value": round(value, 8), "loo_range": [round(min(vals), 8), round(max(vals), 8)]}
    not_compared = [
        {"name": f.id, "metric": f.metric, "published": f.published, "unit": f.unit, "why": why}
        for f, why in report.not_compared
    ]
    doc = {
        "rows": [r.as_json() for r in report.rows],
        "median_abs_loo_error": round(report.median_loo(), 6),
        "band_coverage": band_coverage(report).as_json(),
        "fitted": ranges,
        "not_compared": not_compared,
        "stale_outcome": report.stale,
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def known_miss_text(misses: tuple[KnownMiss, ...], machine: str | None = None) -> str:
    """Every figure the store marks `known_miss` (on `machine`, or all), by machine and phase, each with
    its model and its reason in full: what the plans' one-line "known miss" notes point to."""
    chosen = [m for m in misses if machine is None or m.machine == machine]
    if not chosen:
        where = f" on {machine}" if machine else ""
        return f"no measured figure{where} is marked as a known miss of the cost model\n"
    out: list[str] = []
    places: dict[tuple[str, str], list[KnownMiss]] = {}
    for m in chosen:
        places.setdefault((m.machine, m.phase), []).append(m)
    for (hw, phase), group in places.items():
        out.append(f"{hw}, {phase}: {len(group)} figure{'s' if len(group) != 1 else ''} outside tolerance")
        by_reason: dict[str, list[KnownMiss]] = {}
        for m in group:
            by_reason.setdefault(m.why, []).append(m)
        for why, same in by_reason.items():
            for m in same:
                out.append(f"  - {m.figure_id} ({m.model or 'model not stated'})")
            out.append(f"    why: {why}")
    return "\n".join(out) + "\n"


# the kept-aside check's columns: nothing is fitted on those rows, so no leave-one-out and no "fitted to"
KEPT_ASIDE_COLUMNS = ("row", "machine", "figure", "measured", "predicted", "error", "band", "tolerance")
KEPT_ASIDE_CAPTION = (
    "predicted: under the shipped factors and imbalance parameters, as `moeplan plan` and `evaluate` print it; "
    "nothing is fitted on these rows, so every error is out-of-sample; band: every factor and imbalance parameter "
    f"at the slow / fast end of its range, widened by {BAND_Z:.3f} times the machine group's held-out RMS error "
    f"(the {BAND_LEVEL:.0%} point of a normal error)"
)


def kept_aside_table(report: FidelityReport, where: str) -> Table:
    """One row per figure of runs kept aside from the store (`moeplan fidelity --rows`)."""
    title = f"Cost model vs measured runs kept aside ({where})"
    return _rows_table(report, title, KEPT_ASIDE_CAPTION, KEPT_ASIDE_COLUMNS, "error")


def kept_aside_lines(report: FidelityReport) -> list[str]:
    """The kept-aside check's headline: figures, median and worst |error|, within tolerance, inside the band;
    then the figures not compared, each with why."""
    rows = report.rows
    lines = []
    if rows:
        errors = [abs(r.error) for r in rows]
        worst = max(rows, key=lambda r: abs(r.error))
        within = sum(1 for r in rows if abs(r.error) <= r.row.tolerance)
        banded = [r for r in rows if r.band is not None]
        inside = sum(1 for r in banded if r.in_band)
        machines = sorted({r.hardware for r in rows})
        lines.append(
            f"{len(rows)} measured figures on {', '.join(machines)}, out-of-sample (nothing fitted on them): "
            f"|error| median {median(errors):.1%}, worst {worst.row.id} {worst.error:+.1%}; within their tolerance "
            f"{within} of {len(rows)}; inside the {BAND_LEVEL:.0%} band {inside} of {len(banded)}"
        )
    else:
        lines.append("no figure the static cost model judges (every one excluded or queueing-dominated)")
    for r in rows:
        if r.fitted_to:
            lines.append(f"note: {r.row.id}: {', '.join(r.fitted_to)}: its error may not be out-of-sample")
    for fig, why in report.not_compared:
        lines.append(f"not compared: {fig.id} ({fig.published:g} {fig.unit}): {why}")
    return lines
