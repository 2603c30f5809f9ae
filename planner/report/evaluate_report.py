"""Rich tables for one evaluated plan, and its JSON form."""

from __future__ import annotations

import json

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from planner.costmodel.prediction import (
    AfdPrediction,
    ColocatedPrediction,
    DecodePrediction,
    EconomicsPrediction,
    Prediction,
    PrefillPrediction,
)
from planner.specs.hardware import HardwareSpec
from planner.specs.plan import AfdPlan, DecodePlan, PhasePlan, Plan, PrefillPlan

GIB = 1024.0**3

BREAKDOWN_LABELS = {
    "attention": "attention (MLA/GQA compute, KV reads)",
    "attention_comm": "attention collectives",
    "dense_ffn": "dense FFN",
    "dense_ffn_comm": "dense FFN collectives",
    "moe": "MoE router + experts (busiest device)",
    "moe_comm": "MoE dispatch/combine (incl. overlapped or split shared expert)",
    "lm_head": "embedding + LM head + sampling",
    "lm_head_comm": "embedding + LM head collectives",
    "mtp": "MTP module (or draft head) + framework time",
    "micro_batch_overlap": "hidden by micro-batching",
    "launch_overhead": "operator launch costs",
    "afd_attention": "attention side busy (attention, its collectives and launches, all micro-batches)",
    "afd_ffn_wait": "attention side waits for the FFN side (its experts; all of them with one micro-batch)",
    "afd_transfer": "A<->F transfers the pipeline does not hide",
    "afd_fill_drain": "pipeline fill and drain",
}


def _ok(flag: bool | None) -> str:
    if flag is None:
        return "-"
    return "[green]yes[/]" if flag else "[red]NO[/]"


def _at_percentile(block: DecodePrediction | AfdPrediction | ColocatedPrediction) -> str:
    """'; p90 request ...': the TPOT of the request at the judged percentile of its own MTP acceptance."""
    at, pct = block.tpot_at_acceptance_percentile_ms, block.acceptance_percentile
    if at is None or pct is None:
        return ""
    return f"; p{pct:g} request about {at:.2f} ms, at its own MTP acceptance"


def _tpot_text(plan: Plan, block: DecodePrediction | AfdPrediction | ColocatedPrediction) -> str:
    """The TPOT row: the mean, the SLO-percentile request's (MTP), and the SLO beside the figure it judges."""
    slo = plan.slo.tpot_ms if plan.slo and plan.slo.tpot_ms else None
    verdict = f" (SLO {slo:g} ms: {_ok(block.meets_tpot_slo)})" if slo else ""
    at_pct = plan.slo is not None and plan.slo.tpot_at_percentile and block.tpot_at_acceptance_percentile_ms is not None
    if at_pct:
        return f"{block.tpot_ms:.2f} ms{_at_percentile(block)}{verdict}"
    return f"{block.tpot_ms:.2f} ms{verdict}{_at_percentile(block)}"


def layout_summary(phase: PhasePlan) -> str:
    """Short form of a phase's layouts: attention, dense FFN, MoE, shared expert, LM head (and the embedding
    where the plan lays it out itself)."""
    parts = [f"attn {phase.attention.short()}"]
    if phase.dense_ffn is not None:
        parts.append(f"ffn {phase.dense_ffn.short()}")
    if phase.moe is not None:
        parts.append(f"moe {phase.moe.short()}")
    if phase.shared_expert.placement != "replicated":
        parts.append(f"shared {phase.shared_expert.short()}")
    parts.append(f"head {phase.lm_head_layout.short()}")
    if phase.embedding is not None:
        parts.append(f"embedding {phase.embedding.short()}")
    return ", ".join(parts)


def _breakdown_table(title: str, breakdown_ms: dict[str, float], total_ms: float) -> Table:
    table = Table(title=title)
    table.add_column("part")
    table.add_column("ms", justify="right")
    table.add_column("share", justify="right")
    for key, ms in breakdown_ms.items():
        share = ms / total_ms if total_ms else 0.0
        table.add_row(BREAKDOWN_LABELS.get(key, key), f"{ms:.2f}", f"{share:.1%}")
    table.add_row("[bold]total[/]", f"[bold]{total_ms:.2f}[/]", "100.0%")
    return table


