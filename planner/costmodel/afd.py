"""Attention-FFN disaggregation (AFD): the decode step of an AFD instance, and its HBM on each side.

An AFD instance is A attention devices (attention, KV cache, embedding, LM head, MTP module) and
F FFN devices (routed experts over EP, the router, and by default the shared expert and the dense
FFN layers, as vLLM's afd-plugin runs them). Each of the B sequences per attention device is in one
of M micro-batches; every layer of every micro-batch goes

    attention (A side, a) -> activations A->F (c) -> experts (F side, f) -> activations F->A (c)

Per layer and micro-batch, with b = B / M sequences and t = b (1 + k) tokens per attention device
(k MTP draft tokens):

- a: the attention of one layer (the model's attention cost over all layers / layers, from
  `attention_kinds.layers_cost`), plus the shared expert and the dense FFN when they run on the
  attention side (`modules.shared_expert_s`, `modules.dense_ffn_cost`);
- f: one MoE layer on the FFN devices, each receiving A t / F tokens (`modules.moe_cost` over the F
  devices: router, routed experts of the busiest device under the plan's imbalance model, the
  shared expert, dispatch/combine among the FFN devices over their own links); a dense layer's f
  is the dense FFN on the FFN side;
- c: one transfer: an FFN device receives (and later returns) the hidden states of the A / F
  attention devices it serves, tokens x hidden x 2 bytes (BF16: the afd-plugin's CAMP2P connector
  runs `quant_mode` 0 only, afd_plugin/connectors/npu/camp2p.py) over the plan's link level at
  the machine's link efficiency, plus the level's latency and one collective launch.

The ping-pong pipeline (MegaScale-Infer, arXiv 2504.02263, section 4: each side works on one
micro-batch while the other side, or the link, has the others): the attention side takes the M
micro-batches of a layer in turn, so a layer takes the period

    P = max(M a, M f, a + f + 2 c)

(either side busy all the time, or one micro-batch's round trip when the transfers are too slow
for M micro-batches to cover them), and the step adds its fill and drain once:
(a + f + 2c) + (M - 1) max(a, f) - P, i.e. f + 2c when the attention side binds, a + 2c when the
FFN side binds. With M = 1 the layers run back to back (a + f + 2c each). Dense layers whose FFN
runs on the attention side have no F side: P = M a. The embedding runs on the attention side in every
micro-batch's forward; the LM head and sampling once per step, on the micro-batches' merged
output: vLLM's micro-batching wraps the model's forward and the runner computes the logits on
the concatenated hidden states (afd-plugin at 2e4378f, afd_plugin/v1/worker/npu/npu_ubatch_wrapper.py,
`_merge_outputs`). Each MTP draft token is one more pass
through the pipeline (its attention and projection on the attention side, its MoE layer on the
FFN side, whose experts hold the MTP layer's too) plus the MTP framework time per step.

The breakdown splits the step into parts that add up to it: the attention side's busy time (M a
per layer), the transfers the pipeline does not hide (min(2c, P - M max(a, f)): with M >= 2 the part
of the round trip the ping-pong cannot cover, with M = 1 both transfers), the time the attention
side waits for the FFN side (the rest of P: M (f - a) where f > a; with M = 1 all of f, as the
sides work in turn), the fill and drain, the LM head and the MTP passes.

HBM: the attention devices hold the attention weights, the KV cache of their B sequences, the
embedding and LM head, the MTP projection (and the dense FFN or shared expert when placed there);
the FFN devices hold the expert slots of every MoE layer (MTP layers included), the router, the
shared expert and the dense FFN (by default) and their dispatch buffers: no KV cache. Each side is
costed by the functions of `planner.costmodel.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.attention_kinds import layers_cost
from planner.costmodel.context import CostContext
from planner.costmodel.decode import emitted_tokens_per_step, hash_routed_saving, mtp_projection_s
from planner.costmodel.memory import (
    HbmUse,
    Parts,
    attention_hbm,
    dense_ffn_hbm,
    fixed_hbm,
    head_and_embedding_hbm,
    kv_tokens_in_use,
    moe_hbm,
    prefill_kv_tokens,
)
from planner.costmodel.modules import (
    dense_ffn_cost,
    embedding_cost,
    lm_head_cost,
    moe_cost,
    shared_expert_fixed_s,
    shared_expert_s,
)
from planner.errors import BadInputError
from planner.specs.hardware import LinkLevel
from planner.specs.plan import AfdPlan, SharedExpertLayout, afd_link_level, embedding_layout

AFD_ACTIVATION_BYTES = 2.0  # BF16 hidden states both ways (CAMP2P quant_mode 0, see the module docstring)
GIB = 1024.0**3


def afd_link(ctx: CostContext, section: AfdPlan) -> LinkLevel:
    """The link level that carries the section's activations (the plan's, or the level its devices span)."""
    return ctx.hw.levels[afd_link_level(ctx.hw, section)]


def transfer_s(ctx: CostContext, section: AfdPlan, tokens_per_attention_device: ArrayLike) -> np.ndarray:
    """One transfer of one layer and micro-batch: what one FFN device receives from (or returns to) the
    attention devices it serves, over the link level, with its latency and one launch."""
    t = np.asarray(tokens_per_attention_device, dtype=float)
    link = afd_link(ctx, section)
    per_ffn_device = max(section.ffn_per_attention, 1.0) * t * ctx.model.hidden_size * AFD_ACTIVATION_BYTES
    bandwidth = link.bandwidth_bytes_per_s * ctx.hw.efficiency.link_bandwidth.value
    return per_ffn_device / bandwidth + link.latency_s + ctx.hw.fixed_costs.collective.value


def pipeline_layer_s(
    a: ArrayLike, f: ArrayLike, c: ArrayLike, micro_batches: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(P, fill and drain) of a layer whose micro-batches take a on the attention side, f on the FFN
    side and c per transfer: P = max(M a, M f, a + f + 2c), the time of the layer for all M
    micro-batches, and what one step adds to its layers' periods, (a + f + 2c) + (M - 1) max(a, f) - P
    (>= 0). Vectorised: the search calls it on whole grids of options and concurrencies."""
    slower = np.maximum(a, f)
    round_trip = np.add(a, f) + np.multiply(2.0, c)
    period = np.maximum(np.multiply(micro_batches, slower), round_trip)
    return period, np.maximum(round_trip + (np.subtract(micro_batches, 1)) * slower - period, 0.0)


