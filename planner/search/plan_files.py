"""A chosen deployment as a plan file, scored by the cost model and checked without the solver.

The plan format (planner.specs.plan) has a decode and a prefill section, or one colocated
section; a phase that runs on another machine than the plan's `hardware` names its own (and
the prefill section the KV link the user stated). `scored_plan` fills in `predicted` with
`evaluate_plan` and runs the validator (planner.search.validate).
"""

from __future__ import annotations

from typing import Any

from planner.candidates.afd_candidates import AfdCandidate
from planner.candidates.colocated_candidates import ColocatedCandidate
from planner.candidates.phase_candidates import PhaseCandidate
from planner.search.candidate_spaces import PhaseSpace
from planner.search.contexts import PhaseContexts
from planner.search.deployment import Deployment
from planner.search.request import PlanRequest
from planner.search.validate import score_and_validate, score_mixed_and_validate
from planner.specs.plan import COLOCATED_SHARED_FIELDS, ColocatedPlan, DecodePlan, Plan, PrefillPlan


def candidate_phase_plan(c: PhaseCandidate, instances: int, input_tokens: int) -> DecodePlan | PrefillPlan:
    """A phase section of the plan format from a candidate (`input_tokens`: computed prompt
    tokens per request, what a prefill batch is counted in)."""
    common: dict[str, Any] = {
        "devices": c.devices,
        "instances": instances,
        "attention": c.attention,
        "dense_ffn": c.dense_ffn,
        "moe": c.moe.moe if c.moe else None,
        "shared_expert": c.moe.shared if c.moe else None,
        "lm_head": c.lm_head,
    }
    common = {k: v for k, v in common.items() if v is not None}
    if c.phase == "decode":
        return DecodePlan(concurrency_per_device=c.x, mtp_tokens=c.k, micro_batches=c.micro_batches, **common)  # type: ignore[arg-type]
    return PrefillPlan(batch_tokens=int(c.x) * input_tokens, micro_batches=c.k, **common)  # type: ignore[arg-type]


def _colocated_section(c: ColocatedCandidate, instances: int, n_in: int) -> ColocatedPlan:
    d = candidate_phase_plan(c.decode, instances, n_in)
    assert isinstance(d, DecodePlan)
    shared = d.model_dump(include=set(COLOCATED_SHARED_FIELDS))
    return ColocatedPlan(
        **shared,
        concurrency_per_device=d.concurrency_per_device,
        mtp_tokens=d.mtp_tokens,
        decode_micro_batches=d.micro_batches,
        prefill_batch_tokens=c.chunk_tokens if c.chunk_tokens is not None else c.batch_requests * n_in,
        prefill_micro_batches=c.micro_batches,
        chunk_tokens=c.chunk_tokens,
    )


def deployment_plan(
    request: PlanRequest,
    contexts: PhaseContexts,
    dep: Deployment,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    rank: int,
    coloc: list[ColocatedCandidate] | None = None,
    afd: list[AfdCandidate] | None = None,
) -> Plan:
    """The plan file of one deployment (without `predicted`)."""
    decode: DecodePlan | PrefillPlan | None = None
    prefill: DecodePlan | PrefillPlan | None = None
    colocated: ColocatedPlan | None = None
    afd_section = None
    if dep.afd is not None and afd:
        afd_section = afd[dep.afd].section.model_copy(update={"instances": dep.afd_instances})
    n_in = contexts.prefill.prefill_tokens_per_request
    if dep.colocated is not None and coloc:
        colocated = _colocated_section(coloc[dep.colocated], dep.colocated_instances, n_in)
    if dep.decode is not None and dspace is not None:
        decode = candidate_phase_plan(dspace.candidates[dep.decode], dep.decode_instances, n_in)
        if request.decode_hw_name != request.hardware:
            decode = decode.model_copy(update={"hardware": request.decode_hw_name})
    if dep.prefill is not None and pspace is not None:
        prefill = candidate_phase_plan(pspace.candidates[dep.prefill], dep.prefill_instances, n_in)
        update: dict[str, object] = {}
        if request.prefill_hw_name != request.hardware:
            update["hardware"] = request.prefill_hw_name
        if request.kv_transfer_bytes_per_s is not None:
            update["kv_transfer_bytes_per_s"] = request.kv_transfer_bytes_per_s
        if update:
            prefill = prefill.model_copy(update=update)
    return Plan(
        model=request.model,
        hardware=request.hardware,
        quantization=request.quantization,
        workload=request.workload,
        slo=request.slo,
        decode=decode,  # type: ignore[arg-type]
        prefill=prefill,  # type: ignore[arg-type]
        colocated=colocated,
        afd=afd_section,
        hbm_utilization=request.hbm_utilization,
        decode_attention_kv_split=request.decode_attention_kv_split,
        draft_model=request.draft_model,
        rank=rank,
    )


def scored_plan(plan: Plan, contexts: PhaseContexts) -> Plan:
    """The plan with `predicted` filled in by the cost model; raises AssertionError if it breaks a
    rule (a bug in the search: planner.search.validate)."""
    if contexts.mixed:
        return score_mixed_and_validate(plan, contexts.decode, contexts.prefill)
    return score_and_validate(plan, contexts.decode)


def plan_signature(plan: Plan) -> str:
    """What tells two plans apart for a user: every predicted figure and the deployment's size.
    Plans equal in these differ only in fields with no effect on the prediction: one plan."""
    import json

    return json.dumps([plan.total_devices, plan.predicted], sort_keys=True, default=str)
