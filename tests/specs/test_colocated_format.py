"""Plan format v2: a colocated plan is one `colocated` section; v1 colocated files still load."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from planner.costmodel.evaluate import evaluate_plan, load_plan_specs
from planner.errors import BadInputError
from planner.specs.catalog import load_plan
from planner.specs.files import validate_model
from planner.specs.plan import PLAN_SCHEMA_VERSION, Plan

LAYOUT = {
    "devices": 24,
    "instances": 2,
    "attention": {"dp": 24, "tp": 1},
    "dense_ffn": {"dp": 12, "tp": 2},
    "moe": {"ep": 24, "slots_per_device": 11, "comm": "allgather"},
    "lm_head": {"dp": 12, "tp": 2},
}
HEAD = {
    "model": "deepseek-v3",
    "hardware": "a2",
    "workload": {"input_tokens": 2048, "output_tokens": 2048},
    "slo": {"ttft_ms": 2000, "tpot_ms": 100},
}


def _v2() -> dict:
    section = dict(LAYOUT, concurrency_per_device=40, mtp_tokens=1, prefill_batch_tokens=65536)
    return dict(HEAD, schema_version=2, colocated=section)


def _v1() -> dict:
    decode = dict(LAYOUT, concurrency_per_device=40, mtp_tokens=1)
    prefill = dict(LAYOUT, batch_tokens=65536, micro_batches=1)
    return dict(HEAD, schema_version=1, colocated=True, decode=decode, prefill=prefill)


def test_a_colocated_plan_is_one_section_with_one_layout():
    plan = validate_model(Plan, _v2(), "plan.yaml", "plan")
    assert plan.schema_version == PLAN_SCHEMA_VERSION == 2
    assert plan.is_colocated and plan.decode is None and plan.prefill is None
    # the cost model's views share the section's devices and layouts
    assert plan.decode_phase.devices == plan.prefill_phase.devices == 24
    assert plan.decode_phase.concurrency_per_device == 40 and plan.prefill_phase.batch_tokens == 65536
    # instances count once: 2 x 24 devices, not 96
    assert plan.total_devices == 48
    pred = evaluate_plan(plan)
    assert pred.system is not None and pred.system.devices == 48 and pred.colocated is not None


def test_a_v1_colocated_file_is_migrated_and_scores_the_same(tmp_path, capsys):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(_v1()))
    new.write_text(yaml.safe_dump(_v2()))
    migrated, _ = load_plan(str(old))
    assert "migrated" in capsys.readouterr().err
    current, _ = load_plan(str(new))
    assert capsys.readouterr().err == ""
    assert migrated.model_dump() == current.model_dump()
    assert evaluate_plan(migrated).model_dump() == evaluate_plan(current).model_dump()


def test_v1_colocated_sections_that_differ_are_refused_naming_the_field():
    data = _v1()
    data["prefill"]["attention"] = {"dp": 12, "tp": 2}
    with pytest.raises(BadInputError, match="attention"):
        validate_model(Plan, data, "plan.yaml", "plan")


def test_a_colocated_section_next_to_phase_sections_is_refused():
    data = _v2()
    data["decode"] = dict(LAYOUT, concurrency_per_device=40)
    with pytest.raises(BadInputError, match="colocated"):
        validate_model(Plan, data, "plan.yaml", "plan")


def test_a_colocated_layout_is_checked_against_the_model():
    data = _v2()
    data["colocated"]["moe"] = {"ep": 24, "slots_per_device": 5}
    plan = validate_model(Plan, data, "plan.yaml", "plan")
    with pytest.raises(BadInputError, match=r"colocated\.moe"):
        load_plan_specs(plan)


def test_exported_colocated_plans_use_the_v2_section(tmp_path):
    out = tmp_path / "plans.json"
    run = subprocess.run(
        [sys.executable, "-m", "planner", "plan", "--top", "5", "--max-cards", "32", "--json", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    plans = json.loads(out.read_text())["plans"]
    coloc = [p for p in plans if p.get("colocated")]
    assert coloc, "at 32 cards the search ranks colocated plans in its top 5"
    for p in coloc:
        assert p["schema_version"] == 2 and p.get("decode") is None and p.get("prefill") is None
        assert {"concurrency_per_device", "prefill_batch_tokens", "instances"} <= set(p["colocated"])