def pipeline_period_s(a: ArrayLike, f: ArrayLike, c: ArrayLike, micro_batches: ArrayLike) -> np.ndarray:
    """P = max(M a, M f, a + f + 2c): the time of one layer for all M micro-batches."""
    return pipeline_layer_s(a, f, c, micro_batches)[0]


def pipeline_fill_drain_s(a: ArrayLike, f: ArrayLike, c: ArrayLike, micro_batches: ArrayLike) -> np.ndarray:
    """What one step adds to its layers' periods: (a + f + 2c) + (M - 1) max(a, f) - P (>= 0)."""
    return pipeline_layer_s(a, f, c, micro_batches)[1]


def _exposed_transfer_s(a: np.ndarray, f: np.ndarray, c: np.ndarray, micro_batches: int) -> np.ndarray:
    """The transfers of a layer that its period does not hide: min(2c, P - M max(a, f))."""
    slack = pipeline_period_s(a, f, c, micro_batches) - micro_batches * np.maximum(a, f)
    return np.minimum(2.0 * np.asarray(c, dtype=float), np.maximum(slack, 0.0))


@dataclass
class LayerClass:
    """Layers that cost the same: per micro-batch, the attention side, the FFN side, one transfer."""

    count: int
    attention_s: np.ndarray
    ffn_s: np.ndarray
    transfer_s: np.ndarray


