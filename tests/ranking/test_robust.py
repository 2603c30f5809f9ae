"""Bands on predictions and the ranking's verdicts under shared factor scenarios."""

from __future__ import annotations

import pytest

from planner.costmodel.evaluate import PlanSpecs, evaluate_plan
from planner.costmodel.fidelity import _plan_and_specs
from planner.costmodel.fitting import factor_names, factor_spec, with_factors
from planner.costmodel.imbalance import SkewImbalance
from planner.costmodel.store_fit import heldout_error
from planner.costmodel.uncertainty import (
    BAND_Z,
    band_widening,
    corner,
    factor_ranges,
    imbalance_corner,
    prediction_uncertainty,
    scenarios,
)
from planner.ranking.robust import headline_band, lead_verdict, rank_by_low_end, with_band
from planner.specs.plan import ParallelLayout


def _d70():
    return _plan_and_specs("a2-d70")


def _variant(plan, **update):
    return plan.model_copy(update={"decode": plan.decode.model_copy(update=update)})


def test_every_shipped_factor_carries_a_range_that_holds_its_value():
    _, specs = _d70()
    ranges = factor_ranges(specs.hw)
    assert set(ranges) == set(factor_names(specs.hw))
    for n, (lo, hi) in ranges.items():
        assert lo <= factor_spec(specs.hw, n).value <= hi
        assert factor_spec(specs.hw, n).range.derived  # type: ignore[union-attr]


def test_band_brackets_the_prediction_and_follows_the_corners():
    plan, specs = _d70()
    mid = evaluate_plan(plan, specs=specs)
    u = prediction_uncertainty(plan, specs, mid)
    tps, tpot = u.bands["decode"]["tokens_per_s_per_card"], u.bands["decode"]["tpot_ms"]
    assert tps.low < tps.mid < tps.high
    assert tpot.low < tpot.mid < tpot.high
    # the slow corner (every factor and imbalance parameter at its slow end), widened by BAND_Z held-out errors
    slow = evaluate_plan(
        plan, imbalance=imbalance_corner(None, True), specs=PlanSpecs(specs.model, corner(specs.hw, True), specs.quant)
    )
    assert slow.decode is not None
    err = band_widening(specs.hw.name)
    assert err == pytest.approx(BAND_Z * heldout_error(specs.hw.name)) and err > 0
    assert tps.low == pytest.approx(slow.decode.tokens_per_s_per_card * (1 - err), rel=1e-4)
    # every single-factor scenario stays inside the corners (the model is monotone in each factor)
    for sc in scenarios(specs.hw):
        p = evaluate_plan(plan, specs=PlanSpecs(specs.model, sc.hw, specs.quant))
        assert p.decode is not None
        assert tps.low - 1e-6 <= p.decode.tokens_per_s_per_card <= tps.high + 1e-6, sc.label


def test_without_factor_ranges_or_imbalance_freedom_the_band_is_the_measured_error_alone():
    plan, specs = _d70()
    bare = with_factors(specs.hw, {}, {n: {"range": None} for n in factor_names(specs.hw)})
    balanced = SkewImbalance(0.0)  # perfect balance: no imbalance parameter to move
    on = PlanSpecs(specs.model, bare, specs.quant)
    mid = evaluate_plan(plan, imbalance=balanced, specs=on)
    b = prediction_uncertainty(plan, on, mid, imbalance=balanced).bands["decode"]["tpot_ms"]
    err = band_widening(specs.hw.name)
    assert b.low == pytest.approx(b.mid * (1 - err), rel=1e-4) and b.high == pytest.approx(b.mid * (1 + err), rel=1e-4)


