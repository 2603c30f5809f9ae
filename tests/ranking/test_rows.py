"""The ranked list's rows (planner/ranking/rows.py): variants fold, near-ties order, distinct rows."""

from __future__ import annotations

import copy

from planner.costmodel.evaluate import evaluate_plan
from planner.ranking.rows import NEAR_TIE, fold_variants, headline, is_variant, order_plans
from planner.specs.catalog import load_plan
from planner.specs.plan import ParallelLayout, Plan


def _scored(name: str = "a2-d70") -> Plan:
    plan, _ = load_plan(name)
    return plan.model_copy(update={"predicted": evaluate_plan(plan).model_dump(mode="json")})


def _with(plan: Plan, **figures: float) -> Plan:
    """`plan` with its predicted decode figures replaced (tokens_per_s_per_card scales the headline)."""
    pred = copy.deepcopy(plan.predicted)
    for key, value in figures.items():
        pred["decode"][key] = value
    return plan.model_copy(update={"predicted": pred})


def test_a_plan_differing_only_in_the_lm_head_layout_with_the_same_figures_is_a_variant():
    base = _scored()
    head = base.decode.model_copy(update={"lm_head": ParallelLayout(dp=8, tp=4)})
    other = base.model_copy(update={"decode": head})
    assert is_variant(other, base)
    rows = fold_variants([base, other])
    assert len(rows) == 1 and rows[0].variants == [other]
    # a figure 0.2% away is another row; so is another concurrency
    moved = _with(other, tokens_per_s_per_card=headline(base) * 1.002)
    assert not is_variant(moved, base)
    busier = base.model_copy(update={"decode": base.decode.model_copy(update={"concurrency_per_device": 70})})
    assert not is_variant(busier, base)


def test_near_ties_are_ordered_by_ttft_then_the_slow_end_then_headroom():
    base = _scored("a2-p")  # a prefill plan: its headline is the prefill block's tokens/s per card
    pred = copy.deepcopy(base.predicted)

    def variant(tps: float, ttft: float, rank: int) -> Plan:
        p = copy.deepcopy(pred)
        p["prefill"]["tokens_per_s_per_card"], p["prefill"]["ttft_ms"] = tps, ttft
        return base.model_copy(update={"predicted": p, "rank": rank})

    top = variant(1000.0, 700.0, 1)
    near = variant(1000.0 * (1 - NEAR_TIE / 2), 600.0, 2)  # within 0.5%, shorter TTFT: first
    far = variant(1000.0 * (1 - 2 * NEAR_TIE), 100.0, 3)  # 1% behind: its TTFT does not lift it
    assert [p.rank for p in order_plans([top, near, far])] == [2, 1, 3]
    same = variant(1000.0, 700.0, 4)  # tied on headline and TTFT: more headroom first
    pred4 = copy.deepcopy(same.predicted)
    pred4["prefill"]["hbm_headroom_bytes"] = top.predicted["prefill"]["hbm_headroom_bytes"] + 2**30
    same = same.model_copy(update={"predicted": pred4})
    assert [p.rank for p in order_plans([top, same])] == [4, 1]