def _pipeline_parts(layers: list[LayerClass], micro_batches: int) -> dict[str, np.ndarray]:
    """The pipeline's time, split into parts that add up to it (module docstring); the fill and
    drain are the last layer class's (the MoE layers for every model with dense layers first)."""
    m = micro_batches
    busy = sum(lc.count * m * lc.attention_s for lc in layers)
    exposed = sum(lc.count * _exposed_transfer_s(lc.attention_s, lc.ffn_s, lc.transfer_s, m) for lc in layers)
    wait = sum(
        lc.count
        * (
            pipeline_period_s(lc.attention_s, lc.ffn_s, lc.transfer_s, m)
            - m * lc.attention_s
            - _exposed_transfer_s(lc.attention_s, lc.ffn_s, lc.transfer_s, m)
        )
        for lc in layers
    )
    last = layers[-1]
    fill = pipeline_fill_drain_s(last.attention_s, last.ffn_s, last.transfer_s, m)
    return {"afd_attention": busy, "afd_ffn_wait": wait, "afd_transfer": exposed, "afd_fill_drain": fill}  # type: ignore[dict-item]


@dataclass
class AfdStep:
    """Step time of an AFD instance and its parts (seconds; arrays over the concurrencies evaluated)."""

    concurrency_per_device: np.ndarray  # per attention device
    step_s: np.ndarray
    tpot_s: np.ndarray
    tokens_per_s_per_device: np.ndarray  # per device of the instance, both sides
    tokens_per_s_per_attention_device: np.ndarray
    breakdown_s: dict[str, np.ndarray]
    moe_imbalance: np.ndarray
    attention_layer_s: np.ndarray  # one MoE layer, one micro-batch
    ffn_layer_s: np.ndarray
    transfer_layer_s: np.ndarray


def _shared_on_ffn(section: AfdPlan) -> SharedExpertLayout:
    return section.shared_expert if section.shared_expert_on == "ffn" else SharedExpertLayout()


def _pass_layers(
    ctx: CostContext, section: AfdPlan, tokens: np.ndarray, sequences: np.ndarray, tokens_per_request: float
) -> tuple[LayerClass, LayerClass | None, np.ndarray, float]:
    """(MoE layers, dense layers or None, MoE imbalance, total hash-routing saving) of one micro-batch
    of `tokens` / `sequences` per attention device through the main layers (decode)."""
    m = ctx.model
    assert m.moe is not None and section.moe is not None
    layers = m.num_layers
    att = layers_cost(ctx, section.attention, tokens, sequences, decode=True)
    att_layer = att.total_s / layers
    ffn_tokens = tokens * section.ffn_per_attention
    moe = moe_cost(
        ctx,
        section.ffn_devices,
        section.moe,
        _shared_on_ffn(section),
        ffn_tokens,
        ctx.hw.overlap.decode_shared_expert_with_dispatch,
        tokens_per_request,
        include_shared=section.shared_expert_on == "ffn",
    )
    saving = hash_routed_saving(ctx, moe.router_s)
    f_moe = moe.total_s - saving / max(m.num_moe_layers, 1)
    a_moe = att_layer
    if section.shared_expert_on == "attention":
        a_moe = a_moe + shared_expert_s(ctx, tokens) + shared_expert_fixed_s(ctx)
    c = transfer_s(ctx, section, tokens)
    moe_class = LayerClass(m.num_moe_layers, a_moe, f_moe, c)
    dense_class = None
    if m.num_dense_layers:
        if section.dense_ffn_on == "attention":
            dense = dense_ffn_cost(ctx, section.dense_layout, tokens)
            zero = np.zeros_like(tokens)
            dense_class = LayerClass(m.num_dense_layers, att_layer + dense.total_s, zero, zero)
        else:
            dense = dense_ffn_cost(ctx, section.dense_layout, ffn_tokens)
            dense_class = LayerClass(m.num_dense_layers, att_layer, dense.total_s, c)
    return moe_class, dense_class, moe.imbalance, 0.0


