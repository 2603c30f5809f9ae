"""The simulator's parts of a page: a `simulate --html` run, and `plan --simulate`'s checks in the plans table.

A run's page shows what `moeplan simulate` prints, cell for cell: its tables are the terminal's rich
tables (`planner.report.simulate_report`) read back as rows, its picture is `--plot`'s figure
(`planner.report.simulate_plot`) drawn as SVG, its lines are the terminal's lines. What the page
adds is said here once: the traffic asked for, the answer in one sentence, what bound admission.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.report.html.plans_table import Figure
from planner.simulate.metrics import _pword

if TYPE_CHECKING:
    from markupsafe import Markup
    from rich.table import Table

    from planner.ranking.simulated import SimulatedCheck
    from planner.simulate.run import SimResult


@dataclass
class HtmlTable:
    """A rich table as the page shows it: its title, headers (numeric ones right-aligned) and cells."""

    title: str
    headers: list[tuple[str, bool]]
    rows: list[list[str]]
    caption: str = ""


def html_table(table: Table) -> HtmlTable:
    """The rows of a rich table, cell for cell as the terminal prints them (markup removed)."""
    from rich.text import Text

    def plain(cell: Any) -> str:
        return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain

    columns = [[plain(c) for c in col.cells] for col in table.columns]
    return HtmlTable(
        title=plain(table.title or ""),
        headers=[(plain(col.header), col.justify == "right") for col in table.columns],
        rows=[list(row) for row in zip(*columns, strict=True)],
        caption=plain(table.caption or ""),
    )


@dataclass
class SimulationView:
    """A run's block of the page."""

    tables: list[HtmlTable]
    picture: Markup
    bound: str
    lines: list[str]
    summary_json: Markup
    percentile: str


def simulation_view(result: SimResult, summary_json: str) -> SimulationView:
    """The run's tables, picture and lines as `moeplan simulate` prints and `--plot` draws them."""
    from planner.report.html.render import inline_svg, script_json
    from planner.report.plot import render
    from planner.report.simulate_plot import simulate_figure
    from planner.report.simulate_report import benchmark_table, bound_lines, latency_table

    svg = render(simulate_figure(result), "svg", salt="moeplan-simulate")
    return SimulationView(
        tables=[html_table(benchmark_table(result)), html_table(latency_table(result))],
        picture=inline_svg(svg),
        bound=bound_sentence(
            result.summary["moeplan"]["bound"],
            result.built.traffic.concurrency,
            result.summary["max_concurrent_requests"],
        ),
        lines=bound_lines(result),
        summary_json=script_json(summary_json),
        percentile=_pword(result.verdict.percentile),
    )


def traffic_text(result: SimResult, claimed: bool) -> str:
    """Closed or open loop, in words."""
    t = result.built.traffic
    if t.trace is not None:
        text = f"replayed trace {t.trace.name} (its arrival times and lengths)"
        return text + (f", at most {t.concurrency:,} in flight" if t.concurrency is not None else "")
    if t.rate_per_s is None:
        if t.concurrency is None:
            return "every request sent at once"
        return f"closed loop: at most {t.concurrency:,} requests in flight (the clients' --max-concurrency)"
    shape = "Poisson arrivals" if t.burstiness == 1.0 else f"gamma-distributed gaps, burstiness {t.burstiness:g}"
    text = f"open loop: {t.rate_per_s:.4g} requests/s, {shape}"
    if claimed:
        text += " (the rate the plan's static prediction claims)"
    if t.concurrency is not None:
        text += f", at most {t.concurrency:,} in flight"
    return text


