"""One view of a plan for the exports: disaggregated phases, or one colocated section.

Plan format v1 marks a colocated plan with `colocated: true` and two identical decode/prefill
sections; v2 (docs in COLOCATED_V2 of the lead's notes) gives it its own `colocated:` section
(`Plan.is_colocated`, `Plan.colocated`). Both read the same here, so the exports and the engine
checks do not depend on which format the plan came in.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.plan import DecodePlan, PhasePlan, Plan, PrefillPlan


@dataclass(frozen=True)
class ColocatedView:
    """A colocated instance: one layout for both phases and the settings of each."""

    phase: PhasePlan
    concurrency_per_device: int
    mtp_tokens: int
    prefill_batch_tokens: int
    micro_batches: int


@dataclass(frozen=True)
class PlanView:
    """Either disaggregated phases (decode and/or prefill) or one colocated section."""

    decode: DecodePlan | None
    prefill: PrefillPlan | None
    colocated: ColocatedView | None


def plan_view(plan: Plan) -> PlanView:
    """The view of `plan`, whichever plan format it is in."""
    section = getattr(plan, "colocated", None)
    if getattr(plan, "is_colocated", False) and section is not None and not isinstance(section, bool):
        # plan format v2: a `colocated:` section of its own
        return PlanView(
            None,
            None,
            ColocatedView(
                phase=section,
                concurrency_per_device=section.concurrency_per_device,
                mtp_tokens=section.mtp_tokens,
                prefill_batch_tokens=section.prefill_batch_tokens,
                micro_batches=getattr(section, "prefill_micro_batches", 1),
            ),
        )
    if section is True and plan.decode is not None and plan.prefill is not None:
        # plan format v1: identical decode and prefill sections marked colocated
        return PlanView(
            None,
            None,
            ColocatedView(
                phase=plan.decode,
                concurrency_per_device=plan.decode.concurrency_per_device,
                mtp_tokens=plan.decode.mtp_tokens,
                prefill_batch_tokens=plan.prefill.batch_tokens,
                micro_batches=plan.prefill.micro_batches,
            ),
        )
    return PlanView(plan.decode, plan.prefill, None)
