"""CANN's forced-EPLB decode routing: how many experts a rank serves, and the rows that state it."""

from __future__ import annotations

import pytest

from planner.costmodel.evaluate import load_plan_specs
from planner.costmodel.forced_balance import round_robin_experts_per_device
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.validation import all_figures


def _by_hand(routed: int, ep: int, picks: int) -> int:
    """The cycle written out pick by pick, as the recipe's loop does."""
    per_rank = routed // ep
    served: dict[int, set[int]] = {}
    for rank in range(ep):
        offset = picks * rank + rank
        for i in range(picks):
            g = offset + i
            served.setdefault(g % ep, set()).add((g // ep) % per_rank)
    return max(len(s) for s in served.values())


@pytest.mark.parametrize(
    ("routed", "ep", "picks"),
    [(384, 16, 24), (384, 16, 6), (256, 16, 24), (256, 128, 672), (384, 64, 576), (256, 32, 8), (64, 8, 3)],
)
def test_matches_the_cycle_written_out(routed, ep, picks):
    assert round_robin_experts_per_device(routed, ep, picks) == _by_hand(routed, ep, picks)


def test_offset_runs_reach_more_than_one_ranks_picks():
    # V4-Pro on 16 chips, one sequence a chip at MTP3: 4 tokens x top-6 = 24 picks a rank. One rank's 24
    # picks reach at most 2 experts a chip; the 16 offset runs together reach all 24 of the busiest chip's.
    assert round_robin_experts_per_device(384, 16, 24) == 24
    # one token a rank (6 picks): 6 experts at most
    assert round_robin_experts_per_device(384, 16, 6) == 6


def test_rejects_uneven_split():
    with pytest.raises(ValueError, match="multiple of ep"):
        round_robin_experts_per_device(100, 16, 8)


def _cann_forced_rows():
    for fig, _ in all_figures():
        row = fig.row
        if row.engine and row.engine.startswith("cann-recipes-infer") and row.experts == "forced" and fig.plan:
            yield pytest.param(fig, id=row.id)


@pytest.mark.parametrize("fig", list(_cann_forced_rows()))
def test_cann_rows_state_the_experts_their_routing_reaches(fig):
    plan, _ = load_plan(fig.plan)
    assert plan.decode is not None
    specs = load_plan_specs(plan, plan_base_dir(fig.plan))
    moe = specs.model.moe
    assert moe is not None
    tokens_per_rank = plan.decode.concurrency_per_device * (1 + plan.decode.mtp_tokens)
    reached = round_robin_experts_per_device(
        moe.routed_experts, plan.decode.moe.ep, tokens_per_rank * moe.experts_per_token
    )
    assert fig.row.forced_experts_per_device == reached
