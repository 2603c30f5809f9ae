"""One command's predictions made once: the memo answers as a fresh evaluation would."""

from __future__ import annotations

from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, evaluation_memo
from planner.costmodel.fidelity import _plan_and_specs
from planner.costmodel.imbalance import SkewImbalance
from planner.costmodel.uncertainty import corner, scenarios
from planner.ranking.robust import lead_verdict, with_band


def test_the_memo_answers_a_repeated_question_with_the_fresh_prediction():
    plan, specs = _plan_and_specs("a2-d70")
    fresh = evaluate_plan(plan, specs=specs)
    with evaluation_memo():
        first = evaluate_plan(plan, specs=specs)
        # the same content (rank and predicted aside) on the same spec objects: remembered
        again = evaluate_plan(plan.model_copy(update={"rank": 3, "predicted": {"x": 1}}), specs=specs)
        assert again is first
        # an equal default imbalance model made afresh is the same question
        assert evaluate_plan(plan, specs=specs, imbalance=None) is first
    assert first == fresh


def test_the_memo_tells_plans_machines_and_imbalance_models_apart():
    plan, specs = _plan_and_specs("a2-d70")
    other = plan.model_copy(update={"decode": plan.decode.model_copy(update={"concurrency_per_device": 40})})
    slow = PlanSpecs(specs.model, corner(specs.hw, True), specs.quant)
    skew = SkewImbalance(sigma=1.5)
    with evaluation_memo():
        got = [
            evaluate_plan(plan, specs=specs),
            evaluate_plan(other, specs=specs),
            evaluate_plan(plan, specs=slow),
            evaluate_plan(plan, specs=specs, imbalance=skew),
        ]
    assert got == [
        evaluate_plan(plan, specs=specs),
        evaluate_plan(other, specs=specs),
        evaluate_plan(plan, specs=slow),
        evaluate_plan(plan, specs=specs, imbalance=skew),
    ]
    assert len({g.model_dump_json() for g in got}) == 4


def test_corners_are_built_once_inside_the_memo_and_afresh_outside():
    _, specs = _plan_and_specs("a2-d70")
    assert corner(specs.hw, True) is not corner(specs.hw, True)
    with evaluation_memo():
        slow = corner(specs.hw, True)
        assert corner(specs.hw, True) is slow
        assert scenarios(specs.hw)[0].hw is slow
        assert corner(specs.hw, False) is not slow
    assert corner(specs.hw, True) == slow


def test_bands_and_the_lead_check_are_the_same_with_and_without_the_memo():
    plan, specs = _plan_and_specs("a2-d70")
    second = plan.model_copy(update={"decode": plan.decode.model_copy(update={"concurrency_per_device": 60})})
    banded = [with_band(p, specs, None) for p in (plan, second)]
    verdict = lead_verdict(banded[0], banded[1], specs, None)
    with evaluation_memo():
        banded_memo = [with_band(p, specs, None) for p in (plan, second)]
        verdict_memo = lead_verdict(banded_memo[0], banded_memo[1], specs, None)
    assert banded_memo == banded
    assert verdict_memo == verdict
