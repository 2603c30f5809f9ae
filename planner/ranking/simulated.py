"""Ranked plans checked by simulation (`plan --simulate`, `whatif --simulate`, `sweep --simulate`).

Each plan is served, in simulation, the traffic it was planned for: Poisson arrivals at `--rate`
when the request gives one, else at the rate the plan's static prediction claims (its capacity).
The check is a steady-state one: decode starts full, as that rate fills it (a warm start), the
first `measured` requests sent are measured, and the requests after them keep the load on until
the last measured one ends (a cool-down, not measured). Its length follows the static figures: the
measured requests arrive over 0.25 of a request's static end-to-end time, the cool-down over one
more. The verdict: the `--slo-percentile`-th percentile of the simulated TTFT and TPOT against the
plan's SLOs (`planner.simulate.run`).

`--rate` sizing: the search sizes a deployment for the rate from static figures, which assume
full batches and no queueing. With `--simulate` the plans are checked at that rate; if none meets
its SLOs at the percentile, the search runs again for a rate `RATE_STEP` higher (more capacity),
and its plans are checked at the requested rate, until one meets them or `MAX_RATE_FACTOR` is
passed: the plan kept is the first (fewest cards) whose simulated percentile meets the SLOs.

A colocated plan is served as the engine moeplan launches it runs it (`engine_colocated_prefill`):
with SGLang, per-rank prefill forwards and its prefill delayer where the plan has attention DP and
whole forwards.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planner.costmodel.imbalance import ImbalanceModel
from planner.costmodel.prediction import Prediction
from planner.simulate.build import Traffic, engine_colocated_prefill
from planner.simulate.routing import Routing
from planner.simulate.run import SimResult, SloVerdict, claimed_rate, simulate_plan, static_e2e_s
from planner.specs.plan import Plan

MEASURED_SPAN = 0.25  # measured requests arrive over this share of a request's static end-to-end time
COOLDOWN_SPAN = 1.0  # the load is kept on for this much longer
MIN_MEASURED = 200
MAX_REQUESTS = 60_000
CHECK_SEED = 0
CHECK_SERIES_POINTS = 60
RATE_STEP = 0.1
MAX_RATE_FACTOR = 2.0


@dataclass
class SimulatedCheck:
    """One plan simulated at a rate: its percentiles and the verdict."""

    rank: int | None
    rate_per_s: float
    rate_source: str  # "--rate" or "claimed"
    measured: int
    verdict: SloVerdict
    figures: dict[str, float]  # the summary's latency keys (mean/median/pNN of ttft, tpot, itl, e2el)
    static: dict[str, float | None]
    notes: list[str]
    acceptance_spread: float = 0.0  # tau of the requests' own MTP acceptance the run drew with
    spread_given: bool = False  # tau came from --acceptance-spread (else: the shipped fit)
    tpot_at_percentile: bool = False  # the plan's TPOT SLO held the SLO-percentile request's own acceptance

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        v = self.verdict
        return {
            "rank": self.rank,
            "rate_per_s": self.rate_per_s,
            "rate_source": self.rate_source,
            "measured_requests": self.measured,
            "slo_percentile": v.percentile,
            "meets_slo": v.met,
            "misses": v.misses(),
            "figures": self.figures,
            "static": self.static,
            "acceptance_spread": self.acceptance_spread,
            "acceptance_spread_source": "--acceptance-spread" if self.spread_given else "fitted",
        }


def check_traffic(plan: Plan, prediction: Prediction, rate_per_s: float, seed: int = CHECK_SEED) -> Traffic:
    """The steady-state check's traffic (module docstring)."""
    e2e = max(static_e2e_s(plan, prediction), 1e-3)
    measured = max(MIN_MEASURED, math.ceil(MEASURED_SPAN * e2e * rate_per_s))
    cooldown = math.ceil(COOLDOWN_SPAN * e2e * rate_per_s) + 1
    total = min(measured + cooldown, MAX_REQUESTS)
    cooldown = min(cooldown, total - MIN_MEASURED)
    return Traffic(
        requests=total,
        rate_per_s=rate_per_s,
        seed=seed,
        cooldown=cooldown,
        warm_start=plan.decode_phase is not None,
    )