def _hbm_table(
    title: str, breakdown: dict[str, int], capacity: int, role: str, utilization: float = 1.0, free: int | None = None
) -> Table:
    table = Table(title=f"{title} (per device, {role} role)")
    table.add_column("part")
    table.add_column("GiB", justify="right")
    total = sum(breakdown.values())
    for key, b in breakdown.items():
        table.add_row(key.replace("_", " "), f"{b / GIB:.2f}")
    table.add_row("[bold]total[/]", f"[bold]{total / GIB:.2f}[/]")
    table.add_row(f"capacity ({utilization:g} of the device's HBM)", f"{capacity / GIB:.2f}")
    headroom = capacity - total
    style = "green" if headroom >= 0 else "red"
    table.add_row("headroom", f"[{style}]{headroom / GIB:.2f}[/]")
    if free is not None:
        table.add_row("free on the device", f"{free / GIB:.2f}")
    return table


def _instances_row(phase: PhasePlan, hw: HardwareSpec) -> str:
    return f"{phase.instances} x {phase.devices} ({hw.cards(phase.total_devices):g} x {hw.card_name})"


def _decode_summary(phase: DecodePlan, d: DecodePrediction, hw: HardwareSpec, plan: Plan) -> Table:
    colocated = plan.is_colocated
    # a colocated instance's layouts, TPOT, tokens/s and HBM are the colocated table's (one figure
    # in plan, evaluate and whatif); this table is its decode steps alone, prefill left out
    t = Table(
        title="Decode steps of the colocated instance (alone: prefill left out)" if colocated else "Decode",
        show_header=False,
    )
    t.add_column("figure")
    t.add_column("value")
    if not colocated:
        t.add_row("instances x devices", _instances_row(phase, hw))
        t.add_row("layouts", layout_summary(phase))
    t.add_row(
        "concurrency",
        f"{phase.concurrency_per_device} per device, {d.sequences_per_instance} per instance "
        f"(HBM allows {d.max_concurrency_per_device}" + (" without the prefill batch)" if colocated else ")"),
    )
    drafter = f" from the EAGLE-3 head {plan.draft_model}" if plan.draft_model else ""
    t.add_row(
        "MTP" if not plan.draft_model else "draft tokens",
        f"{phase.mtp_tokens} draft token(s){drafter}, {d.tokens_per_step_per_sequence:.3f} tokens per step per "
        "sequence",
    )
    t.add_row(
        "micro-batches",
        f"{phase.micro_batches}"
        + (" (compute of one overlaps the other's MoE dispatch/combine)" if phase.micro_batches > 1 else ""),
    )
    if not plan.decode_attention_kv_split:
        t.add_row(
            "decode attention",
            "one core per (sequence, KV head), no KV split (decode_attention_kv_split: false; "
            "planner/costmodel/kv_split.py)",
        )
    t.add_row("step", f"{d.step_ms:.2f} ms")
    if colocated:
        t.add_row("TPOT of the decode steps alone", f"{d.tpot_ms:.2f} ms (with prefill: the colocated table)")
    else:
        t.add_row(
            "TPOT",
            _tpot_text(plan, d),
        )
        t.add_row("tokens/s per user", f"{d.tokens_per_s_per_user:.1f}")
        t.add_row(
            "output tokens/s",
            f"{d.tokens_per_s_per_device:.1f} per device, {d.tokens_per_s_per_card:.1f} per card",
        )
    t.add_row("MoE imbalance (busiest/mean)", f"{d.moe_imbalance:.3f}")
    if not colocated:
        t.add_row(
            "HBM per device",
            f"{d.hbm_bytes_per_device / GIB:.2f} of {d.hbm_capacity_bytes / GIB:.1f} GiB "
            f"({d.hbm_utilization:g} of {hw.hbm_bytes / GIB:.0f}), fits: {_ok(d.fits_hbm)}",
        )
    return t


