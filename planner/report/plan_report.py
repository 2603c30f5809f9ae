"""Tables and documents for `moeplan plan`: the ranked list, the best plan, the JSON export."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

from planner.specs.hardware import HardwareSpec
from planner.specs.plan import PhasePlan, Plan

GIB = 1024.0**3


def _p(plan: Plan, *path: str) -> Any:
    node: Any = plan.predicted or {}
    for key in path:
        if node is None:
            return None
        node = node.get(key)
    return node


def headline(plan: Plan) -> float:
    """The figure plans are ranked by: output tokens/s per card of the deployment."""
    s = _p(plan, "system", "output_tokens_per_s_per_card")
    if s is not None:
        return float(s)
    d = _p(plan, "decode", "tokens_per_s_per_card")
    if d is not None:
        return float(d)
    return float(_p(plan, "prefill", "tokens_per_s_per_card") or 0.0)


def cards_of(plan: Plan, hw: HardwareSpec) -> float:
    """Cards the plan occupies (a colocated plan's two sections share their devices)."""
    return hw.cards(plan.total_devices)


def compact_layouts(phase: PhasePlan) -> str:
    """Layouts in a few characters: attention|FFN|experts|head, e.g. DP32|TP8|EP32x8 AG|DP4xTP8."""
    parts = [phase.attention.short()]
    parts.append(phase.dense_ffn.short() if phase.dense_ffn is not None else "-")
    if phase.moe is not None:
        moe = f"EP{phase.moe.ep}x{phase.moe.slots_per_device} {'AG' if phase.moe.comm == 'allgather' else 'A2A'}"
        if phase.shared_expert.placement == "dedicated":
            moe += f"+S{phase.shared_expert.devices}"
        parts.append(moe)
    parts.append(phase.lm_head_layout.short())
    return "|".join(parts)


def ranked_table(plans: list[Plan], hw: HardwareSpec, title: str) -> Table:
    """One row per plan: cards, P:D, layouts, concurrency, TPOT, TTFT, tokens/s per card, headroom."""
    caption = (
        "layouts: attention|dense FFN|experts|LM head; B: sequences per device; K: thousand tokens per "
        "forward; mb: micro-batches"
    )
    if any(p.is_colocated for p in plans):
        caption += (
            "\ncolocated: prefill and decode on the same instances; their TPOT is an average, decoding "
            "pauses for a whole prefill forward now and then (--no-colocated to rank only disaggregated plans)"
        )
    table = Table(title=title, caption=caption)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("cards", justify="right", no_wrap=True)
    table.add_column("P:D", no_wrap=True)
    table.add_column("decode")
    table.add_column("prefill")
    table.add_column("TPOT ms", justify="right")
    table.add_column("TTFT ms", justify="right")
    table.add_column("tok/s/card", justify="right")
    table.add_column("HBM free GiB", justify="right")
    for plan in plans:
        d, p = plan.decode_phase, plan.prefill_phase
        if plan.is_colocated and d is not None:
            pd = f"colocated {d.instances}x{d.devices}"
        else:
            pd = f"{p.instances}x{p.devices}" if p else "-"
            pd += f" : {d.instances}x{d.devices}" if d else " : -"
        dec = "-"
        if d is not None:
            dec = f"{compact_layouts(d)} B{d.concurrency_per_device} MTP{d.mtp_tokens}"
            dec += f" mb{d.micro_batches}" if d.micro_batches > 1 else ""
        pre = "-"
        if p is not None:
            pre = "(same instances) " if plan.is_colocated else f"{compact_layouts(p)} "
            pre += f"{p.batch_tokens // 1024}K mb{p.micro_batches}"
        tpot = _p(plan, "colocated", "tpot_ms") if plan.is_colocated else _p(plan, "decode", "tpot_ms")
        ttft = _p(plan, "colocated", "ttft_ms") if plan.is_colocated else _p(plan, "prefill", "ttft_ms")
        sources = ("colocated",) if plan.is_colocated else ("decode", "prefill")
        heads = [x for x in (_p(plan, src, "hbm_headroom_bytes") for src in sources) if x is not None]
        table.add_row(
            str(plan.rank or ""),
            f"{cards_of(plan, hw):g}",
            pd,
            dec,
            pre,
            f"{tpot:.1f}" if tpot is not None else "-",
            f"{ttft:.0f}" if ttft is not None else "-",
            f"{headline(plan):.1f}",
            f"{min(heads) / GIB:.1f}" if heads else "-",
        )
    return table


def plans_document(plans: list[Plan], status: str) -> str:
    """The JSON export: {"status": ..., "plans": [...]}, deterministic byte for byte."""
    doc = {
        "status": status,
        "plans": [p.model_dump(mode="json", exclude_none=True) for p in plans],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
