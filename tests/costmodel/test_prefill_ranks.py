"""Prefill over attention DP ranks: each rank computes its own prompts under its own token budget (the
batch over the ranks), so a prompt longer than the budget spans forwards on its rank, its TTFT counts
them and its rank keeps the prompt's KV cache over them; context parallelism splits each prompt over
the ranks instead."""

from __future__ import annotations

import json

import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.memory import prefill_hbm
from planner.costmodel.prefill import forwards_per_prompt, kv_transfer_s, prefill_forward, prefill_rank_notes
from planner.engines.profiles import plan_problems
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.plan import AttentionLayout, MoELayout, ParallelLayout, PrefillPlan
from planner.specs.quantization import get_quantization
from planner.specs.workload import Workload
from tests.conftest import run_cli

PROMPT = 16384


def _prefill(dp: int, tp: int, requests: float, context_parallel: bool = False) -> PrefillPlan:
    n = dp * tp
    return PrefillPlan(
        devices=n,
        attention=AttentionLayout(dp=dp, tp=tp),
        dense_ffn=ParallelLayout(dp=n, tp=1),
        moe=MoELayout(ep=n, slots_per_device=256 // n + 1),
        lm_head=ParallelLayout(dp=dp, tp=tp),
        batch_tokens=int(requests * PROMPT),
        context_parallel=context_parallel,
    )


@pytest.fixture(scope="module")
def ctx() -> CostContext:
    w = Workload(input_tokens=PROMPT, output_tokens=1024)
    return CostContext(load_model("deepseek-v3"), load_hardware("a2"), get_quantization("a8w8c16"), w)


@pytest.mark.parametrize(
    ("dp", "requests", "forwards"), [(24, 3, 8), (24, 24, 1), (24, 48, 1), (16, 8, 2), (2, 7, 1), (4, 1, 4)]
)
def test_a_prompt_spans_the_forwards_its_rank_budget_needs(ctx, dp, requests, forwards):
    assert int(forwards_per_prompt(ctx, requests * PROMPT, dp, False)) == forwards
    assert int(forwards_per_prompt(ctx, requests * PROMPT, dp, True)) == 1  # context parallelism: the whole batch
    fwd = prefill_forward(ctx, _prefill(dp, 1, requests))
    assert fwd.ttft_s[0] == pytest.approx((0.5 + forwards) * fwd.forward_s[0] + kv_transfer_s(ctx), rel=1e-12)


def test_the_forward_is_the_even_one_and_only_the_ttft_differs(ctx):
    """A busy instance's ranks all fill their budgets: the forward is the batch spread evenly, with or
    without context parallelism (which adds its KV exchange); the prompt's own forwards are 8 on its rank,
    1 split over the ranks."""
    whole, split = prefill_forward(ctx, _prefill(24, 1, 3)), prefill_forward(ctx, _prefill(24, 1, 3, True))
    exchange = split.breakdown_s["context_parallel_comm"][0]
    assert exchange > 0 and "context_parallel_comm" not in whole.breakdown_s
    assert whole.forward_s[0] == pytest.approx(split.forward_s[0] - exchange, rel=1e-12)
    assert split.ttft_s[0] == pytest.approx(1.5 * split.forward_s[0] + kv_transfer_s(ctx), rel=1e-12)
    assert whole.ttft_s[0] == pytest.approx(8.5 * whole.forward_s[0] + kv_transfer_s(ctx), rel=1e-12)


def test_a_rank_keeps_a_whole_prompts_kv(ctx):
    """A 16K prompt over 2K of budget a rank accumulates its KV over its 8 forwards: a rank holds one whole
    prompt's, as with 24 prompts a forward; split over the ranks by context parallelism, an eighth of it."""
    kv = {r: prefill_hbm(ctx, _prefill(24, 1, r)).breakdown_bytes["kv_cache"][0] for r in (3, 24, 48)}
    assert kv[3] == pytest.approx(kv[24], rel=1e-12)
    assert kv[48] == pytest.approx(2 * kv[24], rel=1e-12)
    split = prefill_hbm(ctx, _prefill(24, 1, 3, True)).breakdown_bytes["kv_cache"][0]
    assert split == pytest.approx(kv[24] / 8, rel=1e-12)


@pytest.mark.parametrize(("dp", "requests", "phrase"), [(24, 3, "spans 8 forwards"), (16, 8, "spans 2 forwards")])
def test_long_prompts_over_many_ranks_are_named(ctx, dp, requests, phrase):
    (note,) = prefill_rank_notes(ctx, _prefill(dp, 1, requests))
    assert note.startswith("prefill ranks:") and phrase in note


def test_context_parallelism_is_named_and_whole_prompts_need_no_note(ctx):
    assert prefill_rank_notes(ctx, _prefill(2, 8, 7)) == []
    (note,) = prefill_rank_notes(ctx, _prefill(24, 1, 3, True))
    assert "split evenly over the 24 attention DP ranks" in note and "ms of communication a forward" in note
    assert prefill_rank_notes(ctx, _prefill(24, 1, 24)) == []
    assert prefill_rank_notes(ctx, _prefill(1, 16, 3)) == []
    assert prefill_rank_notes(ctx, None) == []


def test_context_parallel_plans_are_costed_not_exported():
    plan, _ = load_plan("a3-sglang-v32-w8a8-pd32-64k-deploy")
    assert plan.prefill is not None and plan.prefill.context_parallel
    for engine in ("sglang", "vllm-ascend"):
        problems = plan_problems(plan, load_hardware("a3"), engine, 256, True)
        assert any(p.startswith("prefill.context_parallel:") for p in problems), (engine, problems)
    whole = plan.model_copy(update={"prefill": plan.prefill.model_copy(update={"context_parallel": False})})
    problems = plan_problems(whole, load_hardware("a3"), "sglang", 256, True)
    assert not any(p.startswith("prefill.context_parallel") for p in problems)


def test_the_searched_plan_reports_the_forwards_it_costs():
    r = run_cli("plan", "--input-tokens", "16384", "--output-tokens", "1024", "--structure", "pd", "--top", "1",
                "--json", "-")  # fmt: skip
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)["plans"][0]
    predicted = plan["predicted"]["prefill"]
    dp = plan["prefill"]["attention"]["dp"]
    own = -(-16384 * dp // plan["prefill"]["batch_tokens"])
    assert predicted["ttft_ms"] >= (0.5 + own) * predicted["forward_ms"] - 1e-6
    spans = [n for n in plan["predicted"]["notes"] if "spans" in n and n.startswith("prefill ranks:")]
    assert bool(spans) == (own > 1)


def test_a_colocated_prompt_takes_its_forwards_in_a_row_before_decoding_resumes():
    # attention DP24 over a 16,384-token batch: 682 tokens a rank, so a 1,024-token prompt takes 2 forwards;
    # a new request waits for the step and half a forward, then its 2 forwards; a sequence's longest gap
    # holds a prompt's 2 forwards and a step
    from planner.costmodel.evaluate import evaluate_plan

    plan, _ = load_plan("tests/simulate/small-colocated-whole.yaml")
    p = evaluate_plan(plan)
    step, forward = p.decode.step_ms, p.prefill.forward_ms
    assert p.colocated.forwards_per_prompt == 2
    assert p.colocated.ttft_ms == pytest.approx(step + 2.5 * forward, abs=0.01)
    assert p.colocated.longest_decode_pause_ms == pytest.approx(step + 2 * forward, abs=0.01)
    assert any("spans 2 forwards on its rank, which its TTFT counts" in n for n in p.notes)
    # a colocated instance's TTFT is the colocated block's: no prompt-alone figure for its prefill block
    assert p.prefill.prompt_alone_ms is None


def test_a_forward_below_the_batch_axis_is_read_on_the_line_of_its_first_two_batches():
    from planner.costmodel.colocated import forward_below_axis

    # F(1) = 10, F(2) = 12: half a request's tokens on the line, 9 s
    assert float(forward_below_axis(0.5, 1, 2, 10.0, 12.0)) == pytest.approx(9.0)
    # a line that would fall below F(1) x: the seconds per request never fall as the forward shrinks
    assert float(forward_below_axis(0.25, 1, 2, 10.0, 30.0)) == pytest.approx(2.5)