def _prefill_summary(phase: PrefillPlan, p: PrefillPrediction, hw: HardwareSpec, plan: Plan) -> Table:
    colocated = plan.is_colocated
    t = Table(
        title="Prefill forwards of the colocated instance (alone: decode left out)" if colocated else "Prefill",
        show_header=False,
    )
    t.add_column("figure")
    t.add_column("value")
    if not colocated:
        t.add_row("instances x devices", _instances_row(phase, hw))
        t.add_row("layouts", layout_summary(phase))
    t.add_row(
        "batch",
        f"{phase.batch_tokens} tokens per forward ({p.requests_per_forward:g} requests), "
        f"{phase.micro_batches} micro-batch(es)" + ("" if colocated else f"; HBM allows {p.max_batch_tokens} tokens"),
    )
    t.add_row("forward", f"{p.forward_ms:.2f} ms")
    slo = plan.slo.ttft_ms if plan.slo and plan.slo.ttft_ms else None
    if not colocated:  # (a colocated instance's TTFT, throughput and HBM: the colocated table)
        t.add_row(
            "TTFT (wait + forward + KV transfer)",
            f"{p.ttft_ms:.2f} ms" + (f" (SLO {slo:g} ms: {_ok(p.meets_ttft_slo)})" if slo else ""),
        )
        t.add_row("TTFT of a prompt alone (idle instance)", f"{p.prompt_alone_ms:.2f} ms")
        t.add_row(
            "input tokens/s",
            f"{p.tokens_per_s_per_device:.1f} per device, {p.tokens_per_s_per_card:.1f} per card",
        )
    t.add_row("MoE imbalance (busiest/mean)", f"{p.moe_imbalance:.3f}")
    if not colocated:
        t.add_row(
            "HBM per device",
            f"{p.hbm_bytes_per_device / GIB:.2f} of {p.hbm_capacity_bytes / GIB:.1f} GiB "
            f"({p.hbm_utilization:g} of {hw.hbm_bytes / GIB:.0f}), fits: {_ok(p.fits_hbm)}",
        )
    return t


def afd_layout_summary(section: AfdPlan) -> str:
    """Short form of an AFD instance: sides, micro-batches, and each side's layouts."""
    dense = f", ffn {section.dense_layout.short()} on {section.dense_ffn_on}" if section.dense_ffn is not None else ""
    moe = section.moe.short() if section.moe is not None else "-"
    shared = "" if section.shared_expert_on == "ffn" else ", shared expert on attention"
    if section.shared_expert.placement == "dedicated":
        shared = f", shared x{section.shared_expert.devices}"
    return (
        f"{section.attention_devices} attention + {section.ffn_devices} FFN devices: attn {section.attention.short()}, "
        f"head {section.lm_head_layout.short()} | moe {moe}{dense}{shared}"
    )


def _afd_summary(section: AfdPlan, a: AfdPrediction, hw: HardwareSpec, plan: Plan) -> Table:
    both = section.prefill_batch_tokens is not None
    t = Table(
        title="AFD decode steps (alone: the instances' prefill left out)"
        if both
        else "AFD decode (attention-FFN disaggregated)",
        show_header=False,
    )
    t.add_column("figure")
    t.add_column("value")
    t.add_row(
        "instances x devices",
        f"{section.instances} x ({section.attention_devices} + {section.ffn_devices}) "
        f"({hw.cards(section.total_devices):g} x {hw.card_name})",
    )
    t.add_row("layouts", afd_layout_summary(section))
    t.add_row("A<->F link", f"{a.link}; {a.transfer_layer_ms * 1e3:.1f} us per layer, micro-batch and direction")
    t.add_row(
        "concurrency",
        f"{section.concurrency_per_device} per attention device, {a.sequences_per_instance} per instance "
        f"(HBM allows {a.max_concurrency_per_device})",
    )
    t.add_row(
        "MTP",
        f"{section.mtp_tokens} draft token(s) on the attention side, {a.tokens_per_step_per_sequence:.3f} tokens per "
        "step per sequence",
    )
    t.add_row(
        "micro-batches",
        f"{section.micro_batches}"
        + (" (ping-pong between the two sides)" if section.micro_batches > 1 else " (no ping-pong)"),
    )
    t.add_row(
        "one MoE layer, one micro-batch",
        f"attention side {a.attention_layer_ms:.3f} ms, FFN side {a.ffn_layer_ms:.3f} ms, transfer "
        f"{a.transfer_layer_ms:.3f} ms each way: "
        + (
            "one micro-batch, so the sides work in turn (attention + FFN + both transfers a layer)"
            if a.bound == "in turn"
            else f"{a.bound} binds"
        ),
    )
    t.add_row("step", f"{a.step_ms:.2f} ms")
    if both:
        t.add_row("TPOT of the decode steps alone", f"{a.tpot_ms:.2f} ms (with prefill: the colocated table)")
        t.add_row("prefill forward", f"{a.prefill_forward_ms:.2f} ms for {section.prefill_batch_tokens} tokens")
    else:
        t.add_row(
            "TPOT",
            _tpot_text(plan, a),
        )
        t.add_row("tokens/s per user", f"{a.tokens_per_s_per_user:.1f}")
        t.add_row(
            "output tokens/s",
            f"{a.tokens_per_s_per_device:.1f} per device, {a.tokens_per_s_per_card:.1f} per card (both sides); "
            f"{a.tokens_per_s_per_attention_device:.1f} per attention device",
        )
    t.add_row("MoE imbalance (busiest/mean)", f"{a.moe_imbalance:.3f}")
    t.add_row(
        "HBM per device",
        f"attention {a.hbm_bytes_per_device / GIB:.2f}, FFN {a.ffn_hbm_bytes_per_device / GIB:.2f} of "
        f"{a.hbm_capacity_bytes / GIB:.1f} GiB ({a.hbm_utilization:g} of {hw.hbm_bytes / GIB:.0f}), fits: "
        f"{_ok(a.attention_fits_hbm)} / {_ok(a.ffn_fits_hbm)}",
    )
    return t


