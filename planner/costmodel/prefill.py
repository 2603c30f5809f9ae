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
is busy) + this request's forward (or forwards, when its prompt is longer than a batch) + moving
its KV cache to the decode instance. With a length distribution it is the TTFT of the prompt at
the workload's SLO percentile; with prefix-cache hits only the uncached part of each prompt is
computed (planner.specs.workload).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.attention_kinds import layers_cost
from planner.costmodel.context import CostContext
from planner.costmodel.decode import hash_routed_saving
from planner.costmodel.memory import kv_transfer_bytes_per_request
from planner.costmodel.modules import (
    dense_ffn_cost,
    embedding_cost,
    lm_head_cost,
    moe_cost,
)
from planner.specs.plan import PrefillPlan


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


def kv_transfer_s(ctx: CostContext) -> float:
    """Time to send one request's cache from the prefill to the decode instance: the whole prompt
    (cached prefix included) of the request at the TTFT percentile, over the stated KV link."""
    return kv_transfer_bytes_per_request(ctx) / ctx.kv_link_bytes_per_s


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
    emb = embedding_cost(ctx, phase.lm_head_layout, t)
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
    # tokens fill (one when the batch holds it whole, as the search sizes batches)
    own = np.ceil(ctx.ttft_input_tokens * (1.0 - ctx.workload.hit_rate) / bt - 1e-9)
    ttft = (0.5 + np.maximum(own, 1.0)) * forward + kv_transfer_s(ctx)
    return PrefillForward(
        batch_tokens=bt,
        forward_s=forward,  # type: ignore[arg-type]
        ttft_s=ttft,  # type: ignore[arg-type]
        tokens_per_s_per_device=bt / forward / n,  # type: ignore[operator]
        requests_per_forward=requests,
        breakdown_s=parts,
        moe_imbalance=imbalance,
    )


def prefill_spread_notes(ctx: CostContext, phase: PrefillPlan | None) -> list[str]:
    """A note when a prefill forward's requests do not divide evenly over the attention DP ranks.

    The forward above spreads its prompt tokens evenly over the instance's devices (attention's per
    device tokens are the batch over the devices), which is what context parallelism does. A serving
    engine without it places each request whole on one attention DP rank (vLLM's and SGLang's DP
    schedulers do): with R requests over D ranks the busiest rank holds ceil(R / D) of them, so its
    attention (and what its DP layouts carry) does ceil(R / D) x D / R times the modelled work, while
    the others wait at the expert all-to-all. This model does not cost that yet: the note says so."""
    if phase is None or phase.attention.dp <= 1:
        return []
    dp = phase.attention.dp
    requests = phase.batch_tokens / ctx.prefill_tokens_per_request
    busiest = math.ceil(requests / dp - 1e-9)
    ratio = busiest * dp / requests
    if ratio <= 1.0 + 1e-6:
        return []
    return [
        f"prefill spread: {requests:.3g} request(s) a forward over {dp} attention DP ranks are costed spread evenly "
        "(as context parallelism runs them); an engine that keeps each prompt whole on one rank gives the busiest "
        f"rank {busiest}, {ratio:.2f}x the modelled attention work, not costed here: the prefill figures are "
        "optimistic by up to that"
    ]
