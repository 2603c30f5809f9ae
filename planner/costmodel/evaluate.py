"""Score a written-down plan: every figure of `predicted` from the cost model.

`evaluate_plan` is what `moeplan evaluate` runs, and what the search uses to fill in the plans
it exports, so an exported plan evaluates to the same figures (the round trip).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from planner.costmodel.acceptance_spread import default_acceptance_spread, percentile_request_factor, slo_tpot_factor
from planner.costmodel.colocated import colocated_figures
from planner.costmodel.context import CostContext
from planner.costmodel.coverage import coverage_notes, model_coverage_notes
from planner.costmodel.decode import decode_step, emitted_tokens_per_step
from planner.costmodel.economics import PricedPart, plan_economics
from planner.costmodel.imbalance import ImbalanceModel, default_imbalance_model
from planner.costmodel.memory import (
    HbmUse,
    decode_hbm,
    max_decode_concurrency,
    max_prefill_batch_tokens,
    prefill_hbm,
)
from planner.costmodel.prediction import (
    AfdPrediction,
    ColocatedPrediction,
    DecodePrediction,
    Prediction,
    PrefillPrediction,
    SystemPrediction,
)
from planner.costmodel.prefill import forwards_per_prompt, prefill_forward, prefill_rank_notes, prompt_alone_s
from planner.specs.catalog import load_hardware, load_plan_model
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan, check_plan, sequences_on
from planner.specs.quantization import QuantizationScheme, get_quantization

if TYPE_CHECKING:
    from planner.costmodel.mixed import MixedSpecs
    from planner.specs.validation import KnownMiss

COST_MODEL_VERSION = "moeplan-roofline-1"

T = TypeVar("T")


@dataclass(frozen=True)
class PlanSpecs:
    """The specs a plan names, loaded."""

    model: ModelSpec
    hw: HardwareSpec
    quant: QuantizationScheme


def resolve_ref(ref: str, base_dir: Path | None) -> str:
    """A catalog name stays a name; a relative path is tried as given, then beside the plan."""
    p = Path(ref)
    if base_dir is not None and not p.is_absolute() and not p.exists():
        beside = base_dir / p
        if beside.exists():
            return str(beside)
    return ref


def load_plan_specs(plan: Plan, base_dir: Path | None = None) -> PlanSpecs:
    """Load the model, machine and scheme a plan names, and check the plan against them."""
    model = load_plan_model(plan, base_dir, resolve_ref)
    hw = load_hardware(resolve_ref(plan.hardware, base_dir))
    quant = get_quantization(plan.quantization)
    check_plan(plan, model, hw)
    return PlanSpecs(model, hw, quant)


def plan_cost_context(
    plan: Plan,
    specs: PlanSpecs,
    imbalance: ImbalanceModel | None = None,
    kv_transfer_bytes_per_s: float | None = None,
) -> CostContext:
    """The cost context a plan is evaluated in: its specs, its own workload, HBM share and decode attention kernel."""
    return CostContext(
        specs.model,
        specs.hw,
        specs.quant,
        plan.workload,
        imbalance or default_imbalance_model(),
        plan.hbm_utilization,
        kv_transfer_bytes_per_s,
        decode_attention_kv_split=plan.decode_attention_kv_split,
    )


def _r(x: float, digits: int = 4) -> float:
    return float(round(float(x), digits))


def _ms(parts: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: _r(float(v[0]) * 1e3) for k, v in parts.items()}


def _hbm_fields(use: HbmUse, ctx: CostContext) -> dict[str, object]:
    total = int(round(float(use.total_bytes[0])))
    cap = int(use.capacity_bytes)
    return {
        "hbm_bytes_per_device": total,
        "hbm_capacity_bytes": cap,
        "hbm_headroom_bytes": cap - total,
        "hbm_utilization": ctx.hbm_utilization,
        "hbm_free_bytes": int(ctx.hw.hbm_bytes) - total,
        "hbm_role": use.role,
        "fits_hbm": bool(use.fits[0]),
        "hbm_breakdown_bytes": {k: int(round(float(v[0]))) for k, v in use.breakdown_bytes.items()},
    }


# The HBM figures of a decode or prefill block: they depend on the model, the scheme, the workload,
# the layout, the imbalance model and the machine's memory, never on its factors (efficiency,
# fixed costs, overlap), so a re-evaluation on other factors may take them over (`hbm_from`).
HBM_FIELDS = (
    "hbm_bytes_per_device",
    "hbm_capacity_bytes",
    "hbm_headroom_bytes",
    "hbm_utilization",
    "hbm_free_bytes",
    "hbm_role",
    "fits_hbm",
    "hbm_breakdown_bytes",
)


def _hbm_taken_over(block: DecodePrediction | PrefillPrediction | None, ctx: CostContext) -> dict[str, object] | None:
    """`block`'s HBM fields, when it was computed for the same device memory: capacity, HBM and reserves
    (else None: compute them; a safety net, `evaluate_plan`'s caller vouches for the rest)."""
    if block is None:
        return None
    if block.hbm_capacity_bytes != int(ctx.hbm_capacity_bytes) or block.hbm_utilization != ctx.hbm_utilization:
        return None
    if block.hbm_free_bytes + block.hbm_bytes_per_device != int(ctx.hw.hbm_bytes):
        return None
    reserve = ctx.hw.memory
    for key, spec in (("comm_buffers", reserve.comm_buffers), ("runtime_reserve", reserve.runtime_reserve)):
        if block.hbm_breakdown_bytes.get(key) != int(round(float(spec.value))):
            return None
    return {k: getattr(block, k) for k in HBM_FIELDS}


def acceptance_percentile_fields(ctx: CostContext, mtp_tokens: int, tpot_ms: float) -> dict[str, float | None]:
    """With MTP: the request percentile the workload judges its SLOs at, and the TPOT of the request at
    that percentile of its own MTP acceptance (planner.costmodel.acceptance_spread, the shipped tau)."""
    if mtp_tokens <= 0:
        return {"acceptance_percentile": None, "tpot_at_acceptance_percentile_ms": None}
    factor = percentile_request_factor(ctx.workload, mtp_tokens)
    return {
        "acceptance_percentile": ctx.workload.tpot_percentile,
        "tpot_at_acceptance_percentile_ms": _r(tpot_ms * factor),
    }


def judged_tpot_ms(ctx: CostContext, plan: Plan, mtp_tokens: int, tpot_ms: float) -> float:
    """The TPOT the plan's SLO judges: the mean, or with `slo.tpot_at_percentile` the TPOT of the
    SLO-percentile request at its own MTP acceptance."""
    return tpot_ms * slo_tpot_factor(plan.slo, ctx.workload, mtp_tokens)


def predict_decode(ctx: CostContext, plan: Plan, hbm_from: DecodePrediction | None = None) -> DecodePrediction:
    """Decode figures of the plan's decode phase (HBM figures from `hbm_from`, see `evaluate_plan`)."""
    phase = plan.decode_phase
    assert phase is not None
    step = decode_step(ctx, phase)
    hbm = _hbm_taken_over(hbm_from, ctx)
    if hbm is None:
        hbm = _hbm_fields(decode_hbm(ctx, phase), ctx)
        max_concurrency = max_decode_concurrency(ctx, phase)
    else:
        assert hbm_from is not None
        max_concurrency = hbm_from.max_concurrency_per_device
    per_dev = float(step.tokens_per_s_per_device[0])
    tpot_ms = float(step.tpot_s[0]) * 1e3
    slo = plan.slo.tpot_ms if plan.slo else None
    itl = plan.slo.max_itl_ms if plan.slo else None
    return DecodePrediction(
        step_ms=_r(float(step.step_s[0]) * 1e3),
        tpot_ms=_r(tpot_ms),
        tokens_per_step_per_sequence=_r(emitted_tokens_per_step(phase.mtp_tokens, ctx.workload.mtp_acceptance)),
        tokens_per_s_per_device=_r(per_dev),
        tokens_per_s_per_card=_r(per_dev * ctx.hw.devices_per_card),
        tokens_per_s_per_user=_r(1e3 / tpot_ms),
        sequences_per_instance=sequences_on(phase.concurrency_per_device, phase.devices),
        moe_imbalance=_r(float(step.moe_imbalance[0])),
        max_concurrency_per_device=max_concurrency,
        meets_tpot_slo=None if slo is None else bool(judged_tpot_ms(ctx, plan, phase.mtp_tokens, tpot_ms) <= slo),
        meets_itl_slo=None if itl is None else bool(float(step.step_s[0]) * 1e3 <= itl),
        breakdown_ms=_ms(step.breakdown_s),
        **acceptance_percentile_fields(ctx, phase.mtp_tokens, tpot_ms),  # type: ignore[arg-type]
        **hbm,  # type: ignore[arg-type]
    )


def predict_prefill(ctx: CostContext, plan: Plan, hbm_from: PrefillPrediction | None = None) -> PrefillPrediction:
    """Prefill figures of the plan's prefill phase (HBM figures from `hbm_from`, see `evaluate_plan`)."""
    phase = plan.prefill_phase
    assert phase is not None
    fwd = prefill_forward(ctx, phase)
    hbm = _hbm_taken_over(hbm_from, ctx)
    if hbm is None:
        hbm = _hbm_fields(prefill_hbm(ctx, phase), ctx)
        max_batch_tokens = max_prefill_batch_tokens(ctx, phase)
    else:
        assert hbm_from is not None
        max_batch_tokens = hbm_from.max_batch_tokens
    per_dev = float(fwd.tokens_per_s_per_device[0])
    ttft_ms = float(fwd.ttft_s[0]) * 1e3
    slo = plan.slo.ttft_ms if plan.slo else None
    return PrefillPrediction(
        forward_ms=_r(float(fwd.forward_s[0]) * 1e3),
        ttft_ms=_r(ttft_ms),
        prompt_alone_ms=None if plan.colocated is not None else _r(prompt_alone_s(ctx, phase) * 1e3),
        requests_per_forward=_r(float(fwd.requests_per_forward[0])),
        tokens_per_s_per_device=_r(per_dev),
        tokens_per_s_per_card=_r(per_dev * ctx.hw.devices_per_card),
        moe_imbalance=_r(float(fwd.moe_imbalance[0])),
        max_batch_tokens=max_batch_tokens,
        meets_ttft_slo=None if slo is None else bool(ttft_ms <= slo),
        breakdown_ms=_ms(fwd.breakdown_s),
        **hbm,  # type: ignore[arg-type]
    )


def predict_colocated(ctx: CostContext, plan: Plan) -> ColocatedPrediction:
    """Figures of one colocated instance of the plan."""
    section = plan.colocated
    assert section is not None
    fig = colocated_figures(ctx, section.decode_section(), section.prefill_section(), section.chunk_tokens)
    slo = plan.slo
    tpot_ms, ttft_ms = fig.tpot_s * 1e3, fig.ttft_s * 1e3
    hbm = _hbm_fields(fig.hbm, ctx)
    hbm.pop("hbm_role")
    out_per_s = fig.requests_per_s * ctx.workload.output_tokens
    return ColocatedPrediction(
        requests_per_s_per_instance=_r(fig.requests_per_s, 6),
        prefill_time_fraction=_r(fig.prefill_time_fraction, 6),
        tpot_ms=_r(tpot_ms),
        ttft_ms=_r(ttft_ms),
        longest_decode_pause_ms=_r(fig.pause_s * 1e3),
        itl_p50_ms=_r(fig.itl_p50_s * 1e3),
        itl_p99_ms=_r(fig.itl_p99_s * 1e3),
        chunk_tokens=section.chunk_tokens,
        chunk_step_fraction=_r(fig.chunk_step_fraction, 6),
        prompts_per_forward=None if section.chunk_tokens is not None else _r(fig.held_requests, 3),
        forwards_per_prompt=None if section.chunk_tokens is not None else fig.prompt_forwards,
        tokens_per_s_per_user=_r(1e3 / tpot_ms) if tpot_ms > 0 else 0.0,
        tokens_per_s_per_card=_r(out_per_s / ctx.hw.cards(section.devices)),
        meets_tpot_slo=None
        if slo is None or slo.tpot_ms is None
        else bool(judged_tpot_ms(ctx, plan, section.mtp_tokens, tpot_ms) <= slo.tpot_ms),
        meets_ttft_slo=None if slo is None or slo.ttft_ms is None else bool(ttft_ms <= slo.ttft_ms),
        meets_itl_slo=None if slo is None or slo.max_itl_ms is None else bool(fig.pause_s * 1e3 <= slo.max_itl_ms),
        **acceptance_percentile_fields(ctx, section.mtp_tokens, tpot_ms),  # type: ignore[arg-type]
        **hbm,  # type: ignore[arg-type]
    )


def predict_afd(ctx: CostContext, plan: Plan) -> AfdPrediction:
    """Figures of one AFD instance's decode steps (and of its prefill forward when it prefills too)."""
    from planner.costmodel.afd import (
        afd_decode_step,
        afd_hbm,
        afd_link,
        afd_prefill_forward_s,
        bound_side,
        check_ffn_side_fits,
        max_afd_concurrency,
    )

    section = plan.afd
    assert section is not None
    check_ffn_side_fits(ctx, section)
    step = afd_decode_step(ctx, section)
    att_use, ffn_use = afd_hbm(ctx, section, None, section.prefill_batch_tokens)
    hbm = _hbm_fields(att_use, ctx)
    ffn_total = int(round(float(ffn_use.total_bytes[0])))
    hbm["fits_hbm"] = bool(att_use.fits[0]) and bool(ffn_use.fits[0])
    per_dev = float(step.tokens_per_s_per_device[0])
    tpot_ms = float(step.tpot_s[0]) * 1e3
    slo = plan.slo.tpot_ms if plan.slo else None
    itl = plan.slo.max_itl_ms if plan.slo else None
    forward = (
        _r(float(afd_prefill_forward_s(ctx, section)[0]) * 1e3) if section.prefill_batch_tokens is not None else None
    )
    return AfdPrediction(
        attention_devices=section.attention_devices,
        ffn_devices=section.ffn_devices,
        micro_batches=section.micro_batches,
        link=afd_link(ctx, section).name,
        step_ms=_r(float(step.step_s[0]) * 1e3),
        tpot_ms=_r(tpot_ms),
        tokens_per_step_per_sequence=_r(emitted_tokens_per_step(section.mtp_tokens, ctx.workload.mtp_acceptance)),
        tokens_per_s_per_device=_r(per_dev),
        tokens_per_s_per_card=_r(per_dev * ctx.hw.devices_per_card),
        tokens_per_s_per_attention_device=_r(float(step.tokens_per_s_per_attention_device[0])),
        tokens_per_s_per_user=_r(1e3 / tpot_ms),
        sequences_per_instance=sequences_on(section.concurrency_per_device, section.attention_devices),
        moe_imbalance=_r(float(step.moe_imbalance[0])),
        attention_layer_ms=_r(float(step.attention_layer_s[0]) * 1e3),
        ffn_layer_ms=_r(float(step.ffn_layer_s[0]) * 1e3),
        transfer_layer_ms=_r(float(step.transfer_layer_s[0]) * 1e3),
        bound=bound_side(step, section.micro_batches)[0],
        max_concurrency_per_device=max_afd_concurrency(ctx, section),
        meets_tpot_slo=None if slo is None else bool(judged_tpot_ms(ctx, plan, section.mtp_tokens, tpot_ms) <= slo),
        meets_itl_slo=None if itl is None else bool(float(step.step_s[0]) * 1e3 <= itl),
        breakdown_ms=_ms(step.breakdown_s),
        attention_fits_hbm=bool(att_use.fits[0]),
        ffn_hbm_bytes_per_device=ffn_total,
        ffn_hbm_headroom_bytes=int(ffn_use.capacity_bytes) - ffn_total,
        ffn_hbm_free_bytes=int(ctx.hw.hbm_bytes) - ffn_total,
        ffn_fits_hbm=bool(ffn_use.fits[0]),
        ffn_hbm_breakdown_bytes={k: int(round(float(v[0]))) for k, v in ffn_use.breakdown_bytes.items()},
        prefill_forward_ms=forward,
        **acceptance_percentile_fields(ctx, section.mtp_tokens, tpot_ms),  # type: ignore[arg-type]
        **hbm,  # type: ignore[arg-type]
    )


def predict_afd_colocated(ctx: CostContext, plan: Plan, afd: AfdPrediction) -> ColocatedPrediction:
    """User-facing figures of AFD instances that prefill their own requests (whole forwards between
    decode steps, by the formulas of planner.costmodel.colocated)."""
    from planner.costmodel.afd import afd_hbm, afd_prefill_forward_s
    from planner.costmodel.colocated import (
        colocated_rate_and_latency,
        held_forward,
        itl_percentiles,
        whole_forward_long_gap_fraction,
    )

    section = plan.afd
    assert section is not None and section.prefill_batch_tokens is not None and afd.prefill_forward_ms is not None
    step_s, forward_s = afd.step_ms / 1e3, afd.prefill_forward_ms / 1e3
    emitted = afd.tokens_per_step_per_sequence
    requests = section.prefill_batch_tokens / ctx.prefill_tokens_per_request
    # the forwards a prompt takes on its attention DP rank, back to back (planner.costmodel.colocated)
    own = float(forwards_per_prompt(ctx, section.prefill_batch_tokens, section.attention.dp, False))
    held, held_s = held_forward(
        ctx,
        section.attention_devices,
        section.concurrency_per_device,
        emitted,
        requests,
        forward_s,
        lambda tokens: afd_prefill_forward_s(ctx, section, tokens),
        own,
    )
    rate, fraction, tpot, ttft = (
        float(np.asarray(x).reshape(-1)[0])
        for x in colocated_rate_and_latency(
            step_s,
            emitted,
            section.attention_devices,
            section.concurrency_per_device,
            forward_s,
            requests,
            ctx.workload.output_tokens,
            held_s,
            held,
            own,
        )
    )
    long_fraction = whole_forward_long_gap_fraction(step_s, emitted, rate, held_s, held, fraction, own)
    pause = step_s + own * forward_s
    p50, p99 = (
        float(np.asarray(x).reshape(-1)[0]) for x in itl_percentiles(step_s, own * held_s + step_s, long_fraction)
    )
    att_use, _ = afd_hbm(ctx, section, None, section.prefill_batch_tokens)
    hbm = _hbm_fields(att_use, ctx)
    hbm.pop("hbm_role")
    hbm["fits_hbm"] = afd.fits_hbm
    slo = plan.slo
    cards = ctx.hw.cards(section.devices)
    return ColocatedPrediction(
        requests_per_s_per_instance=_r(rate, 6),
        prefill_time_fraction=_r(fraction, 6),
        tpot_ms=_r(tpot * 1e3),
        ttft_ms=_r(ttft * 1e3),
        longest_decode_pause_ms=_r(pause * 1e3),
        itl_p50_ms=_r(p50 * 1e3),
        itl_p99_ms=_r(p99 * 1e3),
        chunk_tokens=None,
        chunk_step_fraction=0.0,
        prompts_per_forward=_r(held, 3),
        forwards_per_prompt=int(own),
        tokens_per_s_per_user=_r(1e3 / (tpot * 1e3)) if tpot > 0 else 0.0,
        tokens_per_s_per_card=_r(rate * ctx.workload.output_tokens / cards),
        meets_tpot_slo=None
        if slo is None or slo.tpot_ms is None
        else bool(judged_tpot_ms(ctx, plan, section.mtp_tokens, tpot * 1e3) <= slo.tpot_ms),
        meets_ttft_slo=None if slo is None or slo.ttft_ms is None else bool(ttft * 1e3 <= slo.ttft_ms),
        meets_itl_slo=None if slo is None or slo.max_itl_ms is None else bool(pause * 1e3 <= slo.max_itl_ms),
        **acceptance_percentile_fields(ctx, section.mtp_tokens, tpot * 1e3),  # type: ignore[arg-type]
        **hbm,  # type: ignore[arg-type]
    )


def predict_system(
    plan: Plan,
    hw: HardwareSpec,
    decode: DecodePrediction | AfdPrediction,
    prefill: PrefillPrediction | None,
    colocated: ColocatedPrediction | None = None,
) -> SystemPrediction:
    """Requests per second when prefill and decode capacity are matched (or shared, colocated)."""
    w = plan.workload
    if colocated is not None:
        section = plan.colocated if plan.colocated is not None else plan.afd
        assert section is not None
        rps = colocated.requests_per_s_per_instance * section.instances
        cards = hw.cards(section.total_devices)
        return SystemPrediction(
            devices=section.total_devices,
            cards=_r(cards),
            prefill_requests_per_s=_r(rps),
            decode_requests_per_s=_r(rps),
            requests_per_s=_r(rps),
            bottleneck="colocated",
            output_tokens_per_s=_r(rps * w.output_tokens),
            output_tokens_per_s_per_card=_r(rps * w.output_tokens / cards),
            input_tokens_per_s=_r(rps * w.input_tokens),
        )
    decode_section = plan.decode if plan.decode is not None else plan.afd
    assert decode_section is not None and plan.prefill is not None
    d_dev, p_dev = decode_section.total_devices, plan.prefill.total_devices
    decode_out = decode.tokens_per_s_per_device * d_dev
    decode_rps = decode_out / w.output_tokens
    assert prefill is not None
    prefill_rps = plan.prefill.instances * prefill.requests_per_forward / (prefill.forward_ms / 1e3)
    devices = d_dev + p_dev
    return SystemPrediction.matched(
        devices, hw.cards(devices), decode_rps, prefill_rps, w.input_tokens, w.output_tokens
    )


def workload_notes(ctx: CostContext) -> list[str]:
    """What the workload section adds beyond one (input, output) pair, for the report."""
    w = ctx.workload
    notes = []
    if w.has_distribution:
        s = w.stats
        notes.append(
            f"length distribution of {len(w.lengths or [])} bins: mean {s.mean_input:.0f}+{s.mean_output:.0f} tokens, "
            f"longest request {s.longest_context} tokens; TTFT is judged at the p{w.ttft_percentile:g} prompt "
            f"({ctx.ttft_input_tokens} tokens), TPOT at the decode pool's output-weighted mean context "
            f"({ctx.mean_decode_context_tokens:.0f} tokens, std {ctx.decode_context_std_tokens:.0f}) "
            "for every percentile"
        )
    if w.hit_rate:
        notes.append(
            f"prefix cache: {w.hit_rate:.0%} of input tokens hit; prefill computes {ctx.prefill_tokens_per_request} "
            "tokens per request but KV (and the transfer to decode) covers the whole prompt"
        )
    return notes


def acceptance_spread_notes(
    plan: Plan, block: DecodePrediction | AfdPrediction | ColocatedPrediction | None
) -> list[str]:
    """A note when the mean TPOT meets the SLO but the request at the judged percentile of its own MTP
    acceptance does not (`block`: the one whose TPOT the user sees), with the SLO to ask for instead."""
    slo = plan.slo.tpot_ms if plan.slo else None
    if block is None or slo is None or not block.meets_tpot_slo or (plan.slo and plan.slo.tpot_at_percentile):
        return []
    at, pct = block.tpot_at_acceptance_percentile_ms, block.acceptance_percentile
    if at is None or pct is None or at <= slo:
        return []
    from planner.costmodel.acceptance_spread import spread_fit_runs

    ask = slo * block.tpot_ms / at
    wider = (
        f"; the draft model {plan.draft_model} is not an MTP head and may spread wider (SGLang's Qwen3-235B EAGLE-3 "
        "run on A3 reports a P99 TPOT twice its median)"
        if plan.draft_model
        else ""
    )
    return [
        f"TPOT at p{pct:g}: the mean TPOT ({block.tpot_ms:.1f} ms) meets the {slo:g} ms SLO, but the p{pct:g} "
        f"request, at its own MTP acceptance, takes about {at:.1f} ms (acceptance spread tau "
        f"{default_acceptance_spread():.3g} on the logit scale, fitted on {len(spread_fit_runs())} DeepSeek-R1 MTP "
        "runs, planner/costmodel/data/acceptance_spread.json; the search holds the mean step to the SLO, as the "
        f"measured TPOTs it is fitted on are means){wider}; to hold p{pct:g} to the SLO, ask for about "
        f"--tpot-ms {math.floor(ask * 10) / 10:g}"
    ]


KNOWN_MISS_IDS_SHOWN = 3  # a reason shared by more figures names this many and counts the rest


def _named(fids: list[str]) -> str:
    """The figures that miss for one reason: all of them, or the first few and how many more."""
    if len(fids) <= KNOWN_MISS_IDS_SHOWN:
        return ", ".join(fids)
    return f"{', '.join(fids[:KNOWN_MISS_IDS_SHOWN])} and {len(fids) - KNOWN_MISS_IDS_SHOWN} more"


def known_miss_notes(machine: str, phases: tuple[str, ...], model: str | None = None) -> list[str]:
    """One note per phase on which the cost model misses measured rows of `machine` (validation/'s
    `known_miss` marks, each checked by tests/costmodel/test_published.py to really miss): the figures,
    their models and the first clause of each reason (`moeplan fidelity --misses` prints them in
    full), and whether one is of `model`, the plan's own."""
    from planner.specs.validation import known_misses

    notes = []
    for phase in phases:
        # rows that share a reason are named together, with their models and the reason's gist
        by_reason: dict[str, list[KnownMiss]] = {}
        for miss in known_misses():
            if miss.machine == machine and miss.phase == phase:
                by_reason.setdefault(miss.why, []).append(miss)
        if not by_reason:
            continue
        misses = [m for group in by_reason.values() for m in group]
        said = "; ".join(
            f"{_named([m.figure_id for m in group])} "
            f"({', '.join(sorted({m.model for m in group if m.model}))}: {group[0].gist})"
            for group in by_reason.values()
        )
        own = sum(1 for m in misses if model and m.model == model)
        whose = (
            f"{own} of them {'is' if own == 1 else 'are'} of this plan's model ({model})"
            if own
            else (f"none is of this plan's model ({model})" if model else "")
        )
        notes.append(
            f"known miss: on {machine} the cost model misses {len(misses)} measured {phase} "
            f"figure{'s' if len(misses) != 1 else ''} outside their tolerance: {said}"
            + (f"; {whose}" if whose else "")
            + f"; read this plan's {phase} figures with that error in mind (each reason in full: "
            f"moeplan fidelity --misses; docs/fidelity.md)"
        )
    return notes


def hardware_notes(*machines: HardwareSpec) -> list[str]:
    """The announced-hardware warning of each distinct machine."""
    seen, out = set(), []
    for hw in machines:
        text = hw.announced_warning()
        if text and hw.name not in seen:
            seen.add(hw.name)
            out.append(text)
    return out


def attention_machine_notes(hw: HardwareSpec, model: ModelSpec) -> list[str]:
    """The machine's warning when the model's attention kinds were measured on it under another stack's file."""
    text = hw.attention_machine_warning({kind for kind, _, _ in model.attention_groups()})
    return [text] if text else []


# ---- one command's predictions, each made once ---------------------------------------------------

# key -> (value, the objects whose ids are in the key: held so that no other object takes an id over)
_MEMO: ContextVar[dict[Hashable, tuple[Any, tuple[object, ...]]] | None] = ContextVar("evaluation_memo", default=None)


@contextmanager
def evaluation_memo() -> Iterator[None]:
    """Inside the block, `evaluate_plan` answers a question it was asked before from memory.

    A question is the plan's content (`predicted` and `rank` aside), the spec objects it is scored
    on and the imbalance model: `moeplan plan` asks for a ranked plan's prediction in the search, in
    its band and in the lead check, and for the corners of the factor ranges in the band and the lead
    check. The memo lives as long as the block (one command): nothing outlives the run.
    """
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def remembered(key: Hashable, held: tuple[object, ...], make: Callable[[], T]) -> T:
    """`make()`, or inside `evaluation_memo` the value it gave for `key` before.

    `held`: the objects whose ids `key` uses (kept alive with the value, so the ids stay theirs).
    """
    memo = _MEMO.get()
    if memo is None:
        return make()
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = (make(), held)
    return hit[0]  # type: ignore[no-any-return]


def _imbalance_key(imb: ImbalanceModel) -> Hashable:
    """An equal model gives an equal key (the default is made afresh by each caller); measured
    loads (an array, not hashable) are keyed by a digest of their content."""
    content = getattr(imb, "cache_key", None)
    if callable(content):
        return (type(imb).__name__, content())
    try:
        hash(imb)
    except TypeError:  # a model of another kind without a content key: the object itself (held alive)
        return ("id", id(imb))
    key: Hashable = imb  # type: ignore[assignment]
    return key


def evaluate_plan(
    plan: Plan,
    base_dir: Path | None = None,
    imbalance: ImbalanceModel | None = None,
    specs: PlanSpecs | None = None,
    *,
    hbm_from: Prediction | None = None,
) -> Prediction:
    """Every figure the cost model predicts for `plan` (its own `predicted` block is ignored).

    `hbm_from`: this plan's prediction, with the same imbalance model, on a machine that differs
    from `specs.hw` in its factors only (`planner.costmodel.fitting.with_factors`: efficiency, fixed
    costs, overlap). HBM figures do not depend on factors, so its decode and prefill HBM figures are
    taken over instead of recomputed (the factor scenarios of the uncertainty band and of the lead).
    """
    from planner.costmodel.mixed import is_mixed_plan

    if is_mixed_plan(plan):
        return evaluate_mixed_plan(plan, base_dir, imbalance)
    imb = imbalance or default_imbalance_model()
    if specs is not None and _MEMO.get() is not None:
        given = specs
        key = (
            "prediction",
            plan.model_dump_json(exclude={"predicted", "rank"}),
            id(given.model),
            id(given.hw),
            id(given.quant),
            _imbalance_key(imb),
        )
        return remembered(key, (given, imb), lambda: _evaluate_single(plan, given, imb, hbm_from))
    return _evaluate_single(plan, specs or load_plan_specs(plan, base_dir), imb, hbm_from)


def _evaluate_single(plan: Plan, specs: PlanSpecs, imb: ImbalanceModel, hbm_from: Prediction | None) -> Prediction:
    ctx = plan_cost_context(plan, specs, imb)
    if hbm_from is not None and hbm_from.imbalance_model != imb.describe():
        hbm_from = None
    d_from, p_from = (hbm_from.decode, hbm_from.prefill) if hbm_from is not None else (None, None)
    decode = predict_decode(ctx, plan, d_from) if plan.decode_phase is not None else None
    prefill = predict_prefill(ctx, plan, p_from) if plan.prefill_phase is not None else None
    colocated = predict_colocated(ctx, plan) if plan.is_colocated else None
    afd = predict_afd(ctx, plan) if plan.afd is not None else None
    system = None
    if afd is not None and afd.prefill_forward_ms is not None:
        colocated = predict_afd_colocated(ctx, plan, afd)
        system = predict_system(plan, specs.hw, afd, None, colocated)
    elif afd is not None and prefill is not None:
        system = predict_system(plan, specs.hw, afd, prefill)
    elif decode is not None and prefill is not None:
        system = predict_system(plan, specs.hw, decode, prefill, colocated)
    prediction = Prediction(
        cost_model=COST_MODEL_VERSION,
        imbalance_model=imb.describe(),
        decode=decode,
        prefill=prefill,
        colocated=colocated,
        afd=afd,
        system=system,
        notes=hardware_notes(specs.hw)
        + attention_machine_notes(specs.hw, specs.model)
        + model_coverage_notes(specs.model)
        + known_miss_notes(
            specs.hw.name,
            tuple(
                p
                for p, present in (("decode", decode or colocated), ("prefill", prefill or colocated), ("afd", afd))
                if present
            ),
            specs.model.name,
        )
        + coverage_notes(
            plan,
            specs.hw.name,
            tuple(p for p, present in (("decode", decode), ("prefill", prefill)) if present is not None),
        )
        + workload_notes(ctx)
        + prefill_rank_notes(
            ctx,
            plan.prefill_phase
            if prefill is not None and (plan.colocated is None or plan.colocated.chunk_tokens is None)
            else None,
        )
        + acceptance_spread_notes(plan, colocated or afd or decode)
        + (
            [
                "colocated plan: its decode and prefill blocks are the instance's decode steps and prefill "
                "forwards alone; its TPOT, TTFT, tokens/s per user, throughput and HBM are the colocated block's"
            ]
            if colocated is not None and afd is None
            else []
        )
        + (
            [
                "AFD instances that prefill too: the afd block is their decode steps alone; their TPOT, TTFT, "
                "tokens/s per user, throughput and attention-side HBM are the colocated block's"
            ]
            if colocated is not None and afd is not None
            else []
        ),
    )
    parts = [PricedPart(phase, specs.hw, devices) for phase, devices in plan_devices(plan)]
    return prediction.model_copy(update={"economics": plan_economics(prediction, parts)})


def plan_devices(plan: Plan) -> list[tuple[str, int]]:
    """(phase, devices of all its instances) of every section of the plan that has devices."""
    sections = (("decode", plan.decode), ("prefill", plan.prefill), ("colocated", plan.colocated), ("afd", plan.afd))
    return [(name, section.total_devices) for name, section in sections if section is not None]


def evaluate_mixed_plan(
    plan: Plan,
    base_dir: Path | None = None,
    imbalance: ImbalanceModel | None = None,
    specs: MixedSpecs | None = None,
) -> Prediction:
    """A plan whose phases run on different machines (planner.costmodel.mixed)."""
    from planner.costmodel.mixed import load_mixed_specs, mixed_contexts, mixed_system

    specs = specs or load_mixed_specs(plan, base_dir, resolve_ref)
    d_ctx, p_ctx = mixed_contexts(plan, specs, imbalance)
    decode = predict_decode(d_ctx, plan) if plan.decode is not None else None
    prefill = predict_prefill(p_ctx, plan) if plan.prefill is not None else None
    system: SystemPrediction | None = None
    notes: list[str] = []
    if decode is not None and prefill is not None:
        system, notes = mixed_system(plan, specs.decode_hw, specs.prefill_hw, decode, prefill)
    prediction = Prediction(
        cost_model=COST_MODEL_VERSION,
        imbalance_model=d_ctx.imbalance.describe(),
        decode=decode,
        prefill=prefill,
        system=system,
        notes=hardware_notes(specs.decode_hw, specs.prefill_hw)
        + notes
        + workload_notes(p_ctx)
        + prefill_rank_notes(p_ctx, plan.prefill),
    )
    parts = []
    if plan.decode is not None:
        parts.append(PricedPart("decode", specs.decode_hw, plan.decode.total_devices))
    if plan.prefill is not None:
        parts.append(PricedPart("prefill", specs.prefill_hw, plan.prefill.total_devices))
    return prediction.model_copy(update={"economics": plan_economics(prediction, parts)})


def plan_with_prediction(plan: Plan, prediction: Prediction) -> Plan:
    """The plan with its `predicted` block replaced by `prediction`."""
    return plan.model_copy(update={"predicted": prediction.to_json()})
