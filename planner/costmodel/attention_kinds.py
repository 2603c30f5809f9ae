"""Attention cost by layer kind: MLA and GQA (in `modules`), DSA, DeepSeek-V4's SWA/CSA/HCA, linear.

A model's layers come in groups of one kind (`ModelSpec.attention_groups`); the decode step and
the prefill forward sum `layer_group_cost` over them. Plain MLA and GQA layers (no indexer, no
output gate) go to `modules.attention_cost`, the calibrated path, unchanged. The other kinds
follow the same roofline: projections at the linear-layer rate (split into those every core-TP
rank runs in full, those split by heads, and the output projection split over the post TP),
then the attention core on the attention unit: its FLOPs and the bytes it reads from HBM.

- DSA (DeepSeek-V3.2, GLM-5; DeepSeek-V3.2 tech report, 2025-09): the lightning indexer scores
  every earlier position with its own heads (`index_n_heads` x `index_head_dim`) against one
  cached key per position, then MLA (absorbed in decode) reads only the top-k entries. Decode
  reads the whole indexer-key cache but only top-k latent entries per sequence. A stack whose
  indexer and top-k run sequence by sequence pays the machine's `sparse_attention_per_sequence`
  on top, per sequence and sparse layer (none by default; fitted where rows determine it).
  GLM-5.2's IndexShare layers (`dsa_shared`; hicann/cann-recipes-infer models/glm_5_2, README
  and configuration_glm.py at 8679185) reuse the top-k of the last layer with an indexer: the
  same sparse MLA over top-k entries, without the indexer's weights, keys, scoring, top-k or
  their operators (and without the per-sequence cost, which is the indexer's and top-k's).
- DeepSeek-V4 (model card / tech report, 2026-04): each layer attends to its sliding window of
  `sliding_window` uncompressed entries plus compressed entries (one per `ratio` tokens); CSA
  layers (ratio 4) score the compressed entries with the indexer and attend to its top-k,
  HCA layers (ratio 128) attend to all of them. One KV head of `head_dim` (keys = values), so
  the cache is replicated over the core TP and every head reads the same entries.
- Linear attention (Gated DeltaNet, KDA): decode reads and writes a key_dim x value_dim state
  per value head (FP32) for each sequence, whatever the context; prefill runs the chunked
  form, whose cost per token is constant (state update and read-out, plus the intra-chunk
  attention over chunks of `LINEAR_CHUNK_TOKENS`).

Operator counts (for the launch costs) follow the reference implementations' fused operators:
DSA adds 4 matrix ops (indexer query, key, head weights, scores) and 2 vector ops (top-k, cache
write) to MLA's (an IndexShare layer adds none); V4 runs 8 matrix ops (q_a, q_b, kv, compressor,
grouped o_a, o_b, attention, indexer scores on CSA) and 8 vector ops (norms, RoPE, compressor
pooling, cache writes, sink); a linear layer 5 matrix ops (q/k/v, gates, chunked delta rule,
output gate, output) and 6 vector ops (short convolution, L2 norms, decay, norm).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.context import CostContext
from planner.costmodel.elementwise import attention_bytes_per_token, hyper_connection_matrix_ops
from planner.costmodel.imbalance import straggler_z
from planner.costmodel.kv_split import unsplit_kv_read_s
from planner.costmodel.modules import ModuleCost, _fixed, attention_comm, attention_cost, qk_norm_rescale_ops
from planner.specs.model import (
    DSA_KINDS,
    MLA_KINDS,
    LayerKind,
    ModelSpec,
    attended_entries,
    indexed_entries,
    layer_attention_flops,
)
from planner.specs.plan import AttentionLayout

LINEAR_CHUNK_TOKENS = 64  # chunk length of the chunked delta-rule kernels (flash-linear-attention's default)
PREFILL_POSITION_SAMPLES = 64  # positions sampled to average a prompt's attention cost


def is_plain(model: ModelSpec, kind: LayerKind) -> bool:
    """True for layers the calibrated MLA/GQA path costs exactly (no indexer, no output gate)."""
    return kind in ("mla", "gqa") and not model.attention.output_gate


def attention_split_params(model: ModelSpec, kind: LayerKind, ratio: int) -> tuple[float, float, float]:
    """(params every core-TP rank runs in full, params split by heads, output params split by post TP)."""
    a, h = model.attention, model.hidden_size
    p = model.attention_params_per_layer(kind, ratio)
    if kind == "linear":
        assert a.linear is not None
        out = a.linear.num_value_heads * a.linear.value_head_dim * h
        return 0.0, p["linear"] - out, float(out)
    idx = a.indexer
    q_in = a.q_lora_rank or h
    q_down = h * a.q_lora_rank if a.q_lora_rank else 0
    if kind in MLA_KINDS:
        pre = float(q_down + p["kv_a"])
        core = float(p["q"] - q_down + p["kv_b"] + p.get("gate", 0))
        if "indexer" in p and idx is not None:
            idx_q = q_in * idx.num_heads * idx.head_dim
            pre += p["indexer"] - idx_q
            core += idx_q
        return pre, core, float(p["o"])
    if kind == "gqa":
        return 0.0, float(p["q"] + p["kv"] + p.get("gate", 0)), float(p["o"])
    # DeepSeek-V4: the single KV head, the compressors and the indexer's key path run in full
    pre = float(q_down + p["kv"] + p.get("compressor", 0))
    core = float(p["q"] - q_down)
    if "indexer" in p and idx is not None:
        idx_q = q_in * idx.num_heads * idx.head_dim
        pre += p["indexer"] - idx_q
        core += idx_q
    return pre, core, float(p["o"])


def _entry_bytes(model: ModelSpec, kind: LayerKind, kv_bytes: float, core_tp: int) -> tuple[float, float]:
    """(bytes of one attended KV entry on one device, bytes of one indexer key)."""
    a = model.attention
    idx_key = float(a.indexer.head_dim) * kv_bytes if a.indexer is not None else 0.0
    if kind in MLA_KINDS:
        return float(a.kv_lora_rank + a.qk_rope_head_dim) * kv_bytes, idx_key
    if kind == "gqa":
        return 2.0 * a.head_dim * max(1.0, a.num_kv_heads / core_tp) * kv_bytes, 0.0
    return float(a.head_dim) * kv_bytes, idx_key


def decode_kv_read_bytes(
    model: ModelSpec, kind: LayerKind, ratio: int, context: float, kv_bytes: float, tp: int
) -> float:
    """Bytes one device reads (and writes, for linear state) per sequence per decode step in one layer."""
    a = model.attention
    if kind == "linear":
        assert a.linear is not None
        share = 1.0 / min(tp, a.linear.num_key_heads)
        return 2.0 * a.linear.state_elements() * a.linear.state_bytes_per_element * share
    entry, idx_key = _entry_bytes(model, kind, kv_bytes, tp)
    return (
        attended_entries(model, kind, ratio, context) * entry + indexed_entries(model, kind, ratio, context) * idx_key
    )


@lru_cache(maxsize=4096)
def _mean_prefill_flops(model: ModelSpec, kind: LayerKind, ratio: int, prompt_tokens: int) -> float:
    """Attention-core FLOPs per prompt token, averaged over the prompt's positions (causal)."""
    if kind == "linear":
        a = model.attention.linear
        assert a is not None
        chunk = 2.0 * LINEAR_CHUNK_TOKENS * a.num_value_heads * (a.key_head_dim + a.value_head_dim)
        return layer_attention_flops(model, kind, ratio, 1.0) + chunk
    positions = np.linspace(1.0, float(prompt_tokens), PREFILL_POSITION_SAMPLES)
    return float(np.mean([layer_attention_flops(model, kind, ratio, float(p)) for p in positions]))


