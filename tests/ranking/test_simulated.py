"""`--rate` sizing by simulation: search again for more capacity until a plan meets its SLOs at the
simulated percentile, at the requested rate."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import planner.ranking.simulated as simulated
from planner.simulate.run import SloVerdict


@dataclasses.dataclass(frozen=True)
class _Request:
    rate_per_s: float
    imbalance: object = None


def _check(met: bool):
    return SimpleNamespace(verdict=SloVerdict(90.0, {"ttft": (2500.0 if not met else 900.0, 2000.0, met)}))


def test_rate_sizing_searches_for_more_capacity_until_a_plan_meets_its_slos(monkeypatch):
    searched: list[float] = []
    checked_at: list[float] = []

    def search(request):
        searched.append(request.rate_per_s)
        return SimpleNamespace(plans=[f"plan for {request.rate_per_s:g}"])

    def check_plans(plans, rate, pct, routing, imbalance, acceptance_spread):
        assert acceptance_spread is None  # the shipped fit, unless --acceptance-spread gives one
        checked_at.append(rate)
        # plans sized for less than 1.25x the rate miss at it
        sized_for = float(plans[0].split()[-1])
        return [_check(sized_for >= 1.25 * rate)]

    monkeypatch.setattr(simulated, "check_plans", check_plans)
    sized = simulated.size_for_rate(_Request(10.0), search, 90.0)
    assert searched == [10.0, 11.0, 12.0, 13.0]  # 10% steps of the requested rate
    assert checked_at == [10.0] * 4  # every plan is simulated at the requested rate
    assert sized.searched_rate_per_s == 13.0 and sized.checks[0].verdict.met is True
    assert [ok for _, ok in sized.attempts] == [False, False, False, True]


def test_rate_sizing_stops_at_twice_the_rate_and_keeps_the_misses(monkeypatch):
    monkeypatch.setattr(simulated, "check_plans", lambda *a: [_check(False)])
    sized = simulated.size_for_rate(_Request(5.0), lambda r: SimpleNamespace(plans=["p"]), 90.0)
    assert sized.searched_rate_per_s == 10.0  # MAX_RATE_FACTOR
    assert sized.checks[0].verdict.met is False and len(sized.attempts) == 11
