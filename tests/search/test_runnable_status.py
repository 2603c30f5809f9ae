"""`--engine auto` merges each engine's search: the merged result is OPTIMAL only when every engine's search
was proven; when one was not (its solve hit the time limit) it is FEASIBLE, whatever the lead engine's own
status (the verdict read "OPTIMAL: best found ... (not proven optimal)" before)."""

from __future__ import annotations

import dataclasses

import planner.search.runnable as runnable
from planner.cli.plan_cmd import verdict_line
from planner.search.request import PlanRequest
from planner.search.table_cache import TableCache


def test_one_engines_unproven_search_makes_the_merged_result_feasible_not_optimal(monkeypatch):
    real = runnable.run_search

    def one_unproven(request, *args, **kwargs):
        outcome = real(request, *args, **kwargs)
        if request.engine == "mindie":
            return dataclasses.replace(outcome, optimal=False, status="FEASIBLE")
        return outcome

    request = PlanRequest(model="deepseek-v3", hardware="a2", max_cards=16)
    cache = TableCache()
    proven = runnable.run_runnable(request, 1, None, cache)
    assert proven.optimal and proven.status == "OPTIMAL"
    monkeypatch.setattr(runnable, "run_search", one_unproven)
    merged = runnable.run_runnable(request, 1, None, cache)
    assert not merged.optimal and merged.status == "FEASIBLE"
    assert verdict_line(merged).startswith("FEASIBLE: best found in")
    assert merged.plans[0].model_dump_json(exclude={"predicted"}) == proven.plans[0].model_dump_json(
        exclude={"predicted"}
    )
