"""A plan validator that does not use the solver: tiling, HBM and SLOs in floating point.

Every plan the search returns goes through `score_and_validate`; a failure there is a bug in
the search (the integer tables are rounded so that this cannot happen), so it raises.
"""

from __future__ import annotations

from planner.costmodel.context import CostContext
from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, plan_with_prediction
from planner.costmodel.prediction import (
    AfdPrediction,
    ColocatedPrediction,
    DecodePrediction,
    Prediction,
    PrefillPrediction,
    slo_judged_tpot_ms,
)
from planner.specs.plan import Plan, check_plan


def c_none(prediction: Prediction) -> bool:
    """True when the plan has no colocated block (its phases are judged on their own)."""
    return prediction.colocated is None


def plan_problems(plan: Plan, prediction: Prediction) -> list[str]:
    """Broken rules of a scored plan: HBM overflow, missed SLOs (tiling is checked before)."""
    slo = plan.slo
    tpot = slo.tpot_ms if slo else None
    ttft = slo.ttft_ms if slo else None
    blocks: list[
        tuple[
            str,
            ColocatedPrediction | PrefillPrediction | DecodePrediction | AfdPrediction | None,
            float | None,
            float | None,
        ]
    ] = (
        [("colocated", prediction.colocated, tpot, ttft)]
        if prediction.colocated is not None
        else [
            ("decode", prediction.decode, tpot, None),
            ("prefill", prediction.prefill, None, ttft),
        ]
    )
    if prediction.afd is not None and prediction.colocated is None:
        blocks.append(("afd", prediction.afd, tpot, None))
    problems = []
    itl = slo.max_itl_ms if slo else None
    a = prediction.afd
    if itl is not None and c_none(prediction) and a is not None and a.step_ms > itl + 1e-9:
        problems.append(f"afd step {a.step_ms} ms exceeds the ITL limit {itl} ms")
    c, d = prediction.colocated, prediction.decode
    if itl is not None and c is not None and c.longest_decode_pause_ms > itl + 1e-9:
        problems.append(f"colocated longest gap {c.longest_decode_pause_ms} ms exceeds {itl} ms")
    if itl is not None and c is None and d is not None and d.step_ms > itl + 1e-9:
        problems.append(f"decode step {d.step_ms} ms exceeds the ITL limit {itl} ms")
    for name, block, tpot_slo, ttft_slo in blocks:
        if block is None:
            continue
        if not block.fits_hbm:
            problems.append(f"{name} HBM {block.hbm_bytes_per_device} B exceeds {block.hbm_capacity_bytes} B")
        if tpot_slo is not None:
            judged, at_pct = slo_judged_tpot_ms(bool(slo and slo.tpot_at_percentile), block)  # type: ignore[arg-type]
            slack = 5e-5 if at_pct else 1e-9  # (the percentile figure is rounded to 4 decimals as reported)
            if judged > tpot_slo + slack:
                what = "TPOT of the SLO-percentile request" if at_pct else "TPOT"
                problems.append(f"{name} {what} {judged} ms exceeds the SLO {tpot_slo} ms")
        if ttft_slo is not None and block.ttft_ms > ttft_slo + 1e-9:  # type: ignore[union-attr]
            problems.append(f"{name} TTFT {block.ttft_ms} ms exceeds the SLO {ttft_slo} ms")  # type: ignore[union-attr]
    return problems


def score_and_validate(plan: Plan, ctx: CostContext) -> Plan:
    """The plan with `predicted` filled in; raises AssertionError if it breaks a rule."""
    check_plan(plan, ctx.model, ctx.hw)
    prediction = evaluate_plan(plan, imbalance=ctx.imbalance, specs=PlanSpecs(ctx.model, ctx.hw, ctx.quant))
    problems = plan_problems(plan, prediction)
    if problems:
        raise AssertionError("search returned an invalid plan: " + "; ".join(problems))
    return plan_with_prediction(plan, prediction)


def score_mixed_and_validate(plan: Plan, d_ctx: CostContext, p_ctx: CostContext) -> Plan:
    """`score_and_validate` for a plan whose phases run on different machines."""
    from planner.costmodel.evaluate import evaluate_mixed_plan
    from planner.costmodel.mixed import MixedSpecs

    specs = MixedSpecs(d_ctx.model, d_ctx.hw, p_ctx.hw, d_ctx.quant)
    prediction = evaluate_mixed_plan(plan, imbalance=d_ctx.imbalance, specs=specs)
    problems = plan_problems(plan, prediction)
    if problems:
        raise AssertionError("search returned an invalid plan: " + "; ".join(problems))
    return plan_with_prediction(plan, prediction)