def simulate_check(
    plan: Plan,
    rate_per_s: float | None = None,
    slo_pct: float | None = None,
    routing: Routing | None = None,
    imbalance: ImbalanceModel | None = None,
    prediction: Prediction | None = None,
    acceptance_spread: float | None = None,
) -> tuple[SimulatedCheck, SimResult]:
    """Simulate `plan` at `rate_per_s` (None: the rate it claims) and judge it; `acceptance_spread`: tau of
    the requests' own MTP acceptance (None: the shipped fit, planner.simulate.mtp)."""
    from planner.costmodel.acceptance_spread import default_acceptance_spread

    if prediction is None:
        if plan.predicted is not None:
            prediction = Prediction.model_validate(plan.predicted)
        else:
            from planner.costmodel.evaluate import evaluate_plan

            prediction = evaluate_plan(plan, None, imbalance)
    source = "--rate"
    if rate_per_s is None:
        rate_per_s = claimed_rate(plan, prediction)
        source = "claimed"
    if rate_per_s is None or rate_per_s <= 0:
        raise ValueError("the plan claims no request rate")
    traffic = check_traffic(plan, prediction, rate_per_s)
    colocated_prefill, delayer = engine_colocated_prefill(routing.engine if routing is not None else None, plan)
    result = simulate_plan(
        plan.model_copy(update={"predicted": None}),
        traffic,
        slo_pct=slo_pct,
        routing=routing,
        imbalance=imbalance,
        prediction=prediction,
        series_points=CHECK_SERIES_POINTS,
        acceptance_spread=acceptance_spread,
        colocated_prefill=colocated_prefill,
        prefill_delayer=delayer,
    )
    s = result.summary
    keys = [k for k in s if k.endswith("_ms") and k.split("_")[1] in ("ttft", "tpot", "itl", "e2el")]
    check = SimulatedCheck(
        rank=plan.rank,
        rate_per_s=rate_per_s,
        rate_source=source,
        measured=int(s["completed"]),
        verdict=result.verdict,
        figures={k: float(s[k]) for k in keys},
        static={k: v for k, v in s["moeplan"]["static"].items() if k in ("ttft_ms", "tpot_ms")},
        notes=list(s["moeplan"]["notes"]),
        acceptance_spread=default_acceptance_spread() if acceptance_spread is None else acceptance_spread,
        spread_given=acceptance_spread is not None,
        tpot_at_percentile=bool(plan.slo and plan.slo.tpot_at_percentile),
    )
    return check, result


def check_plans(
    plans: list[Plan],
    rate_per_s: float | None = None,
    slo_pct: float | None = None,
    routing: Routing | None = None,
    imbalance: ImbalanceModel | None = None,
    acceptance_spread: float | None = None,
) -> list[SimulatedCheck]:
    """Every plan checked (see `simulate_check`)."""
    return [
        simulate_check(p, rate_per_s, slo_pct, routing, imbalance, acceptance_spread=acceptance_spread)[0]
        for p in plans
    ]


@dataclass
class SizedForRate:
    """The outcome of `--rate` sizing by simulation."""

    outcome: Any  # the search outcome whose plans were kept
    checks: list[SimulatedCheck]
    searched_rate_per_s: float  # the rate the kept search was sized for (>= the requested rate)
    attempts: list[tuple[float, bool]]  # (rate searched, whether a plan of it met the SLOs)


def size_for_rate(
    request: Any,
    search: Callable[[Any], Any],
    slo_pct: float | None,
    routing: Routing | None = None,
    first: Any = None,
    acceptance_spread: float | None = None,
) -> SizedForRate:
    """Search for `request.rate_per_s`, check by simulation, and search again for more capacity while no
    plan meets the SLOs at the simulated percentile (module docstring). `first`: the first search's
    outcome, when the caller has it."""
    target = float(request.rate_per_s)
    factor = 1.0
    attempts: list[tuple[float, bool]] = []
    outcome = first if first is not None else search(request)
    while True:
        checks = check_plans(outcome.plans, target, slo_pct, routing, request.imbalance, acceptance_spread)
        ok = any(c.verdict.met is not False for c in checks)
        attempts.append((target * factor, ok))
        if ok or factor + RATE_STEP > MAX_RATE_FACTOR + 1e-9:
            return SizedForRate(outcome, checks, target * factor, attempts)
        factor = round(factor + RATE_STEP, 6)
        outcome = search(dataclasses.replace(request, rate_per_s=target * factor))
