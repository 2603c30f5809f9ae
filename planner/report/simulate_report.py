"""What `moeplan simulate` prints and writes: the benchmark table, latencies against the static
prediction, what bound, the SLO verdict; the vLLM-keyed JSON and the per-request JSONL records."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from rich.console import RenderableType
from rich.table import Table

from planner.simulate.metrics import LITTLE_WINDOW_LATENCIES, METRICS, _pword
from planner.simulate.run import SimResult

LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}


def _f(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{digits}f}"


def _rel(sim: float | None, static: float | None) -> str:
    if sim is None or not static:
        return ""
    return f" ({sim / static - 1:+.1%})"


def title(result: SimResult) -> str:
    """The run in one line: plan, structure, traffic, requests."""
    b = result.built
    plan = b.plan
    machines = {
        n: sec.hardware or plan.hardware for n, sec in (("prefill", plan.prefill), ("decode", plan.decode)) if sec
    }
    where = (
        " and ".join(f"{n} on {h}" for n, h in machines.items())
        if len(set(machines.values())) > 1
        else f"on {plan.hardware}"
    )
    return (
        f"simulated: {plan.model} {where}, {b.structure}, {b.cards:g} cards; {b.traffic.describe()}; "
        f"{b.sim.table.clients:,} requests ({b.lengths_source}), warm-up {b.sim.warmup}"
        + (f", cool-down {b.sim.cooldown}" if b.sim.cooldown else "")
        + (
            f", warm start {b.sim.table.count - b.sim.table.clients:,} sequences"
            if b.sim.table.count > b.sim.table.clients
            else ""
        )
        + f", seed {b.traffic.seed}"
    )


def benchmark_table(result: SimResult) -> Table:
    """The figures `vllm bench serve` prints, with moeplan's per-card figures and the static prediction."""
    s = result.summary
    m = s["moeplan"]
    static = m["static"]
    t = Table(title=title(result), show_header=True, title_justify="left")
    t.add_column("figure")
    t.add_column("simulated", justify="right")
    t.add_column("per card", justify="right")
    t.add_column("static", justify="right")
    steady = m["steady"]
    t.add_row("requests completed (failed)", f"{s['completed']:,} ({s['failed']})", "", "")
    t.add_row("duration s", _f(s["duration"], 2), "", "")
    t.add_row(
        "request throughput req/s",
        _f(s["request_throughput"], 3),
        _f(m["request_throughput_per_card"], 4),
        _f(static.get("request_throughput"), 3),
    )
    if s.get("request_goodput") is not None:
        bounds = ", ".join(f"{k} <= {v:g} ms" for k, v in m["goodput_bounds_ms"].items())
        t.add_row(f"request goodput req/s ({bounds})", _f(s["request_goodput"], 3), "", "")
    t.add_row(
        "output token throughput tok/s",
        _f(s["output_throughput"]),
        _f(m["output_throughput_per_card"]),
        _f(static.get("output_throughput")),
    )
    if steady is not None:
        t.add_row(
            "  steady state (warm-up to last send)",
            _f(steady["output_throughput"]) + _rel(steady["output_throughput"], static.get("output_throughput")),
            _f(steady["output_throughput_per_card"]),
            "",
        )
    t.add_row(
        "input token throughput tok/s",
        _f(s["total_token_throughput"] - s["output_throughput"]),
        _f(m["input_throughput_per_card"]),
        "",
    )
    t.add_row("peak output tok/s (one second)", _f(s["max_output_tokens_per_s"], 0), "", "")
    t.add_row("peak requests in the system", f"{s['max_concurrent_requests']:,}", "", "")
    if "spec_decode_acceptance_length" in s:
        t.add_row(
            "MTP acceptance rate % / length",
            f"{s['spec_decode_acceptance_rate']:.1f} / {s['spec_decode_acceptance_length']:.3f}",
            "",
            "",
        )
    return t


