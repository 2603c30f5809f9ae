"""Attention kinds in the cost model: DSA, DeepSeek-V4's compressed layers, linear hybrids, latent MoE.

The report's CM384 decode deployment (plans/cm-d.yaml) is re-costed with the 2026 models: the
layouts stay legal for each (attention DP, experts EP) so only the model changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.costmodel.attention_kinds import layer_group_cost
from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.elementwise import residual_bytes
from planner.costmodel.evaluate import load_plan_specs
from planner.costmodel.memory import decode_hbm
from planner.costmodel.prefill import prefill_forward
from planner.specs.catalog import catalog_dir, load_model, load_plan
from planner.specs.plan import PrefillPlan, SharedExpertLayout


def _ctx(model: str, input_tokens: int = 2048, output_tokens: int = 2048, plan_name: str = "cm-d"):
    """The plan with its experts spread over every device (enough slots for the model), and a context."""
    plan, _ = load_plan(plan_name)
    specs = load_plan_specs(plan, catalog_dir("plans"))
    m = load_model(model)
    w = plan.workload.model_copy(update={"input_tokens": input_tokens, "output_tokens": output_tokens})
    assert plan.decode is not None and plan.decode.moe is not None and m.moe is not None
    n = plan.decode.devices
    moe = plan.decode.moe.model_copy(update={"ep": n, "slots_per_device": -(-m.moe.routed_experts // n) + 1})
    decode = plan.decode.model_copy(update={"moe": moe, "shared_expert": SharedExpertLayout()})
    return plan.model_copy(update={"decode": decode}), CostContext(m, specs.hw, specs.quant, w)


def _attention_ms(model: str, input_tokens: int) -> float:
    plan, ctx = _ctx(model, input_tokens)
    assert plan.decode is not None
    step = decode_step(ctx, plan.decode, [16.0])
    return float(step.breakdown_s["attention"][0]) * 1e3


def test_deepseek_v32_no_longer_costs_as_v3():
    plan, v3 = _ctx("deepseek-v3")
    _, v32 = _ctx("deepseek-v3.2")
    assert plan.decode is not None
    assert decode_step(v32, plan.decode).step_s[0] != pytest.approx(decode_step(v3, plan.decode).step_s[0], rel=1e-3)


def test_dsa_costs_its_indexer_at_short_context_and_saves_at_long_context():
    # at 2K tokens every position is selected anyway: the indexer only adds work
    assert _attention_ms("deepseek-v3.2", 1024) > _attention_ms("deepseek-v3", 1024)
    # at 64K tokens MLA reads 2048 latent entries instead of 64K; the indexer keys are 4.5x smaller
    assert _attention_ms("deepseek-v3.2", 65536) < 0.5 * _attention_ms("deepseek-v3", 65536)


def test_dsa_attention_flops_stop_growing_past_top_k_but_indexer_keeps_growing():
    m = load_model("deepseek-v3.2")
    from planner.specs.model import attended_entries, indexed_entries

    assert attended_entries(m, "dsa", 1, 100_000) == 2048
    assert indexed_entries(m, "dsa", 1, 100_000) == 100_000


@pytest.mark.parametrize("kind", ["linear"])
def test_linear_layers_decode_cost_does_not_depend_on_context(kind):
    plan, short = _ctx("qwen3.5-397b-a17b", 1024)
    _, long = _ctx("qwen3.5-397b-a17b", 131072)
    assert plan.decode is not None
    att = plan.decode.attention
    a = layer_group_cost(short, att, [16.0], [16.0], True, kind, 1).total_s
    b = layer_group_cost(long, att, [16.0], [16.0], True, kind, 1).total_s
    assert a[0] == pytest.approx(b[0])
    # the full-attention layers still grow with the context
    g1 = layer_group_cost(short, att, [16.0], [16.0], True, "gqa", 1).total_s
    g2 = layer_group_cost(long, att, [16.0], [16.0], True, "gqa", 1).total_s
    assert g2[0] > 2 * g1[0]


def test_linear_state_is_per_sequence_in_hbm():
    plan, short = _ctx("qwen3.5-397b-a17b", 1024)
    _, long = _ctx("qwen3.5-397b-a17b", 8192)
    assert plan.decode is not None
    b = np.array([8.0, 16.0])
    kv_short = decode_hbm(short, plan.decode, b).breakdown_bytes["kv_cache"]
    kv_long = decode_hbm(long, plan.decode, b).breakdown_bytes["kv_cache"]
    m = short.model
    # the growth per extra token is the full-attention layers' alone (15 main GQA layers and the
    # MTP layer), 2 KV heads of 256, K and V, BF16
    per_token = 16 * 2 * 2 * 256 * 2
    extra_tokens_per_seq = 8192 - 1024  # prompt difference (the 2-sigma margin and outputs are equal)
    assert (kv_long - kv_short) / b == pytest.approx(np.full(2, per_token * extra_tokens_per_seq), rel=1e-6)
    # and at 1K tokens the 45 linear layers' FP32 states dominate the cache
    growing, fixed = m.kv_cache_bytes(1024.0, 2.0)
    assert fixed > growing


def test_v4_compressed_layers_grow_slower_than_full_attention():
    plan, c64k = _ctx("deepseek-v4-pro", 65536)
    _, c512k = _ctx("deepseek-v4-pro", 524288)
    assert plan.decode is not None
    att = plan.decode.attention
    for kind, ratio in (("csa", 4), ("hca", 128)):
        a = layer_group_cost(c64k, att, [16.0], [16.0], True, kind, ratio).total_s[0]
        b = layer_group_cost(c512k, att, [16.0], [16.0], True, kind, ratio).total_s[0]
        assert a < b < 8 * a  # the context grew 8x
    # V4-Pro at 512K context costs less attention per step than V3.2 at the same context
    assert _attention_ms("deepseek-v4-pro", 524288) < _attention_ms("deepseek-v3.2", 524288)


def test_fp4_checkpoint_experts_take_their_own_bytes():
    plan, k2 = _ctx("kimi-k2")
    _, k25 = _ctx("kimi-k2.5")
    assert plan.decode is not None
    assert k25.routed_expert_weight_bytes == pytest.approx(4.5 / 8)
    assert k2.routed_expert_weight_bytes == k2.quant.expert_weight_bytes == 1
    w2 = decode_hbm(k2, plan.decode, [8.0]).breakdown_bytes["routed_expert_weights"][0]
    w25 = decode_hbm(k25, plan.decode, [8.0]).breakdown_bytes["routed_expert_weights"][0]
    assert w25 == pytest.approx(w2 * 4.5 / 8)


def test_latent_moe_moves_tokens_at_the_latent_width():
    m = load_model("kimi-k3")
    assert m.expert_token_width() == 3584 and m.expert_params() == 3 * 3584 * 3072
    assert m.shared_expert_params() == 3 * 7168 * 3072


def test_every_new_model_costs_a_prefill_forward_and_decode_step():
    for name in (
        "deepseek-v3.2",
        "deepseek-v4-pro",
        "deepseek-v4-flash",
        "kimi-k2.5",
        "kimi-k3",
        "glm-5.1",
        "qwen3.5-397b-a17b",
        "minimax-m2.5",
    ):
        plan, ctx = _ctx(name)
        assert plan.decode is not None
        step = decode_step(ctx, plan.decode, [8.0, 16.0])
        assert np.all(np.isfinite(step.step_s)) and step.step_s[1] > step.step_s[0] > 0
        pre = PrefillPlan(
            devices=plan.decode.devices,
            instances=1,
            attention=plan.decode.attention,
            moe=plan.decode.moe,
            shared_expert=plan.decode.shared_expert,
            batch_tokens=16384,
            micro_batches=1,
        )
        fwd = prefill_forward(ctx, pre)
        assert np.all(np.isfinite(fwd.forward_s)) and fwd.forward_s[0] > 0


@pytest.mark.parametrize("model", ["deepseek-v3", "qwen3-235b-a22b"])
def test_plain_models_keep_the_calibrated_attention_path(model):
    from planner.costmodel.attention_kinds import layers_cost
    from planner.costmodel.modules import attention_cost

    plan, ctx = _ctx(model)
    assert plan.decode is not None
    att, c = plan.decode.attention, ctx.mean_decode_context_tokens
    t = np.array([8.0, 32.0])
    whole = layers_cost(ctx, att, t, t, decode=True)
    one = attention_cost(ctx, att, t, t, c, c, decode=True)
    assert np.allclose(whole.total_s, one.total_s * ctx.model.num_layers)


def test_hyper_connections_cost_their_streams_bytes_and_one_launch_per_sub_layer():
    """hc_pre reads n streams and writes one, hc_post reads one and n and writes n (CANN's npu_hc_pre /
    npu_hc_post), where a plain residual add reads two and writes one; hc_pre adds one matrix launch."""
    plan, ctx = _ctx("deepseek-v4-flash")
    m = ctx.model
    assert m.residual_streams == 4 and plan.decode is not None
    h = m.hidden_size
    assert residual_bytes(m) == (3 * 4 + 2) * h * 2.0
    plain = m.model_copy(update={"residual_streams": 1})
    assert residual_bytes(plain) == 3 * h * 2.0
    ctx1 = CostContext(plain, ctx.hw, ctx.quant, ctx.workload)
    hc, base = decode_step(ctx, plan.decode, [16.0]), decode_step(ctx1, plan.decode, [16.0])
    # two sub-layers a main layer (attention, FFN), each one more matrix launch
    launch_s = 2 * m.num_layers * ctx.hw.fixed_costs.matrix_op.value
    got = hc.breakdown_s["launch_overhead"][0] - base.breakdown_s["launch_overhead"][0]
    assert got == pytest.approx(launch_s, rel=1e-9)
    # at least the main pass's extra bytes (16 sequences x 1 + MTP tokens) at the effective HBM rate
    tokens = 16 * (1 + plan.decode.mtp_tokens)
    bytes_s = (residual_bytes(m) - residual_bytes(plain)) * 2 * m.num_layers * tokens / ctx.hbm_bytes_per_s
    assert hc.step_s[0] - base.step_s[0] >= launch_s + bytes_s * (1 - 1e-9)
    # activations hold four residual streams: three more hidden-width copies a token
    acts = decode_hbm(ctx, plan.decode, 16.0).breakdown_bytes["activations"][0]
    acts1 = decode_hbm(ctx1, plan.decode, 16.0).breakdown_bytes["activations"][0]
    assert acts - acts1 == pytest.approx(3 * h * 2.0 * tokens * plan.decode.attention.tp)


def test_qk_norm_across_heads_costs_one_tp_all_reduce_and_two_rescales():
    """MiniMax-M2's q and k RMSNorms span all heads (qk_norm_type: per_layer): under attention TP
    each layer all-reduces every token's two FP32 sums of squares over the TP group and rescales q
    and k after it; without TP, or with per-head norms, nothing is added."""
    from planner.costmodel import comm
    from planner.costmodel.modules import attention_cost
    from planner.specs.plan import AttentionLayout

    _, ctx = _ctx("minimax-m2.5")
    m = ctx.model
    assert m.attention.qk_norm_across_heads
    per_head = m.model_copy(update={"attention": m.attention.model_copy(update={"qk_norm_across_heads": False})})
    ctx0 = CostContext(per_head, ctx.hw, ctx.quant, ctx.workload)
    t, c = np.array([1.0, 4.0]), ctx.mean_decode_context_tokens
    fc = ctx.hw.fixed_costs
    for tp in (16, 4):
        layout = AttentionLayout(dp=16 // tp, tp=tp)
        with_norm = attention_cost(ctx, layout, t, t, c, c, decode=True)
        without = attention_cost(ctx0, layout, t, t, c, c, decode=True)
        assert np.allclose(with_norm.comm_s - without.comm_s, comm.allreduce_s(ctx.hw, tp, t * tp * 2 * 4.0))
        assert with_norm.fixed_s - without.fixed_s == pytest.approx(fc.collective.value + 2 * fc.vector_op.value)
        assert np.allclose(with_norm.compute_s, without.compute_s)
    dp = AttentionLayout(dp=16, tp=1)
    assert np.allclose(
        attention_cost(ctx, dp, t, t, c, c, decode=True).total_s,
        attention_cost(ctx0, dp, t, t, c, c, decode=True).total_s,
    )
    # Qwen3's q_norm and k_norm are one head wide: no collective
    assert not load_model("qwen3-235b-a22b").attention.qk_norm_across_heads
