"""The figures of a simulated run, named as the benchmark clients name them.

Benchmark figures follow `vllm bench serve` (vllm/benchmarks/serve.py, `calculate_metrics` and the
`--save-result` document): over the requests after `--warmup`, `duration` from the first of them
being sent to the last of them finishing; `request_throughput`, `output_throughput`,
`total_token_throughput` per second of it; per request TTFT (send to first token), TPOT
((E2E - TTFT) / (output tokens - 1), requests of one token left out), E2EL (send to last token);
ITL the gaps between the token deliveries of a sequence after its first; for each, `mean_X_ms`,
`median_X_ms`, `std_X_ms` and `pNN_X_ms`; `request_goodput` the requests per second meeting every
`--goodput` bound (TPOT of one-token requests counted as 0, as vLLM does);
`max_output_tokens_per_s` the most tokens delivered within one second of the run,
`max_concurrent_requests` the most requests in the system at once; with MTP,
`spec_decode_acceptance_rate` (accepted draft tokens over draft tokens, %) and
`spec_decode_acceptance_length` (1 + accepted per draft round).

moeplan's own figures sit under `moeplan`: the same throughputs per card, the steady-state window
(from the first measured request being sent to the last request being sent: no ramp-up after the
warm-up, no drain), Little's law on that window (requests in the system on average, against
throughput x mean latency), the static prediction next to the simulated figures, and what bound
(seats, KV cache, preemptions, queues, busy time).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np

from planner.simulate.build import Built

METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILES = (90.0, 99.0)
GOODPUT_NAMES = ("ttft", "tpot", "e2el")


def _pword(p: float) -> str:
    """vLLM's key word for a percentile: 99 -> '99', 99.9 -> '99.9'."""
    return str(int(p)) if int(p) == p else str(p)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, pct: float) -> float:
    """The pct-th percentile of values with integer-like weights, interpolated as numpy's 'linear' on the
    expanded samples (each value repeated weight times)."""
    if values.size == 0:
        return 0.0
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w)
    total = cum[-1]
    rank = pct / 100.0 * (total - 1.0)  # position in the expanded sorted sample, 0-based
    lo = int(np.searchsorted(cum, math.floor(rank) + 1, side="left"))
    hi = int(np.searchsorted(cum, math.floor(rank) + 2, side="left"))
    lo, hi = min(lo, v.size - 1), min(hi, v.size - 1)
    frac = rank - math.floor(rank)
    return float(v[lo] + (v[hi] - v[lo]) * frac)


def _stats(values: np.ndarray, percentiles: tuple[float, ...], weights: np.ndarray | None = None) -> dict[str, float]:
    """mean, median, std and percentiles in ms of seconds `values` (0 for none, as vLLM)."""
    if values.size == 0:
        out = {"mean": 0.0, "median": 0.0, "std": 0.0}
        out.update({f"p{_pword(p)}": 0.0 for p in percentiles})
        return out
    if weights is None:
        ms = values * 1e3
        out = {"mean": float(np.mean(ms)), "median": float(np.median(ms)), "std": float(np.std(ms))}
        out.update({f"p{_pword(p)}": float(np.percentile(ms, p)) for p in percentiles})
        return out
    ms = values * 1e3
    mean = float(np.sum(ms * weights) / np.sum(weights))
    std = float(math.sqrt(max(0.0, float(np.sum(weights * (ms - mean) ** 2) / np.sum(weights)))))
    out = {"mean": mean, "median": weighted_percentile(ms, weights, 50.0), "std": std}
    out.update({f"p{_pword(p)}": weighted_percentile(ms, weights, p) for p in percentiles})
    return out


def parse_goodput(items: list[str] | None) -> dict[str, float]:
    """`--goodput ttft:2000 tpot:100` -> {'ttft': 2000.0, 'tpot': 100.0} (ms), checked like vLLM's."""
    from planner.errors import BadInputError

    out: dict[str, float] = {}
    for item in items or []:
        for part in item.replace(",", " ").split():
            name, sep, value = part.partition(":")
            if not sep:
                raise BadInputError(f"--goodput: '{part}' is not NAME:MS; give pairs like ttft:2000 tpot:100.")
            if name not in GOODPUT_NAMES:
                raise BadInputError(f"--goodput: '{name}' is not one of {', '.join(GOODPUT_NAMES)}.")
            try:
                ms = float(value)
            except ValueError:
                raise BadInputError(f"--goodput: '{value}' is not a number of milliseconds.") from None
            if not (ms >= 0 and math.isfinite(ms)):
                raise BadInputError(f"--goodput: {name}:{value}; give a bound >= 0 ms.")
            out[name] = ms
    return out


def plan_goodput(built: Built) -> dict[str, float]:
    """The plan's own SLOs as goodput bounds (TTFT and TPOT it states)."""
    slo = built.plan.slo
    out: dict[str, float] = {}
    if slo is not None and slo.ttft_ms is not None:
        out["ttft"] = slo.ttft_ms
    if slo is not None and slo.tpot_ms is not None and built.structure != "prefill-only":
        out["tpot"] = slo.tpot_ms
    return out


