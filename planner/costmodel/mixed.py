"""Score a plan whose phases run on different machines (prefill on one, decode on another).

A phase section may name its own `hardware`, overriding the plan's top-level one. Each phase is
costed on its own machine; the KV cache crosses from prefill to decode over
`prefill.kv_transfer_bytes_per_s` when the plan states it, else over the slower of the two
machines' `kv_transfer_bandwidth_bytes_per_s` (the same rule as `moeplan plan`), and that time
is part of the TTFT. The system figures count cards of each kind; with a `price_per_card` in both
hardware YAMLs they also give the deployment's cost and output tokens/s per cost unit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from planner.costmodel.context import CostContext
from planner.costmodel.imbalance import ImbalanceModel, default_imbalance_model
from planner.costmodel.prediction import DecodePrediction, PrefillPrediction, SystemPrediction
from planner.specs.catalog import load_hardware, load_plan_model
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan, check_phase, check_plan
from planner.specs.quantization import QuantizationScheme, get_quantization


@dataclass(frozen=True)
class MixedSpecs:
    """The specs a mixed plan names: one model and scheme, a machine per phase."""

    model: ModelSpec
    decode_hw: HardwareSpec
    prefill_hw: HardwareSpec
    quant: QuantizationScheme


def phase_hardware_refs(plan: Plan) -> tuple[str, str]:
    """(decode, prefill) hardware references: a section's own `hardware`, else the plan's."""
    d = plan.decode.hardware if plan.decode is not None and plan.decode.hardware else plan.hardware
    p = plan.prefill.hardware if plan.prefill is not None and plan.prefill.hardware else plan.hardware
    return d, p


def is_mixed_plan(plan: Plan) -> bool:
    """True when a phase names its own machine or the plan states the KV link."""
    return any(getattr(section, "hardware", None) is not None for section in (plan.decode, plan.prefill)) or (
        plan.prefill is not None and plan.prefill.kv_transfer_bytes_per_s is not None
    )


def load_mixed_specs(plan: Plan, base_dir: Path | None, resolve) -> MixedSpecs:
    """Load the model, each phase's machine and the scheme; check each phase on its machine."""
    if plan.afd is not None:
        from planner.errors import BadInputError

        raise BadInputError(
            "prefill.hardware / prefill.kv_transfer_bytes_per_s: a plan with an 'afd' section is costed on one "
            "machine (prefill on another machine beside AFD decode instances is not modelled); drop the field."
        )
    model = load_plan_model(plan, base_dir, resolve)
    d_ref, p_ref = phase_hardware_refs(plan)
    d_hw = load_hardware(resolve(d_ref, base_dir))
    p_hw = d_hw if p_ref == d_ref else load_hardware(resolve(p_ref, base_dir))
    quant = get_quantization(plan.quantization)
    # workload rules and MTP rules via check_plan on the decode machine, then each phase on its own
    check_plan(plan.model_copy(update={"prefill": None}) if plan.decode is not None else plan, model, d_hw)
    if plan.prefill is not None:
        check_phase("prefill", plan.prefill, model, p_hw)
    return MixedSpecs(model, d_hw, p_hw, quant)


def kv_link_bytes_per_s(plan: Plan, d_hw: HardwareSpec, p_hw: HardwareSpec) -> float:
    """The stated KV link of the plan, else the slower machine's."""
    stated = plan.prefill.kv_transfer_bytes_per_s if plan.prefill is not None else None
    return stated or min(d_hw.kv_transfer_bandwidth_bytes_per_s, p_hw.kv_transfer_bandwidth_bytes_per_s)


def mixed_contexts(
    plan: Plan, specs: MixedSpecs, imbalance: ImbalanceModel | None = None
) -> tuple[CostContext, CostContext]:
    """(decode, prefill) cost contexts of a mixed plan."""
    imb = imbalance or default_imbalance_model()
    kv = kv_link_bytes_per_s(plan, specs.decode_hw, specs.prefill_hw)
    d_ctx = CostContext(
        specs.model,
        specs.decode_hw,
        specs.quant,
        plan.workload,
        imb,
        plan.hbm_utilization,
        kv_transfer_bytes_per_s=kv,
        decode_attention_kv_split=plan.decode_attention_kv_split,
    )
    # the prefill machine runs no decode step: its core count is not asked for
    return d_ctx, dataclasses.replace(d_ctx, hw=specs.prefill_hw, decode_attention_kv_split=True)


def mixed_system(
    plan: Plan, d_hw: HardwareSpec, p_hw: HardwareSpec, decode: DecodePrediction, prefill: PrefillPrediction
) -> tuple[SystemPrediction, list[str]]:
    """Requests/s with matched capacity; cards are the sum of each machine's cards. Also notes."""
    assert plan.decode is not None and plan.prefill is not None
    w = plan.workload
    d_dev, p_dev = plan.decode.total_devices, plan.prefill.total_devices
    decode_rps = decode.tokens_per_s_per_device * d_dev / w.output_tokens
    prefill_rps = plan.prefill.instances * prefill.requests_per_forward / (prefill.forward_ms / 1e3)
    rps = min(decode_rps, prefill_rps)
    d_cards, p_cards = d_hw.cards(d_dev), p_hw.cards(p_dev)
    cards = d_cards + p_cards
    notes = []
    if d_hw.name != p_hw.name:  # (one machine with the phases budgeted apart is not mixed hardware)
        notes.append(
            f"mixed hardware: decode on {d_hw.name} ({d_cards:g} cards), prefill on {p_hw.name} ({p_cards:g} cards); "
            "tokens/s per card counts both kinds of card"
        )
    if d_hw.price_per_card is not None and p_hw.price_per_card is not None:
        cost = d_cards * d_hw.price_per_card.value + p_cards * p_hw.price_per_card.value
        notes.append(
            f"cost {cost:.6g} units ({d_hw.name} {d_hw.price_per_card.value:g}/card, {p_hw.name} "
            f"{p_hw.price_per_card.value:g}/card): {rps * w.output_tokens / cost:.6g} output tokens/s per cost unit"
        )
    system = SystemPrediction.matched(d_dev + p_dev, cards, decode_rps, prefill_rps, w.input_tokens, w.output_tokens)
    return system, notes