def _afd_tables(plan: Plan, a: AfdPrediction, hw: HardwareSpec) -> list[RenderableType]:
    assert plan.afd is not None
    cap, util = a.hbm_capacity_bytes, a.hbm_utilization
    return [
        _afd_summary(plan.afd, a, hw, plan),
        _breakdown_table("AFD decode step by part", a.breakdown_ms, a.step_ms),
        _hbm_table("AFD HBM", a.hbm_breakdown_bytes, cap, "attention", util, a.hbm_free_bytes),
        _hbm_table("AFD HBM", a.ffn_hbm_breakdown_bytes, cap, "FFN", util, a.ffn_hbm_free_bytes),
    ]


def evaluate_tables(
    plan: Plan, prediction: Prediction, hw: HardwareSpec, prefill_hw: HardwareSpec | None = None
) -> list[RenderableType]:
    """Every table `moeplan evaluate` prints (`prefill_hw`: the prefill machine of a mixed plan)."""
    out: list[RenderableType] = []
    colocated = prediction.colocated
    if plan.afd is not None and prediction.afd is not None:
        out.extend(_afd_tables(plan, prediction.afd, hw))
    if plan.decode_phase is not None and prediction.decode is not None:
        d = prediction.decode
        out.append(_decode_summary(plan.decode_phase, d, hw, plan))
        out.append(_breakdown_table("Decode step by module", d.breakdown_ms, d.step_ms))
        # a colocated instance holds its decode state and one prefill batch's KV cache and
        # activations: its HBM is the colocated figures' (the decode block's leaves the batch out)
        use = colocated if colocated is not None else d
        out.append(
            _hbm_table(
                "Colocated HBM" if colocated is not None else "Decode HBM",
                use.hbm_breakdown_bytes,
                use.hbm_capacity_bytes,
                d.hbm_role,
                use.hbm_utilization,
                use.hbm_free_bytes,
            )
        )
    if plan.prefill_phase is not None and prediction.prefill is not None:
        p = prediction.prefill
        out.append(_prefill_summary(plan.prefill_phase, p, prefill_hw or hw, plan))
        out.append(_breakdown_table("Prefill forward by module", p.breakdown_ms, p.forward_ms))
        if colocated is None:
            out.append(
                _hbm_table(
                    "Prefill HBM",
                    p.hbm_breakdown_bytes,
                    p.hbm_capacity_bytes,
                    p.hbm_role,
                    p.hbm_utilization,
                    p.hbm_free_bytes,
                )
            )
    colocated_section = plan.decode_phase if plan.decode_phase is not None else plan.afd
    if prediction.colocated is not None and colocated_section is not None:
        c = prediction.colocated
        chunked = c.chunk_tokens is not None
        t = Table(
            title="Colocated instance ("
            + ("chunked prefill rides along the decode steps)" if chunked else "prefill and decode in turn)"),
            show_header=False,
        )
        t.add_column("figure")
        t.add_column("value")
        if plan.afd is not None:
            t.add_row("instances x devices", f"{plan.afd.instances} x {plan.afd.devices} (AFD, table above)")
            t.add_row("layouts (both phases)", afd_layout_summary(plan.afd))
        else:
            assert plan.decode_phase is not None
            t.add_row("instances x devices", _instances_row(plan.decode_phase, hw))
            t.add_row("layouts (both phases)", layout_summary(plan.decode_phase))
        t.add_row("requests/s per instance", f"{c.requests_per_s_per_instance:.3f}")
        t.add_row("time spent in prefill", f"{c.prefill_time_fraction:.1%}")
        slo = plan.slo
        t.add_row(
            "TPOT (decode stalls during prefill)",
            _tpot_text(plan, c),
        )
        t.add_row(
            "TTFT (step in flight, queue, own chunks)"
            if chunked
            else "TTFT (step in flight, half a forward, own forwards)",
            f"{c.ttft_ms:.2f} ms"
            + (f" (SLO {slo.ttft_ms:g} ms: {_ok(c.meets_ttft_slo)})" if slo and slo.ttft_ms else ""),
        )
        t.add_row("tokens/s per user", f"{c.tokens_per_s_per_user:.1f}")
        if c.chunk_tokens is not None:
            t.add_row(
                "prefill schedule",
                f"chunked: up to {c.chunk_tokens} prompt tokens ride along a decode step; "
                f"{c.chunk_step_fraction:.0%} of the steps carry a chunk",
            )
        else:
            held = (
                ""
                if c.prompts_per_forward is None
                else f"; a forward holds about {c.prompts_per_forward:.2f} prompts, what a full instance admits"
            )
            if c.forwards_per_prompt is not None and c.forwards_per_prompt > 1:
                held += (
                    f"; a prompt takes {c.forwards_per_prompt} forwards in a row on its attention DP rank "
                    "(its rank's share of the batch)"
                )
            t.add_row("prefill schedule", "whole forwards between decode steps (decoding stops during each)" + held)
        itl_slo = slo.max_itl_ms if slo else None
        t.add_row(
            "inter-token latency P50 / P99",
            f"{c.itl_p50_ms:.0f} / {c.itl_p99_ms:.0f} ms (gaps between the steps that emit a sequence's tokens)",
        )
        t.add_row(
            "longest gap between two tokens",
            f"{c.longest_decode_pause_ms:.0f} ms"
            + (f" (limit {itl_slo:g} ms: {_ok(c.meets_itl_slo)})" if itl_slo else "")
            + (" (a whole prefill forward comes between them)" if c.chunk_tokens is None else " (a step with a chunk)"),
        )
        t.add_row("output tokens/s per card", f"{c.tokens_per_s_per_card:.1f}")
        t.add_row(
            "HBM per device",
            f"{c.hbm_bytes_per_device / GIB:.2f} of {c.hbm_capacity_bytes / GIB:.1f} GiB "
            f"({c.hbm_utilization:g} of {hw.hbm_bytes / GIB:.0f}; prefill batch included"
            + ("; an attention device" if plan.afd is not None else "")
            + f"), fits: {_ok(c.fits_hbm)}",
        )
        out.insert(0, t)
    if prediction.system is not None:
        s = prediction.system
        title = "System (colocated instances)" if colocated is not None else "System (prefill and decode matched)"
        if plan.afd is not None:
            title = (
                "System (AFD instances prefill and decode)"
                if colocated is not None
                else ("System (prefill instances and AFD decode instances matched)")
            )
        t = Table(title=title, show_header=False)
        t.add_column("figure")
        t.add_column("value")
        t.add_row("devices / cards", f"{s.devices} / {s.cards:g}")
        t.add_row(
            "requests/s",
            f"{s.requests_per_s:.3f} (each instance prefills and decodes its own requests)"
            if colocated is not None
            else f"{s.requests_per_s:.3f} (prefill can serve {s.prefill_requests_per_s:.3f}, "
            f"decode {s.decode_requests_per_s:.3f}; {s.bottleneck} binds)",
        )
        t.add_row(
            "output tokens/s",
            f"{s.output_tokens_per_s:.1f} ({s.output_tokens_per_s_per_card:.1f} per card)",
        )
        t.add_row("input tokens/s", f"{s.input_tokens_per_s:.1f}")
        out.append(t)
    if prediction.economics is not None:
        out.append(economics_table(prediction.economics))
    notes = list(prediction.notes) + whole_forward_notes(plan, prediction)
    if notes:
        out.append(Text("\n".join(f"note: {n}" for n in notes)))
    return out


