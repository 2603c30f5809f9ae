"""What binds a plan, checked against the cost model: the neighbour the message names really
breaks the rule it names; the search's best plans are never left with nothing binding."""

from __future__ import annotations

import dataclasses

import pytest

from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs, plan_cost_context, plan_with_prediction
from planner.costmodel.memory import decode_hbm, prefill_hbm
from planner.costmodel.prefill import prefill_forward
from planner.ranking.binding import (
    cards_for_rate,
    decode_binding,
    outcome_bindings,
    plan_bindings,
    request_bindings,
    why_line,
)
from planner.search.plan_search import run_search
from planner.search.request import PlanRequest
from planner.specs.catalog import load_plan
from planner.specs.plan import SLO, Workload


@pytest.fixture(scope="module")
def default_outcome():
    """`moeplan plan`'s defaults, disaggregated (prefill and decode on their own instances)."""
    return run_search(PlanRequest(top=1, colocated=False))


def _scored(name: str, **update):
    plan, _ = load_plan(name)
    plan = plan.model_copy(update=update)
    specs = load_plan_specs(plan)
    return plan_with_prediction(plan, evaluate_plan(plan, specs=specs)), specs


def test_default_plan_tpot_prefill_and_budget_bind(default_outcome):
    decode, prefill, deployment = outcome_bindings(default_outcome)
    plan = default_outcome.plans[0]
    ctx = plan_cost_context(plan, load_plan_specs(plan))
    assert decode.constraint == "tpot" and not decode.violated
    b = plan.decode.concurrency_per_device
    nxt = decode_step(ctx, plan.decode, [b + 1]).tpot_s[0] * 1e3
    assert nxt > plan.slo.tpot_ms and f"{nxt:.1f} ms > 100 ms" in decode.message
    # the prefill batch stops at TTFT or HBM (which comes first moves with the fitted factors): one
    # more request breaks the rule the message names
    assert prefill.constraint in ("ttft", "hbm") and not prefill.violated
    bt = plan.prefill.batch_tokens + plan.workload.input_tokens
    if prefill.constraint == "ttft":
        assert prefill_forward(ctx, plan.prefill, [bt]).ttft_s[0] * 1e3 > plan.slo.ttft_ms
    else:
        assert not prefill_hbm(ctx, plan.prefill, [bt]).fits[0]
    assert deployment.constraint == "card_budget"
    assert "another decode instance needs 32 more cards" in deployment.message


def test_why_line_names_every_phase(default_outcome):
    line = why_line(default_outcome)
    assert line.startswith("why: ")
    assert "decode B" in line and "TPOT" in line and "prefill" in line and "cards" in line


COLOCATED_REQUESTS = {
    # chunked prefill: deepseek-v3 on 16 A2 cards, colocated only, a 150 ms ITL limit (a whole forward of 2K
    # prompts does not fit between two tokens)
    "chunked": PlanRequest(
        max_cards=16, top=1, disaggregated=False, slo=SLO(tpot_ms=100, ttft_ms=2000, max_itl_ms=150)
    ),
    # whole forwards: deepseek-v2-lite on 8 A2 cards for MindIE (whose chunked prefill moeplan does not
    # write), colocated only, TPOT 50 ms (ITL 150 ms)
    "whole": PlanRequest(
        model="deepseek-v2-lite",
        max_cards=8,
        top=1,
        engine="mindie",
        disaggregated=False,
        slo=SLO(tpot_ms=50, ttft_ms=2000, max_itl_ms=150),
        workload=Workload(input_tokens=2048, output_tokens=2048),
    ),
}


