"""Replica counts and the DeepSeek EPLB baselines (global and hierarchical)."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner.placement.eplb import (
    global_placement,
    greedy_pack,
    hierarchical_applies,
    hierarchical_placement,
)
from planner.placement.model import Placement, device_loads
from planner.placement.replicas import divisor_replica_counts, min_max_replica_counts
from planner.placement.synthetic import generate_loads


def one_at_a_time(loads: list[float], slots: int, cap: int, theta: float = 1.0) -> list[int]:
    """The replication rule written as the loop it describes (the oracle)."""
    counts = [1] * len(loads)
    heap = [(-w / theta, e) for e, w in enumerate(loads)]
    heapq.heapify(heap)
    for _ in range(slots - len(loads)):
        while True:
            _, e = heapq.heappop(heap)
            if counts[e] < cap:
                break
        counts[e] += 1
        if counts[e] < cap:
            heapq.heappush(heap, (-loads[e] / (counts[e] - 1 + theta), e))
    return counts


def assert_valid(p: Placement, devices: int, slots: int, experts: int) -> None:
    assert p.device_experts.shape[1:] == (devices, slots)
    assert (p.replica_counts >= 1).all()
    assert (p.replica_counts.sum(axis=1) == devices * slots).all()
    for layer in range(p.layers):
        for row in p.device_experts[layer]:
            assert len(set(row.tolist())) == slots  # no expert twice on a device
    assert p.num_experts == experts


@settings(max_examples=60, deadline=None)
@given(
    experts=st.integers(1, 30),
    devices=st.integers(1, 12),
    data=st.data(),
    theta=st.sampled_from([1.0, 0.9, 0.7, 0.5]),
)
def test_vectorised_counts_equal_the_one_at_a_time_loop(experts, devices, data, theta):
    slots = data.draw(st.integers(1, experts))
    assume(devices * slots >= experts)
    loads = data.draw(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=experts, max_size=experts))
    counts = divisor_replica_counts(np.array([loads]), devices * slots, devices, theta)[0]
    expected = one_at_a_time(loads, devices * slots, devices, theta)
    w = np.array(loads)
    # Ties may be broken differently; the per-replica loads taken must match.
    assert counts.sum() == devices * slots and counts.min() >= 1 and counts.max() <= devices
    assert sorted((w / counts).tolist()) == pytest.approx(
        sorted((w / np.array(expected)).tolist()), rel=1e-9, abs=1e-12
    )


def test_min_max_counts_minimise_the_heaviest_replica_exhaustively():
    rng = np.random.default_rng(3)
    for _ in range(30):
        w = rng.lognormal(0, 1, 5)
        counts = min_max_replica_counts(w[None], 9, 9)[0]
        best = min(
            max(w / np.array(c))
            for c in np.ndindex(*(5,) * 5)
            if sum(x + 1 for x in c) == 9
            for c in [tuple(x + 1 for x in c)]
        )
        assert max(w / counts) == pytest.approx(best)


@pytest.mark.parametrize(("devices", "slots"), [(32, 9), (64, 5), (288, 1), (16, 17), (8, 32)])
def test_global_placement_is_valid(devices, slots):
    w = generate_loads("zipf:1.1", 6, 256, seed=1)
    p = global_placement(w, devices, slots)
    assert_valid(p, devices, slots, 256)
    assert np.allclose(device_loads(w, p).sum(axis=1), w.sum(axis=1))


def test_greedy_packs_heaviest_first_onto_the_lightest_device():
    w = np.array([[10.0, 6.0, 5.0, 4.0, 3.0, 2.0]])
    counts = np.ones((1, 6), dtype=np.int64)
    ids = greedy_pack(w, counts, 2, 3)
    # 10 -> d0, 6 -> d1, 5 -> d1 (11), 4 -> d0 (14), 3 -> d1 (14), 2 -> d0 (16)
    assert sorted(ids[0, 0].tolist()) == [0, 3, 5]
    assert sorted(ids[0, 1].tolist()) == [1, 2, 4]


def test_hierarchical_keeps_each_group_on_one_node():
    w = generate_loads("lognormal:1.0", 5, 256, seed=2)
    devices, slots, nodes, groups = 32, 9, 4, 8
    assert hierarchical_applies(256, devices, slots, nodes, groups)
    p = hierarchical_placement(w, devices, slots, nodes, groups)
    assert_valid(p, devices, slots, 256)
    per_node = devices // nodes
    for layer in range(p.layers):
        for device in range(devices):
            node = device // per_node
            for e in p.device_experts[layer, device]:
                group = int(e) // 32
                # every replica of a group's experts sits on the group's node
                others = np.argwhere(p.device_experts[layer] // 32 == group)[:, 0] // per_node
                assert set(others.tolist()) == {node}


def test_hierarchical_falls_back_to_global_when_groups_do_not_divide():
    w = generate_loads("zipf:1.0", 3, 64, seed=0)
    assert not hierarchical_applies(64, 12, 6, 3, 1)
    a = hierarchical_placement(w, 12, 6, 3, 1)
    b = global_placement(w, 12, 6)
    assert a.same_as(b)


def test_divisor_counts_never_overshoot_at_a_rounding_tie():
    # regression: theta 0.95 with three equal loads and a zero used to hand out 3 extra
    # replicas for 2 slots (1 / (1 / 0.95) rounds above 0.95)
    from planner.placement.replicas import divisor_replica_counts

    for theta in (0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 1.0):
        counts = divisor_replica_counts(np.array([[0.0, 1, 1, 1]]), 6, 2, theta)
        assert counts.sum() == 6 and counts.min() >= 1 and counts.max() <= 2


def test_single_layer_packing_equals_the_vectorised_packer():
    from planner.placement.eplb import greedy_pack

    rng = np.random.default_rng(1)
    for _ in range(300):
        experts, devices, slots = (
            int(rng.integers(2, 9)),
            int(rng.integers(1, 5)),
            int(rng.integers(2, 5)),
        )
        if devices * slots < experts or slots > experts:
            continue
        loads = rng.integers(0, 9, size=(1, experts)).astype(float)
        counts = np.ones((1, experts), dtype=np.int64)
        for _ in range(devices * slots - experts):
            open_ = np.flatnonzero(counts[0] < devices)
            counts[0, rng.choice(open_)] += 1
        one = greedy_pack(loads, counts, devices, slots)[0]
        two = greedy_pack(np.vstack([loads, loads]), np.vstack([counts, counts]), devices, slots)[0]
        assert np.array_equal(one, two)
