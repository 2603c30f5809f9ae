"""`moeplan simulate PLAN`: serve a plan under benchmark-client traffic and report what users see."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from planner.cli.common import Outputs, check_outputs, command_line, console, err_console, flag_given, run_guarded
from planner.cli.evaluate_cmd import Scored, plan_lines, score_plan, with_launch_memory
from planner.cli.options import AcceptanceSpreadOpt, LaunchMemoryOpt, LoadsOpt, SkewSigmaOpt, SloPercentileOpt
from planner.errors import BadInputError
from planner.specs.plan import Plan

if TYPE_CHECKING:
    from planner.simulate.run import SimResult

TrafficHelp = "Traffic (one of --concurrency, --rate, --trace; default: Poisson at the rate the plan claims)"


def parse_percentiles(text: str) -> tuple[float, ...]:
    """'90,99' -> (90.0, 99.0), each in (0, 100]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        try:
            p = float(part)
        except ValueError:
            raise BadInputError(f"--percentiles: '{part}' is not a number; give a list like 90,99.") from None
        if not (0 < p <= 100):
            raise BadInputError(f"--percentiles: {p:g} is outside (0, 100].")
        out.append(p)
    if not out:
        raise BadInputError("--percentiles: give at least one percentile, e.g. 90,99.")
    return tuple(sorted(set(out)))


def goodput_values(given: list[str] | None, extra: list[str]) -> list[str]:
    """--goodput's pairs: vLLM writes them after one flag (`--goodput ttft:2000 tpot:100`), so the pairs
    after the first arrive as extra arguments; anything else extra is refused as click would."""
    pairs = list(given or [])
    for arg in extra:
        if ":" not in arg or not pairs:
            raise BadInputError(f"unexpected extra argument '{arg}'; see 'moeplan simulate --help'.")
        pairs.append(arg)
    return pairs


def check_slo_percentile(value: float | None) -> float | None:
    """--slo-percentile in (0, 100]."""
    if value is not None and not (0 < value <= 100 and math.isfinite(value)):
        raise BadInputError(f"--slo-percentile must be a percentage in (0, 100], e.g. 90; got {value:g}.")
    return value


@dataclass(frozen=True)
class RunAsked:
    """What the page's question names beyond the run itself: the PLAN argument, and whether the rate
    is the one the plan claims (no --rate, --concurrency or --trace)."""

    plan_file: str
    rank: int | None
    claimed: bool


def simulate_page_html(
    ctx: typer.Context,
    run: RunAsked,
    scored: Scored,
    plan: Plan,
    result: SimResult,
    loads: Path | None,
    html: Path,
    goodput_pairs: list[str],
) -> str:
    """The HTML report of a run (--html): the run, and the plan as `evaluate --html` shows it."""
    from planner.cli.options import loads_array
    from planner.costmodel.evaluate import plan_with_prediction
    from planner.report.html import SimulatePage, simulate_html
    from planner.report.plan_report import plans_document
    from planner.report.simulate_report import result_json

    prediction = scored.prediction
    simulated = plan_with_prediction(plan, prediction)
    page = SimulatePage(
        result=result,
        plan=simulated,
        prediction=prediction,
        model=scored.model,
        hw=scored.hw,
        prefill_hw=scored.prefill_hw,
        source=run.plan_file + (f" (rank {run.rank})" if run.rank else ""),
        claimed_rate=run.claimed,
        # vLLM's `--goodput a b` reaches the command as one value and extra arguments: all of them
        command=command_line(ctx, {"goodput": goodput_pairs} if goodput_pairs else None),
        plans_json=plans_document([simulated], "SIMULATED", prediction.notes),
        summary_json=result_json(result, per_request=False),
        lines=plan_lines(scored, plan),
        loads=loads_array(loads) if loads else None,
        html_name=str(html),
    )
    return simulate_html(page)


