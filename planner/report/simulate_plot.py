"""The picture of a simulated run: queues, running batch and KV use over time, and the latency CDFs.

Four panels on a bare matplotlib `Figure` (no pyplot): requests waiting (in the client, for
prefill, at decode for admission) over time; sequences running against the decode seats; KV cache
use (mean over DP ranks, and the fullest rank) against the pool; the cumulative distributions of
TTFT, TPOT and E2E over the measured requests, with the plan's SLOs and the static figures marked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.simulate.run import SimResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _cdf(ax, values: np.ndarray, label: str, color: str) -> None:
    v = np.sort(values[np.isfinite(values)])
    if v.size:
        ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label, color=color)


def simulate_figure(result: SimResult) -> Figure:
    """The four panels of the run."""
    from matplotlib.figure import Figure

    b = result.built
    sim = b.sim
    s = sim.series.arrays()
    t = s["time_s"]
    fig = Figure(figsize=(11.0, 7.5), dpi=100, layout="constrained")
    (q_ax, run_ax), (kv_ax, cdf_ax) = fig.subplots(2, 2)
    fig.suptitle(f"{b.plan.model} on {b.plan.hardware}, {b.structure}, {b.traffic.describe()}", fontsize=10)

    q_ax.plot(t, s["client_waiting"], label="in the client", color="tab:gray")
    q_ax.plot(t, s["prefill_queue"], label="for prefill", color="tab:orange")
    q_ax.plot(t, s["decode_waiting"], label="at decode, for admission", color="tab:blue")
    q_ax.set_title("requests waiting", fontsize=9)
    q_ax.set_xlabel("time, s")
    q_ax.legend(fontsize=7)

    run_ax.plot(t, s["running"], color="tab:green", label="running")
    if b.decode_seats:
        run_ax.axhline(b.decode_seats, color="tab:red", ls="--", lw=1, label=f"seats ({b.decode_seats:,})")
    run_ax.set_title("sequences decoding", fontsize=9)
    run_ax.set_xlabel("time, s")
    run_ax.legend(fontsize=7)

    kv_ax.plot(t, 100 * s["kv_use"], color="tab:purple", label="mean over DP ranks")
    kv_ax.plot(t, 100 * s["kv_use_max_rank"], color="tab:pink", label="fullest rank", lw=0.8)
    kv_ax.axhline(100, color="tab:red", ls="--", lw=1, label="KV pool")
    kv_ax.set_title("KV cache use, % of the pool", fontsize=9)
    kv_ax.set_xlabel("time, s")
    kv_ax.legend(fontsize=7)

    table = sim.table
    measured = sim.measured()
    done = measured & np.isfinite(table.end_s)
    ttft = (table.first_token_s - table.sent_s)[done] * 1e3
    e2el = (table.end_s - table.sent_s)[done] * 1e3
    out = table.delivered_tokens[done]
    many = out > 1
    tpot = (e2el[many] - ttft[many]) / (out[many] - 1)
    _cdf(cdf_ax, ttft, "TTFT", "tab:blue")
    if b.structure != "prefill-only":
        _cdf(cdf_ax, tpot, "TPOT", "tab:green")
    _cdf(cdf_ax, e2el, "E2E", "tab:gray")
    slo = b.plan.slo
    static = result.summary["moeplan"]["static"]
    for value, name, color in (
        (slo.ttft_ms if slo else None, "TTFT SLO", "tab:blue"),
        (slo.tpot_ms if slo else None, "TPOT SLO", "tab:green"),
        (static.get("ttft_ms"), "static TTFT", "tab:cyan"),
        (static.get("tpot_ms"), "static TPOT", "tab:olive"),
    ):
        if value:
            cdf_ax.axvline(value, color=color, ls=":" if name.startswith("static") else "--", lw=1, label=name)
    pct = result.verdict.percentile
    cdf_ax.axhline(pct / 100.0, color="black", lw=0.6, ls="-.", label=f"p{pct:g}")
    cdf_ax.set_xscale("log")
    cdf_ax.set_xlabel("ms (log scale)")
    cdf_ax.set_ylabel("share of requests")
    cdf_ax.set_title("latency CDF (measured requests)", fontsize=9)
    cdf_ax.legend(fontsize=7, loc="lower right")
    return fig
