"""Prefill forward time of one instance, and the time to first token.

One forward processes `batch_tokens` prompt tokens of the instance (whole prompts of
`input_tokens` each, so batch_tokens / input_tokens requests). Attention is causal: a prompt
token attends to half the prompt on average (the quadratic term). Only the last position of each
request goes through the LM head.

Micro-batching (m > 1) splits the batch so that one micro-batch computes while another
communicates, layer after layer (dual-batch overlap). The pipeline runs through all L layers,
so only its fill and drain, one layer of one micro-batch, stay exposed: of the shorter of total
compute C and total communication M, the machine's overlap efficiency times
min(C, M) * (1 - 1/(m L)) is hidden. Launch costs are paid once per micro-batch.

TTFT = the wait for the forward already in flight (half a forward on average when the instance
is busy) + this request's forwards + moving its KV cache to the decode instance. With a length
distribution it is the TTFT of the prompt at the workload's SLO percentile; with prefix-cache hits
only the uncached part of each prompt is computed (planner.specs.workload).

With attention data parallelism over D ranks, each rank schedules its own prompts under its own
token budget, the forward's batch over D (vLLM: an engine core per DP rank, its scheduler's
max_num_batched_tokens, vllm/v1/engine/core_client.py DPLBAsyncMPClient routing a request to one;
SGLang: a scheduler per DP rank, --chunked-prefill-size divided over them; MindIE is costed the
same way, its DP scheduling not read), and chunks a prompt longer than that budget over several
forwards (both engines' chunked prefill). A busy instance's ranks all fill their budgets, so a
forward is the batch spread evenly over the devices, as costed here, but a prompt takes
ceil(prompt / (batch / D)) forwards on its rank: the TTFT counts them (`forwards_per_prompt`).
Context parallelism (`context_parallel`) splits each prompt over the ranks instead: a prompt takes
ceil(prompt / batch) forwards, and before each attention layer the ranks exchange the batch's new KV
entries so that each rank's queries see every earlier position of their prompts
(`context_parallel_exchange_s`).

A prompt alone on an idle instance (`prompt_alone_s`, the TTFT without queueing) shows what context
parallelism buys: without it one rank computes the prompt while the other ranks' attention idles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.attention_kinds import layers_cost
from planner.costmodel.comm import allgather_s
from planner.costmodel.context import CostContext
from planner.costmodel.decode import hash_routed_saving
from planner.costmodel.memory import kv_bytes_per_token_per_device, kv_transfer_bytes_per_request
from planner.costmodel.modules import (
    dense_ffn_cost,
    embedding_cost,
    lm_head_cost,
    moe_cost,
)
from planner.specs.plan import PrefillPlan, embedding_layout


@dataclass
class PrefillForward:
    """Forward time and its parts (seconds, arrays over the batch sizes evaluated)."""

    batch_tokens: np.ndarray
    forward_s: np.ndarray
    ttft_s: np.ndarray
    tokens_per_s_per_device: np.ndarray
    requests_per_forward: np.ndarray
    breakdown_s: dict[str, np.ndarray]
    moe_imbalance: np.ndarray


def least_requests_per_forward(ctx: CostContext) -> int:
    """Fewest requests per prefill forward whose tokens hold the TTFT-percentile prompt whole."""
    need = ctx.ttft_input_tokens * (1.0 - ctx.workload.hit_rate)
    return max(1, math.ceil(need / ctx.prefill_tokens_per_request - 1e-9))


def forwards_per_prompt(ctx: CostContext, batch_tokens: ArrayLike, dp: int, context_parallel: bool) -> np.ndarray:
    """Forwards the TTFT-percentile prompt's computed tokens take at `batch_tokens` a forward: over its
    rank's budget, the batch over `dp` attention DP ranks (module docstring), or the whole batch with
    context parallelism; at least one."""
    budget = np.asarray(batch_tokens, dtype=float) / (1 if context_parallel else dp)
    need = ctx.ttft_input_tokens * (1.0 - ctx.workload.hit_rate)
    return np.maximum(np.ceil(need / budget - 1e-9), 1.0)


def kv_transfer_s(ctx: CostContext) -> float:
    """Time to send one request's cache from the prefill to the decode instance: the whole prompt
    (cached prefix included) of the request at the TTFT percentile, over the stated KV link."""
    return kv_transfer_bytes_per_request(ctx) / ctx.kv_link_bytes_per_s


def context_parallel_exchange_s(ctx: CostContext, phase: PrefillPlan, batch_tokens: ArrayLike) -> np.ndarray:
    """The KV exchange of context-parallel prefill, all layers, at each batch size.

    Each of the D attention ranks computes 1/D of every prompt's positions (head and tail chunks, so that
    causal attention is balanced) and, before each layer's attention, gathers the KV entries the other
    ranks hold, computed or cached as a prefix: vllm-ascend v0.23.0 all-gathers MLA's latent and rope key
    over the PCP ranks layer by layer, inline (vllm_ascend/attention/context_parallel/mla_cp.py,
    mla_preprocess_prefill; ring passing was rejected in its design document), SGLang's NSA prefill
    context parallelism the latent and the indexer's keys (layers/attention/nsa/utils.py). The entries are
    those a device keeps (`kv_bytes_per_token_per_device`: MLA's latent, GQA's share of heads, DSA's keys).
    Costed as an AllGather over the D x tp devices of the ranks, each contributing 1/tp of its rank's
    share, so a device receives what the other ranks hold over the links the ranks span; one per main
    layer. Micro-batches hide it as they hide the other collectives."""
    dp, tp = phase.attention.dp, phase.attention.tp
    bt = np.asarray(batch_tokens, dtype=float)
    if not phase.context_parallel or dp <= 1:
        return np.zeros_like(bt)
    m = ctx.model
    # a layer's entries: the cache's mean over its layers; exchanged in the main layers (the prefill's MTP
    # pass is not costed)
    per_layer = kv_bytes_per_token_per_device(ctx, tp, draft=False) / max(m.kv_layers(), 1)
    layers = m.num_layers
    # a cached prefix's entries are spread over the ranks' caches too: every position of the prompts
    shard = bt * ctx.kv_tokens_per_computed_token / dp * per_layer / tp
    return allgather_s(ctx.hw, dp * tp, shard) * layers


def prefill_forward(ctx: CostContext, phase: PrefillPlan, batch_tokens: ArrayLike | None = None) -> PrefillForward:
    """Cost of one prefill forward at each batch size (default: the plan's)."""
    m = ctx.model
    bt = np.atleast_1d(np.asarray(phase.batch_tokens if batch_tokens is None else batch_tokens, dtype=float))
    n = phase.devices
    t = bt / n
    requests = bt / ctx.prefill_tokens_per_request

    compute: dict[str, np.ndarray] = {}
    comm_parts: dict[str, np.ndarray] = {}
    fixed = 0.0
    att = layers_cost(ctx, phase.attention, t, requests / n, decode=False)
    compute["attention"] = att.compute_s
    comm_parts["attention_comm"] = att.comm_s
    if phase.context_parallel:
        comm_parts["context_parallel_comm"] = context_parallel_exchange_s(ctx, phase, bt)
    fixed += att.fixed_s
    imbalance = np.ones_like(bt)
    if m.num_dense_layers:
        dense = dense_ffn_cost(ctx, phase.dense_layout, t)
        compute["dense_ffn"] = dense.compute_s * m.num_dense_layers
        comm_parts["dense_ffn_comm"] = dense.comm_s * m.num_dense_layers
        fixed += dense.fixed_s * m.num_dense_layers
    if m.moe is not None and phase.moe is not None:
        moe = moe_cost(ctx, n, phase.moe, phase.shared_expert, t, False, float(ctx.workload.input_tokens), prefill=True)
        compute["moe"] = moe.compute_s * m.num_moe_layers - hash_routed_saving(ctx, moe.router_s)
        comm_parts["moe_comm"] = moe.comm_s * m.num_moe_layers
        fixed += moe.fixed_s * m.num_moe_layers
        imbalance = moe.imbalance
    emb = embedding_cost(ctx, embedding_layout(phase, ctx.model.tie_word_embeddings), t)
    head = lm_head_cost(ctx, phase.lm_head_layout, requests / n)
    compute["lm_head"] = emb.compute_s + head.compute_s
    comm_parts["lm_head_comm"] = emb.comm_s + head.comm_s
    fixed += emb.fixed_s + head.fixed_s

    c_total = sum(compute.values())
    m_total = sum(comm_parts.values())
    mb = phase.micro_batches
    parts = {**compute, **comm_parts}
    if mb > 1:
        eff = ctx.hw.overlap.prefill_micro_batch_efficiency.value
        layers = m.num_layers
        saving = eff * np.minimum(c_total, m_total) * (1.0 - 1.0 / (mb * layers))
        parts["micro_batch_overlap"] = -saving
    parts["launch_overhead"] = np.full_like(bt, fixed * mb)
    forward = sum(parts.values())
    # the TTFT-percentile prompt waits half a forward, then takes as many forwards as its computed
    # tokens fill on its rank (module docstring)
    own = forwards_per_prompt(ctx, bt, phase.attention.dp, phase.context_parallel)
    ttft = (0.5 + own) * forward + kv_transfer_s(ctx)
    return PrefillForward(
        batch_tokens=bt,
        forward_s=forward,  # type: ignore[arg-type]
        ttft_s=ttft,  # type: ignore[arg-type]
        tokens_per_s_per_device=bt / forward / n,  # type: ignore[operator]
        requests_per_forward=requests,
        breakdown_s=parts,
        moe_imbalance=imbalance,
    )


def busiest_rank_forward_s(
    parts_at: Callable[[float], tuple[float, float]], busiest_rank_tokens: float, tokens: float, dp: int
) -> float:
    """A forward in which each of `dp` attention DP ranks prefills its own prompts, `tokens` in all and
    `busiest_rank_tokens` on the busiest rank. Every part but the routed experts' compute (attention, dense
    layers, LM head, the rank's dispatch and combine, launches) takes as long as on that rank, which is the
    forward of `dp` times its tokens spread evenly; the experts' compute is that of the `tokens` of all ranks
    together. `parts_at(tokens)` gives (forward s, routed experts' compute s) of a forward of that many
    tokens spread evenly. One rank alone thus costs more than the same tokens spread over every rank. Read
    by `prompt_alone_s` and by the serving simulator (planner.simulate.predictor.PrefillTimes.rank_forward_s)."""
    if dp <= 1 or busiest_rank_tokens * dp <= tokens:
        return parts_at(tokens)[0]
    even_s, even_experts_s = parts_at(busiest_rank_tokens * dp)
    return even_s - even_experts_s + parts_at(tokens)[1]


def prompt_alone_s(ctx: CostContext, phase: PrefillPlan) -> float:
    """TTFT of the TTFT-percentile prompt alone on an idle instance, without queueing: its forwards
    (`forwards_per_prompt`), each a chunk of prompt / forwards tokens whose positions attend like the whole
    prompt's (the chunks' attention sums to the prompt's).

    With context parallelism (or one rank) a chunk spreads over every device. Without it the prompt sits on
    one of the D attention DP ranks while the others idle: a forward whose busiest rank holds the chunk
    alone (`busiest_rank_forward_s`). The KV transfer to decode follows, as in the TTFT."""
    dp = phase.attention.dp
    prompt = ctx.ttft_input_tokens * (1.0 - ctx.workload.hit_rate)
    forwards = float(forwards_per_prompt(ctx, phase.batch_tokens, dp, phase.context_parallel))
    chunk = prompt / forwards

    def parts_at(tokens: float) -> tuple[float, float]:
        fwd = prefill_forward(ctx, phase, tokens)
        return float(fwd.forward_s[0]), float(fwd.breakdown_s.get("moe", np.zeros(1))[0])

    ranks = 1 if phase.context_parallel else dp
    return forwards * busiest_rank_forward_s(parts_at, chunk, chunk, ranks) + kv_transfer_s(ctx)


def prefill_rank_notes(ctx: CostContext, phase: PrefillPlan | None) -> list[str]:
    """What the placement of a prefill forward's prompts on the attention DP ranks does to the plan, where it
    does something: a prompt longer than its rank's budget spans forwards (module docstring) and its
    rank keeps its KV cache over them (planner.costmodel.memory.prefill_kv_tokens); with context
    parallelism, what its KV exchange costs a forward."""
    if phase is None or phase.attention.dp <= 1:
        return []
    dp = phase.attention.dp
    if phase.context_parallel:
        exchange_ms = float(context_parallel_exchange_s(ctx, phase, phase.batch_tokens)) * 1e3
        return [
            f"prefill context parallelism: each prompt is split evenly over the {dp} attention DP ranks, which "
            f"gather each other's KV entries before every attention layer ({exchange_ms:,.1f} ms of communication "
            "a forward, before micro-batch overlap)"
        ]
    budget = phase.batch_tokens / dp
    own = int(forwards_per_prompt(ctx, phase.batch_tokens, dp, False))
    if own > 1:
        return [
            f"prefill ranks: each of the {dp} attention DP ranks computes {budget:,.0f} tokens a forward of its own "
            f"prompts (the engines' per-rank token budget); a {ctx.ttft_input_tokens:,}-token prompt spans {own} "
            "forwards on its rank, which its TTFT counts, and its rank keeps the prompt's KV cache over them. "
            "Fewer DP ranks or a larger batch shorten it."
        ]
    return []
