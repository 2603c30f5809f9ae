"""Predicted vs published: a rich table and a Markdown table."""

from __future__ import annotations

from rich.table import Table

from planner.costmodel.reference import RowResult


def _fitted(r: RowResult) -> str:
    return f"fitted: {r.row.fitted.split(' (')[0]}" if r.row.fitted else "out of sample"


def fidelity_table(results: list[RowResult]) -> Table:
    """One row per published figure."""
    table = Table(
        title="Cost model vs published figures",
        caption="fitted: the row set the factors named (benchmarks/calibrate_factors.py); out of sample: it did "
        "not, it checks them",
    )
    for col in ("row", "figure", "published", "predicted", "error", "tolerance", "within", "fitted"):
        table.add_column(
            col,
            justify="right" if col in ("published", "predicted", "error", "tolerance") else "left",
        )
    for r in results:
        ok = "[green]yes[/]" if r.within_tolerance else "[red]NO[/]"
        table.add_row(
            r.row.id,
            r.row.unit,
            f"{r.row.published:g}",
            f"{r.predicted:.1f}",
            f"{r.error:+.1%}",
            f"±{r.row.tolerance:.0%}",
            ok,
            _fitted(r),
        )
    return table


def fidelity_markdown(results: list[RowResult]) -> str:
    """The same as a Markdown table."""
    lines = [
        "| row | figure | published | predicted | error | tolerance | fitted |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.row.id} | {r.row.unit} | {r.row.published:g} | {r.predicted:.1f} | "
            f"{r.error:+.1%} | ±{r.row.tolerance:.0%} | {_fitted(r)} |"
        )
    return "\n".join(lines) + "\n"
