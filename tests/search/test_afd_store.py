"""The AFD splits' bounds and candidates kept on disk (planner.search.candidate_spaces.afd_space
through planner.candidates.table_store): a second run reads them and plans exactly as the first."""

from __future__ import annotations

from planner.candidates import table_store
from planner.search.plan_search import TableCache, run_search
from planner.search.request import PlanRequest
from planner.search.settings import SolverSettings

REQUEST = PlanRequest(
    model="deepseek-v2-lite",
    hardware="a3",
    max_cards=16,
    top=2,
    afd=True,
    settings=SolverSettings(time_limit_s=30, workers=1),
)


def test_a_second_run_reads_the_afd_record_and_plans_the_same(store_dir):
    first = run_search(REQUEST, cache=TableCache())
    assert first.afd, "the search found AFD candidates"
    table_store.table_store().flush()
    table_store.table_store.cache_clear()  # as a new process
    store = table_store.table_store()
    again = run_search(REQUEST, cache=TableCache())
    assert store.misses == 0 and store.pending == 0  # every table and the AFD record read back, none written
    assert [c.section for c in again.afd] == [c.section for c in first.afd]
    assert [p.model_dump() for p in again.plans] == [p.model_dump() for p in first.plans]
    assert [a.plan.model_dump() if a.plan else None for a in again.alternatives] == [
        a.plan.model_dump() if a.plan else None for a in first.alternatives
    ]


def test_a_record_round_trips_and_is_written_only_when_touched(store_dir):
    store = table_store.table_store()
    record = store.record(("afd-test", 1))
    assert record == {}
    record["splits"] = [(16, 8, 1.5)]
    assert store.pending == 0
    store.touch(("afd-test", 1))
    assert store.pending == 1
    store.flush()
    table_store.table_store.cache_clear()
    assert table_store.table_store().record(("afd-test", 1)) == {"splits": [(16, 8, 1.5)]}
