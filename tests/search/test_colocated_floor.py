"""Colocated candidates below the best deployment without them are not costed when they cannot
change the answer (planner.search.candidate_spaces `colocated_space`, `floor_per_device`): sweeps and
what-ifs (no alternatives table) and the MTP alternative. The answers must be those of costing
every colocated candidate."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from planner.search import alternatives, plan_search
from planner.search.plan_search import TableCache, run_search
from planner.search.request import PlanRequest
from planner.specs.plan import SLO

CACHE = TableCache()
REQUESTS = [
    PlanRequest(max_cards=48, top=3),
    PlanRequest(max_cards=32, top=5, slo=SLO(tpot_ms=50, ttft_ms=2000, max_itl_ms=150)),
    PlanRequest(hardware="cm384", max_cards=64, top=3),
]


def _signature(outcome):
    plans = [p.model_dump() for p in outcome.plans]
    alternatives = [(a.label, a.plan.model_dump(), a.rank) for a in outcome.alternatives]
    return plans, alternatives


@pytest.mark.parametrize("request_", REQUESTS, ids=["a2-48", "a2-32-tight", "cm384-64"])
def test_the_floor_changes_no_answer(request_, monkeypatch):
    with_floor = run_search(request_, cache=CACHE)
    without_alternatives = run_search(replace(request_, alternatives=False), cache=CACHE)
    costed = plan_search.colocated_space

    def every_candidate(*args, **kwargs):
        return costed(*args, **{**kwargs, "floor_per_device": Fraction(0)})

    monkeypatch.setattr(plan_search, "colocated_space", every_candidate)
    monkeypatch.setattr(alternatives, "colocated_space", every_candidate)
    reference = run_search(request_, cache=CACHE)
    assert _signature(with_floor) == _signature(reference)
    assert [p.model_dump() for p in without_alternatives.plans] == [p.model_dump() for p in reference.plans]
    assert any(a.label.startswith("with") or a.label.startswith("without") for a in reference.alternatives)
