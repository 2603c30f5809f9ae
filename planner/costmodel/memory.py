"""HBM per device: weights under the layout and scheme, KV cache, activations, buffers, reserve.

Devices of an instance play one of two roles: a routed-expert device (holds `slots_per_device`
routed experts per MoE layer) or, with a dedicated shared expert, a shared-expert device (holds
the shared expert instead). Both run attention, dense FFN and LM head under their layouts, so
the roles differ only in their MoE weights: the figure reported is that of the fuller role,
because that device binds.

HBM is a sum of per-module terms (`attention_hbm`, `dense_ffn_hbm`, `moe_hbm`, `lm_head_hbm`,
`fixed_hbm`), each a dict of named parts; the search's integer tables are built from the same
functions. Everything is linear in the concurrency (decode) or batch size (prefill) but for the
sampling term of the all-to-all receive buffer, so the largest value that fits is found from a
linear estimate refined by evaluating its neighbours (`_max_fitting`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.attention_kinds import attention_split_params
from planner.costmodel.context import CostContext
from planner.costmodel.draft import draft_kv_bytes_per_token, draft_weight_bytes
from planner.costmodel.imbalance import busiest_over_mean
from planner.costmodel.modules import BF16_BYTES, LOGIT_BYTES
from planner.specs.plan import (
    AfdPlan,
    AttentionLayout,
    DecodePlan,
    MoELayout,
    ParallelLayout,
    PhasePlan,
    PrefillPlan,
    SharedExpertLayout,
    embedding_layout,
    integral_as_int,
)

HIDDEN_STATE_COPIES = 6  # residual, normed input, attention out, FFN in/out, one spare (the residual: one per stream)
Parts = dict[str, np.ndarray]


@dataclass
class HbmUse:
    """Bytes per device of the binding role (arrays over the concurrencies evaluated)."""

    breakdown_bytes: Parts
    role: str
    capacity_bytes: float

    @property
    def total_bytes(self) -> np.ndarray:
        """Everything the binding device holds."""
        return sum(self.breakdown_bytes.values())  # type: ignore[return-value]

    @property
    def fits(self) -> np.ndarray:
        """True where the total fits the device's HBM."""
        return self.total_bytes <= self.capacity_bytes


def kv_tokens_in_use(ctx: CostContext, sequences: ArrayLike, mtp_tokens: int, tp: int) -> np.ndarray:
    """KV positions held by the attention TP group of a device running `sequences` decoding
    sequences a device, divided by `tp` (attention_hbm multiplies by the group's `tp` again).

    The group holds g = sequences x tp sequences: the KV cache is paged (blocks are taken as a
    sequence grows and freed when it ends), so at steady state they sit at uniformly spread positions
    of their completions: the pool holds prompt + half the completion per sequence on average, plus
    two standard deviations of the group's sum (each position uniform over the completion,
    std = output / sqrt(12); the sum of g independent ones has sqrt(g) of it). The longest request
    must fit next to the group's g - 1 others (binds only for a long-tailed distribution). The
    group's KV is counted once: tensor parallelism splits its heads (GQA) or replicates its latent
    (MLA) across the group, which attention_hbm's bytes per token carry.
    """
    s = np.asarray(sequences, dtype=float)
    if tp < 1:
        raise ValueError(f"tp = {tp}: an attention TP group has at least one device")
    g = s * tp
    mean = ctx.mean_decode_context_tokens + mtp_tokens
    std = ctx.decode_context_std_tokens
    longest = np.maximum(g - 1.0, 0.0) * mean + ctx.max_context_tokens + mtp_tokens
    group = np.maximum(g * mean + 2.0 * np.sqrt(g) * std, np.where(g > 0, longest, 0.0))
    return group / tp


def kv_transfer_bytes_per_request(ctx: CostContext) -> float:
    """Cache of one prompt sent from prefill to decode: KV entries, compressed entries, linear states
    (the prompt at the TTFT percentile; cached prefixes are sent too)."""
    m = ctx.model
    tokens = float(ctx.ttft_input_tokens)
    if m.is_plain():
        return tokens * m.kv_elements_per_token_per_layer() * m.kv_layers() * ctx.quant.kv_bytes_per_element
    growing, fixed = m.kv_cache_bytes(tokens, ctx.quant.kv_bytes_per_element)
    return growing + fixed


