"""moeplan's placement: never worse than EPLB's greedy, near the lower bound, valid, and checked
against an exhaustive oracle on tiny instances."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.errors import BadInputError
from planner.placement.eplb import global_placement
from planner.placement.metrics import (
    Routing,
    imbalance,
    lower_bound,
    lower_bound_for,
    nodes_per_token,
    slot_aware_lower_bound,
)
from planner.placement.optimize import FAST_SEARCH, imbalance_for, optimize_placement
from planner.placement.replicas import min_max_replica_counts
from planner.placement.synthetic import generate_loads
from tests.placement.test_replicas_and_eplb import assert_valid

TRACES = ["lognormal:1.0", "zipf:1.1"]


def exact_optimum(w: np.ndarray, devices: int, slots: int) -> float:
    """Smallest max device load over every valid placement (brute force; tiny sizes only)."""
    experts = len(w)
    subsets = list(itertools.combinations(range(experts), slots))
    best = np.inf
    for choice in itertools.combinations_with_replacement(subsets, devices):
        counts = np.zeros(experts)
        for subset in choice:
            counts[list(subset)] += 1
        if (counts == 0).any():
            continue
        per = w / counts
        best = min(best, max(per[list(s)].sum() for s in choice))
    return best


@settings(max_examples=40, deadline=None)
@given(
    experts=st.integers(2, 6),
    devices=st.integers(1, 3),
    data=st.data(),
)
def test_bounds_hold_and_search_is_sane_against_exhaustive_oracle(experts, devices, data):
    slots = data.draw(st.integers(1, experts))
    assume(devices * slots >= experts)
    assume(len(list(itertools.combinations(range(experts), slots))) ** devices <= 20000)
    w = np.array(data.draw(st.lists(st.integers(0, 50), min_size=experts, max_size=experts)), dtype=float)
    if w.sum() == 0:
        w[:] = 1.0
    exact = exact_optimum(w, devices, slots)
    mean = w.sum() / devices
    loads = w[None, :]
    assert exact / mean >= lower_bound(loads, devices, slots)[0] - 1e-9
    assert exact / mean >= slot_aware_lower_bound(loads, devices, slots)[0] - 1e-9
    result = optimize_placement(loads, devices, slots)
    ours = imbalance(loads, result.placement)[0]
    greedy = imbalance(loads, result.baseline)[0]
    assert ours >= exact / mean - 1e-9
    assert ours <= greedy + 1e-12
    assert_valid(result.placement, devices, slots, experts)


@settings(max_examples=40, deadline=None)
@given(
    experts=st.integers(4, 40),
    devices=st.integers(2, 16),
    seed=st.integers(0, 10_000),
    data=st.data(),
)
def test_random_instances_are_valid_never_worse_and_above_the_bounds(experts, devices, seed, data):
    slots = data.draw(st.integers(1, min(experts, 8)))
    assume(devices * slots >= experts)
    rng = np.random.default_rng(seed)
    loads = np.floor(rng.lognormal(2, 1.5, (3, experts)))
    loads[0, rng.random(experts) < 0.3] = 0
    result = optimize_placement(loads, devices, slots)
    assert_valid(result.placement, devices, slots, experts)
    ours = imbalance(loads, result.placement)
    assert (ours <= imbalance(loads, result.baseline) + 1e-12).all()
    assert (ours >= lower_bound(loads, devices, slots) - 1e-9).all()
    assert (ours >= slot_aware_lower_bound(loads, devices, slots) - 1e-9).all()
    fast = imbalance_for(loads, devices, slots)
    assert (fast <= imbalance(loads, result.baseline) + 1e-12).all()


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize(("devices", "slots"), [(32, 9), (64, 5), (16, 17), (48, 6), (320, 1)])
def test_within_half_a_percent_median_and_two_percent_worst_of_the_bound(trace, devices, slots):
    # at least one redundant slot per 8 devices in every case
    assert devices * slots - 256 >= devices / 8
    loads = generate_loads(trace, 58, 256, seed=11)
    result = optimize_placement(loads, devices, slots)
    gap = imbalance(loads, result.placement) / lower_bound(loads, devices, slots) - 1
    assert np.median(gap) <= 0.005
    assert gap.max() <= 0.02
    greedy_gap = imbalance(loads, result.baseline) / lower_bound(loads, devices, slots) - 1
    assert (gap <= greedy_gap + 1e-12).all()
    assert_valid(result.placement, devices, slots, 256)


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("devices", [256, 288, 320])
def test_one_slot_per_device_reaches_the_bound_exactly(trace, devices):
    loads = generate_loads(trace, 20, 256, seed=2)
    result = optimize_placement(loads, devices, 1)
    assert np.allclose(imbalance(loads, result.placement), lower_bound(loads, devices, 1))


@pytest.mark.parametrize("trace", TRACES)
def test_two_slots_per_device_pairs_optimally_and_the_plain_bound_is_out_of_reach(trace):
    devices, slots = 144, 2
    loads = generate_loads(trace, 20, 256, seed=5)
    result = optimize_placement(loads, devices, slots)
    ours = imbalance(loads, result.placement)
    # With the min-max counts, pairing sorted replicas largest-with-smallest is optimal.
    counts = min_max_replica_counts(loads, devices * slots, devices)
    mean = loads.sum(axis=1) / devices
    for layer in range(loads.shape[0]):
        x = np.sort(np.repeat(loads[layer] / counts[layer], counts[layer]))
        assert ours[layer] <= (x + x[::-1]).max() / mean[layer] + 1e-9
    # The heaviest replica must share its device: the slot-aware bound is above the plain one.
    plain, aware = lower_bound(loads, devices, slots), slot_aware_lower_bound(loads, devices, slots)
    assert (aware > plain * 1.002).mean() > 0.5
    assert (ours >= aware - 1e-9).all()


def test_fast_variant_is_close_to_the_full_search():
    loads = generate_loads("lognormal:1.0", 58, 256, seed=4)
    for devices, slots in [(32, 9), (64, 5), (16, 16), (144, 2), (288, 1)]:
        fast = imbalance_for(loads, devices, slots)
        full = imbalance(loads, optimize_placement(loads, devices, slots).placement)
        greedy = imbalance(loads, global_placement(loads, devices, slots))
        assert (fast <= greedy + 1e-12).all()
        assert np.median(fast / full - 1) <= 0.005


def test_fast_settings_are_documented_as_fast():
    assert FAST_SEARCH.rounds < 40 and len(FAST_SEARCH.thetas) <= 2


def test_imbalance_for_is_deterministic_and_pure():
    loads = generate_loads("zipf:1.1", 10, 256, seed=0)
    a = imbalance_for(loads, 32, 9)
    b = imbalance_for(loads.copy(), 32, 9)
    assert np.array_equal(a, b)
    other = imbalance_for(loads * 1.0 + np.eye(10, 256) * 500, 32, 9)
    assert not np.array_equal(a, other)


@pytest.mark.parametrize(
    ("devices", "slots", "nodes", "fix"),
    [
        (0, 9, 1, "--devices"),
        (32, 0, 1, "--slots-per-device"),
        (16, 8, 1, "cannot hold"),
        (32, 300, 1, "exceeds"),
        (32, 9, 5, "--nodes"),
    ],
)
def test_bad_layouts_are_user_errors(devices, slots, nodes, fix):
    loads = np.ones((2, 256))
    with pytest.raises(BadInputError, match=fix):
        imbalance_for(loads, devices, slots, nodes)
    if nodes == 1:
        with pytest.raises(BadInputError, match=fix):
            lower_bound_for(loads, devices, slots)


def test_bad_loads_are_user_errors():
    with pytest.raises(BadInputError):
        imbalance_for(np.full((2, 8), np.nan), 4, 2)
    with pytest.raises(BadInputError):
        imbalance_for(-np.ones((2, 8)), 4, 2)
    with pytest.raises(BadInputError):
        imbalance_for(np.ones(8), 4, 2)


def test_all_zero_layer_counts_as_perfectly_balanced():
    loads = np.zeros((2, 16))
    loads[1] = np.arange(16)
    out = imbalance_for(loads, 4, 5)
    assert out[0] == 1.0 and out[1] >= 1.0


def test_group_limited_routing_prefers_fewer_nodes_within_one_percent():
    routing = Routing(experts_per_token=8, n_group=8, topk_group=4)
    loads = generate_loads("lognormal:1.0", 12, 256, seed=7)
    plain = optimize_placement(loads, 32, 9)
    local = optimize_placement(loads, 32, 9, nodes=4, routing=routing)
    ours_plain = imbalance(loads, plain.placement)
    ours_local = imbalance(loads, local.placement)
    assert (ours_local <= ours_plain * 1.01 + 1e-9).all()
    assert (ours_local <= imbalance(loads, local.baseline) + 1e-12).all()
    reach_plain = nodes_per_token(loads, plain.placement, 4, routing)
    reach_local = nodes_per_token(loads, local.placement, 4, routing)
    assert reach_local.mean() < reach_plain.mean()
    assert_valid(local.placement, 32, 9, 256)
