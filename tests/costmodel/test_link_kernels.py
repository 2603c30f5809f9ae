"""The link factors measured kernels imply, and the A3 link bound of validation/_fit.yaml that rests on them."""

from __future__ import annotations

import pytest

from planner.costmodel.link_kernels import (
    DEEPEP_ASCEND_LOW_LATENCY_HCCS,
    KernelTime,
    implied_link_factor,
    link_factor_bounds,
    model_time_s,
)
from planner.costmodel.store_fit import fit_config
from planner.specs.catalog import load_hardware

A3 = load_hardware("a3")


@pytest.mark.parametrize("kernel", DEEPEP_ASCEND_LOW_LATENCY_HCCS, ids=lambda k: f"{k.kernel}-ep{k.ep}")
def test_the_model_takes_the_measured_time_at_the_implied_factor(kernel):
    factor = implied_link_factor(A3, kernel)
    assert model_time_s(A3, kernel, factor) == pytest.approx(kernel.measured_s, rel=1e-9)


def test_the_kernels_bytes_are_the_published_setting():
    # 128 tokens a die, hidden 7168, top-8: 7.34 MB out in INT8, twice that back in BF16
    by_kind = {k.kernel: k.bytes_out for k in DEEPEP_ASCEND_LOW_LATENCY_HCCS}
    assert by_kind["dispatch"] == pytest.approx(128 * 7168 * 8)
    assert by_kind["combine"] == pytest.approx(2 * 128 * 7168 * 8)


def test_sglang_kernels_reach_a_quarter_to_a_half_of_the_a3_links():
    # dispatch 132-139 us and combine 126-135 us for 7.3 and 14.7 MB over 196 GB/s HCCS:
    # the model (0.5 us latency, 10 us per collective) matches at about 0.27 and 0.56
    factors = {(k.kernel, k.ep): implied_link_factor(A3, k) for k in DEEPEP_ASCEND_LOW_LATENCY_HCCS}
    assert factors[("dispatch", 8)] == pytest.approx(0.264, abs=0.002)
    assert factors[("dispatch", 16)] == pytest.approx(0.272, abs=0.002)
    assert factors[("combine", 8)] == pytest.approx(0.556, abs=0.002)
    assert factors[("combine", 16)] == pytest.approx(0.561, abs=0.002)


def test_the_fit_bounds_the_open_engines_links_by_those_kernels():
    low, high = link_factor_bounds(A3, DEEPEP_ASCEND_LOW_LATENCY_HCCS)
    stated = fit_config().groups["910c-open"].factors["efficiency.link_bandwidth"]
    assert tuple(stated) == (round(low, 3), round(high, 3))
    # and the shipped factor is inside it
    assert stated[0] <= A3.efficiency.link_bandwidth.value <= stated[1]


def test_a_kernel_faster_than_the_latency_alone_is_refused():
    fast = KernelTime("dispatch", 16, 128, 7168, 8, 1.0, measured_s=5e-6, source="test")
    with pytest.raises(ValueError, match="no link factor reproduces it"):
        implied_link_factor(A3, fast)