def _kv_fixed_bytes_per_sequence(ctx: CostContext, core_tp: int) -> float:
    """Cache bytes per sequence on one device that do not grow with its context (sliding windows,
    compressor blocks, linear-attention states); 0 for plain MLA/GQA models."""
    m = ctx.model
    if m.is_plain():
        return 0.0
    return m.kv_cache_bytes(float(ctx.max_context_tokens), ctx.quant.kv_bytes_per_element, core_tp)[1]


def kv_bytes_per_token_per_device(ctx: CostContext, core_tp: int, draft: bool = True) -> float:
    """KV bytes per token on one device of a DP rank, all layers (the MLA latent is replicated),
    a draft head's included unless `draft` is false."""
    m = ctx.model
    a = m.attention
    extra = draft_kv_bytes_per_token(ctx, core_tp) if draft else 0.0
    if not m.is_plain():
        return m.kv_cache_bytes(1.0, ctx.quant.kv_bytes_per_element, core_tp)[0] + extra
    elems = (
        float(a.kv_lora_rank + a.qk_rope_head_dim)
        if a.kind == "mla"
        else 2.0 * a.head_dim * max(1.0, a.num_kv_heads / core_tp)
    )
    return elems * m.kv_layers() * ctx.quant.kv_bytes_per_element + extra


def request_kv_bytes_per_device(ctx: CostContext, tokens: float, core_tp: int) -> float:
    """KV cache of one request of `tokens` positions on each device of its attention TP group of
    `core_tp` devices (GQA heads split up to one KV head a device, MLA's latent replicated), the
    part that does not grow with the context included."""
    return tokens * kv_bytes_per_token_per_device(ctx, core_tp) + _kv_fixed_bytes_per_sequence(ctx, core_tp)


def _attention_weight_bytes(ctx: CostContext, layout: AttentionLayout) -> float:
    m, q = ctx.model, ctx.quant
    a = m.attention
    if not m.is_plain():
        total = 0.0
        for mtp, copies in ((False, 1), (True, m.mtp_layers)):
            if not copies:
                continue
            for kind, ratio, count in m.attention_groups(mtp=mtp):
                pre, core, out = attention_split_params(m, kind, ratio)
                total += copies * count * (pre + core / layout.tp + out / layout.post_layout.tp)
        return total * q.linear_weight_bytes
    p = m.attention_params_per_layer()
    core_tp, post_tp = layout.tp, layout.post_layout.tp
    if a.kind == "mla":
        q_down = m.hidden_size * a.q_lora_rank if a.q_lora_rank else 0
        pre_params = m.hidden_size * (a.kv_lora_rank + a.qk_rope_head_dim) + q_down
        per_layer = pre_params + (p["q"] - q_down + p["kv_b"]) / core_tp + p["o"] / post_tp
    else:
        kv_share = max(1.0, a.num_kv_heads / core_tp) / a.num_kv_heads
        per_layer = p["q"] / core_tp + p["kv"] * kv_share + p["o"] / post_tp
    return per_layer * m.kv_layers() * q.linear_weight_bytes


def attention_hbm(
    ctx: CostContext,
    layout: AttentionLayout,
    tokens_per_device: ArrayLike,
    kv_tokens_per_device: ArrayLike,
    kv_sequences_per_device: ArrayLike | None = None,
) -> Parts:
    """Attention weights, the KV cache of the device's DP rank, hidden states and head buffers.

    `kv_sequences_per_device` (like the tokens, the DP rank's share per device) carries the
    cache that does not grow with the context (windows, linear states)."""
    m = ctx.model
    a = m.attention
    t = np.asarray(tokens_per_device, dtype=float)
    kv = np.asarray(kv_tokens_per_device, dtype=float) * layout.tp * kv_bytes_per_token_per_device(ctx, layout.tp)
    if kv_sequences_per_device is not None and not m.is_plain():
        fixed = _kv_fixed_bytes_per_sequence(ctx, layout.tp)
        kv = kv + np.asarray(kv_sequences_per_device, dtype=float) * layout.tp * fixed
    heads_core = a.num_heads / layout.tp
    head_width = 2 * (a.qk_nope_head_dim + a.qk_rope_head_dim) + a.v_head_dim if a.kind == "mla" else 3 * a.head_dim
    copies = HIDDEN_STATE_COPIES - 1 + m.residual_streams  # hyper-connections hold hc_mult residual streams
    acts = t * layout.tp * (m.hidden_size * copies + heads_core * head_width) * BF16_BYTES
    return {
        "attention_weights": np.full_like(t, _attention_weight_bytes(ctx, layout)),
        "kv_cache": kv,
        "activations": acts,
    }


