"""`moeplan evaluate PLAN`: score a deployment someone wrote down."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import console, run_guarded, write_text_atomic
from planner.cli.options import check_hbm_utilization, imbalance_from_options
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs, plan_with_prediction
from planner.report.evaluate_report import evaluate_tables, plan_json
from planner.specs.catalog import load_plan, plan_base_dir


def evaluate(
    plan_file: Annotated[str, typer.Argument(help="Plan YAML/JSON path, or a shipped plan's name (e.g. a2-d70).")],
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the plan with its 'predicted' block as JSON.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Also write the plan with 'predicted' to this JSON file."),
    ] = None,
    loads: Annotated[
        Path | None,
        typer.Option("--loads", help="Expert loads file: take the MoE imbalance from the placement for them."),
    ] = None,
    skew_sigma: Annotated[
        float | None,
        typer.Option(
            "--skew-sigma",
            min=0.0,
            max=5.0,
            help="Log-normal expert skew of the default imbalance model.",
        ),
    ] = None,
    hbm_utilization: Annotated[
        float | None,
        typer.Option(
            "--hbm-utilization",
            metavar="FRACTION",
            help="Fraction of each device's HBM the plan may fill (default: the plan's hbm_utilization, 0.9).",
        ),
    ] = None,
) -> None:
    """Score a plan: step time by module, HBM per device, throughput, and each SLO."""

    def body() -> None:
        plan, _ = load_plan(plan_file)
        if hbm_utilization is not None:
            plan = plan.model_copy(update={"hbm_utilization": check_hbm_utilization(hbm_utilization)})
        base = plan_base_dir(plan_file)
        specs = load_plan_specs(plan, base)
        imbalance = imbalance_from_options(loads, skew_sigma, specs.model)
        prediction = evaluate_plan(plan, base, imbalance, specs=specs)
        scored = plan_with_prediction(plan, prediction)
        text = plan_json(scored)
        if out is not None:
            write_text_atomic(out, text)
        if json_out:
            console.file.write(text)
            return
        for renderable in evaluate_tables(plan, prediction, specs.hw):
            console.print(renderable)
        console.print(f"imbalance model: {prediction.imbalance_model}")

    run_guarded(body)
