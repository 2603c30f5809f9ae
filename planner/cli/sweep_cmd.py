"""`moeplan sweep --tpot-ms 10:150:10`: the best plan at every point of one or two swept parameters,
as a table, CSV/JSON exports, and the frontier of tokens/s per card against tokens/s per user."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from planner.cli.common import (
    Outputs,
    check_outputs,
    command_line,
    console,
    err_console,
    run_guarded,
)
from planner.cli.options import (
    DEFAULT_CURRENCY,
    AcceptanceSpreadOpt,
    AnyTpOpt,
    ColocatedOpt,
    CurrencyOpt,
    DecodeDevicesOpt,
    DecodeMicrobatchOpt,
    HbmUtilizationOpt,
    HtmlOpt,
    KvSplitOpt,
    LoadsOpt,
    MaxExtraSlotsOpt,
    MaxItlOpt,
    MaxRedundantOpt,
    ObjectiveOpt,
    PhaseOpt,
    PrefillDevicesOpt,
    PricePerCardHourOpt,
    QuantizationOpt,
    SearchEngineOpt,
    SkewSigmaOpt,
    SloPercentileOpt,
    StructureOpt,
    SweepJobsOpt,
    TpotAtPercentileOpt,
    WorkersOpt,
    YAxisOpt,
    check_price_names,
    check_spread_needs_simulate,
    parse_prices,
    priced,
)
from planner.cli.plan_cmd import (
    build_request,
    engine_mode,
    first_plan_outcome,
    quantization_for,
    refuse_unused_flags,
)
from planner.costmodel.context import DEFAULT_HBM_UTILIZATION
from planner.errors import BadInputError, InfeasibleError
from planner.ranking.frontier import ECONOMICS_FIGURE, Y_AXES, published_points, sweep_curves, sweep_metric
from planner.report.sweep_report import (
    cache_line,
    sweep_csv,
    sweep_document,
    sweep_rows,
    sweep_table,
    terminal_chart,
)
from planner.search.forked import DEFAULT_JOBS
from planner.search.request import (
    DEFAULT_HARDWARE,
    DEFAULT_MAX_CARDS,
    DEFAULT_MODEL,
    DEFAULT_SLO,
    DEFAULT_WORKLOAD,
)
from planner.search.runnable import AUTO, NONE
from planner.search.settings import DEFAULT_TIME_LIMIT_S
from planner.search.sweep import (
    SweepResult,
    grid,
    parse_axes,
    parse_budgets,
    parse_values,
    run_sweep,
)
from planner.specs.catalog import load_model
from planner.specs.quantization import AUTO_QUANTIZATION

SWEEP_HELP = "A value, a list a,b,c or a range start:stop:step (both ends included)."


def simulate_points(result: SweepResult, rows: list[dict[str, object]], acceptance_spread: float | None = None) -> list:
    """`--simulate`: each feasible point's plan simulated at its rate (planner.ranking.simulated); the
    simulated percentiles go into the point's row (CSV, JSON) as sim_* columns. `acceptance_spread`:
    --acceptance-spread (None: the shipped fit)."""
    from planner.ranking.simulated import simulate_check

    checks = []
    for pt, row in zip(result.points, rows, strict=True):
        if pt.plan is None:
            continue
        pct = pt.request.workload.slo_percentile  # --slo-percentile, as the point was searched with
        check, _ = simulate_check(
            pt.plan, pt.request.rate_per_s, pct, imbalance=pt.request.imbalance, acceptance_spread=acceptance_spread
        )
        word = f"{check.verdict.percentile:g}"
        row.update(
            {
                "sim_rate_per_s": round(check.rate_per_s, 6),
                "sim_ttft_ms": round(check.figures.get(f"p{word}_ttft_ms", 0.0), 3),
                "sim_tpot_ms": round(check.figures.get(f"p{word}_tpot_ms", 0.0), 3),
                "sim_slo_percentile": check.verdict.percentile,
                "sim_meets_slo": check.verdict.met,
            }
        )
        checks.append((pt, check))
    return checks


def _title(result: SweepResult, metric: str) -> str:
    req = result.points[0].request
    w = req.workload
    model = load_model(req.model).name
    phase = {"deployment": "prefill + decode", "decode": "decode only", "prefill": "prefill only"}[metric]

    def span(values: tuple) -> str:
        if isinstance(values[0], str):
            return "/".join(str(v) for v in values)
        return f"{values[0]:g}..{values[-1]:g}"

    swept = ", ".join(f"{a.flag} {span(a.values)}" for a in result.axes)
    note = (
        "\ncurves: whole deployment per card (prefill cards included); published stars: decode cards "
        "only (the report gives no whole-deployment figure), so a star sits higher than its curve would"
        if metric == "deployment"
        else ""
    )
    return (
        f"{model}, {phase}, {w.input_tokens}+{w.output_tokens} tokens, MTP acceptance "
        f"{w.mtp_acceptance:g}; swept {swept}{note}"
    )


def no_feasible_point(result: SweepResult, asked: list[Path | None]) -> str:
    """Why a sweep with no feasible point fails: what bound the points, and how many each."""
    tags: dict[str, list[str]] = {}
    for pt in result.points:
        tags.setdefault(pt.binding_tag or "infeasible", []).append(pt.message.strip().rstrip("."))
    n = len(result.points)
    if len(tags) == 1:
        [(tag, messages)] = tags.items()
        detail = messages[0].removeprefix(f"{tag}:").strip()
        first = "" if len(set(messages)) == 1 else "at the first: "
        where = f"at every one of the {n} points" if n > 1 else "at its only point"
        why = f"{tag} binds {where} ({first}{detail})"
    else:
        counts = sorted(((len(m), tag) for tag, m in tags.items()), reverse=True)
        why = ", ".join(f"{tag} binds at {k}" for k, tag in counts) + " (the table says why at each point)"
    files = [str(p) for p in asked if p is not None and str(p) != "-"]
    unwritten = f" Not written: {', '.join(files)}." if files else ""
    return f"no point of the sweep is feasible: {why}.{unwritten}"


def _sweep_page(
    result: SweepResult, rows, metric: str, curves, published, command: str, html: Path, y_text: str
) -> str:
    """The HTML report of a sweep (--html): the frontier (drawn always), the points, their plans."""
    from planner.report.html import SweepPage, sweep_html
    from planner.report.plot import frontier_figure, render
    from planner.report.sweep_report import sweep_plans_document

    title = _title(result, metric)
    svg = None
    if curves is not None and published is not None:
        svg = render(frontier_figure(curves, published, metric, title, y_text), "svg", salt="moeplan-frontier")
    page = SweepPage(
        result=result,
        rows=rows,
        title=title,
        frontier_svg=svg,
        command=command,
        plans_json=sweep_plans_document(result),
        status_line=cache_line(result),
        html_name=str(html),
    )
    return sweep_html(page)


def check_y_axis(y_axis: str, machines: list[str], price_per_card_hour: str | None, currency: str) -> None:
    """--y-axis is one of the axes, and every machine of the sweep has the figure a cost or energy
    axis needs (its price, from the flag or its file; its power); errors name the flag and the fix."""
    from planner.specs.catalog import load_hardware

    if y_axis not in Y_AXES:
        raise BadInputError(f"--y-axis: '{y_axis}' is not one of {', '.join(Y_AXES)}.")
    if y_axis not in ECONOMICS_FIGURE:
        return
    prices = parse_prices(price_per_card_hour)
    hws = [load_hardware(m) for m in machines]
    check_price_names(prices, [hw.name for hw in hws])
    for hw in hws:
        hw = priced(hw, prices, currency)
        if y_axis == "cost" and hw.price_per_card_hour is None:
            raise BadInputError(
                f"--y-axis cost: hardware '{hw.name}' has no price_per_card_hour; give your price with "
                "--price-per-card-hour."
            )
        if y_axis == "energy" and hw.power_w_per_card is None:
            raise BadInputError(
                f"--y-axis energy: hardware '{hw.name}' has no power_w_per_card; add power_w_per_card: "
                "{value, basis, source} to a copy of its YAML."
            )


def _run_with_progress(points, axes, fixed, jobs: int) -> SweepResult:
    # No refresh thread (auto_refresh=False, refreshed on every point): the sweep forks worker
    # processes, and a fork while another thread holds the console's lock could hang a worker.
    # Without a terminal on stderr there is nothing to redraw, and no display (rich would still
    # end it with an empty line).
    if not err_console.is_terminal:
        return run_sweep(points, axes, fixed, None, jobs=jobs, search=first_plan_outcome)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        auto_refresh=False,
    ) as bar:
        task = bar.add_task("sweeping", total=len(points))
        bar.refresh()

        def progress(done: int, total: int, values: dict) -> None:
            label = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
            bar.update(task, completed=done, description=f"planned {label}" if label else "planned")
            bar.refresh()

        return run_sweep(points, axes, fixed, progress, jobs=jobs, search=first_plan_outcome)


def sweep(
    ctx: typer.Context,
    tpot_ms: Annotated[str, typer.Option("--tpot-ms", help=f"TPOT SLO, ms. {SWEEP_HELP}")] = f"{DEFAULT_SLO.tpot_ms:g}",
    ttft_ms: Annotated[str, typer.Option("--ttft-ms", help=f"TTFT SLO, ms. {SWEEP_HELP}")] = f"{DEFAULT_SLO.ttft_ms:g}",
    input_tokens: Annotated[str, typer.Option("--input-tokens", help=f"Prompt length. {SWEEP_HELP}")] = str(
        DEFAULT_WORKLOAD.input_tokens
    ),
    output_tokens: Annotated[str, typer.Option("--output-tokens", help=f"Completion length. {SWEEP_HELP}")] = str(
        DEFAULT_WORKLOAD.output_tokens
    ),
    mtp_acceptance: Annotated[
        str, typer.Option("--mtp-acceptance", help=f"MTP acceptance. {SWEEP_HELP}")
    ] = f"{DEFAULT_WORKLOAD.mtp_acceptance:g}",
    max_cards: Annotated[
        str,
        typer.Option(
            "--max-cards",
            help=f"Card budget. {SWEEP_HELP} With several --hardware, also one per machine: a2=64,cm384=384.",
        ),
    ] = str(DEFAULT_MAX_CARDS),
    rate: Annotated[
        str | None,
        typer.Option("--rate", help=f"Requests/s to serve with the fewest cards. {SWEEP_HELP}"),
    ] = None,
    hardware: Annotated[
        str, typer.Option("--hardware", help="Machine(s): a name or path, or a list a2,cm384.")
    ] = DEFAULT_HARDWARE,
    model: Annotated[
        str, typer.Option("--model", help="Catalog name or path to a YAML / config.json.")
    ] = DEFAULT_MODEL,
    quantization: QuantizationOpt = AUTO_QUANTIZATION,
    phase: PhaseOpt = "both",
    decode_devices: DecodeDevicesOpt = None,
    prefill_devices: PrefillDevicesOpt = None,
    mtp: Annotated[str | None, typer.Option(help="MTP depths to consider, e.g. '0,1,2'.")] = None,
    draft_model: Annotated[
        str | None,
        typer.Option("--draft-model", metavar="DRAFT", help="An EAGLE-3 draft head beside the model (drafts/)."),
    ] = None,
    loads: LoadsOpt = None,
    skew_sigma: SkewSigmaOpt = None,
    max_redundant_experts: MaxRedundantOpt = None,
    max_extra_slots: MaxExtraSlotsOpt = None,
    any_tp: AnyTpOpt = False,
    colocated: ColocatedOpt = True,
    hbm_utilization: HbmUtilizationOpt = DEFAULT_HBM_UTILIZATION,
    decode_attention_kv_split: KvSplitOpt = True,
    max_itl_ms: MaxItlOpt = None,
    decode_microbatch: DecodeMicrobatchOpt = True,
    structure: StructureOpt = None,
    engine: SearchEngineOpt = None,
    objective: ObjectiveOpt = "tokens-per-card",
    price_per_card_hour: PricePerCardHourOpt = None,
    currency: CurrencyOpt = DEFAULT_CURRENCY,
    y_axis: YAxisOpt = "tokens-per-card",
    csv_out: Annotated[
        Path | None,
        typer.Option("--csv", help="Write one CSV line per point to FILE ('-': stdout)."),
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Write every point (with its plan) as JSON to FILE ('-': stdout)."),
    ] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Draw the frontier to FILE.png or FILE.svg.")] = None,
    html: HtmlOpt = None,
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit",
            min=0.1,
            max=86400.0,
            help="CP-SAT's time limit, in seconds, for each point's solves together (the cost tables are not "
            "limited by it).",
        ),
    ] = DEFAULT_TIME_LIMIT_S,
    workers: WorkersOpt = 2,
    jobs: SweepJobsOpt = DEFAULT_JOBS,
    simulate: Annotated[
        bool,
        typer.Option(
            "--simulate",
            help="Check each point's plan by simulation at its rate (--rate, else the rate it claims): "
            "simulated p90 TTFT and TPOT (--slo-percentile) and whether they meet the SLOs.",
        ),
    ] = False,
    slo_percentile: SloPercentileOpt = None,
    tpot_at_percentile: TpotAtPercentileOpt = False,
    acceptance_spread: AcceptanceSpreadOpt = None,
) -> None:
    """Sweep one or two parameters (SLOs, workload, budget, rate, machine) and print the best plan
    per point; infeasible points are rows naming what binds.

    \b
    Examples:
      moeplan sweep --tpot-ms 10:150:10 --hardware cm384 --max-cards 384 --plot frontier.png
      moeplan sweep --tpot-ms 20:100:20 --input-tokens 1024,2048,4096 --phase decode
      moeplan sweep --tpot-ms 10:150:10 --hardware a2,cm384 --max-cards a2=64,cm384=384

    The plot (and, without --plot, a terminal chart) shows output tokens/s per card against
    tokens/s per user, one curve per machine or per value of the second parameter, with the
    published deployments of the validation/ store (decode-only per card) overlaid.
    """

    def body() -> None:
        from planner.report.plot import plot_format

        check_spread_needs_simulate(acceptance_spread, simulate)
        refuse_unused_flags(ctx, phase)  # as plan does: a flag of the phase --phase leaves out

        fmt = plot_format(plot) if plot is not None else None
        if sum(1 for o in (csv_out, json_out) if o is not None and str(o) == "-") > 1:
            raise BadInputError("--csv - and --json - both want stdout; send one of them to a file.")
        check_outputs(
            {"--csv": csv_out, "--json": json_out, "--plot": plot, "--html": html}, no_stdout=("--plot", "--html")
        )
        texts = {
            "hardware": hardware,
            "tpot-ms": tpot_ms,
            "ttft-ms": ttft_ms,
            "input-tokens": input_tokens,
            "output-tokens": output_tokens,
            "mtp-acceptance": mtp_acceptance,
            "max-cards": max_cards,
            "rate": rate,
        }
        axes, fixed = parse_axes(texts)
        machines = parse_values(hardware, "hardware")
        budgets = parse_budgets(max_cards, machines) if "=" in max_cards else None
        check_y_axis(y_axis, [str(m) for m in machines], price_per_card_hour, currency)
        if fmt is not None and phase == "prefill":
            raise BadInputError("--plot draws tokens/s per user from TPOT: use --phase both or decode.")
        # each machine's scheme (`auto` resolved on it) and why, where `auto` left the default there
        schemes = {str(m): quantization_for(quantization, str(m)) for m in machines}
        mode = engine_mode(engine, [], False)
        points = []
        for values in grid(axes):
            v = {**fixed, **values}
            shown = dict(values)
            if budgets is not None:
                v["max-cards"] = budgets[str(v["hardware"])]
                if "hardware" in values:
                    shown["max-cards"] = v["max-cards"]
            rate_value = v.get("rate")
            request = build_request(
                model=model,
                hardware=str(v["hardware"]),
                quantization=schemes[str(v["hardware"])][0],
                input_tokens=int(v["input-tokens"]),
                output_tokens=int(v["output-tokens"]),
                mtp_acceptance=float(v["mtp-acceptance"]),
                tpot_ms=float(v["tpot-ms"]),
                ttft_ms=float(v["ttft-ms"]),
                max_cards=float(v["max-cards"]),
                phase=phase,
                decode_devices=decode_devices,
                prefill_devices=prefill_devices,
                rate=None if rate_value is None else float(rate_value),
                top=1,
                mtp=mtp,
                time_limit=time_limit,
                workers=workers,
                loads=loads,
                skew_sigma=skew_sigma,
                max_redundant_experts=max_redundant_experts,
                max_extra_slots=max_extra_slots,
                any_tp=any_tp,
                colocated=colocated,
                hbm_utilization=hbm_utilization,
                decode_attention_kv_split=decode_attention_kv_split,
                max_itl_ms=max_itl_ms,
                decode_microbatch=decode_microbatch,
                structure=structure,
                objective=objective,
                price_per_card_hour=price_per_card_hour,
                currency=currency,
                simulate=simulate,
                draft_model=draft_model,
                slo_percentile=slo_percentile,
                tpot_at_percentile=tpot_at_percentile,
                engine=None if mode in (AUTO, NONE) else mode,
            )
            points.append((shown, dataclasses.replace(request, engine_mode=mode)))
        result = _run_with_progress(points, axes, fixed, jobs)
        rows = sweep_rows(result)
        checks = simulate_points(result, rows, acceptance_spread) if simulate else None
        if result.interrupted:
            if result.points:
                console.print(sweep_table(result, rows))
            err_console.print(
                f"interrupted: {len(result.points)} of {len(points)} points done (above); no file was written."
            )
            raise typer.Exit(code=130)
        to_stdout = any(o is not None and str(o) == "-" for o in (csv_out, json_out))
        if not any(pt.status == "ok" for pt in result.points):
            # the table says why at each point (on stderr, as wide as on stdout, when stdout was to
            # carry the CSV/JSON)
            screen = Console(stderr=True, highlight=False, width=console.width) if to_stdout else console
            screen.print(sweep_table(result, rows))
            raise InfeasibleError(no_feasible_point(result, [csv_out, json_out, plot, html]))
        # every output is built before any is written: a plot that fails leaves no CSV behind
        outputs = Outputs()
        if csv_out is not None:
            outputs.text(csv_out, sweep_csv(result, rows), "--csv")
        if json_out is not None:
            outputs.text(json_out, sweep_document(result, rows), "--json")
        metric = sweep_metric(result)
        curves = published = None
        from planner.report.plot import y_label

        y_text = y_label(metric, y_axis, result.points[0].request.currency)
        if metric != "prefill":
            curves = sweep_curves(result, y_axis)
            spec = load_model(result.points[0].request.model)
            # published rows have no price or power: a cost or energy picture has no overlay
            published = published_points(spec, {c.hardware for c in curves}) if y_axis not in ECONOMICS_FIGURE else []
        if plot is not None and fmt is not None and curves is not None and published is not None:
            from planner.report.plot import frontier_figure, render

            fig = frontier_figure(curves, published, metric, _title(result, metric), y_text)
            outputs.data(plot, render(fig, fmt), "--plot")
        if html is not None:
            page = _sweep_page(result, rows, metric, curves, published, command_line(ctx), html, y_text)
            outputs.text(html, page, "--html")
        outputs.commit()
        if any(o is not None and str(o) == "-" for o in (csv_out, json_out)):
            return
        console.print(sweep_table(result, rows, y_axis))
        for _, note in schemes.values():
            if note is not None:
                console.print(f"note: {note}", highlight=False)
        console.print(cache_line(result))
        if checks:
            from planner.report.simulate_report import checks_caption, checks_table, miss_lines

            labels = [", ".join(f"{k}={v}" for k, v in pt.values.items()) for pt, _ in checks]
            console.print(checks_table([c for _, c in checks], "Checked by simulation", labels))
            console.print(checks_caption([c for _, c in checks]))
            for line in miss_lines([c for _, c in checks], labels):
                console.print(line, highlight=False)
        if plot is not None:
            console.print(f"frontier plot written to {plot}")
        elif curves is not None and published is not None:
            console.print(terminal_chart(curves, published, y_text), markup=False, highlight=False)

    run_guarded(body)
