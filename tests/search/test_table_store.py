"""Cost tables kept on disk between runs (planner.candidates.table_store): a second run reads
them instead of costing, and plans exactly as the first; anything odd about a file is a miss."""

from __future__ import annotations

import os

import numpy as np

from planner.candidates import table_store
from planner.search.plan_search import TableCache, run_search
from planner.search.request import PlanRequest
from planner.search.settings import SolverSettings
from planner.specs.plan import Workload

REQUEST = PlanRequest(
    max_cards=16,
    top=3,
    workload=Workload(input_tokens=1024, output_tokens=512),
    settings=SolverSettings(time_limit_s=30, workers=1),
)


def _tables_files(folder):
    return sorted(folder.glob("tables-*.pkl"))


def test_a_second_run_reads_every_table_and_plans_the_same(store_dir):
    first_cache = TableCache()
    first = run_search(REQUEST, cache=first_cache)
    assert first_cache.misses > 0 and first_cache.loaded == 0
    assert not _tables_files(store_dir)  # written at exit, or when flushed
    table_store.table_store().flush()
    # one file per table, holding what was derived from it too (dominance, chunk costs, bounds)
    files = _tables_files(store_dir)
    assert len(files) == first_cache.misses
    table_store.table_store.cache_clear()  # as a new process
    store = table_store.table_store()
    again_cache = TableCache()
    again = run_search(REQUEST, cache=again_cache)
    assert again_cache.loaded == again_cache.misses == first_cache.misses
    assert store.hits == len(files) and store.misses == 0  # every table read back
    assert store.pending == 0  # nothing built or derived again: no file to write
    assert [p.predicted for p in again.plans] == [p.predicted for p in first.plans]
    assert [p.model_dump() for p in again.plans] == [p.model_dump() for p in first.plans]
    # the stored tables are the integer ones, exactly
    key = next(iter(first_cache.entries))
    loaded = table_store.table_store().get(key)
    assert loaded is not None
    built = first_cache.entries[key][1]
    for mod, table in built.time_us.items():
        assert loaded[1].time_us[mod].dtype == np.int64
        assert np.array_equal(loaded[1].time_us[mod], table)
    assert loaded[1].hbm_capacity_mib == built.hbm_capacity_mib


def test_a_damaged_or_foreign_file_is_a_miss(store_dir):
    run_search(REQUEST, cache=TableCache())
    table_store.table_store().flush()
    files = _tables_files(store_dir)
    files[0].write_bytes(b"not a pickle")
    table_store.table_store.cache_clear()
    cache = TableCache()
    run_search(REQUEST, cache=cache)
    assert cache.loaded == cache.misses - 1  # the damaged table was built again
    store = table_store.table_store()
    assert store.misses == 1
    store.flush()
    table_store.table_store.cache_clear()
    assert table_store.table_store().get(("no such", "key")) is None
    cache = TableCache()
    run_search(REQUEST, cache=cache)
    assert cache.loaded == cache.misses  # and stored again


def test_the_file_name_follows_the_code(store_dir, monkeypatch):
    store = table_store.table_store()
    key = ("decode", 16, ("model", "machine"))
    before = store._path(table_store.stable_key(key))
    monkeypatch.setattr(table_store, "code_digest", lambda: "another version of the code")
    assert store._path(table_store.stable_key(key)) != before


def test_keys_known_only_by_identity_are_not_stored(store_dir):
    class Opaque:
        pass

    key = ("decode", 16, (Opaque(),))
    assert table_store.stable_key(key) is None
    store = table_store.table_store()
    assert store.get(key) is None
    store.put(key, (None, None))  # type: ignore[arg-type]
    assert not _tables_files(store_dir)


def test_least_recently_used_files_go_past_the_limit_and_other_versions_at_once(store_dir):
    current = f"tables-{table_store.code_digest()[:12]}-"
    for i in range(4):
        path = store_dir / f"{current}{i}.pkl"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1000 + i, 1000 + i))
    (store_dir / "tables-0123456789ab-old.pkl").write_bytes(b"x")
    table_store.table_store().evict(limit_bytes=2500)
    assert [p.name for p in _tables_files(store_dir)] == [f"{current}2.pkl", f"{current}3.pkl"]


def test_off_disables_the_store(monkeypatch):
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", "off")
    table_store.table_store.cache_clear()
    try:
        assert table_store.table_store() is None
    finally:
        table_store.table_store.cache_clear()
