"""HBM per device: weights under the layout and scheme, KV cache, activations, buffers, reserve.

Devices of an instance play one of two roles: a routed-expert device (holds `slots_per_device`
routed experts per MoE layer) or, with a dedicated shared expert, a shared-expert device (holds
the shared expert instead). Both run attention, dense FFN and LM head under their layouts. The
figure reported is that of the fuller role, because that device binds.

Everything is linear in the concurrency (decode) or batch size (prefill) but for the sampling
term of the all-to-all receive buffer, so the largest value that fits is found from a linear
estimate refined by evaluating its neighbours (`_max_fitting`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.context import CostContext
from planner.costmodel.imbalance import busiest_over_mean
from planner.costmodel.modules import BF16_BYTES, LOGIT_BYTES
from planner.specs.plan import DecodePlan, ParallelLayout, PhasePlan, PrefillPlan

HIDDEN_STATE_COPIES = 6  # residual, normed input, attention out, FFN in/out, one spare


@dataclass
class HbmUse:
    """Bytes per device of the binding role (arrays over the concurrencies evaluated)."""

    breakdown_bytes: dict[str, np.ndarray]
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


def _attention_weight_bytes(ctx: CostContext, phase: PhasePlan) -> float:
    m, q = ctx.model, ctx.quant
    a = m.attention
    p = m.attention_params_per_layer()
    lay = phase.attention
    core_tp, post_tp = lay.tp, lay.post_layout.tp
    if a.kind == "mla":
        pre = a.kv_lora_rank + a.qk_rope_head_dim
        pre_params = m.hidden_size * pre + (m.hidden_size * a.q_lora_rank if a.q_lora_rank else 0)
        q_up = p["q"] - (m.hidden_size * a.q_lora_rank if a.q_lora_rank else 0)
        per_layer = pre_params + (q_up + p["kv_b"]) / core_tp + p["o"] / post_tp
    else:
        kv_share = max(1.0, a.num_kv_heads / core_tp) / a.num_kv_heads
        per_layer = p["q"] / core_tp + p["kv"] * kv_share + p["o"] / post_tp
    return per_layer * m.kv_layers() * q.linear_weight_bytes


def _kv_elements_per_token_on_device(ctx: CostContext, core_tp: int) -> float:
    """KV elements per token per layer on one device of a DP rank (MLA latent is replicated)."""
    a = ctx.model.attention
    if a.kind == "mla":
        return float(a.kv_lora_rank + a.qk_rope_head_dim)
    return 2.0 * a.head_dim * max(1.0, a.num_kv_heads / core_tp)


def _weights(ctx: CostContext, phase: PhasePlan) -> dict[str, dict[str, float]]:
    """Weight bytes per role: {'routed': {...}, 'shared': {...}}."""
    m, q = ctx.model, ctx.quant
    common = {"attention_weights": _attention_weight_bytes(ctx, phase)}
    if m.num_dense_layers:
        common["dense_ffn_weights"] = (
            m.num_dense_layers * m.dense_ffn_params() / phase.dense_layout.tp * q.linear_weight_bytes
        )
    vocab_copies = 1 if m.tie_word_embeddings else 2
    common["embedding_lm_head_weights"] = (
        vocab_copies * m.vocab_params() / phase.lm_head_layout.tp * q.vocab_weight_bytes
    )
    if m.mtp_layers:
        common["mtp_projection_weights"] = m.mtp_layers * m.mtp_extra_params() * q.linear_weight_bytes
    roles = {"routed": dict(common)}
    if m.moe is not None and phase.moe is not None:
        moe_layers = m.num_moe_layers + m.mtp_layers
        expert = m.expert_params() * q.expert_weight_bytes
        shared = m.moe.shared_experts * expert * moe_layers
        router = m.router_params() * BF16_BYTES * moe_layers
        roles["routed"]["routed_expert_weights"] = moe_layers * phase.moe.slots_per_device * expert
        roles["routed"]["router_weights"] = router
        if phase.shared_expert.placement == "dedicated":
            roles["shared"] = dict(common)
            roles["shared"]["shared_expert_weights"] = shared
            roles["shared"]["router_weights"] = router
        elif shared:
            roles["routed"]["shared_expert_weights"] = shared
    return roles


def _activation_bytes(
    ctx: CostContext, phase: PhasePlan, tokens_per_device: np.ndarray, lm_tokens: np.ndarray
) -> np.ndarray:
    m, q = ctx.model, ctx.quant
    h = m.hidden_size
    max_tp = max(phase.attention.tp, phase.dense_layout.tp, phase.lm_head_layout.tp)
    acts = tokens_per_device * max_tp * h * BF16_BYTES * HIDDEN_STATE_COPIES
    a = m.attention
    heads_core = a.num_heads / phase.attention.tp
    head_width = (
        2 * (a.qk_nope_head_dim + a.qk_rope_head_dim) + a.v_head_dim if a.kind == "mla" else 3 * a.head_dim
    )
    acts = acts + tokens_per_device * phase.attention.tp * heads_core * head_width * BF16_BYTES
    if m.num_dense_layers:
        acts = acts + tokens_per_device * phase.dense_layout.tp * (
            3 * m.dense_intermediate_size / phase.dense_layout.tp
        ) * BF16_BYTES
    if m.moe is not None and phase.moe is not None:
        per_token = h * (q.dispatch_bytes_per_element + q.combine_bytes_per_element)
        if phase.moe.comm == "allgather":
            acts = acts + phase.devices * tokens_per_device * per_token
        else:
            k = m.moe.experts_per_token
            mean = tokens_per_device * phase.devices * k / phase.moe.ep
            static = ctx.imbalance.static_factor(m.moe.routed_experts, phase.moe.ep, phase.moe.slots_per_device)
            hot = mean * busiest_over_mean(mean, static, phase.moe.ep)
            acts = acts + hot * (per_token + 3 * m.moe.expert_intermediate_size * BF16_BYTES)
    acts = acts + lm_tokens * m.vocab_size * LOGIT_BYTES
    return acts


def _assemble(
    ctx: CostContext, phase: PhasePlan, kv: np.ndarray, acts: np.ndarray
) -> HbmUse:
    hw = ctx.hw
    best: HbmUse | None = None
    for role, weights in _weights(ctx, phase).items():
        parts = {k: np.full_like(kv, v) for k, v in weights.items()}
        parts["kv_cache"] = kv
        parts["activations"] = acts
        parts["comm_buffers"] = np.full_like(kv, hw.memory.comm_buffers.value)
        parts["runtime_reserve"] = np.full_like(kv, hw.memory.runtime_reserve.value)
        use = HbmUse(parts, role, hw.hbm_bytes)
        if best is None or float(np.max(use.total_bytes)) > float(np.max(best.total_bytes)):
            best = use
    assert best is not None
    return best


def kv_tokens_in_use(ctx: CostContext, sequences: np.ndarray, mtp_tokens: int) -> np.ndarray:
    """KV positions held by `sequences` decoding sequences of one device, with a 2-sigma margin.

    The KV cache is paged (blocks are taken as a sequence grows and freed when it ends), so at
    steady state the sequences sit at uniformly spread positions of their completions: the pool
    holds prompt + half the completion per sequence on average, plus two standard deviations
    of the sum (each position uniform over the completion: std = output / sqrt(12)).
    """
    w = ctx.workload
    mean = w.input_tokens + w.output_tokens / 2.0 + mtp_tokens
    std = w.output_tokens / np.sqrt(12.0)
    return sequences * mean + 2.0 * np.sqrt(sequences) * std


def decode_hbm(ctx: CostContext, phase: DecodePlan, concurrency: ArrayLike | None = None) -> HbmUse:
    """HBM per device of a decode instance at each concurrency per device."""
    b = np.atleast_1d(
        np.asarray(phase.concurrency_per_device if concurrency is None else concurrency, dtype=float)
    )
    m = ctx.model
    core_tp = phase.attention.tp
    per_token = _kv_elements_per_token_on_device(ctx, core_tp) * m.kv_layers() * ctx.quant.kv_bytes_per_element
    kv = kv_tokens_in_use(ctx, b * core_tp, phase.mtp_tokens) * per_token
    tokens = b * (1 + phase.mtp_tokens)
    acts = _activation_bytes(ctx, phase, tokens, tokens)
    return _assemble(ctx, phase, kv, acts)


def prefill_hbm(ctx: CostContext, phase: PrefillPlan, batch_tokens: ArrayLike | None = None) -> HbmUse:
    """HBM per device of a prefill instance at each batch size (tokens per forward)."""
    bt = np.atleast_1d(np.asarray(phase.batch_tokens if batch_tokens is None else batch_tokens, dtype=float))
    m = ctx.model
    core = ParallelLayout(dp=phase.attention.dp, tp=phase.attention.tp)
    per_token = _kv_elements_per_token_on_device(ctx, core.tp) * m.kv_layers() * ctx.quant.kv_bytes_per_element
    kv = bt / core.dp * per_token
    # two micro-batches are in flight at once when micro-batching
    in_flight = bt / phase.micro_batches * min(2, phase.micro_batches)
    tokens = in_flight / phase.devices
    requests = in_flight / ctx.workload.input_tokens
    acts = _activation_bytes(ctx, phase, tokens, requests / phase.devices)
    return _assemble(ctx, phase, kv, acts)


def _max_fitting(total_at, capacity: float, lo: float, hi: float) -> int:
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


def max_decode_concurrency(ctx: CostContext, phase: DecodePlan) -> int:
    """Most sequences per device a decode instance can hold in HBM (0: the weights alone overflow)."""
    return _max_fitting(
        lambda b: decode_hbm(ctx, phase, b).total_bytes, ctx.hw.hbm_bytes, 64.0, 128.0
    )


def max_prefill_batch_tokens(ctx: CostContext, phase: PrefillPlan) -> int:
    """Most tokens per forward a prefill instance can hold in HBM."""
    return _max_fitting(
        lambda t: prefill_hbm(ctx, phase, t).total_bytes, ctx.hw.hbm_bytes, 4096.0, 8192.0
    )