def dense_ffn_hbm(ctx: CostContext, layout: ParallelLayout, tokens_per_device: ArrayLike) -> Parts:
    """Dense FFN weights (split by TP) and their intermediate activations."""
    m, q = ctx.model, ctx.quant
    t = np.asarray(tokens_per_device, dtype=float)
    if not m.num_dense_layers:
        return {}
    weights = m.num_dense_layers * m.dense_ffn_params() / layout.tp * q.dense_weight_bytes
    acts = t * layout.tp * (3 * m.dense_intermediate_size / layout.tp) * BF16_BYTES
    return {"dense_ffn_weights": np.full_like(t, weights), "activations": acts}


def moe_hbm(
    ctx: CostContext,
    devices: int,
    moe: MoELayout,
    shared: SharedExpertLayout,
    tokens_per_device: ArrayLike,
) -> tuple[Parts, str]:
    """MoE weights of the fuller role (routed-expert or shared-expert device) and MoE buffers."""
    m, q = ctx.model, ctx.quant
    t = np.asarray(tokens_per_device, dtype=float)
    if m.moe is None:
        return {}, "routed"
    moe_layers = m.num_moe_layers + m.mtp_layers
    expert = m.expert_params() * ctx.routed_expert_weight_bytes
    shared_bytes = m.moe.shared_experts * m.shared_expert_params() * q.shared_expert_weight_bytes * moe_layers
    shared_bytes /= shared.split_tp  # a split shared expert: 1/tp of its weights a device
    routed_bytes = moe_layers * moe.slots_per_device * expert
    dedicated = shared.placement == "dedicated" and m.moe.shared_experts > 0
    per_token = m.expert_token_width() * (q.dispatch_bytes_per_element + q.combine_bytes_per_element)
    if moe.comm == "allgather":
        buffers = devices * t * per_token
    else:
        k = m.moe.experts_per_token
        mean = t * devices * k / moe.ep
        static = ctx.imbalance.static_factor(m.moe.routed_experts, moe.ep, moe.slots_per_device)
        hot = mean * busiest_over_mean(mean, static, moe.ep)
        buffers = hot * (per_token + 3 * m.moe.expert_intermediate_size * BF16_BYTES)
    parts: Parts = {"router_weights": np.full_like(t, m.router_params() * BF16_BYTES * moe_layers)}
    if dedicated and shared_bytes > routed_bytes:
        role = "shared-expert"
        parts["shared_expert_weights"] = np.full_like(t, shared_bytes)
    else:
        role = "routed"
        parts["routed_expert_weights"] = np.full_like(t, routed_bytes)
        if not dedicated and shared_bytes:
            parts["shared_expert_weights"] = np.full_like(t, shared_bytes)
    parts["activations"] = buffers
    return parts, role


def embedding_hbm(ctx: CostContext, layout: ParallelLayout) -> Parts:
    """Input embedding weights, the vocabulary split over the layout's TP group."""
    return {
        "embedding_lm_head_weights": np.asarray(ctx.model.vocab_params() / layout.tp * ctx.quant.vocab_weight_bytes)
    }