def latency_table(result: SimResult) -> Table:
    """Mean, median and percentiles of TTFT, TPOT, ITL and E2E (ms), the static figure beside them."""
    s = result.summary
    static = s["moeplan"]["static"]
    pcts = s["moeplan"]["percentiles"]
    t = Table(title="latency, ms (per request; ITL per gap between two deliveries)", title_justify="left")
    t.add_column("metric")
    for col in ("mean", "median", *[f"P{_pword(p)}" for p in pcts], "std"):
        t.add_column(col, justify="right")
    t.add_column("static", justify="right")
    for name in METRICS:
        if result.built.structure == "prefill-only" and name in ("tpot", "itl"):
            continue
        cells = [_f(s[f"mean_{name}_ms"]), _f(s[f"median_{name}_ms"])]
        cells += [_f(s[f"p{_pword(p)}_{name}_ms"]) for p in pcts]
        cells.append(_f(s[f"std_{name}_ms"]))
        st = {"ttft": static.get("ttft_ms"), "tpot": static.get("tpot_ms"), "itl": static.get("step_ms")}.get(name)
        t.add_row(LABELS[name], *cells, _f(st))
    return t


def steady_line(steady: dict) -> str:
    """The steady window's throughput, TPOT and Little's law check, or why a figure is not given."""
    head = (
        f"steady state {steady['start_s']:,.1f}-{steady['end_s']:,.1f} s: "
        f"{steady['output_throughput']:,.1f} output tok/s"
    )
    span = steady["end_s"] - steady["start_s"]
    if steady["mean_e2el_ms"] is None:
        return (
            f"{head}; no request finished inside the window ({span:,.1f} s), so it gives no TPOT and no Little's "
            "law check: send more requests (--requests)"
        )
    tpot = steady["mean_tpot_ms"]
    head += f", mean TPOT {tpot:.2f} ms" if tpot is not None else ""
    law = (
        f"Little's law: {steady['mean_in_system']:,.1f} requests in the system on average, throughput x mean "
        f"latency {steady['throughput_x_latency']:,.1f}"
    )
    err = steady["littles_law_error"]
    latency_s = steady["mean_e2el_ms"] / 1e3
    if err is not None:
        # a window a few latencies long carries edge effects of about one latency over its span
        return f"{head}; {law} ({err:+.1%}, over a window of {span / latency_s:,.1f} mean latencies)"
    return (
        f"{head} (over the {steady['completed']:,} requests that finished inside it); {law}: not checked, "
        f"the window ({span:,.1f} s) is shorter than {LITTLE_WINDOW_LATENCIES:g} mean latencies (one is "
        f"{latency_s:,.1f} s), so the requests finishing in it are the quick ones: send more requests (--requests)"
    )


# below half its decode seats running on average, a run is at a load well below the static figures' (its seats full)
STATIC_LOAD_SHARE = 0.5