@pytest.mark.parametrize("schedule", sorted(COLOCATED_REQUESTS))
def test_colocated_neighbours_are_scored_as_colocated_plans(schedule):
    """A colocated plan's decode binding is what its neighbour with one more sequence per device,
    scored as a whole colocated plan (the decode stalls during prefill included), breaks."""
    outcome = run_search(COLOCATED_REQUESTS[schedule])
    plan = outcome.plans[0]
    assert plan.is_colocated and (plan.colocated.chunk_tokens is not None) == (schedule == "chunked")
    decode, prefill, deployment = outcome_bindings(outcome)
    assert "colocated" in decode.message and decode.constraint in ("tpot", "hbm", "itl")
    # a chunk size may be the rate's interior best (a larger one allowed and slower): nothing binds it
    assert prefill.constraint in ("ttft", "tpot", "hbm", "itl", "search_space", "admission", "none")
    if schedule == "whole":  # the forwards hold no more than the batch: what a full instance admits
        held = evaluate_plan(plan.model_copy(update={"predicted": None})).colocated.prompts_per_forward
        assert prefill.constraint == "admission" and held <= plan.colocated.prefill_batch_tokens / 2048
        assert f"{held:.2f} prompts between forwards" in prefill.message
        # a batch below what is admitted: one more request fills the forwards more, so admissions do not bind
        smaller = int(held - 1e-9)
        assert 1 <= smaller < held
        section = plan.colocated.model_copy(update={"prefill_batch_tokens": smaller * 2048})
        below = plan.model_copy(update={"colocated": section, "predicted": None})
        assert request_bindings(below, COLOCATED_REQUESTS[schedule])[1].constraint != "admission"
    b = plan.colocated.concurrency_per_device
    more = plan.model_copy(
        update={
            "colocated": plan.colocated.model_copy(update={"concurrency_per_device": b + 1}),
            "predicted": None,
        }
    )
    worse = evaluate_plan(more).colocated
    slo, rounding = plan.slo, 0.01  # the search's integer tables round each figure up by a few us
    broken = {
        "tpot": worse.tpot_ms > slo.tpot_ms - rounding,
        "hbm": worse.hbm_headroom_bytes < 8 * 2**20,
        "itl": slo.max_itl_ms is not None and worse.longest_decode_pause_ms > slo.max_itl_ms - rounding,
    }
    assert broken[decode.constraint], (decode, worse)
    assert deployment.phase == "deployment" and "colocated" in deployment.message


def test_hbm_binds_without_a_latency_slo():
    outcome = run_search(PlanRequest(phase="decode", max_cards=32, top=1, slo=SLO()))
    decode = outcome_bindings(outcome)[0]
    assert decode.constraint == "hbm"
    plan = outcome.plans[0]
    ctx = plan_cost_context(plan, load_plan_specs(plan))
    b = plan.decode.concurrency_per_device
    use = decode_hbm(ctx, plan.decode, [b, b + 1])
    assert use.fits[0] and not use.fits[1]
    assert decode.figures["short_bytes"] == pytest.approx(use.total_bytes[1] - use.capacity_bytes)


@pytest.mark.parametrize(
    ("request_", "phase_index"),
    [
        (PlanRequest(top=1, hardware="cm384", max_cards=128, slo=SLO(tpot_ms=30, ttft_ms=1500)), 0),
        (PlanRequest(top=1, phase="decode", max_cards=24, slo=SLO(tpot_ms=60)), 0),
        (
            PlanRequest(
                top=1,
                model="deepseek-v2-lite",
                max_cards=8,
                workload=Workload(input_tokens=1024, output_tokens=512),
            ),
            1,
        ),
    ],
)
def test_something_binds_every_best_plan(request_, phase_index):
    """The search maximises throughput, so its best plan's concurrency and batch are stopped by
    a rule (or the search grid), never by nothing."""
    bindings = outcome_bindings(run_search(request_))
    assert all(b.constraint != "none" for b in bindings if b.phase in ("decode", "prefill"))
    assert not any(b.violated for b in bindings)


def test_a_hand_plan_with_slack_says_nothing_binds():
    plan, specs = _scored("a2-d70", slo=SLO(tpot_ms=150))
    decode = plan_bindings(plan, plan_cost_context(plan, specs))[0]
    assert decode.constraint == "none" and "could run more" in decode.message


def test_a_broken_slo_gives_the_largest_concurrency_that_meets_it():
    plan, specs = _scored("a2-d70", slo=SLO(tpot_ms=30))
    ctx = plan_cost_context(plan, specs)
    decode = decode_binding(ctx, plan.decode, 30.0)
    assert decode.constraint == "tpot" and decode.violated
    m = int(decode.figures["max_concurrency_per_device"])
    assert m >= 1
    tpot = decode_step(ctx, plan.decode, [m, m + 1]).tpot_s * 1e3
    assert tpot[0] <= 30.0 < tpot[1]


