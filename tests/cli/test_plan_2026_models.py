"""`moeplan plan` for every 2026 model of the catalog: a plan, or an infeasible naming its constraint."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

NEW_MODELS = [
    "deepseek-v3.2",
    "deepseek-v4-pro",
    "deepseek-v4-flash",
    "kimi-k2.5",
    "kimi-k3",
    "glm-5.1",
    "glm-5.2",
    "qwen3.5-397b-a17b",
    "minimax-m2.5",
]


@pytest.mark.parametrize("name", NEW_MODELS)
def test_each_model_plans_on_cm384(tmp_path, name):
    out = tmp_path / "plan.json"
    r = run_cli("plan", "--model", name, "--hardware", "cm384", "--top", "1", "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    plans = doc if isinstance(doc, list) else doc.get("plans", [doc])
    assert plans, doc
    # the exported best plan re-evaluates to the same figures (the search and the cost model agree)
    best = plans[0]
    best_path = tmp_path / "best.json"
    best_path.write_text(json.dumps(best))
    r2 = run_cli("evaluate", str(best_path), "--json", "-")
    assert r2.exit_code == 0, r2.output


def test_kimi_k3_on_a2_is_infeasible_with_the_reason():
    # disaggregated, 48 cards cannot hold a prefill and a decode copy of the weights
    r = run_cli("plan", "--model", "kimi-k3", "--hardware", "a2", "--top", "1", "--no-colocated")
    assert r.exit_code == 1
    assert "HBM" in r.output and "kimi-k3" in r.output
    # one colocated instance of 40 cards serves both phases: attention TP8 with the shared expert split
    # over the TP8 group (1/8 of its weights a device; replicated, 48 cards were the least); below that
    # nothing fits
    r = run_cli("plan", "--model", "kimi-k3", "--hardware", "a2", "--top", "1", "--max-cards", "40", "--engine", "none")
    assert r.exit_code == 0, r.output
    assert "+S/TP8" in " ".join(r.output.split())
    r = run_cli("plan", "--model", "kimi-k3", "--hardware", "a2", "--top", "1", "--max-cards", "32", "--engine", "none")
    assert r.exit_code == 1
    assert "HBM" in r.output and "kimi-k3" in r.output and "at least 40" in r.output
    # under --engine auto the same 40 cards: vLLM-Ascend runs the split shared expert (SGLang, which
    # builds it whole on every rank, would need 56)
    r = run_cli("plan", "--model", "kimi-k3", "--hardware", "a2", "--top", "1", "--max-cards", "40")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "vllm-ascend" in text and "sglang: no feasible plan it runs" in text


def test_deepseek_v32_no_longer_plans_as_v3():
    args = ("--hardware", "cm384", "--max-cards", "64", "--top", "1", "--phase", "decode")
    v3 = run_cli("plan", "--model", "deepseek-v3", *args)
    v32 = run_cli("plan", "--model", "deepseek-v3.2", *args)
    assert v3.exit_code == 0 and v32.exit_code == 0
    row = [line for line in v3.output.splitlines() if line.startswith("│ 1 ")]
    row32 = [line for line in v32.output.splitlines() if line.startswith("│ 1 ")]
    assert row and row32 and row[0] != row32[0]


def _best_plan_doc(tmp_path, model: str, hardware: str) -> dict:
    """`plan --json` of the best plan of `model` on `hardware` with every other flag at its default."""
    out = tmp_path / "plan.json"
    r = run_cli("plan", "--model", model, "--hardware", hardware, "--top", "1", "--json", str(out))
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def test_default_quantization_follows_the_machine(tmp_path):
    # the Ascend 950 lists no INT8 peak: with no --quantization the plan runs FP8 and says so,
    # while a scheme the user names is still refused by the field it lacks
    doc = _best_plan_doc(tmp_path, "minimax-m2.5", "atlas950")
    assert doc["plans"][0]["quantization"] == "fp8"
    assert any(n.startswith("quantization fp8 (--quantization auto)") for n in doc["notes"]), doc["notes"]
    named = run_cli("plan", "--model", "minimax-m2.5", "--hardware", "atlas950", "--quantization", "a8w8c16")
    assert named.exit_code == 2
    assert "peak_flops_per_s.int8" in named.output


def test_default_quantization_keeps_int8_where_the_machine_has_it(tmp_path):
    doc = _best_plan_doc(tmp_path, "deepseek-v3", "a2")
    assert doc["plans"][0]["quantization"] == "a8w8c16"
    assert not any("--quantization auto" in n for n in doc.get("notes", []))