def bound_lines(result: SimResult) -> list[str]:
    """What limited the run, in words."""
    s = result.summary
    m = s["moeplan"]
    b = m["bound"]
    lines = []
    steady = m["steady"]
    if steady is not None:
        lines.append(steady_line(steady))
    if b["decode_seats"]:
        steps = b["decode_steps"]
        lines.append(
            f"decode: {b['decode_seats']:,} seats, {b['mean_running']:,.0f} running on average "
            f"(peak {b['peak_running']:,}); "
            f"seats full with requests waiting at {b.get('seat_blocked_step_fraction', 0):.0%} of {steps:,} steps; "
            f"KV cache {b['kv_pool_tokens_per_rank']:,.0f} tokens per DP rank, fullest rank at "
            f"{b['peak_kv_fraction']:.0%}, "
            + (
                f"refused a request for KV at {b.get('kv_blocked_step_fraction', 0):.1%} of steps"
                if b["kv_blocked_steps"]
                else "never refused a request for KV"
            )
            + (f", {b['preemptions']:,} preemptions (KV binds)" if b["preemptions"] else "")
            + (
                f"; the prefill delayer decoded instead of prefilling at {b['prefill_delayed_steps']:,} steps"
                if b.get("prefill_delayed_steps")
                else ""
            )
            + f"; busy {_fractions(b['decode_busy_fraction'])}"
        )
    if b["decode_seats"] and b["mean_running"] < STATIC_LOAD_SHARE * b["decode_seats"]:
        lines.append(
            f"static column: the plan's figures with its {b['decode_seats']:,} decode seats full (what `evaluate` "
            f"prints); this run kept {b['mean_running']:,.0f} running on average, so its TPOT and throughput are "
            "those of a lighter load, not the static ones"
        )
    if b["prefill_busy_fraction"]:
        lines.append(
            f"prefill: {b['prefill_forwards']:,} forwards, busy {_fractions(b['prefill_busy_fraction'])}; "
            f"peak queue {b['peak_prefill_queue']:,} requests"
        )
    if b["peak_decode_waiting"] or b["peak_client_waiting"]:
        lines.append(
            f"peak waiting: {b['peak_decode_waiting']:,} at decode for admission (a seat, KV room, the next step), "
            f"{b['peak_client_waiting']:,} in the "
            "client (not counted in the latencies, as in vLLM's and SGLang's clients)"
        )
    lines.append(m["routing"])
    lines.extend(m["notes"])
    lines.append(result.verdict.line())
    return lines


def _fractions(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.0%}"
    return f"{min(values):.0%}-{max(values):.0%} over {len(values)} instances"


def simulate_renderables(result: SimResult) -> list[RenderableType]:
    """Everything the text report prints, in order."""
    return [benchmark_table(result), latency_table(result), *bound_lines(result)]


# the per-request lists of `--json` (vLLM's, one value per request): left out of the HTML report's copy
PER_REQUEST_KEYS = ("input_lens", "output_lens", "ttfts", "latencies", "start_times")


def result_json(result: SimResult, per_request: bool = True) -> str:
    """The `vllm bench serve --save-result`-keyed document (moeplan's own figures under 'moeplan');
    `per_request=False` leaves out the per-request lists, when the run kept them."""
    doc = {k: v for k, v in result.summary.items() if per_request or k not in PER_REQUEST_KEYS}
    doc["moeplan"] = {**doc["moeplan"], "slo_verdict": verdict_json(result)}
    return json.dumps(doc, indent=1, default=_plain) + "\n"


def verdict_json(result: SimResult) -> dict[str, Any]:
    """The SLO verdict as JSON."""
    v = result.verdict
    return {
        "percentile": v.percentile,
        "met": v.met,
        "checks": {k: {"simulated_ms": a, "slo_ms": b, "met": ok} for k, (a, b, ok) in v.checks.items()},
    }


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON: {type(x).__name__}")


