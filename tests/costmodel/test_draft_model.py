"""An EAGLE-3 draft head beside the model: catalog entry, plan rules, decode step, HBM, KV blocks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step, emitted_tokens_per_step
from planner.costmodel.draft import draft_kv_bytes_per_token, draft_pass_s, draft_weight_bytes
from planner.costmodel.evaluate import load_plan_specs
from planner.costmodel.memory import decode_hbm
from planner.errors import BadInputError
from planner.specs.catalog import load_draft, load_hardware, load_model, load_plan, with_draft
from planner.specs.plan import check_plan

DRAFT = "qwen3-235b-a22b-eagle3"
PLAN = "a3-sglang-qwen3-235b-w8a8-d32"


def _ctx(draft: bool = True) -> tuple[CostContext, object]:
    plan, _ = load_plan(PLAN)
    if not draft:
        decode = plan.decode.model_copy(update={"mtp_tokens": 0})
        plan = plan.model_copy(update={"draft_model": None, "decode": decode})
    specs = load_plan_specs(plan)
    return CostContext(specs.model, specs.hw, specs.quant, plan.workload), plan


def test_the_catalog_head_is_specforges_qwen3_235b_eagle3_architecture():
    d = load_draft(DRAFT)
    assert (d.method, d.target, d.checkpoint) == ("eagle3", "qwen3-235b-a22b", "lmsys/Qwen3-235B-A22B-EAGLE3")
    assert d.layer.num_layers == 1 and d.layer.moe is None
    assert d.layer.vocab_size == 32000 and d.embedding_vocab == 151936  # draft vocabulary, target's embedding
    assert d.aux_hidden_states == 3  # eagle_aux_hidden_state_layer_ids [1, 46, 90]
    h = 4096
    # the fc (3h -> h) and the embedding half of Q, K, V's 2h inputs (64 x 128 + 2 x 4 x 128 outputs)
    assert d.extra_params() == 3 * h * h + h * (64 * 128 + 2 * 4 * 128)
    # layer (attention 4096 x (8192 + 1024) + 8192 x 4096, SwiGLU 3 x 4096 x 24576), extra, LM head, embedding
    expected = (h * 9216 + 8192 * h) + 3 * h * 24576 + d.extra_params() + 32000 * h + 151936 * h
    assert d.params() == expected
    assert d.params() == pytest.approx(1.215e9, rel=1e-3)


def test_a_config_that_is_not_an_eagle3_head_is_refused_by_name(tmp_path):
    path = tmp_path / "config.json"
    doc = json.loads(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInputError, match="names no EAGLE-3 head"):
        load_draft(str(path))


def test_a_draft_goes_only_beside_a_model_it_reads_and_without_mtp_layers():
    with pytest.raises(BadInputError, match="its own 1 MTP layer"):
        with_draft(load_model("deepseek-r1"), DRAFT)
    other = load_model("kimi-k2")  # no MTP layers, another hidden size and vocabulary
    assert other.mtp_layers == 0
    with pytest.raises(BadInputError, match="pick a draft trained for it"):
        with_draft(other, DRAFT)
    m = with_draft(load_model("qwen3-235b-a22b"), DRAFT)
    assert m.speculates and m.draft is not None and m.draft.method == "eagle3"
    assert not load_model("qwen3-235b-a22b").speculates


def test_plan_rules_name_the_field():
    plan, _ = load_plan(PLAN)
    hw = load_hardware(plan.hardware)
    bare = load_model(plan.model)
    with pytest.raises(BadInputError, match="decode.mtp_tokens = 3: .*draft_model"):
        check_plan(plan.model_copy(update={"draft_model": None}), bare, hw)
    drafted = with_draft(bare, DRAFT)
    decode = plan.decode.model_copy(update={"mtp_tokens": 0})
    with pytest.raises(BadInputError, match="draft_model = 'qwen3-235b-a22b-eagle3' but decode.mtp_tokens = 0"):
        check_plan(plan.model_copy(update={"decode": decode}), drafted, hw)


def test_the_step_runs_the_head_k_times_in_place_of_mtp_layers():
    ctx, plan = _ctx()
    d = plan.decode
    b = np.array([float(d.concurrency_per_device)])
    k = d.mtp_tokens
    step = decode_step(ctx, d)
    passes = sum(draft_pass_s(ctx, d, b * (1 + k) if i == 0 else b, b, first=i == 0) for i in range(k))
    expected = passes + ctx.hw.fixed_costs.mtp_framework_per_step.value
    assert step.breakdown_s["mtp"] == pytest.approx(expected, rel=1e-12)
    # the extend pass (1 + k tokens per sequence, through the fc) costs more than a one-token pass
    assert draft_pass_s(ctx, d, b * (1 + k), b, first=True)[0] > draft_pass_s(ctx, d, b, b, first=False)[0]
    assert step.tpot_s[0] == pytest.approx(step.step_s[0] / emitted_tokens_per_step(k, 0.782))
    # a small head: a few percent of the step, not nothing
    share = step.breakdown_s["mtp"][0] / step.step_s[0]
    assert 0.005 < share < 0.15


def test_the_head_holds_its_weights_and_its_kv_cache():
    ctx, plan = _ctx()
    bare_ctx, _ = _ctx(draft=False)
    d = plan.decode
    head = load_draft(DRAFT)
    assert draft_weight_bytes(ctx) == head.params() * 2.0 and draft_weight_bytes(bare_ctx) == 0.0
    # one GQA layer of 4 KV heads x 128, K and V, BF16 (the a8w8c16 KV format), at attention TP 1
    assert draft_kv_bytes_per_token(ctx, 1) == 2 * 128 * 4 * 1 * 2.0
    use = decode_hbm(ctx, d)
    assert use.breakdown_bytes["draft_model_weights"][0] == pytest.approx(head.params() * 2.0)
    assert "draft_model_weights" not in decode_hbm(bare_ctx, d.model_copy(update={"mtp_tokens": 0})).breakdown_bytes


@pytest.mark.parametrize("dense_layout", [False, True])
def test_search_tables_agree_with_the_evaluation(dense_layout):
    """The search's integer tables cost the head's passes as the evaluation does (module by module:
    its attention, FFN and LM head under the plan's layouts, its projections as a constant)."""
    from planner.candidates.phase_candidates import decode_candidates
    from planner.candidates.space import MoEOption, SizeOptions
    from planner.candidates.tables import decode_tables, to_integer_tables

    ctx, plan = _ctx()
    d = plan.decode
    opts = SizeOptions(
        devices=d.devices,
        attention=[d.attention],
        dense_ffn=[d.dense_layout] if dense_layout else [],
        moe=[MoEOption(d.moe, d.shared_expert)],
        lm_head=[d.lm_head_layout],
    )
    xs = np.array([d.concurrency_per_device])
    t = decode_tables(ctx, opts, [d.mtp_tokens], xs, 1)
    ints = to_integer_tables(t, ctx.hw.hbm_bytes)
    (cand,) = decode_candidates(t, ints, None, 1)
    step_us = decode_step(ctx, d).step_s[0] * 1e6
    # integers round up: never shorter than the float step, and within a few microseconds per module
    assert step_us <= cand.time_us <= step_us + 20


def test_the_binding_sentences_cost_the_step_with_the_head():
    """`why:` / whatif's binding probes the next concurrency with the head beside the model."""
    from planner.ranking.binding import request_bindings
    from planner.search.request import PlanRequest
    from planner.specs.plan import SLO

    ctx, plan = _ctx()
    plan = plan.model_copy(update={"slo": SLO(tpot_ms=500.0, ttft_ms=None)})
    req = PlanRequest(
        model=plan.model, hardware=plan.hardware, workload=plan.workload, slo=plan.slo, draft_model=plan.draft_model
    )
    decode = next(b for b in request_bindings(plan, req) if b.phase == "decode")
    b = plan.decode.concurrency_per_device + 1
    expected = decode_step(ctx, plan.decode, np.array([float(b)])).tpot_s[0] * 1e3
    assert decode.figures["next_tpot_ms"] == pytest.approx(expected, rel=1e-9)


def test_a_users_head_folder_is_read_like_a_model_folder(tmp_path):
    from planner.specs.catalog import catalog_dir

    folder = tmp_path / "my-eagle3"
    folder.mkdir()
    (folder / "config.json").write_text((catalog_dir("drafts") / f"{DRAFT}.json").read_text())
    d = load_draft(str(folder))
    assert d.name == "my-eagle3" and d.target == "(user file)" and d.checkpoint == str(folder)
    assert d.params() == load_draft(DRAFT).params()
    with pytest.raises(BadInputError, match="draft model folder .* holds no config.json"):
        load_draft(str(tmp_path))