def run_question(result: SimResult, claimed: bool) -> list[tuple[str, str]]:
    """What the run was asked, row by row, after the plan's own rows."""
    b, s = result.built, result.summary
    m = s["moeplan"]
    requests = f"{b.sim.table.clients:,} sent; " + (
        f"the first {b.sim.warmup:,} a warm-up, left out of every figure" if b.sim.warmup else "no warm-up"
    )
    if b.sim.cooldown:
        requests += f"; the last {b.sim.cooldown:,} a cool-down that keeps the load on, not measured"
    if m["warm_start_sequences"]:
        requests += f"; decode starts with {m['warm_start_sequences']:,} sequences running"
    pcts = ", ".join(f"P{_pword(p)}" for p in m["percentiles"])
    goodput = ", ".join(f"{k} ≤ {v:g} ms" for k, v in m["goodput_bounds_ms"].items())
    return [
        ("traffic", traffic_text(result, claimed)),
        ("lengths", b.lengths_source),
        ("requests", requests),
        ("seed", str(b.traffic.seed)),
        ("routing", b.routing.describe()),
        (
            "figures",
            f"mean, median, {pcts} and std per request; the SLOs judged at P{_pword(result.verdict.percentile)}",
        ),
        ("goodput", f"requests meeting {goodput}" if goodput else "no bound"),
    ]


def run_answer(result: SimResult) -> str:
    """Whether the plan meets its SLOs at the percentile, and what it served, in one sentence."""
    s = result.summary
    m = s["moeplan"]
    v = result.verdict
    word = _pword(v.percentile)
    if v.met is None:
        text = "The run has no TTFT or TPOT SLO to judge"
    else:
        checks = "; ".join(
            f"{name.upper()} P{word} {value:,.1f} ms {'≤' if ok else '>'} {limit:,g} ms"
            for name, (value, limit, ok) in v.checks.items()
        )
        verdict = "meets its SLOs" if v.met else "misses its SLOs"
        text = f"At P{word} of simulated requests the plan {verdict} ({checks})"
    text += f"; it served {s['request_throughput']:,.2f} requests/s"
    static = m["static"]
    if m["structure"] == "prefill-only":
        text += f" and {s['total_token_throughput'] - s['output_throughput']:,.1f} input tokens/s"
        if static.get("request_throughput"):
            text += f" (the static prediction's capacity: {static['request_throughput']:,.2f} requests/s)"
        return text + "."
    extra = [f"{m['output_throughput_per_card']:,.1f} per card"]
    if m["steady"] is not None:
        extra.append(f"{m['steady']['output_throughput']:,.1f} in the steady state")
    if static.get("output_throughput"):
        extra.append(f"the static prediction's capacity: {static['output_throughput']:,.1f}")
    return text + f" and {s['output_throughput']:,.1f} output tokens/s ({'; '.join(extra)})."


def run_tiles(result: SimResult) -> list[tuple[str, Figure, str]]:
    """The run's headline figures as tiles, each with its static counterpart."""
    s = result.summary
    m = s["moeplan"]
    static = m["static"]
    word = _pword(result.verdict.percentile)

    def against(value: float | None, digits: int, unit: str = "") -> str:
        return "" if not value else f"static {value:,.{digits}f}{unit}"

    out = [("requests/s", Figure(s["request_throughput"], digits=2), against(static.get("request_throughput"), 2))]
    if m["structure"] != "prefill-only":
        per_card = static["output_throughput"] / m["cards"] if static.get("output_throughput") and m["cards"] else None
        out.append(
            ("output tokens/s per card", Figure(m["output_throughput_per_card"]), against(per_card, 1) or "simulated")
        )
    slo = result.built.plan.slo
    for name, limit in (("ttft", slo.ttft_ms if slo else None), ("tpot", slo.tpot_ms if slo else None)):
        key, digits = f"p{word}_{name}_ms", 0 if name == "ttft" else 1
        if key not in s or (name == "tpot" and m["structure"] == "prefill-only"):
            continue
        unit = "; ".join(
            x for x in ("ms", f"SLO {limit:,g}" if limit else "", against(static.get(f"{name}_ms"), digits)) if x
        )
        out.append((f"{name.upper()} P{word}", Figure(s[key], digits=digits), unit))
    if s.get("request_goodput") is not None:
        out.append(("goodput, requests/s", Figure(s["request_goodput"], digits=2), "meeting every bound"))
    return out