def _mtp_pass_s(
    ctx: CostContext, section: AfdPlan, tokens: np.ndarray, sequences: np.ndarray, first: bool
) -> np.ndarray:
    """One MTP draft pass of every micro-batch: its layer through the pipeline, then the projection,
    LM head and embedding on the attention side."""
    m = ctx.model
    assert section.moe is not None
    k = section.mtp_tokens
    mb = section.micro_batches
    att = layers_cost(ctx, section.attention, tokens, sequences, decode=True, mtp=True)
    a = att.total_s
    if section.shared_expert_on == "attention":
        a = a + shared_expert_s(ctx, tokens) + shared_expert_fixed_s(ctx)
    moe = moe_cost(
        ctx,
        section.ffn_devices,
        section.moe,
        _shared_on_ffn(section),
        tokens * section.ffn_per_attention,
        ctx.hw.overlap.decode_shared_expert_with_dispatch,
        1.0 + k if first else 1.0,
        include_shared=section.shared_expert_on == "ffn",
    )
    c = transfer_s(ctx, section, tokens)
    layer = pipeline_period_s(a, moe.total_s, c, mb) + pipeline_fill_drain_s(a, moe.total_s, c, mb)
    head = (
        lm_head_cost(ctx, section.lm_head_layout, tokens).total_s
        + embedding_cost(ctx, embedding_layout(section, ctx.model.tie_word_embeddings), tokens).total_s
    )
    del m
    return layer + mb * (mtp_projection_s(ctx, tokens) + head)


def afd_decode_step(ctx: CostContext, section: AfdPlan, concurrency: ArrayLike | None = None) -> AfdStep:
    """Cost of one decode step of an AFD instance at each concurrency per attention device."""
    b = np.atleast_1d(np.asarray(section.concurrency_per_device if concurrency is None else concurrency, dtype=float))
    mb = section.micro_batches
    k = section.mtp_tokens
    seqs = b / mb
    tokens = seqs * (1 + k)
    moe_class, dense_class, imbalance, _ = _pass_layers(ctx, section, tokens, seqs, 1.0 + k)
    layers = [lc for lc in (dense_class, moe_class) if lc is not None]
    parts = _pipeline_parts(layers, mb)
    # the embedding runs in each micro-batch's forward; the LM head and sampling once per step on the
    # merged micro-batches (module docstring)
    head = lm_head_cost(ctx, section.lm_head_layout, tokens * mb).total_s
    emb = embedding_cost(ctx, embedding_layout(section, ctx.model.tie_word_embeddings), tokens).total_s
    parts["lm_head"] = head + mb * emb
    if k:
        mtp = np.zeros_like(b)
        for i in range(k):
            pass_tokens = tokens if i == 0 else seqs
            mtp = mtp + _mtp_pass_s(ctx, section, pass_tokens, seqs, i == 0)
        parts["mtp"] = mtp + ctx.hw.fixed_costs.mtp_framework_per_step.value
    step: np.ndarray = np.sum(list(parts.values()), axis=0)
    emitted = emitted_tokens_per_step(k, ctx.workload.mtp_acceptance)
    per_attention_device = b * emitted / step
    return AfdStep(
        concurrency_per_device=b,
        step_s=step,
        tpot_s=step / emitted,
        tokens_per_s_per_device=per_attention_device * section.attention_devices / section.devices,
        tokens_per_s_per_attention_device=per_attention_device,
        breakdown_s=parts,
        moe_imbalance=imbalance,
        attention_layer_s=moe_class.attention_s,
        ffn_layer_s=moe_class.ffn_s,
        transfer_layer_s=moe_class.transfer_s,
    )


def bound_side(step: AfdStep, micro_batches: int) -> list[str]:
    """What sets each concurrency's MoE-layer period: 'in turn' with one micro-batch (the sides work
    one after the other, P = a + f + 2c, so no single side or link binds), else 'transfer' when the
    round trip exceeds M max(a, f), else the slower side, 'attention' or 'ffn'."""
    if micro_batches == 1:
        return ["in turn"] * len(step.attention_layer_s)
    a, f, c = step.attention_layer_s, step.ffn_layer_s, step.transfer_layer_s
    period = pipeline_period_s(a, f, c, micro_batches)
    out = []
    for i in range(len(period)):
        if period[i] > micro_batches * max(a[i], f[i]) + 1e-15:
            out.append("transfer")
        else:
            out.append("attention" if a[i] >= f[i] else "ffn")
    return out


