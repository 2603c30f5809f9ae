"""`moeplan plan`: search for the best deployments and print them ranked."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from planner.cli.common import console, err_console, run_guarded, write_text_atomic
from planner.cli.options import (
    ColocatedOpt,
    DecodeDevicesOpt,
    DecodeMicrobatchOpt,
    LoadsOpt,
    MaxRedundantOpt,
    PhaseOpt,
    PrefillDevicesOpt,
    SkewSigmaOpt,
    WorkersOpt,
    imbalance_from_options,
    parse_int_list,
)
from planner.errors import BadInputError
from planner.ranking.binding import why_line
from planner.report.evaluate_report import evaluate_tables
from planner.report.plan_report import plans_document, ranked_table
from planner.report.vllm_ascend import emit_vllm_ascend
from planner.search.plan_search import SearchOutcome, TableCache, run_search
from planner.search.request import (
    DEFAULT_HARDWARE,
    DEFAULT_MAX_CARDS,
    DEFAULT_MODEL,
    DEFAULT_SLO,
    DEFAULT_WORKLOAD,
    MAX_CARDS,
    PlanRequest,
)
from planner.search.settings import DEFAULT_TIME_LIMIT_S, SolverSettings
from planner.specs.catalog import load_model
from planner.specs.files import validate_model
from planner.specs.plan import MAX_DEVICES_PER_INSTANCE, SLO, Workload

ModelOpt = Annotated[str, typer.Option("--model", help="Catalog name or path to a YAML / config.json.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help="Catalog name or path to a hardware YAML.")]


def build_request(
    *,
    model: str,
    hardware: str,
    quantization: str,
    input_tokens: int,
    output_tokens: int,
    mtp_acceptance: float,
    tpot_ms: float | None,
    ttft_ms: float | None,
    max_cards: float,
    phase: str,
    decode_devices: int | None,
    prefill_devices: int | None,
    rate: float | None,
    top: int,
    mtp: str | None,
    time_limit: float,
    workers: int,
    loads: Path | None,
    skew_sigma: float | None,
    max_redundant_experts: int | None = None,
    colocated: bool = True,
    decode_microbatch: bool = True,
) -> PlanRequest:
    """A PlanRequest from flag values; bad values raise BadInputError naming the flag."""
    workload = validate_model(
        Workload,
        {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "mtp_acceptance": mtp_acceptance,
        },
        "flags",
        "workload flags (--input-tokens, --output-tokens, --mtp-acceptance)",
    )
    slo = validate_model(SLO, {"tpot_ms": tpot_ms, "ttft_ms": ttft_ms}, "flags", "SLO flags (--tpot-ms, --ttft-ms)")
    if phase not in ("both", "decode", "prefill"):
        raise BadInputError(f"--phase must be both, decode or prefill; got '{phase}'.")
    if not max_cards > 0:
        raise BadInputError("--max-cards must be > 0.")
    if top < 1 or top > 50:
        raise BadInputError("--top must be between 1 and 50.")
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise BadInputError("--rate must be a finite number > 0 of requests per second.")
    if not math.isfinite(max_cards) or max_cards > MAX_CARDS:
        raise BadInputError(f"--max-cards must be a finite number of at most {MAX_CARDS:,} cards.")
    for flag, value in (
        ("--decode-devices", decode_devices),
        ("--prefill-devices", prefill_devices),
    ):
        if value is not None and not 1 <= value <= MAX_DEVICES_PER_INSTANCE:
            raise BadInputError(f"{flag} must be between 1 and {MAX_DEVICES_PER_INSTANCE}; got {value}.")
    mtp_values = parse_int_list(mtp, "--mtp", 0, 4) if mtp else None
    if max_redundant_experts is not None and max_redundant_experts < 0:
        raise BadInputError("--max-redundant-experts must be >= 0.")
    spec = load_model(model)
    imbalance = imbalance_from_options(loads, skew_sigma, spec)
    return PlanRequest(
        model=model,
        hardware=hardware,
        quantization=quantization,
        workload=workload,
        slo=slo,
        max_cards=max_cards,
        phase=phase,  # type: ignore[arg-type]
        decode_devices=decode_devices,
        prefill_devices=prefill_devices,
        rate_per_s=rate,
        top=top,
        mtp_tokens=tuple(mtp_values) if mtp_values is not None else None,
        settings=SolverSettings(time_limit_s=time_limit, workers=workers),
        imbalance=imbalance,
        max_redundant_experts=max_redundant_experts,
        colocated=colocated,
        decode_micro_batches=(1, 2) if decode_microbatch else (1,),
    )


def search_with_progress(request: PlanRequest, cache: TableCache | None = None) -> SearchOutcome:
    """Run the search with a progress display on stderr (cost tables from `cache` if given)."""
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("planning", total=1.0)

        def progress(message: str, fraction: float) -> None:
            bar.update(task, description=message, completed=fraction)

        return run_search(request, progress, cache)


def print_outcome(outcome: SearchOutcome) -> None:
    """The ranked table, the status line, and the best plan in detail."""
    req = outcome.request
    title = (
        f"{outcome.model.name} on {outcome.hw.name}, {req.workload.input_tokens}+{req.workload.output_tokens} "
        f"tokens, TPOT <= {req.slo.tpot_ms} ms, TTFT <= {req.slo.ttft_ms} ms, <= {req.max_cards:g} cards"
    )
    console.print(ranked_table(outcome.plans, outcome.hw, title))
    points = sum(s.points_evaluated for s in (outcome.decode_space, outcome.prefill_space) if s)
    if outcome.optimal:
        verdict = "OPTIMAL: proven best under the cost model (CP-SAT)"
    elif outcome.status == "INTERRUPTED":
        verdict = "INTERRUPTED: best found before the interrupt (not proven optimal)"
    else:
        verdict = f"{outcome.status}: best found in {outcome.seconds:.1f} s (not proven optimal)"
    console.print(
        f"{verdict}; {points:,} configurations costed, {outcome.solves} CP-SAT solves, {outcome.seconds:.2f} s."
    )
    console.print(why_line(outcome, index=0))
    best = outcome.plans[0]
    from planner.costmodel.prediction import Prediction

    console.print("\n[bold]Best plan (rank 1) in detail[/]")
    for renderable in evaluate_tables(best, Prediction.model_validate(best.predicted), outcome.hw):
        console.print(renderable)


def plan(
    model: ModelOpt = DEFAULT_MODEL,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    quantization: Annotated[str, typer.Option(help="a8w8c16 (default), bf16 or a8w4c16.")] = "a8w8c16",
    input_tokens: Annotated[int, typer.Option("--input-tokens", help="Prompt length.")] = DEFAULT_WORKLOAD.input_tokens,
    output_tokens: Annotated[
        int, typer.Option("--output-tokens", help="Completion length.")
    ] = DEFAULT_WORKLOAD.output_tokens,
    mtp_acceptance: Annotated[
        float, typer.Option("--mtp-acceptance", help="Acceptance of an MTP draft token.")
    ] = DEFAULT_WORKLOAD.mtp_acceptance,
    tpot_ms: Annotated[
        float | None, typer.Option("--tpot-ms", help="Time per output token SLO.")
    ] = DEFAULT_SLO.tpot_ms,
    ttft_ms: Annotated[float | None, typer.Option("--ttft-ms", help="Time to first token SLO.")] = DEFAULT_SLO.ttft_ms,
    max_cards: Annotated[
        float,
        typer.Option("--max-cards", help="Card budget (A2: 910B cards; CM384: 910C packages)."),
    ] = DEFAULT_MAX_CARDS,
    phase: PhaseOpt = "both",
    decode_devices: DecodeDevicesOpt = None,
    prefill_devices: PrefillDevicesOpt = None,
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Serve this many requests/s with the fewest cards."),
    ] = None,
    top: Annotated[int, typer.Option(help="How many ranked plans.")] = 5,
    mtp: Annotated[
        str | None,
        typer.Option(help="MTP depths to consider, e.g. '0,1,2' (default: all the model allows)."),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write {'plans': [...]} to FILE ('-' for stdout).")
    ] = None,
    emit: Annotated[
        tuple[str, Path] | None,
        typer.Option("--emit", help="vllm-ascend DIR: launch settings of the best plan."),
    ] = None,
    loads: LoadsOpt = None,
    skew_sigma: SkewSigmaOpt = None,
    max_redundant_experts: MaxRedundantOpt = None,
    colocated: ColocatedOpt = True,
    decode_microbatch: DecodeMicrobatchOpt = True,
    time_limit: Annotated[
        float,
        typer.Option("--time-limit", min=0.1, max=86400.0, help="Solver time limit in seconds."),
    ] = DEFAULT_TIME_LIMIT_S,
    workers: WorkersOpt = 2,
) -> None:
    """Search deployments (instance sizes, per-module layouts, expert slots, concurrency, MTP,
    P:D) under HBM and the SLOs, and print them ranked by output tokens/s per card."""

    def body() -> None:
        if emit is not None and emit[0] != "vllm-ascend":
            raise BadInputError(f"--emit supports 'vllm-ascend' only; got '{emit[0]}'.")
        if emit is not None and not emit[1].is_dir():
            raise BadInputError(f"--emit: folder '{emit[1]}' does not exist; create it first.")
        request = build_request(
            model=model,
            hardware=hardware,
            quantization=quantization,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            mtp_acceptance=mtp_acceptance,
            tpot_ms=tpot_ms,
            ttft_ms=ttft_ms,
            max_cards=max_cards,
            phase=phase,
            decode_devices=decode_devices,
            prefill_devices=prefill_devices,
            rate=rate,
            top=top,
            mtp=mtp,
            time_limit=time_limit,
            workers=workers,
            loads=loads,
            skew_sigma=skew_sigma,
            max_redundant_experts=max_redundant_experts,
            colocated=colocated,
            decode_microbatch=decode_microbatch,
        )
        outcome = search_with_progress(request)
        if outcome.status == "INTERRUPTED":
            print_outcome(outcome)
            err_console.print(
                "interrupted: the plans above are the best found so far (not proven); no file was written."
            )
            raise typer.Exit(code=130)
        if json_out is not None:
            write_text_atomic(json_out, plans_document(outcome.plans, outcome.status))
        if emit is not None:
            from planner.cli.options import loads_array

            files = emit_vllm_ascend(
                outcome.plans[0],
                outcome.model,
                emit[1],
                write_text_atomic,
                loads_array(loads) if loads else None,
            )
            err_console.print(f"wrote {len(files)} files to {emit[1]}")
        if json_out is not None and str(json_out) == "-":
            return
        print_outcome(outcome)

    run_guarded(body)
