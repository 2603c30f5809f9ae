"""The cost contexts a request is searched in: one machine, or one per phase.

`moeplan plan --prefill-hardware a2 --decode-hardware cm384` (or per-phase budgets, a cost
budget, or a stated KV link) costs each phase on its own machine: its own peaks, links, HBM and
efficiencies. The KV cache then moves from prefill to decode over `--kv-transfer-gbps`, else the
slower of the two machines' `kv_transfer_bandwidth_bytes_per_s`; its time adds to the TTFT.
Colocated instances need one machine, so a mixed request has none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner.costmodel.context import CostContext
from planner.costmodel.imbalance import default_imbalance_model
from planner.costmodel.kv_split import check_unsplit_decode_attention
from planner.errors import BadInputError
from planner.search.request import PlanRequest
from planner.specs.catalog import load_hardware, load_model, with_draft
from planner.specs.quantization import get_quantization


@dataclass(frozen=True)
class PhaseContexts:
    """The decode and prefill contexts (the same one on a single machine)."""

    decode: CostContext
    prefill: CostContext
    mixed: bool

    def of(self, phase: str) -> CostContext:
        """The context a phase (or a colocated instance, on the one machine) is costed in."""
        return self.prefill if phase == "prefill" else self.decode


def make_context(request: PlanRequest) -> CostContext:
    """Specs loaded and the cost context built for a request (on its `hardware`)."""
    model = with_draft(load_model(request.model), request.draft_model, field="--draft-model")
    hw = load_hardware(request.hardware)
    imbalance = request.imbalance or default_imbalance_model()
    price = dict(request.prices)
    value = price.get(hw.name, price.get(None))
    if value is not None:  # --price-per-card-hour: the user's price of this machine
        from planner.specs.hardware import PricePerCardHour

        card_hour = PricePerCardHour(value=value, currency=request.currency, source="--price-per-card-hour")
        hw = hw.model_copy(update={"price_per_card_hour": card_hour})
    if request.pessimistic_factors:
        from planner.costmodel.uncertainty import corner, imbalance_corner

        hw = corner(hw, slow=True)
        imbalance = imbalance_corner(imbalance, slow=True) or imbalance
    quant = get_quantization(request.quantization)
    w = request.workload
    if w.longest_context_tokens > model.max_context_tokens:
        where = (
            "the --workload file's longest request (input + output)"
            if w.lengths
            else "--input-tokens + --output-tokens"
        )
        from planner.specs.catalog import longer_context_hint

        hint = longer_context_hint(model.name, w.longest_context_tokens)
        raise BadInputError(
            f"{where} = {w.longest_context_tokens} tokens exceeds the model's context of "
            f"{model.max_context_tokens} tokens; shorten it{hint}."
        )
    if request.mtp_tokens and max(request.mtp_tokens) > 0 and not model.speculates:
        raise BadInputError(
            f"--mtp: model '{model.name}' has no MTP layers; use --mtp 0 (or --draft-model NAME: an EAGLE-3 head)."
        )
    if model.draft is not None and request.mtp_tokens is not None and max(request.mtp_tokens) == 0:
        raise BadInputError(
            f"--draft-model {request.draft_model} with --mtp 0: the draft model would never run; give --mtp depths "
            "above 0 or drop --draft-model."
        )
    if not request.decode_attention_kv_split:
        check_unsplit_decode_attention(model, hw, named="--no-decode-attention-kv-split", drop="the flag")
    return CostContext(
        model,
        hw,
        quant,
        w,
        imbalance,
        request.hbm_utilization,
        decode_attention_kv_split=request.decode_attention_kv_split,
    )


def phase_contexts(request: PlanRequest) -> PhaseContexts:
    """(decode, prefill) cost contexts: each on its own machine for a mixed request, sharing the
    KV link between them (see the module docstring)."""
    if not request.is_mixed:
        ctx = make_context(request)
        return PhaseContexts(ctx, ctx, False)
    d_ctx = make_context(dataclasses.replace(request, hardware=request.decode_hw_name))
    # the prefill machine runs no decode step: its core count is not asked for
    p_ctx = make_context(dataclasses.replace(request, hardware=request.prefill_hw_name, decode_attention_kv_split=True))
    kv = request.kv_transfer_bytes_per_s or min(
        d_ctx.hw.kv_transfer_bandwidth_bytes_per_s, p_ctx.hw.kv_transfer_bandwidth_bytes_per_s
    )
    return PhaseContexts(
        dataclasses.replace(d_ctx, kv_transfer_bytes_per_s=kv),
        dataclasses.replace(p_ctx, kv_transfer_bytes_per_s=kv),
        True,
    )
