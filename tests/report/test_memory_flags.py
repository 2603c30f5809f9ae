"""--launch-memory-fraction: an engine launch's own memory flag read back as the plan's hbm_utilization.

The inverse must be exact: a plan evaluated with `sglang=F` (or `vllm-ascend=F`) and exported for that
engine carries F in its launch (SGLang's --mem-fraction-static holds weights and KV pool only;
vllm-ascend's --gpu-memory-utilization all but the runtime's context and graphs). vLLM's flag on a GPU is
refused by name (planner/report/launch/memory_flags.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from planner.costmodel.evaluate import evaluate_plan, plan_with_prediction
from planner.errors import BadInputError
from planner.report.launch.memory_flags import LaunchMemory, hbm_utilization_for, parse_launch_memory
from planner.specs.catalog import load_plan
from tests.conftest import PLANS, engines_embedding, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _flag_values(folder: Path, flag: str) -> dict[str, set[float]]:
    doc = json.loads((folder / "launch.json").read_text())
    out: dict[str, set[float]] = {}
    for p in doc["processes"]:
        if flag in p["argv"]:
            out.setdefault(p["role"], set()).add(float(p["argv"][p["argv"].index(flag) + 1]))
    return out


def test_sglang_launch_carries_the_fraction_it_was_read_from(tmp_path):
    plan_file = tmp_path / "plan.json"
    made = run_cli("plan", "--hardware", "a2", "--max-cards", "32", "--engine", "sglang", "--json", str(plan_file))
    assert made.exit_code == 0, made.output
    scored = tmp_path / "scored.json"
    result = run_cli(
        "evaluate",
        str(plan_file),
        "--launch-memory-fraction",
        "sglang=0.8",
        "--json",
        str(scored),
        "--emit",
        "sglang",
        str(tmp_path / "sglang"),
    )
    assert result.exit_code == 0, result.output
    assert "--mem-fraction-static 0.8 of 64.0 GiB" in result.output
    values = _flag_values(tmp_path / "sglang", "--mem-fraction-static")
    flat = set().union(*values.values())
    # the role that binds gets the flag exactly; no role is given more than it
    assert max(flat) == 0.8 and min(flat) > 0.5
    utilization = json.loads(scored.read_text())["hbm_utilization"]
    assert 0.8 < utilization < 0.9  # the static pool plus a few GiB of activations, buffers and reserve


def test_vllm_ascend_launch_carries_the_fraction_it_was_read_from(tmp_path):
    """vllm-ascend's share holds all but the runtime reserve (v0.25.1rc1's worker: the snapshot precedes
    HCCL's set-up, graphs are captured after the KV cache): the plan fills the flag plus 3 GiB of 64."""
    scored = tmp_path / "scored.json"
    result = run_cli(
        "evaluate", str(engines_embedding(PLANS / "a2-d70.yaml", tmp_path)), "--launch-memory-fraction",
        "vllm-ascend=0.88", "--json", str(scored), "--emit", "vllm-ascend", str(tmp_path / "vllm"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "--gpu-memory-utilization 0.88 of 64.0 GiB plus 3.00 GiB it leaves outside (runtime reserve)" in (
        result.output
    )
    assert json.loads(scored.read_text())["hbm_utilization"] == pytest.approx(0.88 + 3 / 64, abs=1e-9)
    values = _flag_values(tmp_path / "vllm", "--gpu-memory-utilization")
    assert set().union(*values.values()) == {0.88}


@pytest.mark.parametrize("name", ["ep64-16k", "ep64-32k", "64a16f-16k", "64a16f-32k", "48a16f-16k", "48a16f-32k"])
def test_afd_plugin_plans_hold_what_their_recipes_flag_gives(tmp_path, name):
    """The afd-plugin recipes launched vllm-ascend v0.19.1rc1 with --gpu-memory-utilization 0.93 (the same
    worker code as v0.25.1rc1's); their plans' hbm_utilization exports back to that flag on every process."""
    result = run_cli("evaluate", f"plans/afd-plugin-{name}.yaml", "--emit", "vllm-ascend", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    values = _flag_values(tmp_path / "out", "--gpu-memory-utilization")
    assert values and set().union(*values.values()) == {0.93}


def test_afd_plan_reads_one_vllm_ascend_flag_for_both_sides(tmp_path):
    """The afd-plugin launches pass one --gpu-memory-utilization to both sides; only the runtime reserve lies
    outside it on either, so 0.93 gives back the plan's own 0.976875; SGLang's flag (activations and buffers
    outside, different by side) is still refused for an AFD plan."""
    scored = tmp_path / "scored.json"
    result = run_cli(
        "evaluate", "plans/afd-plugin-64a16f-16k.yaml", "--launch-memory-fraction", "vllm-ascend=0.93",
        "--json", str(scored),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(scored.read_text())["hbm_utilization"] == pytest.approx(0.976875, abs=1e-9)
    sglang = run_cli("evaluate", "plans/afd-plugin-64a16f-16k.yaml", "--launch-memory-fraction", "sglang=0.9")
    assert sglang.exit_code == 2 and "a memory flag per side for this engine" in sglang.output


def test_vllm_on_gpus_is_refused_with_the_flag_to_use():
    with pytest.raises(BadInputError, match=r"moeplan writes no GPU launch of vLLM.*--hbm-utilization \(e\.g\. 0\.9,"):
        parse_launch_memory("vllm=0.9")


def test_kept_aside_glm52_plan_holds_what_its_sglang_flag_gives():
    """The GLM-5.2 H200 run launched with --mem-fraction-static 0.85; its plan's hbm_utilization is the
    inverse of moeplan's SGLang translation, not the 0.85 taken for moeplan's own share."""
    plan, _ = load_plan(str(ROOT / "kept-aside" / "plans" / "h200-sglang-glm52-fp8-dp8-ht.yaml"))
    at_flag = plan.model_copy(update={"hbm_utilization": 0.85})
    scored = plan_with_prediction(at_flag, evaluate_plan(at_flag, ROOT / "kept-aside" / "plans"))
    utilization, note = hbm_utilization_for(scored, LaunchMemory("sglang", 0.85))
    assert plan.hbm_utilization == pytest.approx(utilization, abs=5e-5)
    assert "--mem-fraction-static 0.85" in note


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sglang", "give ENGINE=FRACTION"),
        ("mindie=0.9", "MindIE sizes its KV cache in blocks"),
        ("sglang=abc", "is not a number"),
        ("sglang=0", "must be in (0, 1]"),
        ("sglang=1.2", "must be in (0, 1]"),
        ("vllm-ascend", "give ENGINE=FRACTION"),
        ("vllm", "moeplan writes no GPU launch of vLLM"),
        ("sglang=nan", "must be in (0, 1]"),
    ],
)
def test_bad_flag_values_are_refused_by_name(text, message):
    with pytest.raises(BadInputError, match="--launch-memory-fraction") as caught:
        parse_launch_memory(text)
    assert message in str(caught.value)


def test_cli_refusals_exit_2_without_output(tmp_path):
    out = tmp_path / "p.json"
    both = run_cli(
        "evaluate", "plans/a2-d70.yaml", "--launch-memory-fraction", "sglang=0.8", "--hbm-utilization", "0.9"
    )
    assert both.exit_code == 2 and "give one" in both.output
    # 0.99 of an A2's 64 GiB plus its reserve, activations and buffers is more than the device holds
    over = run_cli("evaluate", "plans/a2-d70.yaml", "--launch-memory-fraction", "sglang=0.99", "--out", str(out))
    assert over.exit_code == 2 and "more than the device holds" in over.output
    assert not out.exists()


def test_parse_reads_the_engine_case_blind():
    assert parse_launch_memory(" SGLang=0.85") == LaunchMemory("sglang", 0.85)
    assert parse_launch_memory("sglang=1").flag == "--mem-fraction-static"


def test_simulate_reads_the_flag_too():
    """The simulation's KV room is the flag's: at SGLang's 0.6 (weights and KV pool only) the A2-D70 decode
    (72 sequences a device) is bound by its KV cache, and the run's note states the derived share; at 0.85
    it is not."""
    notes = {}
    for option in ("sglang=0.6", "sglang=0.85"):
        result = run_cli(
            "simulate", "plans/a2-d70.yaml", "--launch-memory-fraction", option, "--concurrency", "64",
            "--requests", "64", "--json", "-",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert re.search(r"hbm_utilization 0\.\d+: sglang's --mem-fraction-static", result.output), result.output
        notes[option] = " ".join(json.loads(result.stdout[result.stdout.index("{") :])["moeplan"]["notes"])
    found = re.search(r"\((\d+) per device \((0\.\d+) of 64 GiB\)\)", notes["sglang=0.6"])
    assert found is not None, notes["sglang=0.6"]
    assert int(found.group(1)) < 72 and float(found.group(2)) == pytest.approx(0.66, abs=0.01)
    assert "more than HBM holds" not in notes["sglang=0.85"]
