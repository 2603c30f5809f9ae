"""`moeplan evaluate PLAN`: score a deployment someone wrote down."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import Outputs, check_outputs, command_line, console, err_console, run_guarded
from planner.cli.emit_options import EmitOpt, ForceOpt, check_new_folders, parse_emits, stage_emits
from planner.cli.options import (
    DEFAULT_CURRENCY,
    CurrencyOpt,
    HtmlOpt,
    LaunchMemoryOpt,
    PricePerCardHourOpt,
    check_default_itl,
    check_hbm_utilization,
    check_price_names,
    imbalance_from_options,
    loads_array,
    parse_prices,
    priced,
)
from planner.costmodel.evaluate import (
    PlanSpecs,
    evaluate_mixed_plan,
    evaluate_plan,
    load_plan_specs,
    plan_with_prediction,
    resolve_ref,
)
from planner.costmodel.imbalance import ImbalanceModel
from planner.costmodel.mixed import is_mixed_plan, load_mixed_specs
from planner.costmodel.prediction import Prediction
from planner.costmodel.uncertainty import prediction_uncertainty, with_uncertainty
from planner.errors import BadInputError, InfeasibleError
from planner.ranking.compare import phase_hardware
from planner.report.evaluate_report import evaluate_tables, plan_json
from planner.report.plan_report import plans_document
from planner.report.uncertainty_report import uncertainty_table
from planner.search.request import ITL_TPOT_MULTIPLE, default_max_itl_ms
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.files import validate_model
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import SLO, Plan


def judged_slo(plan: Plan, tpot_ms: float | None, ttft_ms: float | None, max_itl_ms: float | None) -> tuple[Plan, str]:
    """The plan with the SLOs it is judged against, and a line saying where the ITL limit comes from
    when it is the default ('' otherwise).

    --tpot-ms/--ttft-ms/--max-itl-ms replace the plan's (--max-itl-ms 0: no ITL limit). A plan
    without max_itl_ms is judged as `moeplan plan` would have searched it: the longest gap between
    two tokens within 3x the TPOT SLO.
    """
    slo = plan.slo.model_dump() if plan.slo else {}
    given = (("tpot_ms", tpot_ms), ("ttft_ms", ttft_ms))
    slo.update({k: v for k, v in given if v is not None})
    note = ""
    if max_itl_ms is not None:
        slo["max_itl_ms"] = max_itl_ms or None
    elif slo.get("max_itl_ms") is None and slo.get("tpot_ms") is not None:
        tpot = slo["tpot_ms"]
        if math.isfinite(tpot) and tpot > 0:  # (a bad --tpot-ms is reported by the validation below)
            check_default_itl(tpot, "--tpot-ms" if tpot_ms is not None else "the plan's slo.tpot_ms")
            slo["max_itl_ms"] = default_max_itl_ms(tpot)
            note = (
                f"ITL limit: {slo['max_itl_ms']:g} ms ({ITL_TPOT_MULTIPLE:g}x TPOT, the default `moeplan plan` "
                "searches with; the plan sets no max_itl_ms): --max-itl-ms sets another, 0 none."
            )
    if slo == (plan.slo.model_dump() if plan.slo else {}):
        return plan, note
    return plan.model_copy(update={"slo": validate_model(SLO, slo, "flags", "SLO flags")}), note


def check_problems(prediction: Prediction, default_itl_ms: float | None = None) -> list[str]:
    """What `--check` fails a plan for: HBM overflow or a missed SLO, per section
    (`default_itl_ms`: the ITL limit when it is the default one, which the message then says)."""
    out = []
    afd = prediction.afd
    if afd is not None:
        for side, fits, headroom in (
            ("attention", afd.attention_fits_hbm, afd.hbm_headroom_bytes),
            ("FFN", afd.ffn_fits_hbm, afd.ffn_hbm_headroom_bytes),
        ):
            if not fits:
                out.append(f"overflows HBM on the AFD {side} side by {-headroom / 1024**3:.2f} GiB per device")
        if afd.meets_tpot_slo is False and prediction.colocated is None:
            out.append(f"misses the TPOT SLO in afd ({afd.tpot_ms:.1f} ms)")
        if afd.meets_itl_slo is False and prediction.colocated is None:
            out.append(f"breaks the ITL limit in afd (a {afd.step_ms:.0f} ms step)")
    sections = (("colocated", prediction.colocated), ("decode", prediction.decode), ("prefill", prediction.prefill))
    for name, block in sections:
        if block is None or (name != "colocated" and prediction.colocated is not None):
            continue  # a colocated plan is judged on its colocated figures
        if not block.fits_hbm:
            over = -block.hbm_headroom_bytes / 1024**3
            out.append(f"overflows HBM in {name} by {over:.2f} GiB per device")
        if getattr(block, "meets_tpot_slo", None) is False:
            out.append(f"misses the TPOT SLO in {name} ({block.tpot_ms:.1f} ms)")  # type: ignore[union-attr]
        if getattr(block, "meets_ttft_slo", None) is False:
            out.append(f"misses the TTFT SLO in {name} ({block.ttft_ms:.0f} ms)")  # type: ignore[union-attr]
        if getattr(block, "meets_itl_slo", None) is False:
            gap = getattr(block, "longest_decode_pause_ms", None) or getattr(block, "step_ms", 0.0)
            limit = (
                f"; limit {default_itl_ms:g} ms, {ITL_TPOT_MULTIPLE:g}x the TPOT SLO by default: --max-itl-ms sets "
                "another, 0 none"
                if default_itl_ms is not None
                else ""
            )
            out.append(f"breaks the ITL limit in {name} (a {gap:.0f} ms gap between two tokens{limit})")
    return out


@dataclass
class Scored:
    """A plan scored as `evaluate` scores it: its model and machines, the imbalance model the flags ask
    for, and the prediction (with its bands, on one machine)."""

    model: ModelSpec
    hw: HardwareSpec  # the decode (or only) machine
    prefill_hw: HardwareSpec | None  # the prefill machine of a plan on two
    imbalance: ImbalanceModel | None
    prediction: Prediction


def with_launch_memory(
    plan: Plan, base: Path | None, option: str, loads: Path | None, skew_sigma: float | None
) -> tuple[Plan, str]:
    """The plan at the hbm_utilization of --launch-memory-fraction ENGINE=FRACTION, and how it was derived."""
    from planner.report.launch.memory_flags import hbm_utilization_for, parse_launch_memory

    launch = parse_launch_memory(option)
    first = score_plan(plan, base, loads, skew_sigma, bands=False)
    utilization, note = hbm_utilization_for(plan_with_prediction(plan, first.prediction), launch)
    return plan.model_copy(update={"hbm_utilization": utilization}), note


def score_plan(
    plan: Plan,
    base: Path | None,
    loads: Path | None,
    skew_sigma: float | None,
    bands: bool = True,
    prices: dict[str | None, float] | None = None,
    currency: str = DEFAULT_CURRENCY,
) -> Scored:
    """Score `plan` (`--loads`/`--skew-sigma` pick the imbalance model); `bands`: with every figure's band;
    `prices`: --price-per-card-hour, by machine name (None: every machine)."""
    prices = prices or {}
    if is_mixed_plan(plan):
        # prefill on one machine, decode on another (no uncertainty bands: they are per machine)
        mixed = load_mixed_specs(plan, base, resolve_ref)
        check_price_names(prices, sorted({mixed.decode_hw.name, mixed.prefill_hw.name}))
        mixed = dataclasses.replace(
            mixed,
            decode_hw=priced(mixed.decode_hw, prices, currency),
            prefill_hw=priced(mixed.prefill_hw, prices, currency),
        )
        imbalance = imbalance_from_options(loads, skew_sigma, mixed.model)
        prediction = evaluate_mixed_plan(plan, base, imbalance, specs=mixed)
        return Scored(mixed.model, mixed.decode_hw, mixed.prefill_hw, imbalance, prediction)
    specs = load_plan_specs(plan, base)
    check_price_names(prices, [specs.hw.name])
    specs = PlanSpecs(specs.model, priced(specs.hw, prices, currency), specs.quant)
    imbalance = imbalance_from_options(loads, skew_sigma, specs.model)
    prediction = evaluate_plan(plan, base, imbalance, specs=specs)
    if bands:
        prediction = with_uncertainty(prediction, prediction_uncertainty(plan, specs, prediction, base, imbalance))
    return Scored(specs.model, specs.hw, None, imbalance, prediction)


def plan_lines(scored: Scored, plan: Plan, itl_note: str = "") -> list[str]:
    """The lines `evaluate` prints under its tables (and its page shows): the imbalance model, where the
    ITL limit comes from, which engines run the plan."""
    lines = [f"imbalance model: {scored.prediction.imbalance_model}", itl_note]
    if scored.prefill_hw is None:
        from planner.report.launch import engines_line

        lines.append(engines_line(plan, scored.model, scored.hw))
    return [line for line in lines if line]


def evaluate(
    ctx: typer.Context,
    plan_file: Annotated[
        str,
        typer.Argument(
            metavar="PLAN",
            help="Plan YAML/JSON path (also a `moeplan plan --json` export), or a shipped plan's name (a2-d70).",
        ),
    ],
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            metavar="FILE",
            help="Write the plan with its 'predicted' block as JSON to FILE ('-' for stdout, instead of the tables).",
        ),
    ] = None,
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
    html: HtmlOpt = None,
    emit: EmitOpt = None,
    force: ForceOpt = False,
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware",
            help="Evaluate on this machine instead of the plan's (catalog name or YAML, e.g. one from calibrate).",
        ),
    ] = None,
    rank: Annotated[
        int | None,
        typer.Option("--rank", min=1, help="Which plan of a `moeplan plan --json` export (default 1)."),
    ] = None,
    tpot_ms: Annotated[
        float | None, typer.Option("--tpot-ms", help="Judge against this TPOT SLO instead of the plan's.")
    ] = None,
    ttft_ms: Annotated[
        float | None, typer.Option("--ttft-ms", help="Judge against this TTFT SLO instead of the plan's.")
    ] = None,
    max_itl_ms: Annotated[
        float | None,
        typer.Option(
            "--max-itl-ms",
            help="Judge the longest gap between two tokens against this limit, ms (default: the plan's "
            "max_itl_ms, else 3x the TPOT SLO as `moeplan plan` searches; 0: no limit).",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Exit 1 when the plan overflows HBM or misses an SLO (the plan's, or --tpot-ms/--ttft-ms).",
        ),
    ] = False,
    hbm_utilization: Annotated[
        float | None,
        typer.Option(
            "--hbm-utilization",
            metavar="FRACTION",
            help="Fraction of each device's HBM the plan may fill (default: the plan's hbm_utilization, 0.9).",
        ),
    ] = None,
    launch_memory_fraction: LaunchMemoryOpt = None,
    price_per_card_hour: PricePerCardHourOpt = None,
    currency: CurrencyOpt = DEFAULT_CURRENCY,
) -> None:
    """Score a plan: step time by module, HBM per device, throughput, and each SLO."""

    def body() -> None:
        emits = parse_emits(emit)
        check_new_folders(emits, force)
        # the JSON on stdout is --json -
        check_outputs({"--out": out, "--html": html, "--json": json_out}, no_stdout=("--out", "--html"))
        if max_itl_ms is not None and not (math.isfinite(max_itl_ms) and max_itl_ms >= 0):
            raise BadInputError(f"--max-itl-ms must be >= 0 ms (0 disables it); got {max_itl_ms:g}.")
        plan, _ = load_plan(plan_file, rank)
        if hardware is not None:
            own = {n: h for n, h in phase_hardware(plan).items() if h}
            if own:
                named = ", ".join(f"{n} on {h}" for n, h in own.items())
                raise BadInputError(
                    f"--hardware: this plan names a machine per phase ({named}), which --hardware would not move; "
                    "edit the phases' 'hardware' fields in the plan, or re-plan with --prefill-hardware and "
                    "--decode-hardware."
                )
            plan = plan.model_copy(update={"hardware": hardware})
        decodes = plan.decode_phase is not None or plan.afd is not None or plan.is_colocated
        for flag, given, phase, has in (
            ("--ttft-ms", ttft_ms, "prefill", plan.prefill_phase is not None or plan.is_colocated),
            ("--tpot-ms", tpot_ms, "decode", decodes),
        ):
            if given is not None and not has:
                raise BadInputError(f"{flag}: the plan has no {phase} phase to judge; drop {flag}.")
        plan, itl_note = judged_slo(plan, tpot_ms, ttft_ms, max_itl_ms)
        if hbm_utilization is not None and launch_memory_fraction is not None:
            raise BadInputError(
                "--hbm-utilization and --launch-memory-fraction both set the HBM the plan may fill; give one."
            )
        if hbm_utilization is not None:
            plan = plan.model_copy(update={"hbm_utilization": check_hbm_utilization(hbm_utilization)})
        base = plan_base_dir(plan_file)
        if launch_memory_fraction is not None:
            plan, note = with_launch_memory(plan, base, launch_memory_fraction, loads, skew_sigma)
            err_console.print(f"note: {note}", markup=False, highlight=False)
        scored_by = score_plan(
            plan, base, loads, skew_sigma, prices=parse_prices(price_per_card_hour), currency=currency
        )
        model, hw, prefill_hw, prediction = scored_by.model, scored_by.hw, scored_by.prefill_hw, scored_by.prediction
        for note in prediction.notes:
            if "announced" in note:
                err_console.print(f"[bold yellow]warning:[/] {note}", markup=True, highlight=False)
        scored = plan_with_prediction(plan, prediction)
        text = plan_json(scored)
        default_itl = plan.slo.max_itl_ms if itl_note and plan.slo else None
        problems = check_problems(prediction, default_itl)
        # every output is checked and built before any is written: an engine that cannot run the
        # plan, or a plan that fails --check, leaves no file behind
        outputs, wrote = Outputs(), []
        if emits:
            if is_mixed_plan(plan):
                raise BadInputError(
                    "--emit: this plan runs prefill and decode on different machines, which no engine "
                    "export covers yet; export each phase's plan separately or drop --emit."
                )
            wrote = stage_emits(outputs, emits, scored, model, hw, loads, force)
            from planner.engines.profiles import engine_machine_note, engine_model_note, kv_split_note

            for engine, _ in emits:  # as `plan --emit` says it
                for caution in (
                    engine_machine_note(hw, engine),
                    engine_model_note(model.name, engine),
                    kv_split_note(plan.decode_attention_kv_split, engine),
                ):
                    if caution is not None:
                        err_console.print(f"[bold yellow]warning:[/] {caution}", markup=True, highlight=False)
        if out is not None:
            outputs.text(out, text, "--out")
        if html is not None:
            from planner.report.html import EvaluatePage, evaluate_html

            page = EvaluatePage(
                plan=scored,
                prediction=prediction,
                model=model,
                hw=hw,
                prefill_hw=prefill_hw,
                source=plan_file + (f" (rank {rank})" if rank else ""),
                command=command_line(ctx),
                plans_json=plans_document([scored], "EVALUATED", prediction.notes),
                lines=plan_lines(scored_by, plan, itl_note),
                problems=problems,
                loads=loads_array(loads) if loads else None,
                html_name=str(html),
            )
            outputs.text(html, evaluate_html(page), "--html")
        to_stdout = json_out is not None and str(json_out) == "-"
        if json_out is not None and not to_stdout:
            outputs.text(json_out, text, "--json")
        if to_stdout:
            console.file.write(text)
        else:
            for renderable in evaluate_tables(plan, prediction, hw, prefill_hw):
                console.print(renderable)
            band = uncertainty_table(prediction)
            if band is not None:
                console.print(band)
            for line in plan_lines(scored_by, plan, itl_note):
                console.print(line)
        if check and problems:
            unwritten = [
                str(p) for p in (out, html, json_out, *(f for _, f in emits)) if p is not None and str(p) != "-"
            ]
            nothing = f" Not written: {', '.join(unwritten)}." if unwritten else ""
            raise InfeasibleError("--check: the plan " + "; ".join(problems) + "." + nothing)
        outputs.commit()
        for line in wrote:
            err_console.print(line)
        if check:
            err_console.print("check: fits HBM and meets every SLO it has.")

    run_guarded(body)
