"""A prefill forward whose requests do not divide over the attention DP ranks says that the model
spreads them (as context parallelism would) and by how much the busiest rank's attention is more."""

from __future__ import annotations

import json

import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.prefill import prefill_spread_notes
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import AttentionLayout, MoELayout, ParallelLayout, PrefillPlan
from planner.specs.quantization import get_quantization
from planner.specs.workload import Workload
from tests.conftest import run_cli


def _prefill(dp: int, tp: int, batch_tokens: int) -> PrefillPlan:
    n = dp * tp
    return PrefillPlan(
        devices=n,
        attention=AttentionLayout(dp=dp, tp=tp),
        dense_ffn=ParallelLayout(dp=n, tp=1),
        moe=MoELayout(ep=n, slots_per_device=256 // n + 1),
        batch_tokens=batch_tokens,
    )


@pytest.fixture(scope="module")
def ctx() -> CostContext:
    w = Workload(input_tokens=2048, output_tokens=512)
    return CostContext(load_model("deepseek-v3"), load_hardware("a2"), get_quantization("a8w8c16"), w)


@pytest.mark.parametrize(
    ("dp", "tp", "requests", "busiest", "ratio"),
    [(16, 1, 8, 1, "2.00"), (16, 1, 24, 2, "1.33"), (2, 8, 7, 4, "1.14"), (24, 1, 3, 1, "8.00")],
)
def test_uneven_requests_over_the_ranks_are_named(ctx, dp, tp, requests, busiest, ratio):
    (note,) = prefill_spread_notes(ctx, _prefill(dp, tp, requests * 2048))
    assert f"{requests} request(s) a forward over {dp} attention DP ranks" in note
    assert f"gives the busiest rank {busiest}, {ratio}x the modelled attention work" in note


@pytest.mark.parametrize(("dp", "tp", "requests"), [(16, 1, 16), (16, 1, 32), (1, 16, 3), (2, 8, 8)])
def test_even_requests_or_one_rank_need_no_note(ctx, dp, tp, requests):
    assert prefill_spread_notes(ctx, _prefill(dp, tp, requests * 2048)) == []
    assert prefill_spread_notes(ctx, None) == []


def test_the_plan_says_it():
    r = run_cli("plan", "--input-tokens", "16384", "--output-tokens", "1024", "--top", "1", "--json", "-")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)["plans"][0]
    dp = plan["prefill"]["attention"]["dp"]
    requests = plan["predicted"]["prefill"]["requests_per_forward"]
    spread = [n for n in plan["predicted"]["notes"] if n.startswith("prefill spread:")]
    assert bool(spread) == (requests % dp != 0), (requests, dp, spread)