def test_a_broken_hbm_is_reported_with_what_fits():
    plan, specs = _scored("a2-p", workload=Workload(input_tokens=2048, output_tokens=2048))
    big = plan.model_copy(
        update={
            "prefill": plan.prefill.model_copy(update={"batch_tokens": 400_000}),
            "predicted": None,
        }
    )
    bindings = plan_bindings(big, plan_cost_context(big, specs))
    prefill = bindings[0]
    assert prefill.constraint == "hbm" and prefill.violated
    m = int(prefill.figures["max_requests_per_forward"])
    ctx = plan_cost_context(big, specs)
    fits = prefill_hbm(ctx, big.prefill, [m * 2048, (m + 1) * 2048]).fits
    assert fits[0] and not fits[1]


def test_cards_for_a_rate_scale_instances(default_outcome):
    plan = default_outcome.plans[0]
    from planner.costmodel.prediction import Prediction

    pred = Prediction.model_validate(plan.predicted)
    # at the plan's own rate it needs no more cards than it has
    rate = pred.system.requests_per_s
    assert cards_for_rate(plan, pred, default_outcome.hw, rate) == pytest.approx(48)
    # twice the rate: twice the decode instances (decode binds), prefill still enough
    assert cards_for_rate(plan, pred, default_outcome.hw, 2 * rate) == pytest.approx(16 + 64)


def test_an_engine_without_written_chunked_prefill_gets_whole_forward_colocated_plans():
    """MindIE's SplitFuse is not written by moeplan: the search gives it colocated instances in whole
    forwards only, where without an engine the same request's best colocated instance is chunked."""
    request = COLOCATED_REQUESTS["whole"]
    assert run_search(dataclasses.replace(request, engine=None)).plans[0].colocated.chunk_tokens is not None
    assert run_search(request).plans[0].colocated.chunk_tokens is None


def test_an_itl_limit_binds_the_decode_concurrency_and_is_named():
    """--max-itl-ms holds the decode step: when one more sequence's step breaks it while TPOT and HBM
    still allow it, what binds says ITL with that step, and a step already past it is a broken rule."""
    plan, specs = _scored("a2-d70", slo=SLO(tpot_ms=150))
    ctx = plan_cost_context(plan, specs)
    b = plan.decode.concurrency_per_device
    steps = decode_step(ctx, plan.decode, [b, b + 1]).step_s * 1e3
    between = float(steps[0] + steps[1]) / 2  # the plan's step meets it, one more sequence's does not
    decode = decode_binding(ctx, plan.decode, 150.0, max_itl_ms=between)
    assert decode.constraint == "itl" and not decode.violated
    assert f"B{b + 1} gives a {steps[1]:.1f} ms step > {between:g} ms" in decode.short
    broken = decode_binding(ctx, plan.decode, 150.0, max_itl_ms=float(steps[0]) - 1.0)
    assert broken.constraint == "itl" and broken.violated
    assert decode_binding(ctx, plan.decode, 150.0).constraint != "itl"  # no limit given: none binds on it


def test_a_robust_search_is_explained_at_the_slow_end_it_was_searched_at():
    """`plan --robust` says its 'why' line is at the slow end of the factor ranges: the bindings use the
    search's own context (the pessimistic machine), not the machine as shipped, which would call the
    plan's TPOT slack and name a next sequence that meets the SLO."""
    from planner.search.contexts import make_context

    robust = run_search(PlanRequest(top=1, colocated=False, pessimistic_factors=True))
    plan, req = robust.plans[0], robust.request
    decode = outcome_bindings(robust)[0]
    assert decode.constraint == "tpot" and not decode.violated
    b = plan.decode.concurrency_per_device
    slow_next = decode_step(make_context(req), plan.decode, [b + 1]).tpot_s[0] * 1e3
    shipped_next = decode_step(make_context(dataclasses.replace(req, pessimistic_factors=False)), plan.decode, [b + 1])
    assert decode.figures["next_tpot_ms"] == pytest.approx(slow_next, rel=1e-9)
    assert slow_next > plan.slo.tpot_ms > shipped_next.tpot_s[0] * 1e3
