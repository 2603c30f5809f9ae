"""An EAGLE-3 draft head beside the target model: its passes in a decode step, its weights and KV.

The head (`ModelSpec.draft`, `specs.model.DraftSpec`) is one dense decoder layer with its own
LM head over a reduced vocabulary. A step of k draft tokens with top-k 1 (SGLang's
`--speculative-eagle-topk 1`, `--speculative-num-draft-tokens k+1`; vLLM's
`num_speculative_tokens`) runs it k times, as moeplan's MTP model runs the MTP layer:
the first pass extends the head over the 1 + k positions the target just verified (through the
fc that fuses the target's `aux_hidden_states` hidden states), the other k - 1 passes draft one
token per sequence (sglang 0.5.23 `speculative/eagle_worker_v2.py`: `draft` forwards the head
`speculative_num_steps - 1` times, `_draft_extend_for_decode` once over the verified tokens).
Every pass: the layer's attention over the head's own KV cache (GQA, one layer, the context's
length), its FFN, the wider Q/K/V inputs (the embedding half of EAGLE-3's [embedding; hidden]
input), the LM head over the draft vocabulary and the embedding lookup.

Assumptions, stated because no source gives them for the engines: the head runs in BF16 (its
checkpoint's dtype; the target's INT8 scheme covers the target's layers) beside every attention
DP rank with the plan's attention, dense-FFN and LM-head layouts, its weights replicated on every
device (the conservative case for HBM); its KV cache is in the target's KV format. The prefill's
extend of the head over the prompt (one layer against the target's tens) is not costed, as the
MTP layer's is not.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.attention_kinds import layers_cost
from planner.costmodel.context import CostContext
from planner.costmodel.modules import dense_ffn_cost, embedding_cost, lm_head_cost
from planner.specs.model import DraftSpec
from planner.specs.plan import DecodePlan, embedding_layout
from planner.specs.quantization import ModuleFormats, QuantizationScheme

DRAFT_WEIGHT_BYTES = 2.0  # BF16, the head's checkpoint dtype


@lru_cache(maxsize=16)
def _draft_scheme(quant: QuantizationScheme) -> QuantizationScheme:
    """The target's scheme with BF16 linear layers (the head is not quantised); KV format kept."""
    bf16 = ModuleFormats(weight="bf16", activation="bf16")
    return quant.model_copy(update={"attention": bf16, "dense_ffn": bf16, "experts": bf16, "dispatch_format": "bf16"})


def draft_context(ctx: CostContext) -> CostContext:
    """The cost context of the draft head: its layer as the model, BF16 linear layers."""
    draft = _draft(ctx)
    return dataclasses.replace(ctx, model=draft.layer, quant=_draft_scheme(ctx.quant))


def _draft(ctx: CostContext) -> DraftSpec:
    draft = ctx.model.draft
    if draft is None:
        raise ValueError(f"model '{ctx.model.name}' has no draft model")
    return draft


def draft_pass_s(
    ctx: CostContext, phase: DecodePlan, tokens_per_device: ArrayLike, sequences_per_device: ArrayLike, first: bool
) -> np.ndarray:
    """Seconds of one pass of the draft head over these tokens (`first`: the extend pass with the fc)."""
    draft = _draft(ctx)
    dctx = draft_context(ctx)
    t = np.asarray(tokens_per_device, dtype=float)
    layer = draft.layer
    att = layers_cost(dctx, phase.attention, t, sequences_per_device, decode=True)
    ffn = dense_ffn_cost(dctx, phase.dense_layout, t)
    head = lm_head_cost(dctx, phase.lm_head_layout, t)
    emb = embedding_cost(dctx, embedding_layout(phase, dctx.model.tie_word_embeddings), t)
    projections = _projections_s(draft, dctx, t, first)
    return att.total_s + ffn.total_s * layer.num_dense_layers + head.total_s + emb.total_s + projections


def draft_projections_s(ctx: CostContext, tokens_per_device: ArrayLike, first: bool) -> np.ndarray:
    """The head's weights beyond its layer on these tokens: the wider Q/K/V inputs, and on the extend
    pass (`first`) the fc over the target's hidden states."""
    return _projections_s(_draft(ctx), draft_context(ctx), np.asarray(tokens_per_device, dtype=float), first)


def _projections_s(draft: DraftSpec, dctx: CostContext, t: np.ndarray, first: bool) -> np.ndarray:
    h = draft.layer.hidden_size
    extra = draft.extra_params() - (0 if first else draft.aux_hidden_states * h * h)
    return dctx.roofline_s(2 * t * extra, extra * DRAFT_WEIGHT_BYTES, dctx.linear_flops_per_s)


def draft_weight_bytes(ctx: CostContext) -> float:
    """The head's weights on one device (replicated), embedding table included; 0 without a draft."""
    draft = ctx.model.draft
    return 0.0 if draft is None else draft.params() * DRAFT_WEIGHT_BYTES


def draft_kv_bytes_per_token(ctx: CostContext, core_tp: int) -> float:
    """The head's KV bytes per token on one device of a DP rank (GQA K and V, split over TP up to
    the KV heads); 0 without a draft."""
    draft = ctx.model.draft
    if draft is None:
        return 0.0
    a = draft.layer.attention
    elements = 2.0 * a.head_dim * max(1.0, a.num_kv_heads / core_tp) * draft.layer.num_layers
    return elements * ctx.quant.kv_bytes_per_element