def static_figures(built: Built) -> dict[str, float | None]:
    """The cost model's steady-state figures of the plan (what `evaluate` prints)."""
    p = built.prediction
    out: dict[str, float | None] = {
        "tpot_ms": None,
        "ttft_ms": None,
        "output_throughput": None,
        "request_throughput": None,
    }
    if p.colocated is not None:
        out["tpot_ms"] = p.colocated.tpot_ms
        out["ttft_ms"] = p.colocated.ttft_ms
    else:
        if p.decode is not None:
            out["tpot_ms"] = p.decode.tpot_ms
            out["step_ms"] = p.decode.step_ms
        if p.prefill is not None:
            out["ttft_ms"] = p.prefill.ttft_ms
    if p.system is not None:
        out["output_throughput"] = p.system.output_tokens_per_s
        out["request_throughput"] = p.system.requests_per_s
    elif p.decode is not None and built.plan.decode is not None:
        per_s = p.decode.tokens_per_s_per_device * built.plan.decode.total_devices
        out["output_throughput"] = per_s
        out["request_throughput"] = per_s / built.plan.workload.output_tokens
    elif p.prefill is not None and built.plan.prefill is not None:
        forwards = built.plan.prefill.instances / (p.prefill.forward_ms / 1e3)
        out["request_throughput"] = forwards * p.prefill.requests_per_forward
    return out


def summarize(
    built: Built,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    goodput: dict[str, float] | None = None,
    per_request: bool = True,
) -> dict[str, Any]:
    """The run's figures: vLLM's keys at the top level, moeplan's under 'moeplan'."""
    sim, t, traffic = built.sim, built.sim.table, built.traffic
    done = ~np.isnan(t.end_s)
    measured = sim.measured()
    ok = measured & done
    sent, end, start = t.sent_s[ok], t.end_s[ok], t.first_token_s[ok]
    out_len = t.delivered_tokens[ok]
    in_len = t.input_tokens[ok]
    completed = int(ok.sum())
    duration = float(end.max() - np.nanmin(t.sent_s[measured])) if completed else 0.0
    ttft = start - sent
    e2el = end - sent
    many = out_len > 1
    tpot = (e2el[many] - ttft[many]) / (out_len[many] - 1)
    all_tpot = np.zeros(completed)
    all_tpot[many] = tpot
    gap_v, gap_w, gap_t = sim.gaps.arrays()
    since = float(np.nanmin(t.sent_s[measured])) if completed else 0.0
    keep = gap_t >= since
    gaps = _stats(gap_v[keep], percentiles, gap_w[keep])
    goodput = goodput if goodput is not None else plan_goodput(built)
    good = np.ones(completed, dtype=bool)
    for name, series in (("ttft", ttft), ("tpot", all_tpot), ("e2el", e2el)):
        if name in goodput:
            good &= series <= goodput[name] / 1e3
    total_out = int(out_len.sum())
    total_in = int(in_len.sum())
    per = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    result: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "backend": "moeplan-simulate",
        "model_id": built.plan.model,
        "num_prompts": int(measured.sum()),
        "request_rate": "inf" if traffic.rate_per_s is None else traffic.rate_per_s,
        "burstiness": traffic.burstiness,
        "max_concurrency": traffic.concurrency,
        "duration": duration,
        "completed": completed,
        "failed": int((measured & ~done).sum()),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per(completed),
        "request_goodput": per(int(good.sum())) if goodput else None,
        "output_throughput": per(total_out),
        "total_token_throughput": per(total_in + total_out),
        "max_output_tokens_per_s": float(max(sim.counters.per_second.values(), default=0)),
        "max_concurrent_requests": int(sim.counters.peak_in_system),
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2el", e2el)):
        for key, value in _stats(values, percentiles).items():
            result[f"{key}_{name}_ms"] = value
    for key, value in gaps.items():
        result[f"{key}_itl_ms"] = value
    drafts = sum(getattr(d, "drafts", 0) for d in sim.decode)
    mtp = built.plan.decode_phase.mtp_tokens if built.plan.decode_phase is not None else 0
    if drafts and mtp:
        accepted = sum(d.accepted for d in sim.decode)
        result["spec_decode_acceptance_rate"] = 100.0 * accepted / drafts
        result["spec_decode_acceptance_length"] = 1.0 + accepted / (drafts / mtp)
    if per_request:
        result["input_lens"] = in_len.tolist()
        result["output_lens"] = out_len.tolist()
        result["ttfts"] = ttft.tolist()
        result["latencies"] = e2el.tolist()
        result["start_times"] = sent.tolist()
    result["moeplan"] = _moeplan_block(built, ok, ttft, tpot, e2el, duration, goodput, percentiles)
    return result


