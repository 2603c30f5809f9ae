"""`--engine auto`'s searches (each engine's and the free one) in forked worker processes (`--jobs`): the same
result as one at a time, what a worker sends back, and Ctrl-C while they run."""

from __future__ import annotations

import pickle

import pytest

import planner.search.runnable as runnable
from planner.search.candidate_spaces import PinnedSizeRefused
from planner.search.forked import can_fork
from planner.search.request import PlanRequest
from planner.search.table_cache import TableCache

REQUEST = PlanRequest(model="deepseek-v3", hardware="a2", max_cards=16)


def _what_a_user_sees(outcome) -> dict:
    return {
        "plans": [p.model_dump_json() for p in outcome.plans],
        "runs_on": outcome.runs_on,
        "beyond": outcome.beyond.model_dump_json() if outcome.beyond else None,
        "beyond_problems": outcome.beyond_problems,
        "alternatives": [(a.label, a.plan.model_dump_json() if a.plan else a.reason) for a in outcome.alternatives],
        "failures": outcome.engine_failures,
        "status": (outcome.status, outcome.optimal, outcome.exhausted, outcome.solves),
        "points": [s.points_evaluated for s in (outcome.decode_space, outcome.prefill_space) if s],
    }


@pytest.mark.skipif(not can_fork(), reason="the searches run in forked workers only where fork is safe (Linux)")
def test_the_engines_searches_in_worker_processes_give_what_one_at_a_time_gives(monkeypatch):
    alone = runnable.run_runnable(REQUEST, 5, None, TableCache(), jobs=1)
    forks = []
    real_pool = runnable.fork_pool

    def counted_pool(processes):
        forks.append(processes)
        return real_pool(processes)

    monkeypatch.setattr(runnable, "fork_pool", counted_pool)
    together = runnable.run_runnable(REQUEST, 5, None, TableCache(), jobs=2)
    assert forks == [2]  # the searches did run in two worker processes
    assert _what_a_user_sees(together) == _what_a_user_sees(alone)
    # what a worker sends back holds no cost tables (they stay in the cache), in either way of running
    for outcome in (alone, together):
        assert all(not s.tables for s in (outcome.decode_space, outcome.prefill_space) if s)


def test_a_pinned_size_refusal_comes_back_from_a_worker_whole():
    refusal = PinnedSizeRefused("--decode-devices 33", "33 devices over 8-device nodes needs whole nodes")
    back = pickle.loads(pickle.dumps(refusal))
    assert isinstance(back, PinnedSizeRefused)
    assert (back.pin, back.why, str(back)) == (refusal.pin, refusal.why, str(refusal))


class _InterruptedPool:
    """A pool whose workers have sent back the first search when Ctrl-C reaches the parent."""

    def __init__(self, first):
        self.first, self.calls = first, []

    def imap_unordered(self, fn, order):
        self.calls.append(("imap", list(order)))
        yield order[0], self.first
        raise KeyboardInterrupt

    def close(self):
        self.calls.append("close")

    def terminate(self):
        self.calls.append("terminate")

    def join(self):
        self.calls.append("join")


def test_ctrl_c_stops_the_workers_and_keeps_the_searches_that_had_ended(monkeypatch):
    sentinel = object()
    pool = _InterruptedPool(sentinel)
    monkeypatch.setattr(runnable, "fork_pool", lambda processes: pool)
    monkeypatch.setattr(runnable, "can_fork", lambda: True)
    requests = [REQUEST] * 4
    results = runnable.searched(requests, None, TableCache(), jobs=2, widest=3)
    # the widest search starts first; it ended, the others did not: kept in order up to the first that did not
    assert pool.calls[0] == ("imap", [3, 0, 1, 2])
    assert results == [None, None, None, None]  # search 0 had not ended: nothing after it counts either
    assert pool.calls[1:] == ["terminate", "join"]

    pool = _InterruptedPool(sentinel)
    monkeypatch.setattr(runnable, "fork_pool", lambda processes: pool)
    results = runnable.searched(requests, None, TableCache(), jobs=2)
    assert results == [sentinel, None, None, None]
    assert pool.calls[1:] == ["terminate", "join"]
