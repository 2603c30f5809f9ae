"""An engine profile's `machine_cautions`: what runs of that engine kept aside from the fit measured on a machine
whose factors are another stack's. The caution quotes figures; these tests keep them what `moeplan fidelity
--rows kept-aside` gives, so a change of the model that moves them fails here until the caution is restated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.engines.profiles import ENGINES, load_profile
from planner.specs.catalog import load_hardware
from tests.conftest import PLANS, engines_embedding, run_cli

KEPT = Path(__file__).resolve().parents[2] / "kept-aside"


@pytest.fixture(scope="module")
def kept_aside_static() -> list[dict]:
    result = run_cli("fidelity", "--rows", str(KEPT), "--no-simulated", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["rows"]


def test_every_caution_names_a_catalog_machine():
    for engine in ENGINES:
        for machine in load_profile(engine).machine_cautions:
            assert load_hardware(machine).name == machine


def test_vllm_ascend_a2_caution_states_the_kept_aside_errors(kept_aside_static):
    text = load_profile("vllm-ascend").machine_caution("a2")
    assert text is not None
    low, high = (int(v) / 100 for v in re.search(r"(\d+)-(\d+)% below the measured one", text).groups())
    a2 = [r for r in kept_aside_static if r["hardware"] == "a2"]
    assert len(a2) == 5
    for row in a2:
        # every A2 decode run of a vLLM-based stack kept aside: the prediction below the measurement by the range
        assert -high - 0.005 <= row["error"] <= -low + 0.005, row["name"]
    omni = next(r for r in a2 if "PDHybrid" in r["name"])
    assert f"{omni['predicted']:.1f} against {omni['published']:.1f}" in text
    minimax = next(r for r in a2 if "MiniMax" in r["name"])
    assert f"{minimax['predicted']:.1f} against {minimax['published']:.1f}" in text
    ucm = [r["predicted"] for r in a2 if "UCM" in r["name"]]
    lo, hi = (int(v) for v in re.search(r"(\d+)-(\d+) ms against 66", text).groups())
    assert all(lo - 0.5 <= p <= hi + 0.5 for p in ucm)


def test_the_caution_prints_when_planning_that_engine_there_only():
    caution = "vLLM-Ascend on hardware 'a2'"
    vllm = run_cli("plan", "--hardware", "a2", "--max-cards", "32", "--engine", "vllm-ascend", "--json", "-")
    assert vllm.exit_code == 0, vllm.output
    assert any(caution in n for n in json.loads(vllm.stdout)["notes"])
    assert f"warning: {caution}" in vllm.output
    mindie = run_cli("plan", "--hardware", "a2", "--max-cards", "32", "--engine", "mindie", "--json", "-")
    assert mindie.exit_code == 0, mindie.output
    assert not any(caution in n for n in json.loads(mindie.stdout)["notes"])


def test_evaluate_emit_prints_the_caution(tmp_path):
    d70 = engines_embedding(PLANS / "a2-d70.yaml", tmp_path)
    result = run_cli("evaluate", str(d70), "--emit", "vllm-ascend", str(tmp_path / "v"))
    assert result.exit_code == 0, result.output
    assert "warning: vLLM-Ascend on hardware 'a2'" in result.output
    mindie = run_cli("evaluate", str(d70), "--emit", "mindie", str(tmp_path / "m"))
    assert mindie.exit_code == 0, mindie.output
    assert "on hardware 'a2'" not in mindie.output