def _moeplan_block(
    built: Built,
    ok: np.ndarray,
    ttft: np.ndarray,
    tpot: np.ndarray,
    e2el: np.ndarray,
    duration: float,
    goodput: dict[str, float],
    percentiles: tuple[float, ...],
) -> dict[str, Any]:
    sim, t = built.sim, built.sim.table
    per_card = 1.0 / built.cards if built.cards else 0.0
    out_total = float(t.delivered_tokens[ok].sum())
    in_total = float(t.input_tokens[ok].sum())
    block: dict[str, Any] = {
        "structure": built.structure,
        "traffic": built.traffic.describe(),
        "lengths": built.lengths_source,
        "seed": built.traffic.seed,
        "warmup_requests": sim.warmup,
        "cooldown_requests": sim.cooldown,
        "warm_start_sequences": t.count - t.clients,
        "routing": built.routing.describe(),
        "cards": built.cards,
        "devices": built.devices,
        "output_throughput_per_card": out_total / duration * per_card if duration else 0.0,
        "input_throughput_per_card": in_total / duration * per_card if duration else 0.0,
        "request_throughput_per_card": float(ok.sum()) / duration * per_card if duration else 0.0,
        "goodput_bounds_ms": goodput,
        "percentiles": list(percentiles),
        "notes": list(built.notes),
    }
    block["steady"] = steady_window(built)
    block["static"] = static_figures(built)
    block["bound"] = _binding(built)
    return block


LITTLE_WINDOW_LATENCIES = 2.0  # Little's law is checked over a window at least this many mean latencies long


def steady_window(built: Built) -> dict[str, Any] | None:
    """Throughput, TPOT and Little's law over [first measured request sent, last request sent]; the
    latency, TPOT and Little's law figures are None when the window cannot give them (see below)."""
    sim, t = built.sim, built.sim.table
    a, b = sim.window_start, sim.window_end
    if a is None or b is None or b.time_s - a.time_s <= 0:
        return None
    span = b.time_s - a.time_s
    inside = (t.end_s >= a.time_s) & (t.end_s <= b.time_s)
    e2el = (t.end_s - t.sent_s)[inside]
    out = t.delivered_tokens[inside]
    many = out > 1
    tpot = (e2el[many] - (t.first_token_s - t.sent_s)[inside][many]) / (out[many] - 1)
    completed = b.completed - a.completed
    in_system = (b.area - a.area) / span
    rate = completed / span
    latency = float(np.mean(e2el)) if e2el.size else None
    # Little's law over a finite window holds only when the window is long against the latency: in a
    # window shorter than twice the mean latency the requests that finish in it are the quick ones, and
    # none may finish at all (a run of too few requests); the check is then not made, and says why
    law_error = None
    if latency is not None and in_system > 0 and span >= LITTLE_WINDOW_LATENCIES * latency:
        law_error = rate * latency / in_system - 1.0
    return {
        "start_s": a.time_s,
        "end_s": b.time_s,
        "completed": int(e2el.size),
        "output_throughput": (b.tokens - a.tokens) / span,
        "output_throughput_per_card": (b.tokens - a.tokens) / span / built.cards if built.cards else 0.0,
        "request_throughput": rate,
        "mean_tpot_ms": float(np.mean(tpot)) * 1e3 if tpot.size else None,
        "mean_e2el_ms": latency * 1e3 if latency is not None else None,
        "mean_in_system": in_system,
        "throughput_x_latency": rate * latency if latency is not None else None,
        "littles_law_error": law_error,
    }


def _binding(built: Built) -> dict[str, Any]:
    """What limited the run: seats, KV cache, preemptions, queues, busy time."""
    sim = built.sim
    end = max(sim.now, 1e-12)
    series = sim.series.arrays()
    decode = sim.decode
    steps = sum(d.steps for d in decode)
    out: dict[str, Any] = {
        "decode_seats": built.decode_seats,
        "kv_pool_tokens_per_rank": built.kv_pool_tokens_per_rank,
        "decode_steps": steps,
        "mean_running": float(np.mean(series["running"])) if series["running"].size else 0.0,
        "peak_running": int(series["running"].max()) if series["running"].size else 0,
        "kv_blocked_steps": sum(d.kv_blocked_steps for d in decode),
        "seat_blocked_steps": sum(d.seat_blocked_steps for d in decode),
        "prefill_delayed_steps": sum(d.prefill_delayed_steps for d in decode),
        "preemptions": sum(d.preemptions for d in decode),
        "peak_kv_fraction": max((d.peak_kv_fraction for d in decode), default=0.0),
        "decode_busy_fraction": [d.busy_s / end for d in decode],
        "prefill_busy_fraction": [p.busy_s / end for p in sim.prefill],
        "prefill_forwards": sum(p.forwards for p in sim.prefill),
        "peak_prefill_queue": int(series["prefill_queue"].max()) if series["prefill_queue"].size else 0,
        "peak_decode_waiting": int(series["decode_waiting"].max()) if series["decode_waiting"].size else 0,
        "peak_client_waiting": int(series["client_waiting"].max()) if series["client_waiting"].size else 0,
    }
    if steps:
        out["kv_blocked_step_fraction"] = out["kv_blocked_steps"] / steps
        out["seat_blocked_step_fraction"] = out["seat_blocked_steps"] / steps
    return out
