"""Fixtures of the search tests."""

from __future__ import annotations

import pytest

from planner.candidates import table_store


@pytest.fixture
def store_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(tmp_path))
    table_store.table_store.cache_clear()
    yield tmp_path
    table_store.table_store.cache_clear()
