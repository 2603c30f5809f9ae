"""`moeplan fidelity`: the cost model against every published figure of plans/published.yaml."""

from __future__ import annotations

import typer

from planner.cli.common import console, run_guarded
from planner.costmodel.reference import evaluate_row, published_rows
from planner.report.fidelity_report import fidelity_markdown, fidelity_table


def fidelity(
    markdown: bool = typer.Option(False, "--markdown", help="Print a Markdown table (for the README)."),
) -> None:
    """Predicted vs published for the report's deployments, with each row's tolerance."""

    def body() -> None:
        results = [evaluate_row(r) for r in published_rows()]
        if markdown:
            console.file.write(fidelity_markdown(results))
        else:
            console.print(fidelity_table(results))

    run_guarded(body)