def test_a_lead_no_factor_range_moves_is_not_said_to_hold_at_the_ends():
    """On a machine without ranges the band is zero-wide: the lead was not tested, and is not said
    to hold "at every end of the factor ranges" (the a3-node example printed that)."""
    plan, specs = _d70()
    bare = with_factors(specs.hw, {}, {n: {"range": None} for n in factor_names(specs.hw)})
    worse = _variant(plan, moe=plan.decode.moe.model_copy(update={"comm": "alltoall"}))  # type: ignore[union-attr]
    verdict = lead_verdict(plan, worse, PlanSpecs(specs.model, bare, specs.quant), None)
    assert not verdict.ranged
    assert verdict.lines() == [verdict.lines()[0]] and "is not tested against factor ranges" in verdict.lines()[0]
    assert lead_verdict(plan, worse, specs, None).ranged


def test_a_lead_that_a_factor_end_reverses_is_reported_inside_the_band():
    plan, specs = _d70()
    # two micro-batches against one micro-batch with the LM head data-parallel: ahead at the predicted
    # factors, behind at an end of the ranges (the micro-batch overlap factor's low end)
    first = _variant(plan, micro_batches=2)
    verdict = lead_verdict(first, _variant(plan, lm_head=ParallelLayout(dp=32, tp=1)), specs, None)
    assert verdict.lead > 0
    assert verdict.inside_band and verdict.worst_lead <= 0
    assert "inside the uncertainty band" in verdict.lines()[0]


def test_a_lead_from_one_term_names_that_term_and_holds():
    plan, specs = _d70()
    worse = _variant(plan, moe=plan.decode.moe.model_copy(update={"comm": "alltoall"}))  # type: ignore[union-attr]
    verdict = lead_verdict(plan, worse, specs, None)
    assert not verdict.inside_band and verdict.worst_lead > 0
    assert verdict.dominant_term == "MoE dispatch/combine"
    assert any("the lead comes from MoE dispatch/combine" in line for line in verdict.lines())


def test_rank_by_low_end_orders_by_the_pessimistic_figure():
    plan, specs = _d70()
    plans = [with_band(_variant(plan, concurrency_per_device=c), specs, None) for c in (40, 72, 60)]
    ranked = rank_by_low_end(plans)
    lows = [headline_band(_pred(p))[0] for p in ranked]  # type: ignore[index]
    assert lows == sorted(lows, reverse=True)
    assert [p.rank for p in ranked] == [1, 2, 3]


def _pred(plan):
    from planner.costmodel.prediction import Prediction

    return Prediction.model_validate(plan.predicted)


def test_hbm_taken_over_from_the_mid_prediction_gives_the_same_prediction_as_a_fresh_evaluation():
    # every shipped single-machine plan (decode, prefill, colocated) under every factor scenario of its
    # machine: HBM figures do not depend on factors, so taking them over changes no figure
    from planner.costmodel.evaluate import load_plan_specs
    from planner.costmodel.mixed import is_mixed_plan
    from planner.specs.catalog import catalog_dir, load_plan

    checked = 0
    for path in sorted(catalog_dir("plans").glob("*.yaml")):
        if path.stem == "published":
            continue
        plan, _ = load_plan(str(path))
        if is_mixed_plan(plan):
            continue
        specs = load_plan_specs(plan, path.parent)
        mid = evaluate_plan(plan, specs=specs)
        for sc in scenarios(specs.hw):
            on = PlanSpecs(specs.model, sc.hw, specs.quant)
            fresh = evaluate_plan(plan, specs=on)
            assert evaluate_plan(plan, specs=on, hbm_from=mid) == fresh, (path.stem, sc.label)
        checked += 1
    assert checked >= 10


def test_hbm_is_recomputed_when_the_mid_prediction_is_for_other_memory_or_imbalance():
    from planner.costmodel.imbalance import SkewImbalance

    plan, specs = _d70()
    mid = evaluate_plan(plan, specs=specs)
    fuller = plan.model_copy(update={"hbm_utilization": 0.95})
    assert evaluate_plan(fuller, specs=specs, hbm_from=mid) == evaluate_plan(fuller, specs=specs)
    reserve = specs.hw.memory.runtime_reserve
    bigger = specs.hw.model_copy(
        update={
            "memory": specs.hw.memory.model_copy(
                update={"runtime_reserve": reserve.model_copy(update={"value": reserve.value * 2})}
            )
        }
    )
    other = PlanSpecs(specs.model, bigger, specs.quant)
    assert evaluate_plan(plan, specs=other, hbm_from=mid) == evaluate_plan(plan, specs=other)
    assert evaluate_plan(plan, specs=other).decode != mid.decode
    skew = SkewImbalance(sigma=1.5)
    assert evaluate_plan(plan, specs=specs, imbalance=skew, hbm_from=mid) == evaluate_plan(
        plan, specs=specs, imbalance=skew
    )


