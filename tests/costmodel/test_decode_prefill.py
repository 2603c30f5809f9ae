"""Behaviour of the decode and prefill cost models (monotonicity, MTP, micro-batching)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step, emitted_tokens_per_step
from planner.costmodel.evaluate import load_plan_specs
from planner.costmodel.memory import (
    decode_hbm,
    max_decode_concurrency,
    max_prefill_batch_tokens,
    prefill_hbm,
)
from planner.costmodel.prefill import prefill_forward
from planner.specs.catalog import catalog_dir, load_plan


def _ctx(name: str):
    plan, _ = load_plan(name)
    specs = load_plan_specs(plan, catalog_dir("plans"))
    return plan, CostContext(specs.model, specs.hw, specs.quant, plan.workload)


def test_emitted_tokens_formula():
    assert emitted_tokens_per_step(0, 0.7) == 1.0
    assert emitted_tokens_per_step(1, 0.7) == pytest.approx(1.7)
    assert emitted_tokens_per_step(2, 0.5) == pytest.approx(1.75)


@pytest.mark.parametrize("name", ["a2-d70", "cm-d"])
def test_step_time_and_throughput_grow_with_concurrency(name):
    plan, ctx = _ctx(name)
    grid = np.arange(1, 200, dtype=float)
    step = decode_step(ctx, plan.decode, grid)
    assert np.all(np.diff(step.step_s) > 0)
    assert np.all(np.diff(step.tokens_per_s_per_device) > 0)
    assert np.allclose(step.tpot_s * 1.7, step.step_s)


@settings(max_examples=50, deadline=None)
@given(b=st.integers(min_value=1, max_value=150))
def test_breakdown_adds_up_to_the_step(b):
    plan, ctx = _ctx("a2-d70")
    step = decode_step(ctx, plan.decode, [b])
    assert sum(float(v[0]) for v in step.breakdown_s.values()) == pytest.approx(float(step.step_s[0]))


def test_mtp_costs_time_but_pays_at_70_percent():
    plan, ctx = _ctx("a2-d70")
    no_mtp = plan.decode.model_copy(update={"mtp_tokens": 0})
    with_mtp = decode_step(ctx, plan.decode)
    without = decode_step(ctx, no_mtp)
    assert with_mtp.step_s[0] > without.step_s[0]
    assert with_mtp.tokens_per_s_per_device[0] > without.tokens_per_s_per_device[0]


def test_hbm_max_concurrency_is_exact():
    plan, ctx = _ctx("a2-d70")
    b = max_decode_concurrency(ctx, plan.decode)
    use = decode_hbm(ctx, plan.decode, [b, b + 1])
    assert bool(use.fits[0]) and not bool(use.fits[1])


def test_prefill_hbm_max_batch_is_exact():
    plan, ctx = _ctx("a2-p")
    bt = max_prefill_batch_tokens(ctx, plan.prefill)
    use = prefill_hbm(ctx, plan.prefill, [bt, bt + 1])
    assert bool(use.fits[0]) and not bool(use.fits[1])


def test_micro_batching_hides_the_shorter_of_compute_and_communication():
    plan, ctx = _ctx("a2-p")
    one = prefill_forward(ctx, plan.prefill)
    two = prefill_forward(ctx, plan.prefill.model_copy(update={"micro_batches": 2}))
    comm_ms = sum(float(v[0]) for k, v in one.breakdown_s.items() if k.endswith("_comm"))
    assert two.forward_s[0] < one.forward_s[0]
    # cannot go below the longer of compute and communication
    assert two.forward_s[0] >= max(comm_ms, one.forward_s[0] - comm_ms - float(one.breakdown_s["launch_overhead"][0]))


def test_prefill_attention_grows_quadratically_with_prompt_length():
    plan, ctx = _ctx("a2-p")
    short = CostContext(ctx.model, ctx.hw, ctx.quant, ctx.workload.model_copy(update={"input_tokens": 1024}))
    long = CostContext(ctx.model, ctx.hw, ctx.quant, ctx.workload.model_copy(update={"input_tokens": 4096}))
    a_short = prefill_forward(short, plan.prefill).breakdown_s["attention"][0]
    a_long = prefill_forward(long, plan.prefill).breakdown_s["attention"][0]
    assert a_long > a_short


def test_ttft_includes_wait_and_kv_transfer():
    plan, ctx = _ctx("a2-p")
    fwd = prefill_forward(ctx, plan.prefill)
    assert fwd.ttft_s[0] > 1.5 * fwd.forward_s[0]
