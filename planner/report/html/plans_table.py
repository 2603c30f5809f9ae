"""The ranked plans as table rows: every layout written out in full, variants folded under their leader.

A *variant* is a plan that reaches the same figures as the plan ranked just above it (same cards,
instances and sizes, concurrency, MTP depth, micro-batches, prefill batch, and output tokens/s per
card as shown) and differs only in module layouts (say the decode dense FFN DP16xTP2 instead of
DP8xTP4). The terminal lists them one per rank; the page folds consecutive variants under the
first of them and says which choices differ (`planner.ranking.compare.plan_choices`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.ranking.compare import pd_cards, plan_choices
from planner.ranking.robust import headline_band
from planner.report.plan_report import GIB, cards_of, compact_afd, compact_layouts, draft_label, headline
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import AfdPlan, AttentionLayout, PhasePlan, Plan

COMM_NAMES = {"allgather": "AllGather + ReduceScatter", "alltoall": "All2All"}


@dataclass(frozen=True)
class Figure:
    """A number with its band (low, high) where the prediction carries one, and how to print it."""

    value: float | None
    low: float | None = None
    high: float | None = None
    digits: int = 1
    band_digits: int | None = None  # None: as the value

    @property
    def text(self) -> str:
        return "-" if self.value is None else f"{self.value:,.{self.digits}f}"

    @property
    def band_text(self) -> str:
        if self.low is None or self.high is None or self.low == self.high:
            return ""
        digits = self.digits if self.band_digits is None else self.band_digits
        return f"{self.low:,.{digits}f}–{self.high:,.{digits}f}"

    @property
    def sort_key(self) -> str:
        return "" if self.value is None else repr(float(self.value))


def attention_text(att: AttentionLayout) -> str:
    """The attention layout in words; the report's hybrid prefill names its three parts."""
    if not att.is_hybrid:
        return att.short()
    core = AttentionLayout(dp=att.dp, tp=att.tp).short()
    return f"{att.pre_layout.short()} before the core, {core} core, {att.post_layout.short()} output projection"


def module_layouts(phase: PhasePlan | AfdPlan, routed_experts: int | None) -> list[tuple[str, str]]:
    """(module, layout) for every module of an instance, in full."""
    rows = [("attention", attention_text(phase.attention))]
    if phase.dense_ffn is not None:
        rows.append(("dense FFN", phase.dense_ffn.short()))
    if phase.moe is not None:
        moe = phase.moe
        text = f"EP{moe.ep} × {moe.slots_per_device} slots, {COMM_NAMES.get(moe.comm, moe.comm)}"
        if routed_experts:
            redundant = moe.ep * moe.slots_per_device - routed_experts
            text += f" ({redundant} redundant {'copy' if redundant == 1 else 'copies'})"
        rows.append(("experts", text))
        shared = phase.shared_expert
        if shared.placement == "dedicated":
            rows.append(("shared expert", f"{shared.devices} dedicated devices"))
        elif shared.placement == "split":
            rows.append(("shared expert", f"split over the attention TP{shared.tp} group"))
    rows.append(("LM head", phase.lm_head_layout.short()))
    return rows


def afd_layouts(afd: AfdPlan, routed_experts: int | None) -> list[tuple[str, str]]:
    """(module and side, layout) of an AFD instance: attention and LM head on the attention
    devices, experts on the FFN devices, the dense FFN and the shared expert where the plan puts them."""
    side = {
        "attention": "attention",
        "LM head": "attention",
        "experts": "ffn",
        "dense FFN": afd.dense_ffn_on,
        "shared expert": afd.shared_expert_on,
    }
    names = {"attention": f"{afd.attention_devices} attention devices", "ffn": f"{afd.ffn_devices} FFN devices"}
    return [(f"{m} ({names[side.get(m, 'ffn')]})", text) for m, text in module_layouts(afd, routed_experts)]


def afd_settings(plan: Plan) -> str:
    """Concurrency, MTP, micro-batches and link of an AFD instance."""
    a = plan.afd
    if a is None:
        return ""
    link = _p(plan, "afd", "link") or a.link
    text = f"{a.concurrency_per_device} sequences per attention device, MTP {a.mtp_tokens}"
    text += f", {a.micro_batches} micro-batches ping-ponging over {link}"
    if a.prefill_batch_tokens is not None:
        text += f"; prefills {a.prefill_batch_tokens:,} tokens per forward between decode steps"
    return text


def decode_settings(plan: Plan) -> str:
    """Concurrency, MTP and micro-batches of the decode phase (or the colocated instance's decode)."""
    d = plan.decode_phase
    if d is None:
        return ""
    text = f"{d.concurrency_per_device} sequences per device, MTP {d.mtp_tokens}"
    return text + (f", {d.micro_batches} micro-batches" if d.micro_batches > 1 else "")