def test_rank_2_ahead_at_the_predicted_factors_is_explained_by_how_the_list_was_ranked():
    """A negative lead comes from the integer tables' rounding, unless --robust ranked at the slow
    end: "rank 1 leads at the pessimistic end" is said only then (it was said always)."""
    from planner.ranking.robust import LeadVerdict

    v = LeadVerdict(-0.01, -0.00002, -0.01, "the predicted factors", True, None, 0.0, {})
    assert "integer cost tables" in v.lines()[0] and "pessimistic" not in v.lines()[0]
    v.ranked_pessimistic = True
    assert "rank 1 leads at the pessimistic end of the band" in v.lines()[0]


def test_a_lead_that_rounds_to_zero_is_a_tie_and_a_gap_is_never_a_negative_ahead():
    from planner.ranking.robust import LeadVerdict

    tie = LeadVerdict(0.04, 0.0001, -0.2, "efficiency.matmul at 0.869 (fast end)", True, None, 0.0, {})
    assert tie.lines()[0].startswith("at the predicted factors rank 1 and rank 2 are tied (0.0 tok/s/card)")
    behind = LeadVerdict(-3.2, -0.005, -3.2, "the predicted factors", True, None, 0.0, {})
    assert "rank 2 is ahead of rank 1 by 3.2 tok/s/card" in behind.lines()[0]
    inside = LeadVerdict(5.0, 0.01, -2.5, "efficiency.matmul at 0.869 (fast end)", True, None, 0.0, {})
    assert "rank 2 is ahead by 2.5 tok/s/card" in inside.lines()[0]
    level = LeadVerdict(5.0, 0.01, -0.01, "efficiency.matmul at 0.869 (fast end)", True, None, 0.0, {})
    assert "the two are tied" in level.lines()[0]
    for v in (tie, behind, inside, level):
        assert not any("ahead (-" in line or "ahead by -" in line for line in v.lines())
    untested = LeadVerdict(0.0, 0.0, 0.0, "the predicted factors", False, None, 0.0, {}, ranged=False)
    assert untested.lines()[0].startswith("rank 1 and rank 2 are tied (0.0 tok/s/card); the tie is not tested")


def test_the_band_table_names_its_columns_by_slow_and_fast_end():
    from planner.costmodel.evaluate import load_plan_specs
    from planner.costmodel.uncertainty import with_uncertainty
    from planner.report.uncertainty_report import band_rows, uncertainty_table
    from planner.specs.catalog import load_plan

    plan, _ = load_plan("a2-d70")
    s = load_plan_specs(plan, None)
    pred = evaluate_plan(plan, specs=s)
    pred = with_uncertainty(pred, prediction_uncertainty(plan, s, pred, None, None))
    rows = {(block, label): (slow, mid, fast) for block, label, slow, mid, fast, _ in band_rows(pred)}
    slow, mid, fast = rows[("decode", "TPOT ms")]
    assert slow > mid > fast  # a time is largest at the slow end
    slow, mid, fast = rows[("decode", "tokens/s per card")]
    assert slow < mid < fast  # a rate smallest
    # what an output token costs grows as the deployment slows: joules (a2 states its power) too
    slow, mid, fast = rows[("economics", "J per output token")]
    assert slow > mid > fast
    table = uncertainty_table(pred)
    assert [c.header for c in table.columns][2:5] == ["slow end", "predicted", "fast end"]
