"""`moeplan fidelity`: the cost model against every published figure, in-sample and leave-one-out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import console, run_guarded
from planner.costmodel.fidelity import fidelity_report
from planner.errors import BadInputError
from planner.report.fidelity_report import (
    coverage_lines,
    fidelity_json,
    fidelity_markdown,
    fidelity_table,
    fit_lines,
    known_miss_text,
)


def fidelity(
    markdown: bool = typer.Option(False, "--markdown", help="Print a Markdown table (for the README)."),
    json_out: bool = typer.Option(False, "--json", help="Print {'rows': [...]} as JSON."),
    simulated: bool = typer.Option(
        True,
        "--simulated/--no-simulated",
        help="Also judge the queueing-dominated figures (compare: simulated) by simulating their runs.",
    ),
    misses: bool = typer.Option(
        False,
        "--misses",
        help="Only list the figures the cost model misses outside their tolerance (validation/'s known_miss), "
        "each with its reason in full: what the plans' 'known miss' notes point to.",
    ),
    hardware: str | None = typer.Option(
        None, "--hardware", metavar="MACHINE", help="With --misses: only this machine's (e.g. a3)."
    ),
    coverage: bool = typer.Option(
        False,
        "--coverage",
        help="Only print how often the bands hold the measured figure, by machine group, at the shipped 90% "
        "width and at others (each row's band widened without its own error).",
    ),
    rows_path: Annotated[
        Path | None,
        typer.Option(
            "--rows",
            metavar="PATH",
            help="Check measured runs kept aside from validation/ instead: a YAML file of rows in its format "
            "(docs/validation.md), or a folder of them, predicted under the shipped factors with nothing fitted on "
            "them (every error out-of-sample). Works with --json and --simulated.",
        ),
    ] = None,
) -> None:
    """Predicted vs published for every row of the validation/ store: the error under the shipped factors,
    the leave-one-out error (factors refitted without the row) and the factors each row determines."""

    def body() -> None:
        if rows_path is not None and (misses or coverage or markdown or hardware is not None):
            raise BadInputError(
                "--rows checks the given rows alone: drop --misses, --hardware, --coverage and --markdown (--json and "
                "--simulated work with it)"
            )
        if json_out and markdown:
            raise BadInputError("--json and --markdown: each prints the whole table in its format; give one")
        if rows_path is not None:
            _kept_aside(rows_path, json_out, simulated)
            return
        if hardware is not None and not misses:
            raise BadInputError("--hardware: it selects the machine of --misses; add --misses, or drop --hardware")
        if misses and (json_out or markdown):
            raise BadInputError(
                "--misses lists the known misses as text; drop --json/--markdown (fidelity --json holds every row "
                "with its known_miss)"
            )
        if coverage and (misses or json_out or markdown):
            raise BadInputError("--coverage: it prints the bands' coverage alone; drop --misses, --json and --markdown")
        if misses:
            from planner.specs.catalog import catalog_names, did_you_mean
            from planner.specs.validation import known_misses

            if hardware is not None and hardware not in catalog_names("hardware"):
                hint = did_you_mean("hardware", hardware)
                raise BadInputError(
                    f"--hardware: no machine '{hardware}' in the catalog"
                    + (f"; {hint}" if hint else f"; one of {', '.join(catalog_names('hardware'))}")
                )

            console.file.write(known_miss_text(known_misses(), hardware))
            return
        report = fidelity_report()
        if coverage:
            console.file.write("\n".join(coverage_lines(report)) + "\n")
            return
        sims = []
        if not simulated:  # the queueing-dominated figures are the simulator's: left out, not 'needs simulation'
            report.not_compared = [(f, why) for f, why in report.not_compared if f.compare != "simulated"]
        else:
            # the serving simulator judges what the static model leaves as 'needs simulation'
            from planner.simulate.validation import simulated_fidelity

            sims = simulated_fidelity()
            judged = {r.figure.id for r in sims}
            report.not_compared = [(f, why) for f, why in report.not_compared if f.id not in judged]
        if json_out:
            text = fidelity_json(report)
            if simulated:
                import json

                doc = json.loads(text)
                doc["simulated_rows"] = [r.as_json() for r in sims]
                text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
            console.file.write(text)
        elif markdown:
            console.file.write(fidelity_markdown(report))
            if sims:
                from planner.report.simulate_report import simulated_fidelity_markdown

                console.file.write("\n" + simulated_fidelity_markdown(sims))
        else:
            console.print(fidelity_table(report))
            for line in fit_lines(report):
                console.print(line)
            _print_simulated(sims)

    run_guarded(body)


def _kept_aside(path: Path, json_out: bool, simulated: bool) -> None:
    """`fidelity --rows PATH`: the rows at PATH against the shipped model, nothing fitted on them."""
    from planner.costmodel.fidelity import kept_aside_report
    from planner.report.fidelity_report import kept_aside_lines, kept_aside_table
    from planner.specs.validation import figures_at

    figures = figures_at(path)
    report = kept_aside_report(figures)
    sims = []
    if simulated:
        from planner.simulate.validation import simulate_figures

        sims = simulate_figures([f for f, why in figures if not why and f.compare == "simulated"])
        judged = {r.figure.id for r in sims}
        report.not_compared = [(f, why) for f, why in report.not_compared if f.id not in judged]
    else:
        report.not_compared = [(f, why) for f, why in report.not_compared if f.compare != "simulated"]
    if json_out:
        import json

        doc = json.loads(fidelity_json(report))
        doc["kept_aside"] = str(path)
        for row in doc["rows"]:  # the file's role (fit or holdout) means nothing here: none is fitted on
            row["role"] = "kept aside"
        if simulated:
            doc["simulated_rows"] = [r.as_json() for r in sims]
        console.file.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        return
    if report.rows:
        console.print(kept_aside_table(report, str(path)))
    for line in kept_aside_lines(report):
        console.print(line)
    _print_simulated(sims)


def _print_simulated(sims: list) -> None:
    """The simulator's judgement of the queueing-dominated figures: its table and summary (nothing without any)."""
    if not sims:
        return
    from planner.report.simulate_report import simulated_fidelity_lines, simulated_fidelity_table

    console.print(simulated_fidelity_table(sims))
    for line in simulated_fidelity_lines(sims):
        console.print(line)
