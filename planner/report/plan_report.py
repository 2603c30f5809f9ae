"""Tables and documents for `moeplan plan`: the ranked list, the best plan, the JSON export."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.table import Table

from planner.ranking.compare import pd_cards
from planner.ranking.robust import band_cell, tpot_band_cell
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
    """Cards the plan occupies (a colocated plan's two sections share their devices; a mixed plan's
    phases count their own machine's cards, as its `predicted` system block does)."""
    mixed = any(getattr(s, "hardware", None) for s in (plan.decode, plan.prefill))
    cards = _p(plan, "system", "cards")
    if mixed and cards is not None:
        return float(cards)
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
        "P:D cards: prefill : decode instances x cards per instance; layouts: attention|dense FFN|experts|LM "
        "head over the instance's devices (dies); B: sequences per device (die); K: thousand "
        "tokens per forward; mb: micro-batches"
    )
    if any(p.is_colocated for p in plans):
        caption += (
            "\ncolocated: prefill and decode on the same instances, taking turns (whole forwards: decoding "
            "pauses for each) or chunked (up to N prompt tokens ride along each decode step); TPOT is the mean "
            "over the stalls, ITL max the longest gap (--no-colocated ranks only disaggregated plans)"
        )
    table = Table(title=title, caption=caption)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("cards", justify="right", no_wrap=True)
    table.add_column("P:D cards", no_wrap=True)
    table.add_column("decode")
    table.add_column("prefill")
    table.add_column("TPOT ms", justify="right")
    table.add_column("TTFT ms", justify="right")
    table.add_column("ITL max ms", justify="right")
    table.add_column("tok/s/card", justify="right")
    banded = any((p.predicted or {}).get("uncertainty") for p in plans)
    if banded:
        caption += "\n(low-high) under TPOT and tok/s/card: the band, every factor at the slow / fast end of its range"
        table.caption = caption
    table.add_column("HBM free GiB", justify="right")
    utilizations = sorted({p.hbm_utilization for p in plans})
    caption += (
        "\nHBM free: per device, of the device's whole HBM; plans fill at most "
        + "/".join(f"{u:g}" for u in utilizations)
        + " of it (--hbm-utilization)"
    )
    heads_tps = [round(headline(p), 1) for p in plans]  # (as shown)
    if any(b > a for a, b in zip(heads_tps, heads_tps[1:], strict=False)):
        caption += (
            "\nranks follow the search's integer cost tables (every time rounded up to whole microseconds; with "
            "--robust, the slow end of the band): a row may show a hair more tok/s/card than the one above it"
        )
    table.caption = caption
    for plan in plans:
        d, p = plan.decode_phase, plan.prefill_phase
        pd = pd_cards(plan, hw)
        dec = "-"
        if d is not None:
            dec = f"{compact_layouts(d)} B{d.concurrency_per_device} MTP{d.mtp_tokens}"
            dec += f" mb{d.micro_batches}" if d.micro_batches > 1 else ""
        pre = "-"
        if p is not None:
            pre = "(same instances) " if plan.is_colocated else f"{compact_layouts(p)} "
            chunk = plan.colocated.chunk_tokens if plan.colocated is not None else None
            if chunk is not None:
                pre += f"chunk {chunk / 1024:g}K/step"
            else:
                pre += f"{p.batch_tokens // 1024}K mb{p.micro_batches}"
        tpot = _p(plan, "colocated", "tpot_ms") if plan.is_colocated else _p(plan, "decode", "tpot_ms")
        ttft = _p(plan, "colocated", "ttft_ms") if plan.is_colocated else _p(plan, "prefill", "ttft_ms")
        sources = ("colocated",) if plan.is_colocated else ("decode", "prefill")
        heads = [x for x in (_p(plan, src, "hbm_free_bytes") for src in sources) if x is not None]
        itl = _p(plan, "colocated", "longest_decode_pause_ms") if plan.is_colocated else _p(plan, "decode", "step_ms")
        table.add_row(
            str(plan.rank or ""),
            f"{cards_of(plan, hw):g}",
            pd,
            dec,
            pre,
            (f"{tpot:.1f}" if tpot is not None else "-") + (f"\n({tpot_band_cell(plan)})" if banded else ""),
            f"{ttft:.0f}" if ttft is not None else "-",
            f"{itl:.0f}" if itl is not None else "-",
            f"{headline(plan):.1f}" + (f"\n({band_cell(plan)})" if banded else ""),
            f"{min(heads) / GIB:.1f}" if heads else "-",
        )
    return table