def lm_head_hbm(
    ctx: CostContext, layout: ParallelLayout, logit_tokens_per_device: ArrayLike, shares_embedding: bool = False
) -> Parts:
    """LM head weights (vocabulary split by TP) and the logits buffer; `shares_embedding`: a tied model's
    head is the embedding's table in the same split, counted once (by `embedding_hbm`)."""
    m, q = ctx.model, ctx.quant
    t = np.asarray(logit_tokens_per_device, dtype=float)
    copies = 0 if shares_embedding else 1
    return {
        "embedding_lm_head_weights": np.full_like(t, copies * m.vocab_params() / layout.tp * q.vocab_weight_bytes),
        "activations": t * m.vocab_size * LOGIT_BYTES,
    }


def head_and_embedding_hbm(
    ctx: CostContext, section: PhasePlan | AfdPlan, logit_tokens_per_device: ArrayLike
) -> list[Parts]:
    """The LM head's and the input embedding's HBM of a phase or an AFD section (`embedding_layout`)."""
    emb = embedding_layout(section, ctx.model.tie_word_embeddings)
    head = section.lm_head_layout
    shares = ctx.model.tie_word_embeddings and emb.tp == head.tp
    return [lm_head_hbm(ctx, head, logit_tokens_per_device, shares), embedding_hbm(ctx, emb)]


def fixed_hbm(ctx: CostContext) -> dict[str, float]:
    """What does not depend on the layout: MTP projection, a draft model, communication buffers, runtime reserve."""
    m, hw = ctx.model, ctx.hw
    out = {}
    if m.mtp_layers:
        out["mtp_projection_weights"] = m.mtp_layers * m.mtp_extra_params() * ctx.quant.linear_weight_bytes
    if m.draft is not None:
        out["draft_model_weights"] = draft_weight_bytes(ctx)
    out["comm_buffers"] = hw.memory.comm_buffers.value
    out["runtime_reserve"] = hw.memory.runtime_reserve.value
    return out


def _combine(shape_like: np.ndarray, *groups: Parts, fixed: dict[str, float]) -> Parts:
    total: Parts = {}
    for group in groups:
        for key, value in group.items():
            total[key] = total[key] + value if key in total else np.asarray(value, dtype=float)
    for key, constant in fixed.items():
        total[key] = np.full_like(shape_like, constant)
    return total


def _phase_hbm(
    ctx: CostContext,
    phase: PhasePlan,
    tokens: np.ndarray,
    kv_tokens: np.ndarray,
    logit_tokens: np.ndarray,
    kv_sequences: np.ndarray | None = None,
) -> HbmUse:
    moe_parts, role = (
        moe_hbm(ctx, phase.devices, phase.moe, phase.shared_expert, tokens) if phase.moe is not None else ({}, "routed")
    )
    parts = _combine(
        tokens,
        attention_hbm(ctx, phase.attention, tokens, kv_tokens, kv_sequences),
        dense_ffn_hbm(ctx, phase.dense_layout, tokens),
        moe_parts,
        *head_and_embedding_hbm(ctx, phase, logit_tokens),
        fixed=fixed_hbm(ctx),
    )
    return HbmUse(parts, role, ctx.hbm_capacity_bytes)


def decode_hbm(ctx: CostContext, phase: DecodePlan, concurrency: ArrayLike | None = None) -> HbmUse:
    """HBM per device of a decode instance at each concurrency per device."""
    b = np.atleast_1d(np.asarray(phase.concurrency_per_device if concurrency is None else concurrency, dtype=float))
    tokens = b * (1 + phase.mtp_tokens)
    kv = kv_tokens_in_use(ctx, b, phase.mtp_tokens, phase.attention.tp)
    return _phase_hbm(ctx, phase, tokens, kv, tokens, b)


def prefill_kv_tokens(batch_tokens: ArrayLike, core_dp: int, prompt_kv_tokens: float | None = None) -> np.ndarray:
    """KV positions a prefill device's attention DP rank holds: its share of the batch, the rank's token
    budget (planner.costmodel.prefill), and with `prompt_kv_tokens` (a prompt's KV positions) at least one
    whole prompt's: a prompt longer than the budget keeps its KV over the forwards it spans. (A budget
    that is not a whole number of prompts also carries part of a prompt from one forward to the next,
    at most one prompt more: not counted, so that the figure grows with the batch.)"""
    share = np.asarray(batch_tokens, dtype=float) / core_dp
    return share if prompt_kv_tokens is None else np.maximum(share, prompt_kv_tokens)


