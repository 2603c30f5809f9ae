"""Simulate a plan and judge it: the one entry point of `simulate`, `plan --simulate`, `whatif` and `sweep`.

`--slo-percentile P` has one meaning in every command: the share of requests whose TTFT and whose
TPOT must meet the SLOs. The static cost model stands it in with the TTFT of the P-th percentile
prompt; a simulation measures it: the plan meets its SLOs when the P-th percentile of the
simulated TTFT and of the simulated TPOT are within them (`SloVerdict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from planner.simulate.build import Built, Traffic, build_simulation
from planner.simulate.metrics import DEFAULT_PERCENTILES, _pword, summarize
from planner.specs.plan import Plan
from planner.specs.workload import DEFAULT_SLO_PERCENTILE


@dataclass(frozen=True)
class SloVerdict:
    """Whether the simulated P-th percentiles meet the SLOs, figure by figure."""

    percentile: float
    checks: dict[str, tuple[float, float, bool]] = field(default_factory=dict)  # name -> (simulated, SLO, met)

    @property
    def met(self) -> bool | None:
        """True when every stated SLO is met at the percentile (None: no SLO to judge)."""
        if not self.checks:
            return None
        return all(ok for _, _, ok in self.checks.values())

    def misses(self) -> list[str]:
        """'TTFT p90 5,210 ms > 2,000 ms' for each SLO missed."""
        return [
            f"{name.upper()} p{_pword(self.percentile)} {value:,.0f} ms > {limit:,.0f} ms"
            for name, (value, limit, ok) in self.checks.items()
            if not ok
        ]

    def line(self) -> str:
        """One line for a report."""
        if not self.checks:
            return "no TTFT/TPOT SLO to judge the simulated percentiles against"
        parts = [
            f"{name.upper()} p{_pword(self.percentile)} {value:,.1f} ms {'<=' if ok else '>'} {limit:g} ms"
            for name, (value, limit, ok) in self.checks.items()
        ]
        verdict = "meets its SLOs" if self.met else "MISSES its SLOs"
        return f"at p{_pword(self.percentile)} of simulated requests the plan {verdict}: " + "; ".join(parts)


def judge(summary: dict[str, Any], ttft_ms: float | None, tpot_ms: float | None, percentile: float) -> SloVerdict:
    """The verdict on a run's summary (which must hold the percentile)."""
    word = _pword(percentile)
    checks = {}
    for name, limit in (("ttft", ttft_ms), ("tpot", tpot_ms)):
        key = f"p{word}_{name}_ms"
        if limit is None or key not in summary:
            continue
        if name == "tpot" and summary["moeplan"]["structure"] == "prefill-only":
            continue
        if name == "tpot" and summary.get("total_output_tokens", 0) <= summary.get("completed", 0):
            continue  # every request emitted one token: no TPOT to judge
        value = float(summary[key])
        checks[name] = (value, float(limit), value <= limit)
    return SloVerdict(percentile, checks)


def slo_percentile(plan: Plan, given: float | None) -> float:
    """--slo-percentile, else the plan's workload's, else the default (p90)."""
    if given is not None:
        return given
    return plan.workload.slo_percentile if plan.workload.slo_percentile is not None else DEFAULT_SLO_PERCENTILE


@dataclass
class SimResult:
    """A simulated run: what was built, its figures, and the SLO verdict."""

    built: Built
    summary: dict[str, Any]
    verdict: SloVerdict


def simulate_plan(
    plan: Plan,
    traffic: Traffic,
    *,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    goodput: dict[str, float] | None = None,
    slo_pct: float | None = None,
    per_request: bool = False,
    **build_args: Any,
) -> SimResult:
    """Build, run and summarise a simulation; judge it at the SLO percentile."""
    built = build_simulation(plan, traffic, **build_args)
    built.sim.run()
    pct = slo_percentile(built.plan, slo_pct)
    wanted = tuple(sorted(set(percentiles) | {pct}))
    summary = summarize(built, wanted, goodput, per_request=per_request)
    slo = built.plan.slo
    verdict = judge(summary, slo.ttft_ms if slo else None, slo.tpot_ms if slo else None, pct)
    return SimResult(built, summary, verdict)


