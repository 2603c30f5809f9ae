"""Huge inputs end in a result or a clear refusal, never a hang (issue: hardening)."""

from __future__ import annotations

import json

import pytest

from planner.errors import BadInputError, InfeasibleError
from planner.search.plan_search import run_search
from planner.search.request import PlanRequest
from planner.specs.plan import SLO, Workload
from tests.conftest import PROOF, REPO, llama_8b_config


def test_a_100000_card_budget_plans():
    outcome = run_search(PlanRequest(max_cards=100_000, top=1, settings=PROOF))
    assert outcome.optimal
    assert outcome.plans[0].total_devices <= 100_000


def test_budgets_beyond_the_limit_are_refused():
    with pytest.raises(BadInputError, match="--max-cards"):
        run_search(PlanRequest(max_cards=10**13, top=1))


def test_a_four_million_token_context_is_refused_clearly(tmp_path):
    cfg = llama_8b_config(4_200_000)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(cfg))
    request = PlanRequest(
        model=str(path),
        workload=Workload(input_tokens=4_000_000, output_tokens=1000),
        slo=SLO(tpot_ms=100, ttft_ms=10_000_000),
        max_cards=64,
        top=1,
    )
    # one request's KV at TP8 (one KV head a die) is 61 GiB: more than a 64 GB die has
    with pytest.raises(InfeasibleError, match="KV cache per device"):
        run_search(request)


def test_a_4096_expert_model_plans(tmp_path):
    cfg = json.loads((REPO / "models" / "deepseek-v3.json").read_text())
    cfg.update(
        {
            "n_routed_experts": 4096,
            "n_group": 1,
            "topk_group": 1,
            "moe_intermediate_size": 256,
            "num_hidden_layers": 20,
            "first_k_dense_replace": 1,
        }
    )
    path = tmp_path / "e4096.json"
    path.write_text(json.dumps(cfg))
    outcome = run_search(PlanRequest(model=str(path), max_cards=16, top=1))
    assert outcome.plans[0].decode_phase.moe.ep * outcome.plans[0].decode_phase.moe.slots_per_device >= 4096


def test_a_dense_model_plans_with_expert_parallelism_collapsed(tmp_path):
    cfg = {
        "model_type": "llama",
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
    }
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(cfg))
    plan = run_search(PlanRequest(model=str(path), max_cards=16, top=1)).plans[0]
    assert plan.decode_phase.moe is None and plan.predicted["system"]["output_tokens_per_s_per_card"] > 0


@pytest.mark.parametrize(
    ("model", "input_tokens", "hint"),
    [
        # the catalog holds Qwen3-235B with its model card's YaRN (131,072 tokens): the refusal points to it
        (
            "qwen3-235b-a22b",
            100_000,
            "or use --model qwen3-235b-a22b-yarn (the model with YaRN rope scaling, up to 131,072",
        ),
        ("qwen3-235b-a22b", 200_000, None),  # past what YaRN reaches too: no hint
        ("deepseek-v3", 200_000, None),  # no -yarn entry
    ],
)
def test_a_context_past_the_model_names_the_catalogs_longer_variant(model, input_tokens, hint):
    request = PlanRequest(model=model, hardware="a3", workload=Workload(input_tokens=input_tokens, output_tokens=100))
    with pytest.raises(BadInputError, match="exceeds the model's context") as refused:
        run_search(request)
    text = str(refused.value)
    if hint is None:
        assert "--model" not in text and text.endswith("shorten it.")
    else:
        assert hint in text