def plans_document(
    plans: list[Plan],
    status: str,
    notes: list[str] | None = None,
    simulated: list[dict[str, Any]] | None = None,
    space: list[Any] | None = None,
) -> str:
    """The JSON export: {"status": ..., ["space": [...]], ["notes": [...]], "plans": [...],
    ["simulated": [...]]}, deterministic byte for byte.

    `space`: the named limits of the space the status holds over (planner.candidates.
    restrictions: key, what each keeps out, how to lift it). `notes` (announced hardware: figures
    are vendor claims; mixed hardware; workload percentiles) appear only when there are any;
    `simulated` (`plan --simulate`: each plan's simulated percentiles and verdict, by rank) only
    when asked for."""
    doc: dict[str, Any] = {"status": status}
    if space:
        doc["space"] = [{"limit": r.key, "keeps_out": r.keeps_out, "lift": r.lift} for r in space]
    if notes:
        doc["notes"] = notes
    doc["plans"] = [p.model_dump(mode="json", exclude_none=True) for p in plans]
    if simulated is not None:
        doc["simulated"] = simulated
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_NEAREST = re.compile(r"(--[a-z][a-z-]*) to at least ([0-9][0-9,]*(?:\.[0-9]+)?)")
_RAISE = re.compile(r"(?:raise|relax|lower) (--[a-z][a-z-]*)", re.IGNORECASE)


def infeasible_document(reason: str) -> str:
    """The JSON `plan --json` writes when nothing is feasible: status, the reason (the message
    naming the binding constraint), the binding constraint, and the nearest feasible point: the
    flag to change and, where the diagnosis names it, the value that works."""
    constraint = reason.split(":", 1)[0].strip() if ":" in reason else None
    nearest: dict[str, Any] | None = None
    found = _NEAREST.search(reason)
    if found:
        number = found.group(2).replace(",", "")
        value: float | int = float(number) if "." in number else int(number)
        nearest = {"flag": found.group(1), "value": value}
    else:
        loose = _RAISE.search(reason)
        if loose:
            nearest = {"flag": loose.group(1), "value": None}
    doc = {"status": "INFEASIBLE", "reason": reason, "constraint": constraint, "nearest": nearest}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def space_line(space: list[Any]) -> str:
    """The line under the verdict: the named limits of the space it holds over."""
    if not space:
        return "over every layout, concurrency and batch the cost model represents."
    return "over: " + "; ".join(r.short for r in space) + " (--explain-space lists them)."


def space_table(space: list[Any]) -> Table:
    """`--explain-space`: every named limit of the space, what it keeps out, why, how to lift it."""
    table = Table(
        title="The search space's named limits (every concurrency and batch is searched)",
        caption="basis: physics, engine (what the serving engines run), model (what the cost model "
        "represents) or choice; tests/candidates/test_restrictions.py checks each",
    )
    for name in ("limit", "keeps out", "why", "lift with"):
        table.add_column(name, overflow="fold")
    for r in space:
        table.add_row(r.short, r.keeps_out, r.basis, r.lift)
    return table


def alternatives_table(alternatives: list[Any], best: Plan, hw: HardwareSpec) -> Table:
    """The best plan of each other structure (label, plan, rank) and its price against rank 1."""
    table = Table(
        title="Best plan of each other structure (same budget and SLOs)",
        caption="price: tokens/s per card against rank 1; 'rank N' when it is in the list above",
    )
    for name, justify in (("structure", "left"), ("cards", "right"), ("P:D", "left"), ("decode", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("tok/s/card", justify="right")
    table.add_column("price", justify="right")
    top = headline(best)
    for alt in alternatives:
        plan = alt.plan
        if plan is None:
            table.add_row(alt.label, "-", "-", alt.reason or "none fits", "-", "-")
            continue
        d = plan.decode_phase
        dec = f"{compact_layouts(d)} B{d.concurrency_per_device} MTP{d.mtp_tokens}" if d is not None else "-"
        value = headline(plan)
        price = f"{(value - top) / top * 100:+.1f}%" if top > 0 else "-"
        if alt.rank is not None:
            price += f" (rank {alt.rank})"
        table.add_row(alt.label, f"{cards_of(plan, hw):g}", pd_cards(plan, hw), dec, f"{value:.1f}", price)
    return table