# ---- prefill forwards of AFD instances that prefill too -------------------------------------------


def afd_prefill_forward_s(ctx: CostContext, section: AfdPlan, batch_tokens: ArrayLike | None = None) -> np.ndarray:
    """One prefill forward of `batch_tokens` prompt tokens through an AFD instance (M micro-batches)."""
    m = ctx.model
    assert m.moe is not None and section.moe is not None
    bt = np.atleast_1d(np.asarray(section.prefill_batch_tokens if batch_tokens is None else batch_tokens, dtype=float))
    mb = section.micro_batches
    tokens = bt / section.attention_devices / mb
    requests = bt / ctx.prefill_tokens_per_request / section.attention_devices / mb
    att = layers_cost(ctx, section.attention, tokens, requests, decode=False)
    a = att.total_s / m.num_layers
    ffn_tokens = tokens * section.ffn_per_attention
    moe = moe_cost(
        ctx,
        section.ffn_devices,
        section.moe,
        _shared_on_ffn(section),
        ffn_tokens,
        False,
        float(ctx.workload.input_tokens),
        include_shared=section.shared_expert_on == "ffn",
    )
    f = moe.total_s - hash_routed_saving(ctx, moe.router_s) / max(m.num_moe_layers, 1)
    a_moe = a + (
        shared_expert_s(ctx, tokens) + shared_expert_fixed_s(ctx) if section.shared_expert_on == "attention" else 0.0
    )
    c = transfer_s(ctx, section, tokens)
    layers = []
    if m.num_dense_layers:
        if section.dense_ffn_on == "attention":
            zero = np.zeros_like(tokens)
            layers.append(
                LayerClass(
                    m.num_dense_layers, a + dense_ffn_cost(ctx, section.dense_layout, tokens).total_s, zero, zero
                )
            )
        else:
            layers.append(
                LayerClass(m.num_dense_layers, a, dense_ffn_cost(ctx, section.dense_layout, ffn_tokens).total_s, c)
            )
    layers.append(LayerClass(m.num_moe_layers, a_moe, f, c))
    total: np.ndarray = np.sum(list(_pipeline_parts(layers, mb).values()), axis=0)
    # the embedding runs in each micro-batch's forward, the LM head once on their merged output
    head = lm_head_cost(ctx, section.lm_head_layout, requests * mb).total_s
    return (
        total
        + head
        + mb * embedding_cost(ctx, embedding_layout(section, ctx.model.tie_word_embeddings), tokens).total_s
    )


# ---- HBM on each side ---------------------------------------------------------------------------


def _moe_parts(ctx: CostContext, section: AfdPlan, ffn_tokens: np.ndarray) -> Parts:
    assert section.moe is not None
    parts, _ = moe_hbm(ctx, section.ffn_devices, section.moe, _shared_on_ffn(section), ffn_tokens)
    return parts


def _combine(shape_like: np.ndarray, groups: list[Parts], fixed: dict[str, float]) -> Parts:
    total: Parts = {}
    for group in groups:
        for key, value in group.items():
            total[key] = total[key] + value if key in total else np.asarray(value, dtype=float) + 0.0 * shape_like
    for key, constant in fixed.items():
        total[key] = np.full_like(shape_like, constant)
    return total


