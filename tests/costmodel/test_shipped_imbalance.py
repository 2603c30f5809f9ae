"""The shipped engine-imbalance table (planner/costmodel/data/engine_imbalance.json) holds what the
placement code computes (to 1e-12), and is in use: made from the current placement code."""

from __future__ import annotations

import json
import random

import pytest

from planner.costmodel import imbalance
from planner.costmodel.disk_memo import placement_code_digest

REGENERATE = "rerun python benchmarks/build_imbalance_table.py and commit the table"


def _doc() -> dict:
    return json.loads(imbalance.SHIPPED_TABLE.read_text())


def test_the_table_was_made_from_the_current_placement_code():
    assert _doc()["code_digest"] == placement_code_digest(), f"the placement code changed: {REGENERATE}"
    assert len(imbalance.shipped_engine_values()) > 1000


@pytest.mark.parametrize("seed", range(4))
def test_a_sample_recomputes_to_the_same_values(seed):
    values = _doc()["values"]
    for key in random.Random(seed).sample(sorted(values), 3):
        sigma, drift, experts, ep, slots = key.split(",")
        computed = imbalance.engine_static_computed(float(sigma), float(drift), int(experts), int(ep), int(slots))
        # to the last bits a double can lose to the CPU's vector width (numpy's SIMD sums differ between
        # machines: a table built on one recomputed on another differs at 1e-16); any change of the placement
        # code moves these figures by far more
        assert list(computed) == pytest.approx(values[key], rel=1e-12, abs=0), f"{key}: {REGENERATE}"


def test_a_shipped_key_is_answered_without_placing_experts(monkeypatch):
    default = f"{imbalance.DEFAULT_POPULARITY_SIGMA!r},{imbalance.DEFAULT_DRIFT_SIGMA!r},"
    key = next(k for k in sorted(imbalance.shipped_engine_values()) if k.startswith(default))
    sigma, drift, experts, ep, slots = key.split(",")

    def refuse(*args, **kwargs):
        raise AssertionError("placed experts for a shipped key")

    monkeypatch.setattr(imbalance, "engine_static_computed", refuse)
    imbalance._engine_static.cache_clear()
    model = imbalance.EngineImbalance()
    assert (model.popularity_sigma, model.drift_sigma) == (float(sigma), float(drift))
    got = model.static_factor(int(experts), int(ep), int(slots))
    assert got == imbalance.shipped_engine_values()[key][1]
    imbalance._engine_static.cache_clear()


def test_a_table_from_other_code_is_not_used(monkeypatch, tmp_path):
    doc = _doc()
    doc["code_digest"] = "0" * 16
    path = tmp_path / "engine_imbalance.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(imbalance, "SHIPPED_TABLE", path)
    imbalance.shipped_engine_values.cache_clear()
    try:
        assert imbalance.shipped_engine_values() == {}
    finally:
        imbalance.shipped_engine_values.cache_clear()