def simulate(
    ctx: typer.Context,
    plan_file: Annotated[
        str,
        typer.Argument(
            metavar="PLAN", help="Plan YAML/JSON, a `moeplan plan --json` export, or a shipped plan's name."
        ),
    ],
    rank: Annotated[
        int | None, typer.Option("--rank", min=1, help="Which plan of a `plan --json` export (default 1).")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", help="Closed loop: at most N requests in flight (the clients' --max-concurrency)."
        ),
    ] = None,
    rate: Annotated[
        float | None, typer.Option("--rate", help="Open loop: requests per second (with --concurrency: both apply).")
    ] = None,
    burstiness: Annotated[
        float,
        typer.Option(
            "--burstiness", help="Gamma shape of the gaps between arrivals (vLLM's; 1: Poisson, <1 burstier)."
        ),
    ] = 1.0,
    trace: Annotated[
        Path | None,
        typer.Option(
            "--trace", help="CSV or JSONL: arrival_s (or timestamp ms), input_tokens, output_tokens per line."
        ),
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(
            "--requests",
            help="Requests to send (default: enough for a steady state, 1,000 to 50,000, see docs/simulate.md; "
            "a trace: all of it).",
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", min=0, max=2**32 - 1, help="Seed of lengths, arrivals and MTP acceptance draws.")
    ] = 0,
    warmup: Annotated[
        int,
        typer.Option(
            "--warmup",
            help="Leave the first N requests out of every figure; the steady state starts after them (default: "
            "0, or with the default --requests the first static end-to-end time's worth).",
        ),
    ] = 0,
    workload_file: Annotated[
        Path | None,
        typer.Option("--workload", help="Lengths from a YAML/JSON of (input, output) pairs or a histogram."),
    ] = None,
    random_input_len: Annotated[
        int | None,
        typer.Option("--random-input-len", help="Random dataset: input tokens (the clients' --random-input-len)."),
    ] = None,
    random_output_len: Annotated[
        int | None, typer.Option("--random-output-len", help="Random dataset: output tokens.")
    ] = None,
    random_range_ratio: Annotated[
        float,
        typer.Option("--random-range-ratio", help="Random dataset: range ratio, drawn as --random-convention does."),
    ] = 0.0,
    random_convention: Annotated[
        str,
        typer.Option(
            "--random-convention",
            help="vllm: uniform on [L(1-r), L(1+r)], r < 1; sglang: uniform on [L r, L] (r = 1: fixed length).",
        ),
    ] = "vllm",
    engine: Annotated[
        str | None,
        typer.Option("--engine", help="Route requests as this engine does: vllm-ascend (default), sglang or mindie."),
    ] = None,
    route_instances: Annotated[
        str | None,
        typer.Option("--route-instances", help="Override: round-robin, least-loaded or random over instances."),
    ] = None,
    route_dp: Annotated[
        str | None, typer.Option("--route-dp", help="Override: round-robin, least-loaded or random over DP ranks.")
    ] = None,
    decode_concurrency: Annotated[
        int | None,
        typer.Option("--decode-concurrency", help="Seats per device of the decode instances (default: the plan's)."),
    ] = None,
    goodput: Annotated[
        list[str] | None,
        typer.Option(
            "--goodput", help="Goodput bounds like vLLM's: ttft:2000 tpot:100 e2el:MS (default: the plan's SLOs)."
        ),
    ] = None,
    percentiles: Annotated[
        str, typer.Option("--percentiles", help="Percentiles to report, e.g. 90,99 (vLLM's --metric-percentiles).")
    ] = "90,99",
    slo_percentile: SloPercentileOpt = None,
    records: Annotated[
        Path | None, typer.Option("--records", help="Write one JSON line per request (timings, placement) to FILE.")
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Write the run keyed like `vllm bench serve --save-result` to FILE ('-': stdout)."),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", help="Draw queues, running batch, KV use and latency CDFs to FILE.png/.svg."),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Also write a self-contained HTML report to FILE: the run's figures and pictures next to the "
            "static prediction, and the plan drawn; `moeplan evaluate FILE` reads the plan back.",
        ),
    ] = None,
    loads: LoadsOpt = None,
    skew_sigma: SkewSigmaOpt = None,
    acceptance_spread: AcceptanceSpreadOpt = None,
    colocated_prefill: Annotated[
        str | None,
        typer.Option(
            "--colocated-prefill",
            help="How a colocated plan's whole prefill forwards form their batch: 'instance' (the static "
            "prediction's: up to prefill_batch_tokens over the instance, spread over the DP ranks) or 'per-rank' "
            "(SGLang with DP attention: each DP rank prefills its own prompts, up to prefill_batch_tokens / dp, "
            "and a forward lasts as long as its busiest rank). Default: as --engine runs moeplan's launch of the "
            "plan (sglang: per-rank with the sglang-0.5.23 delayer where attention DP > 1; else instance).",
        ),
    ] = None,
    prefill_delayer: Annotated[
        str | None,
        typer.Option(
            "--prefill-delayer",
            help="With per-rank forwards, SGLang's prefill delayer: 'sglang-0.5.23' (--enable-prefill-delayer: no "
            "prefill while some DP ranks have a prompt to prefill and others do not), 'pr14201' "
            "(SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE=1 in SGLang of December 2025: no prefill while some DP ranks "
            "have every seat taken and others do not), each for up to --prefill-delay-passes passes in a row, or "
            "'none'. Default: the engine's (see --colocated-prefill).",
        ),
    ] = None,
    prefill_delay_passes: Annotated[
        int,
        typer.Option(
            "--prefill-delay-passes",
            min=1,
            help="The most passes in a row the prefill delayer holds prefill back (30, both versions' default).",
        ),
    ] = 30,
    launch_memory_fraction: LaunchMemoryOpt = None,
) -> None:
    """Simulate the plan's instances serving a benchmark client's traffic, event by event, with every step
    and forward timed by the cost model; print TTFT, TPOT, ITL and E2E percentiles, throughput and goodput."""

    def body() -> None:
        from planner.report.plot import plot_format, render
        from planner.report.simulate_plot import simulate_figure
        from planner.report.simulate_report import records_jsonl, result_json, simulate_renderables
        from planner.simulate.build import RandomDataset, Traffic, engine_colocated_prefill
        from planner.simulate.metrics import parse_goodput
        from planner.simulate.routing import engine_routing
        from planner.simulate.run import auto_requests, claimed_rate, simulate_plan
        from planner.simulate.traffic import check_random_dataset
        from planner.specs.catalog import load_plan, plan_base_dir
        from planner.specs.workload import load_workload_file

        if records is not None and str(records) == "-":
            raise BadInputError("--records: give a file name ('-' is for --json).")
        check_outputs(
            {"--json": json_out, "--records": records, "--plot": plot, "--html": html},
            no_stdout=("--records", "--plot", "--html"),
        )
        fmt = plot_format(plot) if plot is not None else None
        pcts = parse_percentiles(percentiles)
        check_slo_percentile(slo_percentile)
        pairs = goodput_values(goodput, ctx.args)
        bounds = parse_goodput(pairs) if pairs else None
        routing = engine_routing(engine).with_overrides(route_instances, route_dp)
        plan, _ = load_plan(plan_file, rank)
        mode, delayer = engine_colocated_prefill(routing.engine, plan)
        if colocated_prefill is not None and colocated_prefill != mode:
            mode, delayer = colocated_prefill, None
        if prefill_delayer is not None:
            delayer = None if prefill_delayer == "none" else prefill_delayer
        base = plan_base_dir(plan_file)
        random = None
        if random_input_len is not None or random_output_len is not None:
            if random_input_len is None or random_output_len is None:
                raise BadInputError("--random-input-len and --random-output-len go together; give both.")
            for flag, v in (("--random-input-len", random_input_len), ("--random-output-len", random_output_len)):
                if v < 1:
                    raise BadInputError(f"{flag} must be >= 1 token; got {v}.")
            check_random_dataset(random_range_ratio, random_convention)
            random = RandomDataset(random_input_len, random_output_len, random_range_ratio, random_convention)
        else:
            for name, flag in (
                ("random_range_ratio", "--random-range-ratio"),
                ("random_convention", "--random-convention"),
            ):
                if flag_given(ctx, name):
                    raise BadInputError(
                        f"{flag} shapes the random dataset, which needs --random-input-len and --random-output-len; "
                        f"give them, or drop {flag}."
                    )
        if workload_file is not None and random is not None:
            raise BadInputError("--workload and --random-* both give lengths; give one.")
        if workload_file is not None and trace is not None:
            raise BadInputError("--trace gives each request's lengths; drop --workload with it.")
        workload = load_workload_file(workload_file) if workload_file is not None else None
        if rate is not None and not (rate > 0 and math.isfinite(rate)):
            raise BadInputError(f"--rate must be a finite number of requests per second > 0; got {rate:g}.")
        if concurrency is not None and concurrency < 1:
            raise BadInputError(f"--concurrency must be >= 1 request; got {concurrency}.")
        from planner.simulate.build import with_decode_concurrency

        sized = with_decode_concurrency(plan, decode_concurrency)
        if launch_memory_fraction is not None:
            # derived at the decode concurrency the run serves; the simulation re-sizes `plan` itself
            sized, note = with_launch_memory(sized, base, launch_memory_fraction, loads, skew_sigma)
            plan = plan.model_copy(update={"hbm_utilization": sized.hbm_utilization})
            err_console.print(f"note: {note}", markup=False, highlight=False)
        # the page shows the plan as `evaluate --html` does, bands included; the run needs no bands
        scored = score_plan(sized, base, loads, skew_sigma, bands=html is not None)
        imbalance, prediction = scored.imbalance, scored.prediction
        count = requests if requests is not None else 0
        warm = warmup
        traffic_rate = rate
        notes = []
        from planner.engines.profiles import colocated_schedule_refusal

        refusal = colocated_schedule_refusal(routing.engine, plan)
        if refusal is not None:
            notes.append(
                f"--engine {routing.engine}: {refusal.split('; re-plan')[0]}; the simulation serves the plan's own "
                "schedule, not the one this engine would run"
            )
        if trace is None and rate is None and concurrency is None:
            claim = claimed_rate(sized, prediction)
            if claim is None or claim <= 0:
                raise BadInputError("the plan claims no request rate; give --rate, --concurrency or --trace.")
            traffic_rate = claim
            notes.append(
                f"traffic: Poisson at {claim:.4g} req/s, the rate the plan's static prediction claims "
                "(--rate sets another)"
            )
        if requests is None and trace is None:
            count, auto_warm, why = auto_requests(sized, prediction, traffic_rate, concurrency)
            warm = warmup if warmup else auto_warm
            notes.append(f"requests: {count:,} ({why}; --requests and --warmup set them)")
        traffic = Traffic(
            requests=count,
            concurrency=concurrency,
            rate_per_s=traffic_rate,
            burstiness=burstiness,
            trace=trace,
            workload=workload,
            random=random,
            seed=seed,
            warmup=warm,
        )
        result = simulate_plan(
            plan,
            traffic,
            percentiles=pcts,
            goodput=bounds,
            slo_pct=slo_percentile,
            per_request=json_out is not None,
            base_dir=base,
            routing=routing,
            imbalance=imbalance,
            decode_concurrency=decode_concurrency,
            prediction=prediction,
            acceptance_spread=acceptance_spread,
            colocated_prefill=mode,
            prefill_delayer=delayer,
            prefill_delay_passes=prefill_delay_passes,
        )
        result.built.notes[:0] = notes
        result.summary["moeplan"]["notes"][:0] = notes
        outputs = Outputs()
        if json_out is not None:
            outputs.text(json_out, result_json(result), "--json")
        if records is not None:
            outputs.text(records, records_jsonl(result), "--records")
        if plot is not None:
            assert fmt is not None
            outputs.data(plot, render(simulate_figure(result), fmt), "--plot")
        if html is not None:
            run = RunAsked(plan_file, rank, claimed=traffic_rate is not None and rate is None and trace is None)
            outputs.text(html, simulate_page_html(ctx, run, scored, sized, result, loads, html, pairs), "--html")
        if json_out is not None and str(json_out) == "-":
            outputs.commit()
            return
        for renderable in simulate_renderables(result):
            console.print(renderable)
        outputs.commit()
        for flag, path in (("--json", json_out), ("--records", records), ("--plot", plot), ("--html", html)):
            if path is not None:
                err_console.print(f"{flag}: wrote {path}")

    run_guarded(body)


# vLLM's `--goodput ttft:2000 tpot:100` puts several values after one flag: the ones after the first reach
# the command as extra arguments (see `goodput_values`)
simulate.context_settings = {"allow_extra_args": True}  # type: ignore[attr-defined]
