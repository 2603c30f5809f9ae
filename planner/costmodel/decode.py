"""Decode step time of one instance, vectorised over concurrency per device.

A step processes 1 + mtp_tokens tokens per sequence through every layer (attention with MLA
weight absorption reading the KV cache, then the dense FFN or the MoE), the LM head on every
position, then the MTP module once per draft token (embedding, the 2h->h projection, one MoE layer and
the LM head; the first pass on every position, later passes on one token per sequence) with its
framework time (with an EAGLE-3 draft model, `costmodel.draft`, its head's passes instead). A step emits on average
1 + a + a^2 + ... + a^k tokens per sequence for k draft tokens of acceptance a (a draft counts
only if every earlier draft of the step was accepted). TPOT = step time / tokens emitted.

Two micro-batches (`micro_batches: 2`, DeepSeek's and SGLang's two-batch overlap): every module
runs twice on half the sequences, so weights are read twice, launch costs and collective latencies
are paid twice and GEMMs are half as tall (the roofline prices that), while one half's compute
runs during the other half's communication. As for prefill, of the shorter of the main layers'
compute C and communication M, the machine's decode overlap efficiency times
min(C, M) * (1 - 1/(2 L)) is hidden (the first and last layer of the pipeline stay exposed);
launch costs, the LM head and the MTP module are not hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.attention_kinds import layers_cost
from planner.costmodel.context import CostContext
from planner.costmodel.draft import draft_pass_s
from planner.costmodel.modules import (
    ModuleCost,
    dense_ffn_cost,
    embedding_cost,
    lm_head_cost,
    moe_cost,
)
from planner.specs.plan import DecodePlan, embedding_layout


def hash_routed_saving(ctx: CostContext, router_s: np.ndarray) -> np.ndarray:
    """Router GEMM time the hash-routed MoE layers skip (DeepSeek-V4: token id -> experts by table)."""
    m = ctx.model
    if m.moe is None or not m.moe.hash_layers:
        return np.zeros_like(router_s)
    gate_share = m.hidden_size * m.moe.routed_experts / max(m.router_params(), 1)
    return router_s * gate_share * m.moe.hash_layers


def mtp_projection_s(ctx: CostContext, tokens_per_device: ArrayLike) -> np.ndarray:
    """The MTP module's 2h -> h projection of the embedding and the hidden state, on these tokens."""
    t = np.asarray(tokens_per_device, dtype=float)
    proj = 2 * ctx.model.hidden_size * ctx.model.hidden_size
    return ctx.roofline_s(2 * t * proj, proj * ctx.quant.linear_weight_bytes, ctx.linear_flops_per_s)


def emitted_tokens_per_step(mtp_tokens: int, acceptance: float) -> float:
    """Mean tokens one sequence emits per step with `mtp_tokens` drafts of acceptance a."""
    return 1.0 + sum(acceptance**i for i in range(1, mtp_tokens + 1))


@dataclass
class DecodeStep:
    """Step time and its parts (seconds, arrays over the concurrencies evaluated)."""

    concurrency_per_device: np.ndarray
    step_s: np.ndarray
    tpot_s: np.ndarray
    tokens_per_s_per_device: np.ndarray
    breakdown_s: dict[str, np.ndarray]
    moe_imbalance: np.ndarray


MICRO_BATCH_COMPUTE = ("attention", "dense_ffn", "moe")
MICRO_BATCH_COMM = ("attention_comm", "dense_ffn_comm", "moe_comm")


def micro_batch_hidden_s(ctx: CostContext, compute_s: ArrayLike, comm_s: ArrayLike) -> np.ndarray:
    """Seconds two decode micro-batches hide: efficiency x min(C, M) x (1 - 1/(2 L))."""
    eff = ctx.hw.overlap.decode_micro_batch_efficiency.value
    factor = eff * (1.0 - 1.0 / (2 * ctx.model.num_layers))
    return factor * np.minimum(np.asarray(compute_s, dtype=float), np.asarray(comm_s, dtype=float))


