"""The alpha-beta collective model on the machines' interconnect levels."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.costmodel import comm
from planner.specs.catalog import load_hardware
from tests.conftest import collective_cost_contexts

A2 = load_hardware("a2")
CM = load_hardware("cm384")


def test_single_device_collectives_cost_nothing():
    assert float(comm.allgather_s(A2, 1, 1e6)) == 0.0
    assert float(comm.all_to_all_s(CM, 1, 1e6)) == 0.0


def test_a2_allgather_over_four_nodes_is_bound_by_the_node_mesh():
    # 32 devices: each receives 28 shards over HCCS and 3 over its own RoCE NIC (hierarchical);
    # with the inter-node traffic hidden under the intra-node traffic, HCCS sets the time.
    shard = 1e6
    eff = A2.efficiency.link_bandwidth.value
    hccs = A2.levels[0].bandwidth_bytes_per_s * eff
    roce = A2.levels[1].bandwidth_bytes_per_s * eff
    expected_bw = max(28 * shard / hccs, 3 * shard / roce)
    fixed = A2.fixed_costs.collective.value + A2.levels[0].latency_s + A2.levels[1].latency_s
    assert float(comm.allgather_s(A2, 32, shard)) == pytest.approx(expected_bw + fixed)


def test_tp2_on_cm384_stays_inside_a_package():
    # a TP2 group is the two dies of a 910C package: only the SIO link is used
    t = float(comm.allgather_s(CM, 2, 1e6))
    sio = CM.levels[0]
    assert t == pytest.approx(
        1e6 / (sio.bandwidth_bytes_per_s * CM.efficiency.link_bandwidth.value)
        + sio.latency_s
        + CM.fixed_costs.collective.value
    )


def test_crossing_nodes_on_a2_is_slower_than_inside_one():
    assert float(comm.all_to_all_s(A2, 16, 1e7)) > 2 * float(comm.all_to_all_s(A2, 8, 1e7))


@given(
    n=st.integers(min_value=2, max_value=512),
    small=st.floats(min_value=0, max_value=1e8),
    extra=st.floats(min_value=0, max_value=1e8),
)
def test_collectives_grow_with_bytes(n, small, extra):
    for hw in (A2, CM):
        for fn in (comm.allgather_s, comm.reduce_scatter_s, comm.allreduce_s, comm.all_to_all_s):
            assert float(fn(hw, n, small + extra)) >= float(fn(hw, n, small)) - 1e-15


def test_vectorised_over_sizes():
    sizes = np.array([1e3, 1e6, 1e9])
    out = comm.all_to_all_s(CM, 288, sizes)
    assert out.shape == (3,) and np.all(np.diff(out) > 0)


def test_a_collective_pays_its_fixed_cost_in_its_time_and_among_the_launches():
    """`fixed_costs.collective` is charged twice per collective, on purpose (comm.py's docstring):
    raising it by d raises a TP2 dense FFN (an AllGather in, a ReduceScatter out) by 2 x 2d, the LM
    head (hidden states and logits gathered) by 2 x 2d, the embedding (one AllReduce, costed as a
    ReduceScatter and an AllGather, two launches counted) by 4d, and a module without TP by nothing.
    A change to this is a change to every fit: rerun benchmarks/calibrate_factors.py and compare."""
    from planner.costmodel.modules import dense_ffn_cost, embedding_cost, lm_head_cost
    from planner.specs.plan import ParallelLayout

    d = 7e-6
    ctx, ctx_raised = collective_cost_contexts(d)
    t = np.array([4.0, 64.0])
    tp2, dp2 = ParallelLayout(dp=1, tp=2), ParallelLayout(dp=2, tp=1)
    for cost, layout, charges in (
        (dense_ffn_cost, tp2, 4),
        (lm_head_cost, tp2, 4),
        (embedding_cost, tp2, 4),
        (dense_ffn_cost, dp2, 0),
        (embedding_cost, dp2, 0),
    ):
        step = cost(ctx_raised, layout, t).total_s - cost(ctx, layout, t).total_s
        assert np.allclose(step, charges * d, rtol=1e-9, atol=1e-15), (cost.__name__, layout)
        launches = cost(ctx_raised, layout, t).fixed_s - cost(ctx, layout, t).fixed_s
        assert launches == pytest.approx(charges / 2 * d, abs=1e-15), (cost.__name__, layout)
