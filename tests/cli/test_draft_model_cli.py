"""`--draft-model` from the command line: search, export, refusals."""

from __future__ import annotations

import json

import pytest

from tests.conftest import PLANS, run_cli

DRAFT = "qwen3-235b-a22b-eagle3"
QWEN = ("--model", "qwen3-235b-a22b", "--hardware", "a3", "--input-tokens", "3500", "--output-tokens", "1500")


def test_plan_with_a_draft_head_drafts_in_every_plan_and_exports_it(tmp_path):
    out = tmp_path / "plans.json"
    r = run_cli("plan", *QWEN, "--draft-model", DRAFT, "--max-cards", "24", "--top", "3", "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["status"] == "OPTIMAL" and doc["plans"]
    for plan in doc["plans"]:
        assert plan["draft_model"] == DRAFT
        phase = plan.get("decode") or plan.get("colocated")
        assert 1 <= phase["mtp_tokens"] <= 3  # a loaded head runs: depths 1-3 by default
        assert plan["predicted"]["decode" if plan.get("decode") else "colocated"]
    assert "draft 1-3 tokens" in " ".join(r.output.split())  # the space's rule says so


def test_the_draft_heads_plan_exports_for_sglang_and_vllm_ascend_and_mindie_refuses(tmp_path):
    plan = str(PLANS / "a3-sglang-qwen3-235b-w8a8-d32.yaml")
    r = run_cli("evaluate", plan, "--emit", "sglang,vllm-ascend", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    sglang = json.loads((tmp_path / "out" / "sglang" / "launch.json").read_text())
    argv = next(p["argv"] for p in sglang["processes"] if p["role"] == "decode")
    i = argv.index("--speculative-algorithm")
    assert argv[i + 1] == "EAGLE3"
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "lmsys/Qwen3-235B-A22B-EAGLE3"
    assert argv[argv.index("--speculative-draft-model-quantization") + 1] == "unquant"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "4"
    vllm = json.loads((tmp_path / "out" / "vllm-ascend" / "launch.json").read_text())
    argv = next(p["argv"] for p in vllm["processes"] if p["role"] == "decode")
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": "lmsys/Qwen3-235B-A22B-EAGLE3", "num_speculative_tokens": 3}
    r = run_cli("evaluate", plan, "--emit", "mindie", str(tmp_path / "mindie"))
    assert r.exit_code == 2 and "draft_model" in r.output
    assert not (tmp_path / "mindie").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--draft-model", "nope"), "unknown draft model 'nope'"),
        (("--draft-model", DRAFT, "--mtp", "0"), "would never run"),
        (("--draft-model", DRAFT, "--structure", "afd"), "--structure afd with --draft-model"),
        (("--draft-model", DRAFT, "--engine", "mindie"), "mindie runs no EAGLE-3 draft model"),
        (("--mtp", "1"), "--draft-model NAME"),
    ],
)
def test_bad_draft_requests_get_one_line_and_exit_2(flags, message):
    r = run_cli("plan", *QWEN, *flags)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output


def test_a_model_with_its_own_mtp_layers_refuses_a_draft_head():
    r = run_cli("plan", "--model", "deepseek-r1", "--draft-model", DRAFT)
    assert r.exit_code == 2
    assert "drafts with its own 1 MTP layer(s); drop --draft-model" in r.output


def test_models_list_shows_the_draft_heads():
    r = run_cli("models", "list")
    assert r.exit_code == 0
    assert DRAFT in r.output and "lmsys/Qwen3-235B" in r.output


def test_sweep_and_whatif_carry_the_draft_head():
    r = run_cli("sweep", *QWEN, "--draft-model", DRAFT, "--tpot-ms", "50", "--max-cards", "24")
    assert r.exit_code == 0, r.output
    assert "EAGLE3:" in r.output  # the decode cell names the head's draft tokens
    plan = str(PLANS / "a3-sglang-qwen3-235b-w8a8-d32.yaml")
    r = run_cli("whatif", plan, "--tpot-ms", "30")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "new (re-planned)" in text and "│ tpot-ms │ unset │ 30 │" in text  # the head stays: not a changed assumption
    r = run_cli("whatif", plan, "--draft-model", "none", "--mtp", "0")
    assert r.exit_code == 0, r.output