def afd_hbm(
    ctx: CostContext, section: AfdPlan, concurrency: ArrayLike | None = None, prefill_batch_tokens: float | None = None
) -> tuple[HbmUse, HbmUse]:
    """(attention device, FFN device) HBM at each concurrency per attention device.

    `prefill_batch_tokens`: the instances also prefill; the attention devices then hold one prefill
    batch's KV cache and activations on top of their decode state.
    """
    b = np.atleast_1d(np.asarray(section.concurrency_per_device if concurrency is None else concurrency, dtype=float))
    k = section.mtp_tokens
    tokens = b * (1 + k)
    kv = kv_tokens_in_use(ctx, b, k, section.attention.tp)
    seqs = b
    if prefill_batch_tokens:
        # a prefill forward's prompts, spread over the attention devices' DP ranks (as a prefill instance)
        kv = (
            kv
            + prefill_kv_tokens(prefill_batch_tokens * ctx.kv_tokens_per_computed_token, section.attention.dp)
            / section.attention.tp
        )
        seqs = seqs + prefill_batch_tokens / ctx.workload.input_tokens / section.attention_devices
        tokens = tokens + prefill_batch_tokens / section.attention_devices / section.micro_batches
    ffn_tokens = tokens * section.ffn_per_attention
    fixed = fixed_hbm(ctx)
    attention_groups = [
        attention_hbm(ctx, section.attention, tokens, kv, seqs),
        *head_and_embedding_hbm(ctx, section, tokens),
    ]
    moe_parts = _moe_parts(ctx, section, ffn_tokens)
    if section.shared_expert_on == "attention":
        attention_groups.append({"shared_expert_weights": moe_parts.pop("shared_expert_weights")})
    ffn_groups = [moe_parts]
    if section.dense_ffn_on == "attention":
        attention_groups.append(dense_ffn_hbm(ctx, section.dense_layout, tokens))
    else:
        ffn_groups.append(dense_ffn_hbm(ctx, section.dense_layout, ffn_tokens))
    ffn_fixed = {key: v for key, v in fixed.items() if key != "mtp_projection_weights"}
    cap = ctx.hbm_capacity_bytes
    return (
        HbmUse(_combine(b, attention_groups, fixed), "attention", cap),
        HbmUse(_combine(b, ffn_groups, ffn_fixed), "ffn", cap),
    )


def max_afd_concurrency(ctx: CostContext, section: AfdPlan) -> int | float:
    """Most sequences per attention device both sides hold in HBM (0: the weights alone overflow), in
    steps of one sequence per attention TP group, as planner.costmodel.memory.max_decode_concurrency."""
    from planner.costmodel.memory import most_sequences_fitting

    def total(b: np.ndarray) -> np.ndarray:
        att, ffn = afd_hbm(ctx, section, b, section.prefill_batch_tokens)
        return np.maximum(att.total_bytes, ffn.total_bytes)

    return most_sequences_fitting(total, ctx.hbm_capacity_bytes, section.attention.tp)


def check_ffn_side_fits(ctx: CostContext, section: AfdPlan, field: str = "afd") -> None:
    """BadInputError when the FFN devices cannot hold the experts at all (the A:F split does not fit
    the experts), naming the smallest FFN device count whose expert slots fit."""
    m = ctx.model
    assert m.moe is not None and section.moe is not None
    _, ffn = afd_hbm(ctx, section, np.array([float(section.micro_batches)]))
    total = float(ffn.total_bytes[0])
    cap = ctx.hbm_capacity_bytes
    if total <= cap:
        return
    slot_bytes = (m.num_moe_layers + m.mtp_layers) * m.expert_params() * ctx.routed_expert_weight_bytes
    slots = section.moe.slots_per_device
    others = total - slots * slot_bytes
    fitting = int((cap - others) // slot_bytes) if cap > others else 0
    dedicated = section.shared_expert.dedicated_devices
    if fitting >= 1:
        need = -(-m.moe.routed_experts // fitting) + dedicated
        fix = f"use ffn_devices >= {need} ({fitting} expert slots per device fit)"
    else:
        fix = "the weights besides the experts already fill a device; choose a narrower quantization scheme"
    raise BadInputError(
        f"{field}: the {section.ffn_devices} FFN devices cannot hold the experts: {slots} expert slots per device "
        f"need {slots * slot_bytes / GIB:.1f} GiB, and with the rest {total / GIB:.1f} GiB of the "
        f"{cap / GIB:.1f} GiB a device may fill (--hbm-utilization); {fix}."
    )