def whole_forward_notes(plan: Plan, prediction: Prediction) -> list[str]:
    """A colocated instance in whole prefill forwards whose forwards hold fewer prompts than its
    batch: how many, and which figures are at which (planner.costmodel.colocated)."""
    co, c = plan.colocated, prediction.colocated
    if co is None or co.chunk_tokens is not None or c is None or c.prompts_per_forward is None:
        return []
    w = plan.workload
    per_request = max(1, round(w.stats.mean_input * (1.0 - w.hit_rate)))  # CostContext.prefill_tokens_per_request
    batch = (co.prefill_batch_tokens or per_request) / per_request
    if c.prompts_per_forward >= batch - 1e-3:
        return []
    spans = c.forwards_per_prompt or 1
    if spans > 1:
        return [
            f"whole prefill forwards: a full instance admits a prompt only as a sequence finishes, and each prompt "
            f"takes {spans} forwards in a row on its attention DP rank (its rank's share of the batch), so its "
            f"forwards hold about {c.prompts_per_forward:.2f} prompts' worth of tokens, not the {batch:.1f} of this "
            "plan's batch: the TPOT, time in prefill and requests/s above are at those forwards, the TTFT, longest "
            "gap and HBM at the full batch; a larger batch takes fewer forwards a prompt (docs/simulate.md compares "
            "this with the serving simulator)"
        ]
    return [
        f"whole prefill forwards: a full instance admits a prompt only as a sequence finishes, so its forwards "
        f"hold about {c.prompts_per_forward:.2f} prompts, not the {batch:.1f} of this plan's batch (vLLM and SGLang "
        "prefill what they admit; MindIE with supportSelectBatch off, as the launch files set it): the TPOT, time "
        "in prefill and requests/s above are at those forwards, the TTFT, longest gap and HBM at the full batch, "
        "so a smaller batch would serve the same with less HBM and shorter gaps (docs/simulate.md compares "
        "this with the serving simulator)"
    ]