def claimed_rate(plan: Plan, prediction: Any) -> float | None:
    """The request rate the static prediction says the plan serves (its capacity)."""
    if prediction.system is not None:
        return float(prediction.system.requests_per_s)
    if prediction.colocated is not None and plan.colocated is not None:
        return float(prediction.colocated.requests_per_s_per_instance * plan.colocated.instances)
    if prediction.decode is not None and plan.decode is not None:
        return prediction.decode.tokens_per_s_per_device * plan.decode.total_devices / plan.workload.output_tokens
    if prediction.prefill is not None and plan.prefill is not None:
        return plan.prefill.instances * prediction.prefill.requests_per_forward / (prediction.prefill.forward_ms / 1e3)
    return None


AUTO_MIN_REQUESTS = 1000
AUTO_MAX_REQUESTS = 50_000
AUTO_SPANS = 5.0  # requests arriving over this many static end-to-end times
AUTO_CLOSED_MULTIPLE = 6  # a closed loop: this many times its concurrency


def auto_requests(
    plan: Plan, prediction: Any, rate_per_s: float | None, concurrency: int | None
) -> tuple[int, int, str]:
    """(requests, warm-up, why) when `--requests` is not given: long enough to reach steady state.

    Open loop: requests arriving over `AUTO_SPANS` static end-to-end times, the first such time of them
    the warm-up; closed loop: `AUTO_CLOSED_MULTIPLE` times the concurrency, two times it the warm-up.
    Within [AUTO_MIN_REQUESTS, AUTO_MAX_REQUESTS]."""
    e2e = max(static_e2e_s(plan, prediction), 1e-3)
    if concurrency is not None and rate_per_s is None:
        wanted = AUTO_CLOSED_MULTIPLE * concurrency
        n = min(max(wanted, AUTO_MIN_REQUESTS), AUTO_MAX_REQUESTS)
        warm = min(2 * concurrency, n // 2)
        size = f"{n / concurrency:.3g} x the concurrency" + _bounded(wanted, n)
        return n, warm, f"auto: {size}, the first {warm:,} a warm-up"
    rate = rate_per_s if rate_per_s is not None else 1.0
    if concurrency is not None:
        rate = min(rate, concurrency / e2e)
    wanted_n = math.ceil(AUTO_SPANS * rate * e2e)
    n = int(min(max(wanted_n, AUTO_MIN_REQUESTS), AUTO_MAX_REQUESTS))
    warm = int(min(math.ceil(rate * e2e), n // 2))
    spans = n / (rate * e2e)
    return (
        n,
        warm,
        f"auto: arriving over {spans:.3g} static end-to-end times of {e2e:,.1f} s{_bounded(wanted_n, n)}, the "
        f"first {warm:,} a warm-up",
    )


def _bounded(wanted: int, n: int) -> str:
    """Why the automatic request count is not the one its rule asks for."""
    if n < wanted:
        return f", capped at {AUTO_MAX_REQUESTS:,} (the rule asks {wanted:,})"
    if n > wanted:
        return f", raised to the least of {AUTO_MIN_REQUESTS:,}"
    return ""


def static_e2e_s(plan: Plan, prediction: Any) -> float:
    """A request's end-to-end time by the static figures: TTFT + first step + (output - 1) x TPOT."""
    out = plan.workload.output_tokens
    if prediction.colocated is not None:
        return float(prediction.colocated.ttft_ms + (out - 1) * prediction.colocated.tpot_ms) / 1e3
    ttft = prediction.prefill.ttft_ms if prediction.prefill is not None else 0.0
    tpot = prediction.decode.tpot_ms if prediction.decode is not None else 0.0
    step = prediction.decode.step_ms if prediction.decode is not None else 0.0
    return float(ttft + step + (out - 1) * tpot) / 1e3