def prefill_settings(plan: Plan) -> str:
    """Batch and micro-batches of the prefill phase (chunked prefill of a colocated instance)."""
    p = plan.prefill_phase
    if p is None:
        return ""
    chunk = plan.colocated.chunk_tokens if plan.colocated is not None else None
    if chunk is not None:
        return f"chunked prefill: up to {chunk:,} prompt tokens ride along each decode step"
    requests = ((plan.predicted or {}).get("prefill") or {}).get("requests_per_forward")
    per = f" ({requests:g} requests)" if requests else ""
    text = f"{p.batch_tokens:,} tokens per forward{per}"
    return text + (f", {p.micro_batches} micro-batches" if p.micro_batches > 1 else "")


def compact_code(plan: Plan) -> str:
    """The terminal's compact form of the plan (decode, then prefill), for readers who know it."""
    d, p = plan.decode_phase, plan.prefill_phase
    parts = []
    if plan.afd is not None:
        parts.append("AFD " + compact_afd(plan.afd))
    if d is not None:
        code = f"{compact_layouts(d)} B{d.concurrency_per_device} {draft_label(plan, d.mtp_tokens)}"
        parts.append(code + (f" mb{d.micro_batches}" if d.micro_batches > 1 else ""))
    if p is not None and not plan.is_colocated:
        parts.append(f"{compact_layouts(p)} {p.batch_tokens // 1024}K mb{p.micro_batches}")
    return " ; ".join(parts)


@dataclass
class Section:
    """One kind of instance of a plan, for the table and the drawing's legend."""

    role: str  # decode | prefill | colocated (an AFD side once AFD plans exist)
    instances: int
    devices: int
    cards: float
    layouts: list[tuple[str, str]]
    settings: list[str]


def plan_sections(
    plan: Plan, hw: HardwareSpec, model: ModelSpec | None, prefill_hw: HardwareSpec | None = None
) -> list[Section]:
    """The plan's kinds of instances: colocated, or prefill and decode (`prefill_hw`: the prefill
    machine of a plan whose phases run on two)."""
    routed = model.moe.routed_experts if model is not None and model.moe is not None else None
    out = []
    if plan.colocated is not None:
        c = plan.colocated
        settings = [decode_settings(plan), prefill_settings(plan)]
        out.append(
            Section("colocated", c.instances, c.devices, hw.cards(c.devices), module_layouts(c, routed), settings)
        )
        return out
    if plan.prefill is not None:
        p = plan.prefill
        p_hw = prefill_hw or hw
        out.append(
            Section(
                "prefill",
                p.instances,
                p.devices,
                p_hw.cards(p.devices),
                module_layouts(p, routed),
                [prefill_settings(plan)],
            )
        )
    if plan.afd is not None:
        a = plan.afd
        out.append(
            Section(
                "AFD decode",
                a.instances,
                a.devices,
                hw.cards(a.devices),
                afd_layouts(a, routed),
                [afd_settings(plan)],
            )
        )
    if plan.decode is not None:
        d = plan.decode
        out.append(
            Section(
                "decode",
                d.instances,
                d.devices,
                hw.cards(d.devices),
                module_layouts(d, routed),
                [decode_settings(plan)],
            )
        )
    return out


def _p(plan: Plan, *path: str) -> Any:
    node: Any = plan.predicted or {}
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _band(plan: Plan, block: str, figure: str) -> tuple[float | None, float | None]:
    b = _p(plan, "uncertainty", "bands", block, figure)
    return (b["low"], b["high"]) if isinstance(b, dict) else (None, None)


@dataclass
class PlanRow:
    """One ranked plan as the page's table shows it."""

    rank: int | None
    cards: float
    pd: str
    sections: list[Section]
    code: str
    headline: Figure
    tpot_ms: Figure
    ttft_ms: Figure
    itl_max_ms: Figure
    requests_per_s: Figure
    hbm_free_gib: Figure
    fits: bool
    meets_slos: bool | None
    differs: list[str] = field(default_factory=list)  # for a variant: the choices that differ from its leader


@dataclass
class RowGroup:
    """A plan and the variants folded under it."""

    leader: PlanRow
    variants: list[PlanRow]

    @property
    def differs(self) -> list[str]:
        """Every choice some variant makes differently from the leader."""
        seen: dict[str, None] = {}
        for v in self.variants:
            seen.update(dict.fromkeys(v.differs))
        return list(seen)