def bound_sentence(b: dict[str, Any], concurrency: int | None = None, peak_in_system: int = 0) -> str:
    """Whether the decode seats or the KV cache bound admission, from the run's counters (the summary's
    `moeplan.bound`: a step is seat-blocked when it began with every seat of a DP rank with a queue
    taken, KV-blocked when it began with a request refused for KV alone; planner/simulate/decode_instance.py);
    when neither did, whether the client's concurrency cap did (`concurrency`: the cap, `peak_in_system`:
    the most requests in the system at once)."""
    if not b["decode_seats"]:
        return "No decode seats or KV cache to bind: the plan prefills only (its queue and busy time below)."
    steps = b["decode_steps"]
    seats = b["seat_blocked_steps"]
    kv = b["kv_blocked_steps"]
    seat_text = (
        f"at {seats:,} of {steps:,} decode steps ({seats / steps:.1%}) every seat of a DP rank with requests "
        f"waiting was taken"
        if steps
        else ""
    )
    kv_text = (
        f"at {kv:,} of {steps:,} steps ({kv / steps:.1%}) the KV cache refused a request the seats had room for"
        if steps
        else ""
    )
    pre = f", and {b['preemptions']:,} sequences were preempted when it overflowed" if b["preemptions"] else ""
    if seats and (kv or b["preemptions"]):
        return f"Seats and KV cache both bound admission: {seat_text}; {kv_text}{pre}."
    if kv or b["preemptions"]:
        return (
            f"The KV cache bound admission, not the seats: {kv_text}{pre}; the fullest DP rank reached "
            f"{b['peak_kv_fraction']:.0%} of its pool of {b['kv_pool_tokens_per_rank']:,.0f} tokens."
        )
    if seats:
        return (
            f"The seats bound admission ({b['decode_seats']:,} of them): {seat_text}; the KV cache never refused "
            f"a request (the fullest DP rank at {b['peak_kv_fraction']:.0%} of its pool)."
        )
    text = (
        f"Neither the seats nor the KV cache bound admission: {b['mean_running']:,.0f} of {b['decode_seats']:,} "
        f"seats ran on average (peak {b['peak_running']:,}), no step began with a DP rank's seats all taken while "
        f"requests waited, and the KV cache never refused a request (the fullest DP rank at "
        f"{b['peak_kv_fraction']:.0%} of its pool)."
    )
    if concurrency is not None and b.get("peak_client_waiting") and peak_in_system >= concurrency:
        text += (
            f" The client's concurrency cap did: requests waited in the client while the {concurrency:,} it "
            "allows were in the system."
        )
    return text


# ---- `plan --simulate`: the checks in the ranked table --------------------------------------------


@dataclass
class CheckCells:
    """One ranked plan's simulated check as the plans table shows it (the terminal's cells)."""

    ttft: str
    tpot: str
    ttft_sort: float | None  # the SLO percentile's value, for sorting
    tpot_sort: float | None
    verdict: str
    met: bool | None
    rate: str  # 'at 156 req/s (claimed)'


@dataclass
class ChecksView:
    """`plan --simulate`'s checks: cells by rank, the percentile judged, how the plans were simulated."""

    by_rank: dict[int, CheckCells]
    percentile: str
    caption: str
    lines: list[str]


def checks_view(checks: list[SimulatedCheck], lines: list[str]) -> ChecksView | None:
    """The checks of `plan --simulate` for the plans table (None: the plans were not simulated)."""
    if not checks:
        return None
    from planner.report.simulate_report import check_trio, check_verdict, checks_caption, miss_lines

    word = _pword(checks[0].verdict.percentile)
    by_rank = {}
    for c in checks:
        if c.rank is None:
            continue
        by_rank[c.rank] = CheckCells(
            ttft=check_trio(c, "ttft"),
            tpot=check_trio(c, "tpot"),
            ttft_sort=c.figures.get(f"p{word}_ttft_ms"),
            tpot_sort=c.figures.get(f"p{word}_tpot_ms"),
            verdict=check_verdict(c),
            met=c.verdict.met,
            rate=f"at {c.rate_per_s:.3g} req/s ({c.rate_source})",
        )
    return ChecksView(by_rank, word, checks_caption(checks), [*lines, *miss_lines(checks)])