def economics_table(e: EconomicsPrediction) -> Table:
    """Cost and energy at the predicted throughput, and what a missing figure needs."""
    t = Table(title=f"Cost and energy ({e.throughput_basis})", show_header=False)
    t.add_column("figure")
    t.add_column("value")
    t.add_row("cards", f"{e.cards:g}")
    if e.power_w is not None:
        t.add_row("power", f"{e.power_w / 1e3:.2f} kW ({e.power_basis})")
    if e.joules_per_output_token is not None:
        t.add_row("energy per output token", f"{e.joules_per_output_token:.3f} J")
    if e.joules_per_token is not None:
        counted = "input + output" if e.joules_per_output_token is not None else "input: no output tokens"
        t.add_row(f"energy per token ({counted})", f"{e.joules_per_token:.4f} J")
    if e.price_per_hour is not None:
        t.add_row("price per hour", f"{e.price_per_hour:.2f} {e.currency}")
    if e.cost_per_million_output_tokens is not None:
        t.add_row("cost per million output tokens", f"{e.cost_per_million_output_tokens:.4g} {e.currency}")
    if e.cost_per_million_tokens is not None:
        t.add_row("cost per million tokens (input + output)", f"{e.cost_per_million_tokens:.4g} {e.currency}")
    for line in e.missing:
        t.add_row("not computed", line)
    return t


def plan_json(plan: Plan) -> str:
    """A plan as JSON text (deterministic: fixed key order, no trailing spaces)."""
    return json.dumps(plan.model_dump(mode="json", exclude_none=True), indent=2, ensure_ascii=False) + "\n"