def plan_row(plan: Plan, hw: HardwareSpec, model: ModelSpec | None, prefill_hw: HardwareSpec | None = None) -> PlanRow:
    """The table's row of one plan."""
    colocated = plan.is_colocated
    head_band = headline_band_of(plan)
    decoding = "afd" if plan.afd is not None else "decode"
    tpot_block = "colocated" if colocated else decoding
    ttft_block = "colocated" if colocated else "prefill"
    blocks = ("colocated",) if colocated else (decoding, "prefill")
    frees = [x for x in (_p(plan, b, "hbm_free_bytes") for b in blocks) if x is not None]
    if plan.afd is not None and _p(plan, "afd", "ffn_hbm_free_bytes") is not None:
        frees.append(_p(plan, "afd", "ffn_hbm_free_bytes"))
    fits = all(_p(plan, b, "fits_hbm") is not False for b in blocks)
    meets = [_p(plan, b, k) for b in blocks for k in ("meets_tpot_slo", "meets_ttft_slo", "meets_itl_slo")]
    known = [m for m in meets if m is not None]
    itl = _p(plan, "colocated", "longest_decode_pause_ms") if colocated else _p(plan, decoding, "step_ms")
    return PlanRow(
        rank=plan.rank,
        cards=cards_of(plan, hw),
        pd=pd_cards(plan, hw),
        sections=plan_sections(plan, hw, model, prefill_hw),
        code=compact_code(plan),
        headline=Figure(headline(plan), *head_band, band_digits=0),
        tpot_ms=Figure(_p(plan, tpot_block, "tpot_ms"), *_band(plan, tpot_block, "tpot_ms")),
        ttft_ms=Figure(_p(plan, ttft_block, "ttft_ms"), *_band(plan, ttft_block, "ttft_ms"), digits=0),
        itl_max_ms=Figure(itl, digits=0),
        requests_per_s=Figure(_p(plan, "system", "requests_per_s"), *_band(plan, "system", "requests_per_s"), digits=2),
        hbm_free_gib=Figure(min(frees) / GIB if frees else None),
        fits=fits,
        meets_slos=all(known) if known else None,
    )


def headline_band_of(plan: Plan) -> tuple[float | None, float | None]:
    """(low, high) of the headline figure, as the terminal's band cell."""
    if not plan.predicted:
        return None, None
    from planner.costmodel.prediction import Prediction

    band = headline_band(Prediction.model_validate(plan.predicted))
    return (band[0], band[2]) if band is not None else (None, None)


def _variant_key(plan: Plan, hw: HardwareSpec) -> tuple[Any, ...]:
    d, p = plan.decode_phase, plan.prefill_phase
    chunk = plan.colocated.chunk_tokens if plan.colocated is not None else None
    a = plan.afd
    return (
        plan.is_colocated,
        None
        if a is None
        else (a.attention_devices, a.ffn_devices, a.concurrency_per_device, a.mtp_tokens, a.micro_batches),
        f"{cards_of(plan, hw):g}",
        pd_cards(plan, hw),
        None if d is None else (d.concurrency_per_device, d.mtp_tokens, d.micro_batches),
        None if p is None else (p.batch_tokens, p.micro_batches, chunk),
        f"{headline(plan):.1f}",
    )


def grouped_rows(
    plans: list[Plan],
    hw: HardwareSpec,
    model: ModelSpec | None,
    prefill_hw: HardwareSpec | None = None,
    variants: list[list[Plan]] | None = None,
) -> list[RowGroup]:
    """The plans as rows with their variants folded under them: `variants` (per plan, the search's own
    folding, planner.ranking.rows) where the search gave them, else consecutive plans that differ only
    in the dense FFN or LM head layout."""
    groups = list(zip(plans, variants, strict=True)) if variants is not None else _consecutive_variants(plans, hw)
    out = []
    for leader, more in groups:
        lead = plan_choices(leader, hw, model)
        rows = []
        for v in more:
            row = plan_row(v, hw, model, prefill_hw)
            this = plan_choices(v, hw, model)
            row.differs = [k for k in this if this[k] != lead.get(k)]
            rows.append(row)
        out.append(RowGroup(plan_row(leader, hw, model, prefill_hw), rows))
    return out


def _consecutive_variants(plans: list[Plan], hw: HardwareSpec) -> list[tuple[Plan, list[Plan]]]:
    """Each plan with the consecutive plans after it that differ only in the dense FFN or LM head layout."""
    groups: list[tuple[Plan, list[Plan]]] = []
    for plan in plans:
        if groups and _variant_key(plan, hw) == _variant_key(groups[-1][0], hw):
            groups[-1][1].append(plan)
        else:
            groups.append((plan, []))
    return groups
