"""`moeplan evaluate PLAN`: score a deployment someone wrote down."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import console, run_guarded, write_text_atomic
from planner.cli.emit_options import EmitOpt, ForceOpt, check_new_folders, parse_emits, write_emits
from planner.cli.options import imbalance_from_options
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs, plan_with_prediction
from planner.costmodel.uncertainty import prediction_uncertainty, with_uncertainty
from planner.report.evaluate_report import evaluate_tables, plan_json
from planner.report.uncertainty_report import uncertainty_table
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
    emit: EmitOpt = None,
    force: ForceOpt = False,
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware",
            help="Evaluate on this machine instead of the plan's (catalog name or YAML, e.g. one from calibrate).",
        ),
    ] = None,
) -> None:
    """Score a plan: step time by module, HBM per device, throughput, and each SLO."""

    def body() -> None:
        emits = parse_emits(emit)
        check_new_folders(emits, force)
        plan, _ = load_plan(plan_file)
        if hardware is not None:
            plan = plan.model_copy(update={"hardware": hardware})
        base = plan_base_dir(plan_file)
        specs = load_plan_specs(plan, base)
        imbalance = imbalance_from_options(loads, skew_sigma, specs.model)
        prediction = evaluate_plan(plan, base, imbalance, specs=specs)
        prediction = with_uncertainty(prediction, prediction_uncertainty(plan, specs, prediction, base, imbalance))
        scored = plan_with_prediction(plan, prediction)
        text = plan_json(scored)
        if out is not None:
            write_text_atomic(out, text)
        if emits:
            write_emits(emits, scored, specs.model, specs.hw, loads, force)
        if json_out:
            console.file.write(text)
            return
        for renderable in evaluate_tables(plan, prediction, specs.hw):
            console.print(renderable)
        band = uncertainty_table(prediction)
        if band is not None:
            console.print(band)
        console.print(f"imbalance model: {prediction.imbalance_model}")
        from planner.report.launch import engines_line

        console.print(engines_line(plan, specs.model, specs.hw))

    run_guarded(body)
