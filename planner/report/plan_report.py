"""Tables and documents for `moeplan plan`: the ranked list, the best plan, the JSON export."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.table import Table

from planner.costmodel.uncertainty import BAND_LEVEL, BAND_Z
from planner.ranking.compare import pd_cards
from planner.ranking.robust import band_cell, tpot_band_cell
from planner.ranking.rows import headline
from planner.specs.hardware import HardwareSpec
from planner.specs.plan import AfdPlan, MoELayout, PhasePlan, Plan, SharedExpertLayout

GIB = 1024.0**3


def _p(plan: Plan, *path: str) -> Any:
    node: Any = plan.predicted or {}
    for key in path:
        if node is None:
            return None
        node = node.get(key)
    return node


def cards_of(plan: Plan, hw: HardwareSpec) -> float:
    """Cards the plan occupies (a colocated plan's two sections share their devices; a mixed plan's
    phases count their own machine's cards, as its `predicted` system block does)."""
    mixed = any(getattr(s, "hardware", None) for s in (plan.decode, plan.prefill))
    cards = _p(plan, "system", "cards")
    if mixed and cards is not None:
        return float(cards)
    return hw.cards(plan.total_devices)


def compact_experts(moe: MoELayout, shared: SharedExpertLayout) -> str:
    """Experts and shared expert in a few characters: EP32x8 A2A, +S8 (dedicated devices), +S/TP4 (split)."""
    text = f"EP{moe.ep}x{moe.slots_per_device} {'AG' if moe.comm == 'allgather' else 'A2A'}"
    if shared.placement == "dedicated":
        text += f"+S{shared.devices}"
    elif shared.placement == "split":
        text += f"+S/TP{shared.tp}"
    return text


def compact_layouts(phase: PhasePlan) -> str:
    """Layouts in a few characters: attention|FFN|experts|head, e.g. DP32|TP8|EP32x8 AG|DP4xTP8."""
    parts = [phase.attention.short()]
    parts.append(phase.dense_ffn.short() if phase.dense_ffn is not None else "-")
    if phase.moe is not None:
        parts.append(compact_experts(phase.moe, phase.shared_expert))
    parts.append(phase.lm_head_layout.short())
    return "|".join(parts)


def compact_afd(section: AfdPlan) -> str:
    """An AFD instance in a few characters: attention side | FFN side, concurrency, MTP, micro-batches,
    e.g. 48A:DP48|DP48 16F:EP16x16 A2A|DP16 B40 MTP0 mb2 (dense FFN and shared expert on the FFN side
    unless marked)."""
    ffn = compact_experts(section.moe, section.shared_expert) if section.moe else "-"
    att = f"{section.attention.short()}|{section.lm_head_layout.short()}"
    if section.dense_ffn is not None:
        if section.dense_ffn_on == "attention":
            att += f"|ffn {section.dense_ffn.short()}"
        else:
            ffn += f"|{section.dense_ffn.short()}"
    if section.shared_expert_on == "attention":
        att += "|shared"
    return (
        f"{section.attention_devices}A:{att} {section.ffn_devices}F:{ffn} B{section.concurrency_per_device} "
        f"MTP{section.mtp_tokens} mb{section.micro_batches}"
    )


def draft_label(plan: Plan, tokens: int) -> str:
    """`MTP<k>`, or `EAGLE3:<k>` when an EAGLE-3 head drafts (the plan's draft_model)."""
    return f"{'EAGLE3:' if plan.draft_model else 'MTP'}{tokens}"


def decode_cell(plan: Plan) -> str:
    """The ranked table's decode cell: layouts and integers of the decode or AFD instances."""
    d = plan.decode_phase
    if plan.afd is not None:
        return "AFD " + compact_afd(plan.afd)
    if d is None:
        return "-"
    dec = f"{compact_layouts(d)} B{d.concurrency_per_device} {draft_label(plan, d.mtp_tokens)}"  # type: ignore[attr-defined]
    return dec + (f" mb{d.micro_batches}" if d.micro_batches > 1 else "")  # type: ignore[attr-defined]


def ranked_table(
    plans: list[Plan],
    hw: HardwareSpec,
    title: str,
    runs_on: list[dict[str, list[str]]] | None = None,
    variants: list[list[Plan]] | None = None,
    economics: bool = True,
) -> Table:
    """One row per plan: cards, P:D, layouts, concurrency, TPOT, TTFT, tokens/s per card, headroom;
    with `runs_on` (per plan: engine -> what it cannot run), the engines that run it; with
    `variants`, each plan's variants on rows of their own under it."""
    caption = (
        "P:D cards: prefill : decode instances x cards per instance; layouts: attention|dense FFN|experts|LM "
        "head over the instance's devices (dies); B: sequences per device (die); K: 1,024 "
        "tokens per forward; mb: micro-batches"
    )
    if any(p.draft_model for p in plans):
        caption += "; EAGLE3:k: k draft tokens per step from the EAGLE-3 draft head (--draft-model)"
    placements = {ph.shared_expert.placement for p in plans for ph in (p.decode, p.prefill, p.colocated) if ph}
    if "split" in placements:
        caption += "; +S/TPt: the shared expert split over the attention TP group of t devices"
    if "dedicated" in placements:
        caption += "; +Sn: n dedicated shared-expert devices"
    if any(p.afd is not None for p in plans):
        caption += (
            "\nAFD: attention-FFN disaggregated decode instances, per instance A attention devices (attention, KV, "
            "LM head) : F FFN devices (experts; dense FFN and shared expert too unless marked), micro-batches "
            "ping-ponging between them"
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
    table.add_column("decode", overflow="fold")
    table.add_column("prefill", overflow="fold")
    table.add_column("TPOT ms", justify="right", overflow="fold")
    table.add_column("TTFT ms", justify="right")
    table.add_column("ITL max ms", justify="right")
    prompts_only = bool(plans) and all(
        p.prefill_phase is not None and p.decode_phase is None and p.afd is None and not p.is_colocated for p in plans
    )
    # a prefill-only plan emits no output token: its figure is the prompt tokens its cards take in
    table.add_column("prompt tok/s/card" if prompts_only else "tok/s/card", justify="right")
    banded = any((p.predicted or {}).get("uncertainty") for p in plans)
    if banded:
        caption += (
            f"\n(low-high) under TPOT and tok/s/card: the {BAND_LEVEL:.0%} band, every factor at the slow / fast end "
            f"of its range and {BAND_Z:.3f} held-out errors past it"
        )
        table.caption = caption
    econ = economics_columns(plans) if economics else []
    for name, _ in econ:
        table.add_column(name, justify="right")
    if econ:
        caption += "\n" + economics_caption(plans, econ)
    table.add_column("HBM free GiB", justify="right")
    if runs_on:
        table.add_column("runs on")
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
    from planner.engines.profiles import running

    for i, plan in enumerate(plans):
        cells = _row_cells(plan, hw, banded, econ)
        if runs_on:
            cells.append(running(runs_on[i]))
        table.add_row(*cells)
        for variant in variants[i] if variants else []:
            more = _row_cells(variant, hw, banded, econ)
            more[0] = "variant"
            if runs_on:
                more.append("")
            table.add_row(*more, style="dim")
    return table


def kilo_tokens(tokens: int) -> str:
    """Tokens in units of 1,024 ('K' in the tables' captions): 73,728 -> '72K', 3,500 -> '3.418K'."""
    return f"{tokens / 1024:.4g}K"


def _row_cells(plan: Plan, hw: HardwareSpec, banded: bool, econ: list[tuple[str, str]]) -> list[str]:
    """One row of the ranked table (without the engines column)."""
    p = plan.prefill_phase
    pd = pd_cards(plan, hw)
    dec = decode_cell(plan)
    pre = "-"
    if p is not None:
        pre = "(same instances) " if plan.is_colocated else f"{compact_layouts(p)} "
        chunk = plan.colocated.chunk_tokens if plan.colocated is not None else None
        if chunk is not None:
            pre += f"chunk {kilo_tokens(chunk)}/step"
        else:
            pre += f"{kilo_tokens(p.batch_tokens)} mb{p.micro_batches}"
    together = plan.is_colocated or _p(plan, "colocated") is not None  # (AFD instances that prefill too)
    decoding = "afd" if plan.afd is not None else "decode"
    tpot = _p(plan, "colocated", "tpot_ms") if together else _p(plan, decoding, "tpot_ms")
    ttft = _p(plan, "colocated", "ttft_ms") if together else _p(plan, "prefill", "ttft_ms")
    sources = ("colocated",) if plan.is_colocated else (decoding, "prefill")
    heads = [x for x in (_p(plan, src, "hbm_free_bytes") for src in sources) if x is not None]
    if plan.afd is not None and _p(plan, "afd", "ffn_hbm_free_bytes") is not None:
        heads.append(_p(plan, "afd", "ffn_hbm_free_bytes"))
    itl = _p(plan, "colocated", "longest_decode_pause_ms") if together else _p(plan, decoding, "step_ms")
    return [
        str(plan.rank or ""),
        f"{cards_of(plan, hw):g}",
        pd,
        dec,
        pre,
        (f"{tpot:.1f}" if tpot is not None else "-") + (f"\n({tpot_band_cell(plan)})" if banded else ""),
        f"{ttft:.0f}" if ttft is not None else "-",
        f"{itl:.0f}" if itl is not None else "-",
        f"{headline(plan):.1f}" + (f"\n({band_cell(plan)})" if banded else ""),
        *(economics_cell(plan, key) for _, key in econ),
        f"{min(heads) / GIB:.1f}" if heads else "-",
    ]


# (column, economics figure) of the ranked and alternatives tables, shown when a plan has the figure
ECONOMICS_COLUMNS = (("cost/M out", "cost_per_million_output_tokens"), ("J/out tok", "joules_per_output_token"))


def economics_columns(plans: list[Plan]) -> list[tuple[str, str]]:
    """The cost and energy columns some plan of the list has a figure for."""
    return [(name, key) for name, key in ECONOMICS_COLUMNS if any(_p(p, "economics", key) is not None for p in plans)]


def economics_cell(plan: Plan, key: str) -> str:
    value = _p(plan, "economics", key)
    return "-" if value is None else f"{value:.4g}"


def economics_caption(plans: list[Plan], columns: list[tuple[str, str]]) -> str:
    """What the cost and energy columns shown count: the plan's cards (their price, their power)
    at its predicted output tokens/s."""
    parts = []
    if any(key == "cost_per_million_output_tokens" for _, key in columns):
        currencies = sorted({c for p in plans if (c := _p(p, "economics", "currency")) is not None})
        unit = f" ({', '.join(currencies)})" if currencies else ""
        parts.append(
            f"cost/M out{unit}: the price of the plan's card-hours per million output tokens at its predicted "
            "throughput"
        )
    if any(key == "joules_per_output_token" for _, key in columns):
        bases = sorted({b for p in plans if (b := _p(p, "economics", "power_basis")) is not None})
        power = f" (power: {' | '.join(bases)})" if bases else ""
        parts.append(f"J/out tok: the cards' power (a node's too where given) per output token{power}")
    return "; ".join(parts)


def plans_document(
    plans: list[Plan],
    status: str,
    notes: list[str] | None = None,
    simulated: list[dict[str, Any]] | None = None,
    engines: list[dict[str, Any]] | None = None,
    variants: list[list[Plan]] | None = None,
    space: list[Any] | None = None,
) -> str:
    """The JSON export: {"status": ..., ["space": [...]], ["notes": [...]], "plans": [...],
    ["simulated": [...]]}, deterministic byte for byte.

    `space`: the named limits of the space the status holds over (planner.candidates.
    restrictions: key, what each keeps out, how to lift it). `notes` (announced hardware: figures
    are vendor claims; mixed hardware; workload percentiles) appear only when there are any;
    `simulated` (`plan --simulate`: each plan's simulated percentiles and verdict, by rank) only
    when asked for. `engines`: per plan, `runs_on` (engine names) and `cannot_run` ({engine: the
    first field it lacks}), merged into the plan's object; `variants`: per plan, the plans folded
    under it (same deployment, another dense FFN / LM head layout)."""
    doc: dict[str, Any] = {"status": status}
    if space:
        doc["space"] = [{"limit": r.key, "keeps_out": r.keeps_out, "lift": r.lift} for r in space]
    if notes:
        doc["notes"] = notes
    out = []
    for i, p in enumerate(plans):
        item = p.model_dump(mode="json", exclude_none=True)
        if engines is not None:
            item.update(engines[i])
        if variants is not None and variants[i]:
            item["variants"] = [v.model_dump(mode="json", exclude_none=True, exclude={"rank"}) for v in variants[i]]
        out.append(item)
    doc["plans"] = out
    if simulated is not None:
        doc["simulated"] = simulated
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_NEAREST = re.compile(
    r"(--[a-z][a-z-]*) to at least ([0-9][0-9,]*(?:\.[0-9]+)?)"
    r"|(--base [a-z][a-z-]*)=([0-9][0-9,]*(?:\.[0-9]+)?) or more"  # whatif's base (planner.cli.whatif_cmd)
)
_RAISE = re.compile(r"(?:raise|relax|lower) (--[a-z][a-z-]*)", re.IGNORECASE)


def infeasible_document(reason: str) -> str:
    """The JSON `plan --json` writes when nothing is feasible: status, the reason (the message
    naming the binding constraint), the binding constraint, and the nearest feasible point: the
    flag to change and, where the diagnosis names it, the value that works."""
    constraint = reason.split(":", 1)[0].strip() if ":" in reason else None
    nearest: dict[str, Any] | None = None
    found = _NEAREST.search(reason)
    if found:
        flag, number = (found.group(1), found.group(2)) if found.group(1) else (found.group(3), found.group(4))
        number = number.replace(",", "")
        value: float | int = float(number) if "." in number else int(number)
        nearest = {"flag": flag, "value": value}
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
        title="The search space's named limits (every decode concurrency of its axis and every batch is searched)",
        caption="basis: physics, engine (what the serving engines run), model (what the cost model "
        "represents) or choice; tests/candidates/test_restrictions.py checks each",
    )
    for name in ("limit", "keeps out", "why", "lift with"):
        table.add_column(name, overflow="fold")
    for r in space:
        table.add_row(r.short, r.keeps_out, r.basis, r.lift)
    return table


def alternatives_table(
    alternatives: list[Any],
    best: Plan,
    hw: HardwareSpec,
    by_cards: bool = False,
    economics: bool = True,
    by_total: bool = False,
) -> Table:
    """The best plan of each other structure (label, plan, rank) and its price against rank 1: in
    tokens/s per card, with a target rate (`by_cards`) in cards, with --objective total (`by_total`) in
    the deployment's output tokens/s."""
    table = Table(
        title="Best plan of each other structure (same budget and SLOs)",
        caption=f"price: {price_basis(by_cards, by_total)}; 'rank N' when it is in the list above",
    )
    for name, justify in (("structure", "left"), ("cards", "right"), ("P:D", "left"), ("decode", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    table.add_column("tok/s/card", justify="right")
    table.add_column("price", justify="right")
    econ = economics_columns([best, *(a.plan for a in alternatives if a.plan is not None)]) if economics else []
    for name, _ in econ:
        table.add_column(name, justify="right")
    for alt in alternatives:
        plan = alt.plan
        if plan is None:
            table.add_row(alt.label, "-", "-", alt.reason or "none fits", "-", "-", *("-" for _ in econ))
            continue
        dec = decode_cell(plan)
        price = alternative_price(plan, best, hw, by_cards, by_total) + (
            f" (rank {alt.rank})" if alt.rank is not None else ""
        )
        cells = (economics_cell(plan, key) for _, key in econ)
        table.add_row(
            alt.label, f"{cards_of(plan, hw):g}", pd_cards(plan, hw), dec, f"{headline(plan):.1f}", price, *cells
        )
    return table


def price_basis(by_cards: bool = False, by_total: bool = False) -> str:
    """What `alternative_price` compares."""
    if by_cards:
        return "cards against rank 1 (a target rate: fewest cards first)"
    if by_total:
        return "output tokens/s of the whole deployment against rank 1 (--objective total)"
    return "tokens/s per card against rank 1"


def alternative_price(plan: Plan, best: Plan, hw: HardwareSpec, by_cards: bool = False, by_total: bool = False) -> str:
    """`plan`'s price against rank 1 (`best`), as `alternatives_table` says it: tokens/s per card, with a
    target rate (`by_cards`) cards, with --objective total (`by_total`) the deployment's output tokens/s."""
    value, top = headline(plan), headline(best)
    if by_cards:
        extra = cards_of(plan, hw) - cards_of(best, hw)
        return f"{extra:+g} cards" if extra else "same cards"
    if by_total:
        mine, theirs = value * cards_of(plan, hw), top * cards_of(best, hw)
        return f"{(mine - theirs) / theirs * 100:+.1f}%" if theirs > 0 else "-"
    return f"{(value - top) / top * 100:+.1f}%" if top > 0 else "-"


def afd_line(alternatives: list[Any], best: Plan) -> str | None:
    """Whether attention-FFN disaggregation wins, and by how much (tokens/s per card of the whole
    deployment): rank 1 against the best plan of the other kind; None when AFD was not searched."""
    alt = next((a for a in alternatives if a.label in ("best AFD", "best non-AFD")), None)
    if alt is None:
        return None
    top = headline(best)
    if alt.plan is None:
        why = (alt.reason or "").removeprefix("none fits: ")
        if alt.label == "best AFD":
            if alt.unsearched:
                return f"AFD: not in the list: {why} (--engine none searches it anyway)."
            return f"AFD: does not win: no AFD deployment fits ({why})."
        if alt.unsearched:
            return f"AFD: not compared: {why} (add them to --structure to compare)."
        return f"AFD: wins: no deployment without AFD fits ({why})."
    other = headline(alt.plan)
    if other <= 0:
        return None
    if f"{other:.1f}" == f"{top:.1f}":
        return (
            f"AFD: ties: the best {'non-AFD' if best.afd is not None else 'AFD'} deployment gives the same "
            f"{top:.1f} tokens/s per card as rank 1."
        )
    if best.afd is not None:
        return (
            f"AFD: wins: rank 1 is an AFD deployment, {top / other - 1:+.1%} tokens/s per card over the best "
            f"deployment without AFD ({other:.1f})."
        )
    return (
        f"AFD: does not win: the best AFD deployment gives {other:.1f} tokens/s per card, {other / top - 1:+.1%} "
        f"against rank 1 ({top:.1f}, without AFD)."
    )
