"""The ranked list as rows: distinct deployments, their variants, and the order of near-ties.

A *variant* is a plan that differs from a plan ranked above it only inside an instance, in a
module whose layout changes no figure the table shows: the dense FFN and the LM head layouts (and, on
an EP1 instance, the MoE dispatch mode: one device moves no token). Its
deployment (structure, instance sizes and counts, attention and expert layouts, concurrency, MTP,
micro-batches, prefill batch) is the same and its predicted figures (tokens/s per card, TPOT,
TTFT) agree within `VARIANT_TOLERANCE`. The rows are distinct deployments; each row carries its
variants (`moeplan plan --variants` lists them).

Near-ties: plans whose objective figure (the search's: output tokens/s per card, per cost unit or
per watt; with --objective total, of the deployment; with a target rate, at equal cards or cost)
lies within `NEAR_TIE` of the first plan of their run are ordered by TTFT (shorter first), then by
the band's slow end (higher first), then by HBM headroom (more first). `order_rule` says so
under the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.specs.plan import Plan

VARIANT_TOLERANCE = 0.001  # predicted figures equal within 0.1%
NEAR_TIE = 0.005  # headlines within 0.5% are a near-tie
_ORDER_TAIL = (
    "plans within 0.5% of each other by TTFT (shorter first), then the band's slow end (higher first), then HBM "
    "headroom (more first). Rows are distinct deployments; plans differing only in the dense FFN or LM head layout "
    "(or an EP1 instance's dispatch) with figures within 0.1% are its variants (--variants lists them)."
)
ORDER_RULE_RATE = (
    "order: fewest cards for the rate, then tokens/s per card; plans within 0.5% by TTFT (shorter first), then "
    "the band's slow end, then HBM headroom. Rows are distinct deployments; dense FFN / LM head (and EP1 dispatch) "
    "variants within 0.1% are folded (--variants lists them)."
)


def order_rule(objective: str, rate: bool, weight_unit: str) -> str:
    """The line under the ranked table: what the list is ordered by, which is what the search ranked
    (planner.search.deployment.order_figures) under the request's objective and the budget's weight
    unit (planner.search.budget: devices or cards; a cost unit per hour with --objective cost, or per
    card bought when both machines of a mixed plan carry price_per_card; milliwatts with energy)."""
    if weight_unit == "cost unit" and objective == "cost":
        per, least = "cost unit (--objective cost)", "least cost per hour (--objective cost)"
    elif weight_unit == "cost unit":
        per, least = "cost unit (the machines' price_per_card)", "least cost (the machines' price_per_card)"
    elif weight_unit == "mW":
        per, least = "watt (--objective energy)", "least power (--objective energy)"
    else:
        per, least = "card", "fewest cards"
    if rate:
        then = "tokens/s per card" if per == "card" else "tokens/s"
        return ORDER_RULE_RATE.replace("fewest cards", least).replace("tokens/s per card", then)
    if objective == "total":
        return "order: output tokens/s of the whole deployment (--objective total); " + _ORDER_TAIL
    return f"order: tokens/s per {per}; " + _ORDER_TAIL


def _get(plan: Plan, *path: str) -> float | None:
    node: Any = plan.predicted or {}
    for part in path:
        if not isinstance(node, dict) or node.get(part) is None:
            return None
        node = node[part]
    return float(node)


def headline(plan: Plan) -> float:
    """Output tokens/s per card of the deployment (the decode, AFD or prefill block's for a one-phase plan)."""
    for path in (
        ("system", "output_tokens_per_s_per_card"),
        ("decode", "tokens_per_s_per_card"),
        ("afd", "tokens_per_s_per_card"),
    ):
        value = _get(plan, *path)
        if value is not None:
            return value
    return _get(plan, "prefill", "tokens_per_s_per_card") or 0.0


def ttft_ms(plan: Plan) -> float:
    return _get(plan, "colocated", "ttft_ms") or _get(plan, "prefill", "ttft_ms") or 0.0


def tpot_ms(plan: Plan) -> float:
    return _get(plan, "colocated", "tpot_ms") or _get(plan, "decode", "tpot_ms") or _get(plan, "afd", "tpot_ms") or 0.0


def slow_end(plan: Plan) -> float:
    """The headline at the slow end of its band (the headline itself when the plan has no band)."""
    u = (plan.predicted or {}).get("uncertainty") or {}
    bands = u.get("bands", {}) if isinstance(u, dict) else {}
    system = bands.get("system", {}).get("output_tokens_per_s_per_card")
    if system:
        return float(system["low"])
    for block in ("colocated", "decode", "afd"):
        b = bands.get(block, {}).get("tokens_per_s_per_card")
        if b:
            return float(b["low"])
    return headline(plan)


def headroom_bytes(plan: Plan) -> float:
    """The least HBM headroom of the plan's instances."""
    rooms = [_get(plan, block, "hbm_headroom_bytes") for block in ("colocated", "decode", "prefill")]
    values = [r for r in rooms if r is not None]
    return min(values) if values else 0.0


def _close(a: float, b: float, tolerance: float) -> bool:
    return abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-9)


