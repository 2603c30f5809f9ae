"""`moeplan evaluate PLAN`: score a deployment someone wrote down."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import console, err_console, run_guarded, write_text_atomic
from planner.cli.options import imbalance_from_options
from planner.costmodel.evaluate import _resolve_ref as resolve_ref
from planner.costmodel.evaluate import (
    evaluate_mixed_plan,
    evaluate_plan,
    load_plan_specs,
    plan_with_prediction,
)
from planner.costmodel.mixed import is_mixed_plan, load_mixed_specs
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
        plan, _ = load_plan(plan_file)
        if hardware is not None:
            plan = plan.model_copy(update={"hardware": hardware})
        base = plan_base_dir(plan_file)
        if is_mixed_plan(plan):
            # prefill on one machine, decode on another (no uncertainty bands: they are per machine)
            mixed = load_mixed_specs(plan, base, resolve_ref)
            model, hw, prefill_hw = mixed.model, mixed.decode_hw, mixed.prefill_hw
            imbalance = imbalance_from_options(loads, skew_sigma, model)
            prediction = evaluate_mixed_plan(plan, base, imbalance, specs=mixed)
        else:
            specs = load_plan_specs(plan, base)
            hw, prefill_hw = specs.hw, None
            imbalance = imbalance_from_options(loads, skew_sigma, specs.model)
            prediction = evaluate_plan(plan, base, imbalance, specs=specs)
            prediction = with_uncertainty(prediction, prediction_uncertainty(plan, specs, prediction, base, imbalance))
        for note in prediction.notes:
            if "announced" in note:
                err_console.print(f"[bold yellow]warning:[/] {note}", markup=True, highlight=False)
        scored = plan_with_prediction(plan, prediction)
        text = plan_json(scored)
        if out is not None:
            write_text_atomic(out, text)
        if json_out:
            console.file.write(text)
            return
        for renderable in evaluate_tables(plan, prediction, hw, prefill_hw):
            console.print(renderable)
        band = uncertainty_table(prediction)
        if band is not None:
            console.print(band)
        console.print(f"imbalance model: {prediction.imbalance_model}")

    run_guarded(body)