def decode_step(ctx: CostContext, phase: DecodePlan, concurrency: ArrayLike | None = None) -> DecodeStep:
    """Cost of one decode step at each concurrency per device (default: the plan's)."""
    b = np.atleast_1d(np.asarray(phase.concurrency_per_device if concurrency is None else concurrency, dtype=float))
    mb = phase.micro_batches
    if mb == 1:
        parts, imbalance = _step_parts(ctx, phase, b)
    else:
        half, imbalance = _step_parts(ctx, phase, b / mb)
        parts = {name: value * mb for name, value in half.items()}
        compute = np.sum([parts[p] for p in MICRO_BATCH_COMPUTE if p in parts], axis=0)
        comm_s = np.sum([parts[p] for p in MICRO_BATCH_COMM if p in parts], axis=0)
        parts["micro_batch_overlap"] = -micro_batch_hidden_s(ctx, compute, comm_s)
    step: np.ndarray = np.sum(list(parts.values()), axis=0)
    emitted = emitted_tokens_per_step(phase.mtp_tokens, ctx.workload.mtp_acceptance)
    return DecodeStep(
        concurrency_per_device=b,
        step_s=step,
        tpot_s=step / emitted,
        tokens_per_s_per_device=b * emitted / step,
        breakdown_s=parts,
        moe_imbalance=imbalance,
    )


def _step_parts(ctx: CostContext, phase: DecodePlan, b: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Seconds of every part of one (micro-)batch of b sequences per device, and the MoE imbalance."""
    m = ctx.model
    k = phase.mtp_tokens
    tokens = b * (1 + k)
    overlap = ctx.hw.overlap.decode_shared_expert_with_dispatch

    idx = m.attention.indexer
    reuse = idx is not None and idx.mtp_reuses_top_k

    def attention(t: np.ndarray, seqs: np.ndarray, later_draft: bool) -> ModuleCost:
        # drafts after the first take the first one's top-k where the model says so (GLM-5.2)
        return layers_cost(ctx, phase.attention, t, seqs, decode=True, mtp=True, reuse_top_k=reuse and later_draft)

    # every main layer's attention, by kind (MLA, GQA, DSA, V4's SWA/CSA/HCA, linear)
    att = layers_cost(ctx, phase.attention, tokens, b, decode=True)
    parts: dict[str, np.ndarray] = {}
    fixed_total = 0.0
    parts["attention"] = att.compute_s
    parts["attention_comm"] = att.comm_s
    fixed_total += att.fixed_s

    imbalance = np.ones_like(b)
    if m.num_dense_layers:
        dense = dense_ffn_cost(ctx, phase.dense_layout, tokens)
        parts["dense_ffn"] = dense.compute_s * m.num_dense_layers
        parts["dense_ffn_comm"] = dense.comm_s * m.num_dense_layers
        fixed_total += dense.fixed_s * m.num_dense_layers
    if m.moe is not None and phase.moe is not None:
        moe = moe_cost(ctx, phase.devices, phase.moe, phase.shared_expert, tokens, overlap, 1.0 + k)
        parts["moe"] = moe.compute_s * m.num_moe_layers - hash_routed_saving(ctx, moe.router_s)
        parts["moe_comm"] = moe.comm_s * m.num_moe_layers
        fixed_total += moe.fixed_s * m.num_moe_layers
        imbalance = moe.imbalance

    emb = embedding_cost(ctx, embedding_layout(phase, ctx.model.tie_word_embeddings), tokens)
    head = lm_head_cost(ctx, phase.lm_head_layout, tokens)
    parts["lm_head"] = head.compute_s + head.comm_s + emb.compute_s + emb.comm_s
    fixed_total += head.fixed_s + emb.fixed_s

    if k and m.draft is not None:  # an EAGLE-3 head drafts instead of MTP layers (costmodel.draft)
        passes = [draft_pass_s(ctx, phase, tokens if i == 0 else b, b, first=i == 0) for i in range(k)]
        parts["mtp"] = np.sum(passes, axis=0) + ctx.hw.fixed_costs.mtp_framework_per_step.value
    elif k:
        mtp = np.zeros_like(b)
        for i in range(k):
            t_pass = tokens if i == 0 else b
            a_pass = attention(t_pass, b, i > 0)
            pass_costs: list[ModuleCost] = [
                a_pass,
                lm_head_cost(ctx, phase.lm_head_layout, t_pass),
                embedding_cost(ctx, embedding_layout(phase, ctx.model.tie_word_embeddings), t_pass),
            ]
            if m.moe is not None and phase.moe is not None:
                pass_costs.append(
                    moe_cost(
                        ctx, phase.devices, phase.moe, phase.shared_expert, t_pass, overlap, 1.0 + k if i == 0 else 1.0
                    )
                )
            else:
                pass_costs.append(dense_ffn_cost(ctx, phase.dense_layout, t_pass))
            mtp = mtp + mtp_projection_s(ctx, t_pass) + sum(c.total_s for c in pass_costs)
        parts["mtp"] = mtp + ctx.hw.fixed_costs.mtp_framework_per_step.value
    parts["launch_overhead"] = np.full_like(b, fixed_total)
    return parts, imbalance