def records_jsonl(result: SimResult) -> str:
    """One JSON object per request: its lengths, timings (seconds from the start), latencies and placement."""
    t = result.built.sim.table
    sim = result.built.sim
    measured = sim.measured()
    ttft = (t.first_token_s - t.sent_s) * 1e3
    e2el = (t.end_s - t.sent_s) * 1e3
    out = t.delivered_tokens
    tpot = np.where(out > 1, (e2el - ttft) / np.maximum(out - 1, 1), np.nan)
    cols = {
        "input_tokens": t.input_tokens,
        "output_tokens": out,
        "cached_tokens": t.cached_tokens,
        "ready_s": t.ready_s,
        "sent_s": t.sent_s,
        "prefill_done_s": t.prefill_done_s,
        "kv_ready_s": t.kv_ready_s,
        "first_token_s": t.first_token_s,
        "end_s": t.end_s,
        "client_queue_ms": (t.sent_s - t.ready_s) * 1e3,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2el_ms": e2el,
        "prefill_instance": t.prefill_instance,
        "decode_instance": t.decode_instance,
        "dp_rank": t.dp_rank,
        "preemptions": t.preemptions,
    }
    lists = {k: v.tolist() for k, v in cols.items()}
    lines = []
    for i in range(t.count):
        row: dict[str, Any] = {"request": i, "measured": bool(measured[i]), "preloaded": i >= t.clients}
        for k, v in lists.items():
            x = v[i]
            row[k] = None if isinstance(x, float) and math.isnan(x) else (round(x, 6) if isinstance(x, float) else x)
        lines.append(json.dumps(row, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def checks_table(checks: list[Any], title_text: str, labels: list[str] | None = None) -> Table:
    """Plans checked by simulation (planner.ranking.simulated): percentiles next to the static figures.
    `labels`: what each row is (default: the plan's rank)."""
    pct = checks[0].verdict.percentile if checks else 90.0
    word = _pword(pct)
    t = Table(title=title_text, title_justify="left")
    t.add_column("#" if labels is None else "plan", justify="right")
    t.add_column("rate req/s", justify="right")
    t.add_column("TTFT ms p50 / p90 / p99", justify="right")
    t.add_column("static TTFT", justify="right")
    t.add_column("TPOT ms p50 / p90 / p99", justify="right")
    t.add_column("static TPOT", justify="right")
    t.add_column(f"meets SLOs at p{word}")
    for k, c in enumerate(checks):
        t.add_row(
            str(c.rank or "") if labels is None else labels[k],
            f"{c.rate_per_s:.3g} ({c.rate_source})",
            check_trio(c, "ttft"),
            _f(c.static.get("ttft_ms"), 0),
            check_trio(c, "tpot"),
            _f(c.static.get("tpot_ms")),
            check_verdict(c),
        )
    return t


def check_trio(check: Any, name: str) -> str:
    """A checked plan's simulated p50 / p90 / p99 of 'ttft' or 'tpot', ms (the checks table's cell)."""
    digits = 0 if name == "ttft" else 1
    return " / ".join(_f(check.figures.get(f"{k}_{name}_ms"), digits) for k in ("median", "p90", "p99"))


def check_verdict(check: Any) -> str:
    """'yes', 'NO: ' and what it misses, or '-' (no SLO to judge)."""
    met = check.verdict.met
    return "-" if met is None else ("yes" if met else "NO: " + "; ".join(check.verdict.misses()))


def checks_caption(checks: list[Any]) -> str:
    """How the plans were simulated, in one line."""
    if not checks:
        return ""
    n = min(c.measured for c in checks)
    return (
        "simulated: Poisson arrivals at each plan's rate, decode warm-started full at that rate, "
        f">= {n:,} measured requests per plan (a cool-down keeps the load on until the last of them ends), seed 0; "
        f"p{_pword(checks[0].verdict.percentile)} of simulated TTFT and TPOT judged against the SLOs "
        f"(--slo-percentile); each request's own MTP acceptance spread, tau {checks[0].acceptance_spread:.3g} "
        f"({'--acceptance-spread' if checks[0].spread_given else 'fitted, docs/simulate.md'})"
    )


def _median_meets_tpot(check: Any) -> str:
    """When a plan misses TPOT at the percentile but its median meets it: why, and the SLO to plan to."""
    tpot = check.verdict.checks.get("tpot")
    median = check.figures.get("median_tpot_ms")
    if tpot is None or tpot[2] or median is None or median > tpot[1]:
        return ""
    value, limit, _ = tpot
    why = (
        "the search held the percentile request's TPOT as its own MTP acceptance spreads it, and batching, "
        "context lengths and queueing spread the requests further"
        if getattr(check, "tpot_at_percentile", False)  # (a SimulatedCheck; duck-typed checks lack it)
        else "the static TPOT is the mean step, and requests spread about it, each at its own MTP acceptance"
    )
    return (
        f" (its median TPOT, {median:.1f} ms, meets it: {why}, docs/simulate.md; to meet it at this percentile, "
        f"ask for --tpot-ms {limit * limit / value:.0f})"
    )


def miss_lines(checks: list[Any], labels: list[str] | None = None) -> list[str]:
    """One line for each checked plan that misses its SLOs at the percentile (`labels`: each plan's name,
    default 'rank N')."""
    names = labels if labels is not None else [f"rank {c.rank}" for c in checks]
    return [
        f"{name} misses its SLOs at p{c.verdict.percentile:g} of simulated requests: "
        + "; ".join(c.verdict.misses())
        + _median_meets_tpot(c)
        for name, c in zip(names, checks, strict=True)
        if c.verdict.met is False
    ]


def _sim_error(r: Any) -> str:
    return "-" if r.error is None else f"{r.error:+.1%}"


def _fit_labels(r: Any) -> list[str]:
    """What was fitted on the figure or on its run, for a reader: 'acceptance spread' for the simulator's
    parameter, 'static row of the run' for a static fit row derived from the same run."""
    labels = {name.split(".")[-1].replace("_", " ") for name in r.fitted_parameters}
    if r.static_rows_of_run:
        labels.add("static row of the run")
    return sorted(labels)


def _sim_name(r: Any) -> str:
    """The figure's id, marked when something was fitted on it or on its run (the simulator's acceptance spread,
    a static fit row derived from the same run)."""
    labels = _fit_labels(r)
    return f"{r.figure.id} (fit: {', '.join(labels)})" if labels else r.figure.id


def simulated_fidelity_table(rows: list[Any]) -> Table:
    """`moeplan fidelity`: the store's queueing-dominated figures against the simulated runs."""
    t = Table(
        title="Queueing-dominated figures against the serving simulator (compare: simulated)",
        caption="each run simulated as the benchmark client ran it (planner/simulate/validation.py), mean of "
        "seeds 0-2 (their range beside it); every step and forward timed by the cost model as shipped; "
        "(fit: ...): the simulator's parameter fitted on the figure, or a static fit row derived from the same "
        "run (its factors then were fitted on that run); every other figure held out",
        title_justify="left",
    )
    for col in ("row", "figure", "published", "simulated", "error", "seeds", "tolerance", "within"):
        t.add_column(col, justify="right" if col in ("published", "simulated", "error", "tolerance") else "left")
    for r in rows:
        ok = "-" if r.within_tolerance is None else ("[green]yes[/]" if r.within_tolerance else "[red]NO[/]")
        seeds = f"{min(r.per_seed):.4g}-{max(r.per_seed):.4g}" if r.per_seed else (r.reason or "-")
        t.add_row(
            _sim_name(r),
            r.figure.unit,
            f"{r.figure.published:g}",
            "-" if r.predicted is None else f"{r.predicted:.4g}",
            _sim_error(r),
            seeds,
            f"±{r.figure.tolerance:.0%}",
            ok,
        )
    return t


def simulated_fidelity_lines(rows: list[Any]) -> list[str]:
    """Counts, and the figures that could not be simulated with why."""
    judged = [r for r in rows if r.within_tolerance is not None]
    lines = []
    if judged:
        inside = sum(1 for r in judged if r.within_tolerance)
        held = [r for r in judged if not r.fitted_to]
        held_inside = sum(1 for r in held if r.within_tolerance)
        lines.append(
            f"simulated figures within their tolerance: {inside} of {len(judged)}; of those on runs nothing was "
            f"fitted or chosen on (held out): {held_inside} of {len(held)}"
        )
    for r in rows:
        if r.reason:
            lines.append(f"not simulated: {r.figure.id}: {r.reason}")
    return lines


def simulated_fidelity_markdown(rows: list[Any]) -> str:
    """The same as a Markdown table."""
    lines = [
        "| simulated run | figure | published | simulated | error | seeds | tolerance |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        seeds = f"{min(r.per_seed):.4g}-{max(r.per_seed):.4g}" if r.per_seed else (r.reason or "-")
        sim = "-" if r.predicted is None else f"{r.predicted:.4g}"
        lines.append(
            f"| {_sim_name(r)} | {r.figure.unit} | {r.figure.published:g} | {sim} | {_sim_error(r)} | {seeds} | "
            f"±{r.figure.tolerance:.0%} |"
        )
    return "\n".join(lines) + "\n"