def prefill_hbm(
    ctx: CostContext, phase: PrefillPlan, batch_tokens: ArrayLike | None = None, *, carried_prompt: bool = True
) -> HbmUse:
    """HBM per device of a prefill instance at each batch size (tokens per forward). `carried_prompt`: a
    rank holds at least one whole prompt's KV cache (`prefill_kv_tokens`); a chunked colocated instance's
    caller counts its prompts in prefill itself."""
    bt = np.atleast_1d(np.asarray(phase.batch_tokens if batch_tokens is None else batch_tokens, dtype=float))
    # two micro-batches are in flight at once when micro-batching
    in_flight = bt / phase.micro_batches * min(2, phase.micro_batches)
    tokens = in_flight / phase.devices
    requests = in_flight / ctx.prefill_tokens_per_request
    # cached prefixes occupy KV too: the KV of whole prompts
    prompt_kv = rank_prompt_kv_tokens(ctx, phase.context_parallel, carried_prompt)
    kv = prefill_kv_tokens(bt * ctx.kv_tokens_per_computed_token, phase.attention.dp, prompt_kv)
    kv = kv / phase.attention.tp
    kv_sequences = kv / ctx.workload.input_tokens
    return _phase_hbm(ctx, phase, tokens, kv, requests / phase.devices, kv_sequences)


def rank_prompt_kv_tokens(ctx: CostContext, context_parallel: bool, carried_prompt: bool = True) -> float | None:
    """The KV positions of the prompt a prefill rank keeps whole over the forwards it spans (the workload's
    mean prompt), for `prefill_kv_tokens`; None where no rank keeps one whole: context parallelism splits
    each prompt over the ranks, and a chunked colocated caller counts its prompts in prefill itself."""
    if context_parallel or not carried_prompt:
        return None
    return float(ctx.workload.stats.mean_input)


def _max_fitting(total_at: Callable[[np.ndarray], np.ndarray], capacity: float, lo: float, hi: float) -> int:
    """Largest integer x >= 0 with total_at(x) <= capacity, for total nearly linear in x."""
    pts = np.array([lo, hi])
    y0, y1 = (float(v) for v in total_at(pts))
    slope = (y1 - y0) / (hi - lo)
    if slope <= 0:
        return 0 if y0 > capacity else 10**9
    guess = int(np.floor((capacity - (y0 - slope * lo)) / slope))
    if guess < 1:
        return 0
    window = np.arange(max(1, guess - 8), guess + 9, dtype=float)
    ok = window[np.asarray(total_at(window)) <= capacity]
    if ok.size == 0:
        return _max_fitting(total_at, capacity, lo, max(lo + 1, guess - 8)) if guess > 9 else 0
    return int(ok.max())


def most_sequences_fitting(total_at: Callable[[np.ndarray], np.ndarray], capacity: float, tp: int) -> int | float:
    """Most sequences per device whose `total_at` (bytes per device at sequences per device) fits
    `capacity`, in steps of one sequence per attention TP group of `tp` (1/tp a device), the steps a
    plan states it in (planner.specs.plan.check_whole_sequences): a whole number, or 1.75 on TP4."""
    groups = _max_fitting(lambda g: total_at(g / tp), capacity, 64.0 * tp, 128.0 * tp)
    return integral_as_int(groups / tp)


def max_decode_concurrency(ctx: CostContext, phase: DecodePlan) -> int | float:
    """Most sequences per device a decode instance can hold in HBM (0: the weights alone overflow), in
    steps of one sequence per attention TP group (`most_sequences_fitting`)."""
    return most_sequences_fitting(
        lambda b: decode_hbm(ctx, phase, b).total_bytes, ctx.hbm_capacity_bytes, phase.attention.tp
    )


def max_prefill_batch_tokens(ctx: CostContext, phase: PrefillPlan) -> int:
    """Most tokens per forward a prefill instance can hold in HBM."""
    return _max_fitting(lambda t: prefill_hbm(ctx, phase, t).total_bytes, ctx.hbm_capacity_bytes, 4096.0, 8192.0)
