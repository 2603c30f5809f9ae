"""The predictor's tables read back what the cost model says, at and between grid points."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs
from planner.costmodel.memory import kv_transfer_bytes_per_request
from planner.costmodel.prefill import prefill_forward
from planner.simulate.mtp import StepSampler, step_moments
from planner.simulate.predictor import decode_times, kv_pool, prefill_times, prefill_workload
from planner.specs.catalog import load_plan
from planner.specs.workload import Workload

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def setup():
    plan, _ = load_plan(str(HERE / "small-pd.yaml"))
    specs = load_plan_specs(plan)
    ctx = CostContext(specs.model, specs.hw, specs.quant, plan.workload)
    return plan, ctx


def test_decode_table_at_the_plans_point_is_the_cost_models_step_without_the_dp_straggler(setup):
    plan, ctx = setup
    d = plan.decode
    times = decode_times(ctx, d, 2000.0, ctx.mean_decode_context_tokens)
    c = ctx.mean_decode_context_tokens
    # the cost model asked at the same context with no spread of contexts (one rank's view)
    flat = dataclasses.replace(ctx, workload=Workload(input_tokens=int(c) - 1, output_tokens=2, mtp_acceptance=0.7))
    direct = float(decode_step(flat, d).step_s[0])
    n = d.concurrency_per_device * d.devices
    tokens = n * c
    ranks = np.full(d.attention.dp, n / d.attention.dp)
    assert times.step_s(n, tokens, ranks, ranks * c) == pytest.approx(direct, rel=1e-3)
    # and the static prediction adds the statistical straggler on top of it
    assert evaluate_plan(plan).decode.step_ms / 1e3 > direct


@pytest.mark.parametrize("batch,context", [(1.3, 700.0), (2.7, 1333.0), (3.9, 1800.0)])
def test_decode_table_between_grid_points_is_within_half_a_percent(setup, batch, context):
    plan, ctx = setup
    d = plan.decode
    times = decode_times(ctx, d, 2000.0, ctx.mean_decode_context_tokens)
    flat = dataclasses.replace(
        ctx, workload=Workload(input_tokens=int(context) - 1, output_tokens=2, mtp_acceptance=0.7)
    )
    direct = float(decode_step(flat, d, np.array([batch])).step_s[0])
    assert times.step_at(batch, context) == pytest.approx(direct, rel=5e-3)


def test_a_slower_rank_makes_a_slower_step(setup):
    plan, ctx = setup
    d = plan.decode
    times = decode_times(ctx, d, 2000.0, 1280.0)
    ranks = np.full(32, 4.0)
    even = times.step_s(128, 128 * 1280.0, ranks, ranks * 1280.0)
    tokens = ranks * 1280.0
    tokens[5] *= 1.5  # one rank holds half as many tokens again
    tokens[6] -= 0.5 * 4 * 1280.0
    assert times.step_s(128, float(tokens.sum()), ranks, tokens) > even


@pytest.mark.parametrize("tokens,prompt", [(16384, 1024), (5000, 1024), (3000, 3000), (700, 350)])
def test_prefill_table_reads_the_cost_models_forward(setup, tokens, prompt):
    plan, ctx = setup
    times = prefill_times(ctx, plan.prefill, 4096.0, 1024.0)
    c = dataclasses.replace(ctx, workload=prefill_workload(prompt, ctx.workload))
    direct = float(prefill_forward(c, plan.prefill, np.array([float(tokens)])).forward_s[0])
    # whole prompts of `prompt` tokens attend on average to prompt/2 positions
    assert times.forward_s(tokens, prompt / 2.0) == pytest.approx(direct, rel=5e-3)
    assert times.prompt_kv_bytes(prompt) == pytest.approx(kv_transfer_bytes_per_request(c), rel=1e-3)


def test_kv_pool_holds_the_plans_concurrency_at_the_cost_models_estimate(setup):
    plan, ctx = setup
    pool = kv_pool(ctx, plan.decode)
    pred = evaluate_plan(plan)
    kv_now = pred.decode.hbm_breakdown_bytes["kv_cache"]
    # the pool is the cache the plan uses plus the headroom the engine's share leaves
    assert pool.pool_bytes == pytest.approx(kv_now + pred.decode.hbm_headroom_bytes, rel=1e-6)
    # MLA: a token costs the same on every device of a DP rank
    assert pool.bytes_per_token == pytest.approx(
        ctx.model.kv_elements_per_token_per_layer() * ctx.model.kv_layers() * ctx.quant.kv_bytes_per_element
    )


@pytest.mark.parametrize("k,a", [(1, 0.7), (2, 0.7), (3, 0.9), (1, 0.0), (2, 1.0)])
def test_step_sampler_draws_the_renewal_count(k, a):
    rng = np.random.default_rng(0)
    sampler = StepSampler(k, a, rng)
    mean_x, var_x = step_moments(k, a)
    assert mean_x == pytest.approx(1 + sum(a**m for m in range(1, k + 1)))
    for tokens in (40, 2000):  # exact draws, and the normal limit
        steps = np.array([sampler.steps(tokens) for _ in range(3000)])
        assert steps.min() >= np.ceil(tokens / (1 + k)) and steps.max() <= tokens
        # renewal: E[S] = R / E[X] up to the overshoot of the last step
        assert steps.mean() == pytest.approx(tokens / mean_x, rel=0.03, abs=1.0)
        if 0 < a < 1 and tokens == 2000:
            assert steps.var() == pytest.approx(tokens * var_x / mean_x**3, rel=0.15)