def layer_group_cost(
    ctx: CostContext,
    layout: AttentionLayout,
    tokens_per_device: ArrayLike,
    sequences_per_device: ArrayLike,
    decode: bool,
    kind: LayerKind,
    ratio: int,
) -> ModuleCost:
    """One attention layer of `kind` on one device (decode at the mean context, or a prefill forward)."""
    m = ctx.model
    t = np.asarray(tokens_per_device, dtype=float)
    seqs = np.asarray(sequences_per_device, dtype=float)
    if is_plain(m, kind):
        if decode:
            c = ctx.mean_decode_context_tokens
            return attention_cost(ctx, layout, t, seqs, c, c, decode=True)
        return attention_cost(ctx, layout, t, seqs, ctx.prefill_attended_tokens, 0.0, decode=False)

    a = m.attention
    q = ctx.quant
    pre, post = layout.pre_layout, layout.post_layout
    core_tp, core_dp = layout.tp, layout.dp
    lin = ctx.linear_flops_per_s
    wb = q.linear_weight_bytes
    pre_params, head_params, out_params = attention_split_params(m, kind, ratio)
    head_params /= core_tp
    out_params /= post.tp
    parts: list[np.ndarray] = []
    t_pre, t_core, t_post = t * pre.tp, t * core_tp, t * post.tp
    parts.append(ctx.roofline_s(2 * t_pre * pre_params, pre_params * wb, lin))
    if decode and kind in DSA_KINDS:
        # absorbed MLA: W_UK / W_UV as BF16 batched matmuls, the rest of the head-split weights at the linear rate
        kvb_params = a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim) / core_tp
        parts.append(ctx.roofline_s(2 * t_core * kvb_params, kvb_params * wb, ctx.bf16_matmul_flops_per_s))
        head_params -= kvb_params
    parts.append(ctx.roofline_s(2 * t_core * head_params, head_params * wb, lin))

    if decode:
        context = ctx.mean_decode_context_tokens
        flops_per_query = layer_attention_flops(m, kind, ratio, context)
        read = decode_kv_read_bytes(m, kind, ratio, context, q.kv_bytes_per_element, core_tp)
        kv_bytes = seqs * core_tp * read
    else:
        # the prompt whose causal mean position is the workload's (prefix hits, length mix)
        prompt = max(1, round(2.0 * (ctx.prefill_attended_tokens - 0.5)))
        flops_per_query = _mean_prefill_flops(m, kind, ratio, prompt)
        kv_bytes = np.zeros_like(t)
    rate = ctx.attention_flops_per_s if decode else ctx.prefill_attention_flops_per_s
    t_att = ctx.roofline_s(t_core * flops_per_query / core_tp, kv_bytes, rate, ctx.kv_read_bytes_per_s)
    if decode and kind == "gqa" and not ctx.decode_attention_kv_split:
        # one core per (sequence, KV head): the busiest core's pairs bound the layer (costmodel/kv_split.py)
        kv_heads = max(1.0, a.num_kv_heads / core_tp)
        t_att = np.maximum(t_att, unsplit_kv_read_s(ctx.hw, seqs * core_tp, kv_heads, read / kv_heads))
    if decode and core_dp > 1 and kind != "linear":
        # DP ranks wait for the one with the longest contexts (as in modules.attention_cost)
        spread = ctx.decode_context_std_tokens / max(ctx.mean_decode_context_tokens, 1.0)
        t_att = t_att * (1.0 + straggler_z(core_dp) * spread / np.sqrt(np.maximum(seqs * core_tp, 1)))
    parts.append(t_att)
    parts.append(ctx.roofline_s(2 * t_post * out_params, out_params * wb, lin))
    parts.append(ctx.elementwise_s(t, attention_bytes_per_token(m, q, decode)))
    compute = sum(parts[1:], parts[0])

    if kind == "linear":
        assert a.linear is not None
        out_width = float(a.linear.num_value_heads * a.linear.value_head_dim)
        latent_width = float(m.hidden_size)
        ops = (5, 6)
    elif kind in MLA_KINDS:
        out_width = float(a.num_heads * a.v_head_dim)
        latent_width = float(a.kv_lora_rank + a.qk_rope_head_dim + (a.q_lora_rank or 0))
        ops = (7 + (4 if kind == "dsa" else 0) + (1 if a.output_gate else 0), 6 + (2 if kind == "dsa" else 0))
    elif kind == "gqa":
        out_width = float(a.num_heads * a.head_dim)
        latent_width = float(m.hidden_size)
        ops = (4, 4 + qk_norm_rescale_ops(a, core_tp))
    else:
        out_width = float(a.num_heads * a.head_dim)
        latent_width = float(a.head_dim + (a.q_lora_rank or 0))
        ops = (8 if kind == "csa" else 7, 8)
    per_sequence = ctx.hw.fixed_costs.sparse_attention_per_sequence
    if decode and per_sequence is not None and a.indexer is not None and kind in ("dsa", "csa"):
        # a stack whose indexer and top-k run sequence by sequence pays its per-sequence cost on each device
        compute = compute + seqs * core_tp * per_sequence.value
    comm_s, collectives = attention_comm(
        ctx, layout, t, latent_width, out_width, kind == "gqa" and a.qk_norm_across_heads
    )
    return ModuleCost(compute, comm_s, _fixed(ctx, ops[0] + hyper_connection_matrix_ops(m), ops[1], collectives))


def layers_cost(
    ctx: CostContext,
    layout: AttentionLayout,
    tokens_per_device: ArrayLike,
    sequences_per_device: ArrayLike,
    decode: bool,
    mtp: bool = False,
    reuse_top_k: bool = False,
) -> ModuleCost:
    """All main layers' attention (or one MTP layer's), summed over the model's layer groups.

    `reuse_top_k`: the DSA layers take an earlier pass's top-k instead of running their indexer
    (an MTP draft after the first, where the model's `indexer.mtp_reuses_top_k` says so)."""
    groups = ctx.model.attention_groups(mtp=mtp)
    total: ModuleCost | None = None
    for kind, ratio, count in groups:
        if reuse_top_k and kind == "dsa":
            kind = "dsa_shared"
        c = layer_group_cost(ctx, layout, tokens_per_device, sequences_per_device, decode, kind, ratio)
        scaled = ModuleCost(c.compute_s * count, c.comm_s * count, c.fixed_s * count)
        total = (
            scaled
            if total is None
            else ModuleCost(
                total.compute_s + scaled.compute_s, total.comm_s + scaled.comm_s, total.fixed_s + scaled.fixed_s
            )
        )
    assert total is not None
    return total
