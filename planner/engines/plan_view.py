"""One view of a plan for the exports: disaggregated phases, or one colocated section.

A colocated plan (plan format v2) has one `colocated:` section: one layout, the decode
concurrency and MTP depth, the prefill batch and micro-batches; a disaggregated plan has decode
and/or prefill sections. The exports and the engine checks read both through this view.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.specs.plan import DecodePlan, PhasePlan, Plan, PrefillPlan, sequences_on


@dataclass(frozen=True)
class ColocatedView:
    """A colocated instance: one layout for both phases and the settings of each."""

    phase: PhasePlan
    concurrency_per_device: int | float
    mtp_tokens: int
    prefill_batch_tokens: int
    micro_batches: int
    chunk_tokens: int | None = None  # chunked prefill: prompt tokens one step of the instance carries

    @property
    def whole_forwards_over_dp_ranks(self) -> bool:
        """Whole prefill forwards (no chunked prefill) on an instance whose attention is data-parallel: SGLang
        then prefills each rank's prompts on that rank alone, which its prefill delayer gathers
        (planner/simulate/colocated_instance.py; the SGLang launch turns the delayer on)."""
        return self.chunk_tokens is None and self.phase.attention.dp > 1


@dataclass(frozen=True)
class PlanView:
    """Either disaggregated phases (decode and/or prefill) or one colocated section."""

    decode: DecodePlan | None
    prefill: PrefillPlan | None
    colocated: ColocatedView | None


def plan_view(plan: Plan) -> PlanView:
    """The view of `plan` (plan format v2: a colocated plan has its own `colocated` section)."""
    section = plan.colocated
    if plan.is_colocated and section is not None:
        return PlanView(
            None,
            None,
            ColocatedView(
                phase=section,
                concurrency_per_device=section.concurrency_per_device,
                mtp_tokens=section.mtp_tokens,
                prefill_batch_tokens=section.prefill_batch_tokens,
                micro_batches=section.prefill_micro_batches,
                chunk_tokens=section.chunk_tokens,
            ),
        )
    return PlanView(plan.decode, plan.prefill, None)


def decode_slots(plan: Plan) -> int:
    """Sequences the plan keeps in flight: every decode slot of every instance (a prefill-only plan:
    the prompts of one forward per instance). The concurrency its benchmark runs at."""
    if plan.afd is not None:  # sequences sit on the attention devices
        a = plan.afd
        return sequences_on(a.concurrency_per_device, a.attention_devices) * a.instances
    view = plan_view(plan)
    if view.colocated is not None:
        c = view.colocated
        return sequences_on(c.concurrency_per_device, c.phase.devices) * c.phase.instances
    if view.decode is not None:
        d = view.decode
        return sequences_on(d.concurrency_per_device, d.devices) * d.instances
    assert view.prefill is not None
    p = view.prefill
    return max(1, p.batch_tokens // plan.workload.input_tokens) * p.instances