def _deployment(plan: Plan) -> str:
    """The plan with the layouts of the modules that change no shown figure, the rank and the
    predictions taken out: what a variant shares with its row."""
    doc = plan.model_dump(mode="json", exclude={"predicted", "rank"})
    for section in ("decode", "prefill", "colocated", "afd"):
        if isinstance(doc.get(section), dict):
            doc[section].pop("dense_ffn", None)
            doc[section].pop("lm_head", None)
            moe = doc[section].get("moe")
            if isinstance(moe, dict) and moe.get("ep") == 1:
                moe.pop("comm", None)  # one device dispatches to no other: AllGather and All2All are one plan
    import json

    return json.dumps(doc, sort_keys=True)


def is_variant(plan: Plan, of: Plan) -> bool:
    """Whether `plan` is a variant of `of` (module docstring)."""
    if _deployment(plan) != _deployment(of):
        return False
    pairs = ((headline(plan), headline(of)), (tpot_ms(plan), tpot_ms(of)), (ttft_ms(plan), ttft_ms(of)))
    return all(_close(a, b, VARIANT_TOLERANCE) for a, b in pairs)


@dataclass
class Row:
    """One distinct deployment of the ranked list and the variants folded under it."""

    plan: Plan
    variants: list[Plan] = field(default_factory=list)


def fold_variants(plans: list[Plan]) -> list[Row]:
    """The plans as rows, in order: a plan that is a variant of a row above joins that row."""
    rows: list[Row] = []
    for plan in plans:
        for row in rows:
            if is_variant(plan, row.plan):
                row.variants.append(plan)
                break
        else:
            rows.append(Row(plan))
    return rows


OrderKey = tuple[float, float]  # (what near-ties must share, lower first; the figure, higher first)


def in_window(key: OrderKey, of: OrderKey) -> bool:
    """Whether a plan keyed `key`, at or below `of` in the order, could be a near-tie of `of`'s run:
    the same first part and a figure within `NEAR_TIE` of `of`'s (a run starts at or above `of`, so
    a plan outside this window is in no run that reaches `of`)."""
    return key[0] == of[0] and key[1] >= of[1] * (1 - NEAR_TIE)


def order_plans(plans: list[Plan], keys: list[OrderKey] | None = None) -> list[Plan]:
    """Best first by `keys` (per plan, planner.search.deployment.order_figures of its deployment: the
    search's objective; default: the headline), near-ties (the same first part, figures within
    `NEAR_TIE` of their run's first plan) by TTFT, then the band's slow end, then HBM headroom."""
    keyed = [(i, plan, keys[i] if keys is not None else (0.0, headline(plan))) for i, plan in enumerate(plans)]
    keyed.sort(key=lambda item: (item[2][0], -item[2][1]))
    out: list[Plan] = []
    start = 0
    while start < len(keyed):
        first = keyed[start][2]
        end = start + 1
        while end < len(keyed) and keyed[end][2][0] == first[0] and _close(keyed[end][2][1], first[1], NEAR_TIE):
            end += 1
        run = sorted(keyed[start:end], key=lambda it: (ttft_ms(it[1]), -slow_end(it[1]), -headroom_bytes(it[1]), it[0]))
        out.extend(p for _, p, _ in run)
        start = end
    return out


def renumbered(plans: list[Plan]) -> list[Plan]:
    """The plans with ranks 1, 2, ... in their order."""
    return [p.model_copy(update={"rank": i}) for i, p in enumerate(plans, start=1)]
