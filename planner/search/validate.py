"""A plan validator that does not use the solver: tiling, HBM and SLOs in floating point.

Every plan the search returns goes through `score_and_validate`; a failure there is a bug in
the search (the integer tables are rounded so that this cannot happen), so it raises.
"""

from __future__ import annotations

from planner.costmodel.context import CostContext
from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, plan_with_prediction
from planner.costmodel.prediction import Prediction
from planner.specs.plan import Plan, check_plan


def plan_problems(plan: Plan, prediction: Prediction) -> list[str]:
    """Broken rules of a scored plan: HBM overflow, missed SLOs (tiling is checked before)."""
    problems = []
    slo = plan.slo
    if prediction.colocated is not None:
        c = prediction.colocated
        if not c.fits_hbm:
            problems.append(f"colocated HBM {c.hbm_bytes_per_device} B exceeds {c.hbm_capacity_bytes} B")
        if slo and slo.tpot_ms is not None and c.tpot_ms > slo.tpot_ms + 1e-9:
            problems.append(f"colocated TPOT {c.tpot_ms} ms exceeds the SLO {slo.tpot_ms} ms")
        if slo and slo.ttft_ms is not None and c.ttft_ms > slo.ttft_ms + 1e-9:
            problems.append(f"colocated TTFT {c.ttft_ms} ms exceeds the SLO {slo.ttft_ms} ms")
        return problems
    if prediction.decode is not None:
        d = prediction.decode
        if not d.fits_hbm:
            problems.append(f"decode HBM {d.hbm_bytes_per_device} B exceeds {d.hbm_capacity_bytes} B")
        if slo and slo.tpot_ms is not None and d.tpot_ms > slo.tpot_ms + 1e-9:
            problems.append(f"decode TPOT {d.tpot_ms} ms exceeds the SLO {slo.tpot_ms} ms")
    if prediction.prefill is not None:
        p = prediction.prefill
        if not p.fits_hbm:
            problems.append(f"prefill HBM {p.hbm_bytes_per_device} B exceeds {p.hbm_capacity_bytes} B")
        if slo and slo.ttft_ms is not None and p.ttft_ms > slo.ttft_ms + 1e-9:
            problems.append(f"prefill TTFT {p.ttft_ms} ms exceeds the SLO {slo.ttft_ms} ms")
    return problems


def score_and_validate(plan: Plan, ctx: CostContext) -> Plan:
    """The plan with `predicted` filled in; raises AssertionError if it breaks a rule."""
    check_plan(plan, ctx.model, ctx.hw)
    prediction = evaluate_plan(plan, imbalance=ctx.imbalance, specs=PlanSpecs(ctx.model, ctx.hw, ctx.quant))
    problems = plan_problems(plan, prediction)
    if problems:
        raise AssertionError("search returned an invalid plan: " + "; ".join(problems))
    return plan_with_prediction(plan, prediction)
