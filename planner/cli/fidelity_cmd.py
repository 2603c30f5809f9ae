"""`moeplan fidelity`: the cost model against every published figure, in-sample and leave-one-out."""

from __future__ import annotations

import typer

from planner.cli.common import console, run_guarded
from planner.costmodel.fidelity import fidelity_report
from planner.report.fidelity_report import fidelity_json, fidelity_markdown, fidelity_table, fit_lines


def fidelity(
    markdown: bool = typer.Option(False, "--markdown", help="Print a Markdown table (for the README)."),
    json_out: bool = typer.Option(False, "--json", help="Print {'rows': [...]} as JSON."),
) -> None:
    """Predicted vs published for every row of the validation/ store: the error under the shipped factors,
    the leave-one-out error (factors refitted without the row) and the factors each row determines."""

    def body() -> None:
        report = fidelity_report()
        if json_out:
            console.file.write(fidelity_json(report))
        elif markdown:
            console.file.write(fidelity_markdown(report))
        else:
            console.print(fidelity_table(report))
            for line in fit_lines(report):
                console.print(line)

    run_guarded(body)
