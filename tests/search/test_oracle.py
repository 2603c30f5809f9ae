"""CP-SAT and the vectorised candidate enumeration against exhaustive oracles on small spaces."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.candidates.phase_candidates import (
    PhaseCandidate,
    decode_candidates,
    prefill_candidates,
)
from planner.candidates.space import SpaceLimits, size_options
from planner.candidates.tables import decode_tables, prefill_tables, to_integer_tables
from planner.costmodel.context import CostContext
from planner.search.deployment_model import DeploymentModel
from planner.search.oracle import best_deployment_ratio, best_phase_ratio
from planner.search.settings import SolverSettings
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import AttentionLayout, ParallelLayout, Workload
from planner.specs.quantization import get_quantization


def _fake(phase: str, devices: int) -> PhaseCandidate:
    lay = ParallelLayout(dp=devices, tp=1)
    return PhaseCandidate(
        phase,
        devices,
        AttentionLayout(dp=devices, tp=1),
        None,
        None,
        lay,
        0,
        1,
        1,
        1,
        1,
        10,
        1,
        1,
        (0, 0, 0, 0),
    )


@settings(max_examples=60, deadline=None)
@given(
    decode=st.lists(st.tuples(st.integers(1, 5000), st.sampled_from([1, 2, 4, 8, 16])), min_size=1, max_size=4),
    prefill=st.lists(st.tuples(st.integers(1, 5000), st.sampled_from([1, 2, 4, 8])), min_size=0, max_size=3),
    budget=st.integers(2, 40),
)
def test_deployment_model_matches_the_enumerator(decode, prefill, budget):
    d_rates, d_dev = [r for r, _ in decode], [d for _, d in decode]
    p_rates, p_dev = [r for r, _ in prefill], [d for _, d in prefill]
    expected = best_deployment_ratio(d_rates, d_dev, p_rates, p_dev, budget)
    model = DeploymentModel(
        [_fake("decode", d) for d in d_dev],
        [_fake("prefill", d) for d in p_dev],
        d_rates,
        p_rates,
        budget,
        SolverSettings(time_limit_s=20, workers=1),
    )
    result = model.solve_top(1)
    if expected == 0:
        assert not result.deployments
        return
    best = result.deployments[0]
    assert result.optimal
    assert Fraction(best.rate_milli, best.devices) == expected
    assert best.devices <= budget


@pytest.fixture(scope="module")
def lite_ctx():
    model = load_model("deepseek-v2-lite")
    hw = load_hardware("a2")
    return CostContext(model, hw, get_quantization("a8w8c16"), Workload(input_tokens=512, output_tokens=256))


@pytest.mark.parametrize(("devices", "slo_us"), [(1, None), (2, 20000), (4, 15000), (8, 12000)])
def test_decode_candidates_match_brute_force(lite_ctx, devices, slo_us):
    opts = size_options(lite_ctx.model, lite_ctx.hw, devices, "decode", SpaceLimits(64))
    t = decode_tables(lite_ctx, opts, [0], np.arange(1, 48) * 8)
    ints = to_integer_tables(t, lite_ctx.hw.hbm_bytes)
    best = decode_candidates(t, ints, slo_us, keep=1)
    oracle = best_phase_ratio(t, ints, slo_us)
    if oracle == 0:
        assert not best
    else:
        assert Fraction(best[0].num, best[0].den) == oracle


@pytest.mark.parametrize(("devices", "slo_us"), [(1, None), (4, 400000), (8, 200000)])
def test_prefill_candidates_match_brute_force(lite_ctx, devices, slo_us):
    opts = size_options(lite_ctx.model, lite_ctx.hw, devices, "prefill", SpaceLimits(64))
    t = prefill_tables(lite_ctx, opts, [1, 2], np.arange(1, 24))
    ints = to_integer_tables(t, lite_ctx.hw.hbm_bytes)
    best = prefill_candidates(t, ints, slo_us, 1, lite_ctx.model.num_layers, 1.0)
    oracle = best_phase_ratio(t, ints, slo_us, lite_ctx.model.num_layers, 1.0)
    if oracle == 0:
        assert not best
    else:
        assert Fraction(best[0].num, best[0].den) == oracle
