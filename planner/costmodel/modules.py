"""Cost of one layer's module on the busiest device: attention, dense FFN, MoE, LM head, embedding.

Every function returns a `ModuleCost`: roofline time of the module's operators (`compute_s`),
time of its collectives (`comm_s`) and the fixed launch costs of its operators (`fixed_s`). They
accept numpy arrays for the per-device token count, so one call costs many concurrencies at once.

Tokens are data-parallel across the devices of an instance between modules: `tokens_per_device`
is what one device carries into a module. A module with TP > 1 gathers its group's tokens
(AllGather), computes on its weight shard, and scatters the result back (ReduceScatter): the
FlashComm-style replacement of an AllReduce that the report describes.

Operator counts per module (for the fixed launch costs) follow the fused operators of the
report's vLLM-Ascend graphs: MLA decode 7 matrix ops (q_a, q_b, kv_a, absorbed UK, attention,
absorbed UV, o) and 6 vector ops (norms, RoPE, cache write, quantisation); MoE 3 matrix ops
(router, two grouped GEMMs) and 6 vector ops (norm, top-k, permute, SwiGLU, quantisation,
unpermute), the shared expert 2 matrix and 1 vector op; dense FFN 2 matrix and 3 vector ops.
A GQA layer whose q and k RMSNorms span all heads (MiniMax-M2) adds, under attention TP, one
all-reduce of each token's two FP32 sums of squares and two rescale operators.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel import comm
from planner.costmodel.context import CostContext
from planner.costmodel.elementwise import (
    attention_bytes_per_token,
    dense_ffn_bytes_per_token,
    hyper_connection_matrix_ops,
    moe_bytes_per_assignment,
    moe_bytes_per_token,
)
from planner.costmodel.imbalance import busiest_over_mean, dispersion_of, straggler_z
from planner.costmodel.kv_split import unsplit_kv_read_s
from planner.specs.hardware import HardwareSpec
from planner.specs.model import AttentionSpec
from planner.specs.plan import AttentionLayout, MoELayout, ParallelLayout, SharedExpertLayout

BF16_BYTES = 2.0
FP32_BYTES = 4.0
LOGIT_BYTES = 4.0


@dataclass
class ModuleCost:
    """Seconds one module adds to a forward pass on the busiest device (arrays over concurrency)."""

    compute_s: np.ndarray
    comm_s: np.ndarray
    fixed_s: float

    @property
    def total_s(self) -> np.ndarray:
        """Compute, communication and launch costs back to back."""
        return self.compute_s + self.comm_s + self.fixed_s


def _fixed(ctx: CostContext, matrix_ops: int, vector_ops: int, collectives: int = 0) -> float:
    """Launch costs of a module's operators; its collectives pay `fixed_costs.collective` here and
    again inside their time (comm.py's docstring: why both stay)."""
    fc = ctx.hw.fixed_costs
    return matrix_ops * fc.matrix_op.value + vector_ops * fc.vector_op.value + collectives * fc.collective.value


def _tp_in_out_comm_s(ctx: CostContext, tp: int, tokens_per_device: np.ndarray, width: int) -> np.ndarray:
    """AllGather the group's inputs (dispatch precision) and ReduceScatter outputs (BF16)."""
    if tp <= 1:
        return np.zeros_like(tokens_per_device)
    q = ctx.quant
    return comm.allgather_s(
        ctx.hw, tp, tokens_per_device * width * q.dispatch_bytes_per_element
    ) + comm.reduce_scatter_s(ctx.hw, tp, tokens_per_device * width * BF16_BYTES)


# ---- attention ---------------------------------------------------------------------------------


def qk_norm_rescale_ops(attention: AttentionSpec, core_tp: int) -> int:
    """Vector operators a GQA layer adds when its q and k RMSNorms span all heads and the heads are
    split over a TP group: the norms' scales wait for the group's sums, so q and k are rescaled by
    two operators after the all-reduce (a fused norm kernel cannot do it in one pass)."""
    return 2 if attention.qk_norm_across_heads and core_tp > 1 else 0


def attention_comm(
    ctx: CostContext,
    layout: AttentionLayout,
    t: np.ndarray,
    latent_width: float,
    out_width: float,
    qk_norm_across_heads: bool = False,
) -> tuple[np.ndarray, int]:
    """Collectives of one attention layer under its layout, and how many there are.

    Pre-TP gathers the layer's input; the hybrid layout (the report's prefill) gathers the
    latent to the core TP group and moves head outputs all-to-all; a plain TP layout gathers
    the input and reduce-scatters the output. `qk_norm_across_heads` (a GQA layer whose q and k
    RMSNorms span all heads): the core TP group all-reduces each token's two FP32 sums of squares.
    """
    q = ctx.quant
    h = ctx.model.hidden_size
    pre, post = layout.pre_layout, layout.post_layout
    core = ParallelLayout(dp=layout.dp, tp=layout.tp)
    comm_s = np.zeros_like(t)
    collectives = 0
    if qk_norm_across_heads and core.tp > 1:
        comm_s = comm_s + comm.allreduce_s(ctx.hw, core.tp, t * core.tp * 2 * FP32_BYTES)
        collectives += 1
    if pre.tp > 1:
        comm_s = comm_s + comm.allgather_s(ctx.hw, pre.tp, t * h * q.dispatch_bytes_per_element)
        collectives += 1
    if layout.is_hybrid:
        if core.tp > pre.tp:
            comm_s = comm_s + comm.allgather_s(ctx.hw, core.tp, t * latent_width * BF16_BYTES)
            collectives += 1
        if core.tp > 1:
            moved = t * out_width * BF16_BYTES * (core.tp - 1) / core.tp
            comm_s = comm_s + comm.all_to_all_s(ctx.hw, core.tp, moved)
            collectives += 1
        elif post.tp > 1:
            comm_s = comm_s + comm.allgather_s(ctx.hw, post.tp, t * out_width * BF16_BYTES)
            collectives += 1
    elif core.tp > 1 and pre.tp == 1:
        comm_s = comm_s + comm.allgather_s(ctx.hw, core.tp, t * h * q.dispatch_bytes_per_element)
        collectives += 1
    if post.tp > 1:
        comm_s = comm_s + comm.reduce_scatter_s(ctx.hw, post.tp, t * h * BF16_BYTES)
        collectives += 1
    return comm_s, collectives


def attention_cost(
    ctx: CostContext,
    layout: AttentionLayout,
    tokens_per_device: ArrayLike,
    sequences_per_device: ArrayLike,
    attended_tokens: float,
    kv_read_tokens: float,
    decode: bool,
) -> ModuleCost:
    """One attention layer on one device.

    `attended_tokens`: mean number of KV positions each query token attends to (decode: the mean
    context; prefill: half the prompt, causal). `kv_read_tokens`: KV positions read from HBM per
    sequence (decode: the mean context; prefill: 0, the KV is produced, not read).
    Decode uses MLA weight absorption (scores in the 512-dim latent space); prefill does not.
    """
    m, q = ctx.model, ctx.quant
    a = m.attention
    t = np.asarray(tokens_per_device, dtype=float)
    seqs = np.asarray(sequences_per_device, dtype=float)
    pre, post = layout.pre_layout, layout.post_layout
    core = ParallelLayout(dp=layout.dp, tp=layout.tp)
    h = m.hidden_size
    heads_core = a.num_heads / core.tp
    wb = q.linear_weight_bytes
    lin = ctx.linear_flops_per_s
    kvb = q.kv_bytes_per_element
    parts: list[np.ndarray] = []

    if a.kind == "mla":
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        latent = a.kv_lora_rank + a.qk_rope_head_dim
        # pre-attention projections, replicated inside a pre-TP group
        pre_params = h * latent + (h * a.q_lora_rank if a.q_lora_rank else 0)
        t_pre = t * pre.tp
        parts.append(ctx.roofline_s(2 * t_pre * pre_params, pre_params * wb, lin))
        # query up-projection, split by heads
        q_in = a.q_lora_rank or h
        qb_params = q_in * heads_core * qk_head
        t_core = t * core.tp
        parts.append(ctx.roofline_s(2 * t_core * qb_params, qb_params * wb, lin))
        kvb_params = a.kv_lora_rank * heads_core * (a.qk_nope_head_dim + a.v_head_dim)
        if decode:
            # absorbed: W_UK into the query, W_UV after the values; batched BF16 matmuls
            parts.append(ctx.roofline_s(2 * t_core * kvb_params, kvb_params * wb, ctx.bf16_matmul_flops_per_s))
            score_dim, value_dim = latent, a.kv_lora_rank
            kv_elems = float(latent)
        else:
            parts.append(ctx.roofline_s(2 * t_core * kvb_params, kvb_params * wb, lin))
            score_dim, value_dim = qk_head, a.v_head_dim
            kv_elems = float(latent)
        o_params = a.num_heads * a.v_head_dim * h / post.tp
        latent_width = latent + (a.q_lora_rank or 0)
        out_width = a.num_heads * a.v_head_dim
        matrix_ops, vector_ops = 7 if decode else 6, 6
    else:
        kv_heads_core = max(1.0, a.num_kv_heads / core.tp)
        q_params = h * heads_core * a.head_dim
        kv_params = h * kv_heads_core * 2 * a.head_dim
        t_core = t * core.tp
        parts.append(ctx.roofline_s(2 * t_core * (q_params + kv_params), (q_params + kv_params) * wb, lin))
        score_dim = value_dim = a.head_dim
        kv_elems = 2 * a.head_dim * kv_heads_core
        o_params = a.num_heads * a.head_dim * h / post.tp
        latent_width = h
        out_width = a.num_heads * a.head_dim
        matrix_ops, vector_ops = 3, 4 + qk_norm_rescale_ops(a, core.tp)

    # attention core: BF16 scores and values; decode reads the KV cache of its DP rank
    att_flops = 2 * t_core * heads_core * attended_tokens * (score_dim + value_dim)
    kv_bytes = seqs * core.tp * kv_read_tokens * kv_elems * kvb
    t_att = ctx.roofline_s(
        att_flops,
        kv_bytes,
        ctx.attention_flops_per_s if decode else ctx.prefill_attention_flops_per_s,
        ctx.kv_read_bytes_per_s,
    )
    if decode and a.kind == "gqa" and not ctx.decode_attention_kv_split:
        # one core per (sequence, KV head): the busiest core's pairs bound the layer (costmodel/kv_split.py)
        per_head = kv_read_tokens * 2 * a.head_dim * kvb
        t_att = np.maximum(t_att, unsplit_kv_read_s(ctx.hw, seqs * core.tp, kv_heads_core, per_head))
    if decode and core.dp > 1:
        # DP ranks wait for the one with the longest contexts (sequences at different positions)
        spread = ctx.decode_context_std_tokens / max(ctx.mean_decode_context_tokens, 1.0)
        t_att = t_att * (1.0 + straggler_z(core.dp) * spread / np.sqrt(np.maximum(seqs * core.tp, 1)))
    parts.append(t_att)
    # output projection, split by heads over the post-TP group
    t_post = t * post.tp
    parts.append(ctx.roofline_s(2 * t_post * o_params, o_params * wb, lin))
    parts.append(ctx.elementwise_s(t, attention_bytes_per_token(m, q, decode)))
    compute = sum(parts[1:], parts[0])

    comm_s, collectives = attention_comm(ctx, layout, t, latent_width, out_width, a.qk_norm_across_heads)
    matrix_ops += hyper_connection_matrix_ops(m)
    return ModuleCost(compute, comm_s, _fixed(ctx, matrix_ops, vector_ops, collectives))


# ---- dense FFN ---------------------------------------------------------------------------------


def dense_ffn_cost(ctx: CostContext, layout: ParallelLayout, tokens_per_device: ArrayLike) -> ModuleCost:
    """One dense SwiGLU FFN layer on one device."""
    t = np.asarray(tokens_per_device, dtype=float)
    params = ctx.model.dense_ffn_params() / layout.tp
    compute = ctx.roofline_s(
        2 * t * layout.tp * params, params * ctx.quant.dense_weight_bytes, ctx.module_flops_per_s("dense_ffn")
    ) + ctx.elementwise_s(t, dense_ffn_bytes_per_token(ctx.model, ctx.quant))
    comm_s = _tp_in_out_comm_s(ctx, layout.tp, t, ctx.model.hidden_size)
    matrix_ops = 2 + hyper_connection_matrix_ops(ctx.model)
    return ModuleCost(compute, comm_s, _fixed(ctx, matrix_ops, 3, 2 if layout.tp > 1 else 0))


# ---- MoE ---------------------------------------------------------------------------------------


def expected_target_devices(ep: int, experts_per_token: int) -> float:
    """Distinct devices a token's top-k experts land on, each on a uniformly random device."""
    if ep <= 1:
        return 1.0
    return ep * (1.0 - (1.0 - 1.0 / ep) ** experts_per_token)


def _direct(hw: HardwareSpec, n: int, token_bytes: np.ndarray, copies: float, _k: int) -> np.ndarray:
    """Decode's low-latency dispatch: every copy straight to its device, no forwarding."""
    return comm.all_to_all_s(hw, n, token_bytes * copies)


@dataclass
class MoECost(ModuleCost):
    """MoE layer cost with its parts kept apart for the breakdown and the overlap rule."""

    experts_s: np.ndarray
    shared_s: np.ndarray
    dispatch_combine_s: np.ndarray
    router_s: np.ndarray
    imbalance: np.ndarray


def shared_expert_s(ctx: CostContext, tokens_per_device: ArrayLike, split_tp: int = 1) -> np.ndarray:
    """Roofline time of every shared expert of one MoE layer on `tokens_per_device` tokens.

    `split_tp` > 1: the weights are split over a TP group whose devices each run their 1/split_tp
    on every token of the group (split_tp x the device's tokens): the same FLOPs a device, 1/split_tp
    of the weight reads."""
    m = ctx.model
    assert m.moe is not None
    t = np.asarray(tokens_per_device, dtype=float)
    p = m.moe.shared_experts * m.shared_expert_params()
    weight_bytes = p * ctx.quant.shared_expert_weight_bytes / split_tp
    return ctx.roofline_s(2 * t * p, weight_bytes, ctx.module_flops_per_s("experts"))


def split_shared_expert_allreduce_s(ctx: CostContext, tokens_per_device: ArrayLike, split_tp: int) -> np.ndarray:
    """The all-reduce of a split shared expert's partial output over its TP group: every token of
    the group at the model width in BF16 (vllm-ascend's TENSOR_PARALLEL mode all-reduces the shared
    output over the TP group, vllm_ascend/ops/fused_moe/fused_moe.py _reduce_shared_output_if_needed)."""
    t = np.asarray(tokens_per_device, dtype=float)
    return comm.allreduce_s(ctx.hw, split_tp, t * split_tp * ctx.model.hidden_size * BF16_BYTES)


SHARED_EXPERT_OPS = (2, 1)  # matrix and vector operators of the shared expert (fixed launch costs)


def shared_expert_fixed_s(ctx: CostContext) -> float:
    """Launch costs of the shared expert's operators in one MoE layer."""
    return _fixed(ctx, *SHARED_EXPERT_OPS)


def moe_cost(
    ctx: CostContext,
    devices: int,
    moe: MoELayout,
    shared: SharedExpertLayout,
    tokens_per_device: ArrayLike,
    overlap_shared: bool,
    tokens_per_request: ArrayLike = 1.0,
    prefill: bool = False,
    include_shared: bool = True,
) -> MoECost:
    """One MoE layer: router, dispatch, routed experts on the busiest device, shared expert, combine.

    With `overlap_shared` (decode on a stack that overlaps them, as the report's), the replicated
    shared expert and the router's tail run concurrently with dispatch/combine, so the layer
    costs experts + max(dispatch + combine, shared). Dedicated shared-expert devices run in
    parallel with the routed devices: the layer waits for the slower of the two roles.
    `tokens_per_request`: tokens one request has in this step (decode 1 + MTP drafts, prefill
    the prompt); with top-k over EP devices a request puts tokens * k / ep assignments on a device,
    which the imbalance model's per-step overdispersion needs. `prefill`: the high-throughput
    dispatch (a token once per distinct device, forwarded inside remote nodes); decode sends one
    message per expert copy (planner.costmodel.comm.moe_all_to_all_s). `include_shared=False` leaves the
    shared expert out (an AFD plan may run it on the attention side).
    """
    m, q = ctx.model, ctx.quant
    assert m.moe is not None
    t = np.asarray(tokens_per_device, dtype=float)
    # a latent MoE (Kimi-K3) runs and moves its routed tokens at the latent width
    h, k = m.expert_token_width(), m.moe.experts_per_token
    expert_params = m.expert_params()
    ew = ctx.routed_expert_weight_bytes
    lin = ctx.module_flops_per_s("experts")
    inter = m.moe.expert_intermediate_size
    tokens_total = t * devices
    ep, slots = moe.ep, moe.slots_per_device

    # routed experts on the busiest device
    mean_assign = tokens_total * k / ep
    static = ctx.imbalance.static_factor(m.moe.routed_experts, ep, slots)
    # assignments one request puts on one device in this step: its tokens route alike (overdispersion)
    per_request = np.asarray(tokens_per_request, dtype=float) * k / ep
    imb = busiest_over_mean(mean_assign, static, ep, dispersion_of(ctx.imbalance, per_request))
    hot_assign = mean_assign * imb
    tokens_per_slot = tokens_total * k / (ep * slots)
    active_slots = slots * (1.0 - np.exp(-tokens_per_slot))
    forced = getattr(ctx.imbalance, "active_experts_per_device", None)
    if forced is not None:
        # a benchmark's forced routing cycles over a fixed set of experts per device (ForcedBalance)
        active_slots = np.minimum(active_slots * 0.0 + min(slots, forced), np.maximum(tokens_total * k / ep, 1.0))
    act_bytes = hot_assign * (h * q.dispatch_bytes_per_element + 4 * inter * BF16_BYTES + h * BF16_BYTES)
    experts_s = ctx.roofline_s(2 * hot_assign * expert_params, active_slots * expert_params * ew + act_bytes, lin)
    # the permutation, SwiGLU and un-permutation kernels around the expert GEMMs, on the busiest device
    experts_s = experts_s + ctx.elementwise_s(hot_assign, moe_bytes_per_assignment(m, q))

    # router (BF16 GEMM over every expert, on the device's own tokens)
    router_params = m.router_params()
    router_s = ctx.roofline_s(2 * t * router_params, router_params * BF16_BYTES, ctx.bf16_matmul_flops_per_s)
    # shared expert
    n_shared = m.moe.shared_experts if include_shared else 0
    if n_shared == 0:
        shared_s = np.zeros_like(t)
    elif shared.placement != "dedicated":
        shared_s = shared_expert_s(ctx, t, shared.split_tp)
    else:
        shared_s = shared_expert_s(ctx, tokens_total / shared.devices)

    # dispatch and combine
    n_comm = devices
    if moe.comm == "allgather":
        disp = comm.allgather_s(ctx.hw, n_comm, t * h * q.dispatch_bytes_per_element)
        comb = comm.reduce_scatter_s(ctx.hw, n_comm, t * h * q.combine_bytes_per_element)
    else:
        dedicated = 1 if shared.placement == "dedicated" else 0
        copies = (expected_target_devices(ep, k) if prefill else float(k)) + dedicated
        # the busiest device receives its imbalance times the mean volume
        recv_scale = np.maximum(imb, 1.0)
        route = comm.moe_all_to_all_s if prefill else _direct
        disp = route(ctx.hw, n_comm, t * h * q.dispatch_bytes_per_element * recv_scale, copies, k)
        comb = route(ctx.hw, n_comm, t * h * q.combine_bytes_per_element * recv_scale, copies, k)
    dc = disp + comb

    token_side_s = ctx.elementwise_s(t, moe_bytes_per_token(m, q))
    router_s = router_s + token_side_s  # norm, combine and residual on the device's own tokens
    if shared.placement == "dedicated" and n_shared:
        compute = router_s + np.maximum(experts_s, shared_s)
        comm_s = dc
    elif shared.placement == "split" and n_shared:
        # no overlap with dispatch/combine: vllm-ascend's shared-expert stream runs only at TP 1 or with
        # replicated weights (multistream_overlap_shared_expert, docs/source/tutorials/models/DeepSeek-V3.1.md)
        compute = router_s + experts_s + shared_s
        comm_s = dc + split_shared_expert_allreduce_s(ctx, t, shared.tp)
    elif overlap_shared:
        compute = router_s + experts_s
        comm_s = np.maximum(dc, shared_s)
    else:
        compute = router_s + experts_s + shared_s
        comm_s = dc
    shared_ops = SHARED_EXPERT_OPS if n_shared else (0, 0)
    fixed = _fixed(ctx, 3 + shared_ops[0] + hyper_connection_matrix_ops(m), 6 + shared_ops[1], 2)
    return MoECost(compute, comm_s, fixed, experts_s, shared_s, dc, router_s, imb)


# ---- LM head and embedding ---------------------------------------------------------------------


def lm_head_cost(ctx: CostContext, layout: ParallelLayout, tokens_per_device: ArrayLike) -> ModuleCost:
    """Final norm, LM head GEMM (BF16, vocabulary split over TP) and sampling on one device."""
    m = ctx.model
    t = np.asarray(tokens_per_device, dtype=float)
    params = m.vocab_params() / layout.tp
    t_group = t * layout.tp
    logits_bytes = t_group * (m.vocab_size / layout.tp) * LOGIT_BYTES
    compute = ctx.roofline_s(
        2 * t_group * params,
        params * ctx.quant.vocab_weight_bytes + 2 * logits_bytes,
        ctx.bf16_matmul_flops_per_s,
    )
    comm_s = np.zeros_like(t)
    if layout.tp > 1:
        comm_s = comm.allgather_s(ctx.hw, layout.tp, t * m.hidden_size * BF16_BYTES) + comm.allgather_s(
            ctx.hw, layout.tp, t * 2 * LOGIT_BYTES
        )
    return ModuleCost(compute, comm_s, _fixed(ctx, 1, 2, 2 if layout.tp > 1 else 0))


def embedding_cost(ctx: CostContext, layout: ParallelLayout, tokens_per_device: ArrayLike) -> ModuleCost:
    """Embedding lookup (vocabulary split over TP, then summed across the group)."""
    m = ctx.model
    t = np.asarray(tokens_per_device, dtype=float)
    compute = ctx.roofline_s(0 * t, t * layout.tp * m.hidden_size * BF16_BYTES, 1.0)
    comm_s = np.zeros_like(t)
    if layout.tp > 1:
        comm_s = comm.allreduce_s(ctx.hw, layout.tp, t * layout.tp * m.hidden_size * BF16_BYTES)
    return ModuleCost(compute, comm_s, _fixed(ctx, 0, 1, 2 if layout.tp > 1 else 0))
