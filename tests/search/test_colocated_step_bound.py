"""The colocated bounds count the decode step in flight against the TTFT and ITL limits of a whole
forward (planner.candidates.colocated_candidates `_step_limit_floors_us`, `_batches_within_us`).

A whole prefill forward of R requests runs at concurrency B only if step_B + k F(R) fits the longest
gap (ITL) and step_B + (k + 1/2) F(R) the TTFT. The bounds once checked F(R) alone: on CloudMatrix384
with MindIE (default SLOs: TPOT 100 ms, so ITL 300 ms) the 96-die size's bound was 24.13 requests/s against
a best instance of 18.24 (x1.32; x1.47 on the combination it came from: DP24 attention, whose 24-prompt
batches take ~250 ms next to a ~120 ms step), no size was pruned, and the search evaluated every size's
combinations. They also took the shortest forward over micro-batch counts an expert layout cannot run
(SGLang runs several only with some): SGLang's 24-card A2 bound was 4.46 against a best of 3.27. The
bounds must stay above every instance (the search is exact only then) and are now within a few percent
of the best.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.candidates.colocated_candidates import (
    _batches_within_us,
    colocated_candidates,
    colocated_size_bound,
    colocated_upper_bounds,
)
from planner.candidates.space import SpaceLimits
from planner.search.candidate_spaces import build_phase_space
from planner.search.contexts import make_context
from planner.search.plan_search import TableCache
from planner.search.request import PlanRequest
from tests.conftest import PROOF

CACHE = TableCache()


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 4),
    batches=st.integers(1, 7),
    steps=st.integers(1, 5),
    data=st.data(),
)
def test_batches_within_matches_a_direct_count(rows, batches, steps, data):
    """The one sorted search over offset rows equals, per row and concurrency, the largest batch whose
    floors (non-decreasing) are within every limit less the step, -1 where none is."""
    values = st.integers(0, 2000)
    floors = np.array(
        [
            [sorted(data.draw(st.lists(values, min_size=batches, max_size=batches))) for _ in range(rows)]
            for _ in range(2)
        ],
        dtype=np.int64,
    )
    limits = np.array(data.draw(st.lists(st.integers(0, 2500), min_size=2, max_size=2)), dtype=np.int64).reshape(
        2, 1, 1
    )
    step = np.array(
        [data.draw(st.lists(st.floats(0, 2500), min_size=steps, max_size=steps)) for _ in range(rows)], dtype=float
    )
    got = _batches_within_us(floors, limits, step)
    for i in range(rows):
        for b in range(steps):
            ok = [all(floors[lim, i, r] <= limits[lim, 0, 0] - step[i, b] for lim in range(2)) for r in range(batches)]
            expected = max((r for r in range(batches) if all(ok[: r + 1])), default=-1)
            assert got[i, b] == expected


def _tables(devices: int, engine: str | None, hardware: str = "cm384") -> tuple:
    request = PlanRequest(hardware=hardware, max_cards=384, top=1, settings=PROOF, colocated=True, engine=engine)
    ctx = make_context(request)
    limits = SpaceLimits(max_devices=devices, engine=engine)
    d = build_phase_space(ctx, "decode", [devices], request, limits, keep=1, cache=CACHE)
    p = build_phase_space(ctx, "prefill", [devices], request, limits, keep=1, cache=CACHE)
    return request, ctx, d.tables[devices], p.tables[devices]


@pytest.mark.parametrize(
    ("engine", "hardware", "devices"), [("mindie", "cm384", 96), ("sglang", "cm384", 96), ("sglang", "a2", 24)]
)
def test_bounds_hold_and_are_tight_where_the_step_and_a_forward_fill_the_itl(engine, hardware, devices):
    request, ctx, (dt, di), (pt, pi) = _tables(devices, engine, hardware)
    slo = request.slo
    tpot, ttft, itl = int(slo.tpot_ms * 1000), int(slo.ttft_ms * 1000), int(3 * slo.tpot_ms * 1000)
    every = colocated_candidates(ctx, dt, di, pt, pi, tpot, ttft, keep=10**6, prune=False, max_itl_us=itl)
    assert every, "no colocated instance: nothing to bound"
    bound, _ = colocated_upper_bounds(ctx, dt, di, pt, pi, tpot, ttft, itl)
    for c in every:
        assert c.rate_milli / 1000 <= bound[(dt.k_values.index(c.decode.k),) + c.decode.option_index] * (1 + 1e-9)
        assert c.itl_max_us <= itl
    best = every[0].rate_milli / 1000
    # before: 24.13 requests/s against a best of 18.24 (x1.32) with MindIE on cm384, 4.46 against 3.27 (x1.36)
    # with SGLang on a2; now within 5%
    assert float(bound.max()) <= 1.05 * best
    size = colocated_size_bound(ctx, dt, di, pt, pi, tpot, ttft, itl, None)
    assert float(bound.max()) <= size * (1 + 1e-9)
    # the size bound takes each module's least on its own (x1.01-1.17 here): loose enough to stay cheap, tight
    # enough to skip sizes
    assert size <= 1.20 * best
    pruned = colocated_candidates(ctx, dt, di, pt, pi, tpot, ttft, keep=2, max_itl_us=itl)
    assert [(c.rate_milli, c.chunk_tokens) for c in pruned] == [(c.rate_milli, c.chunk_tokens) for c in every[:2]]


@pytest.mark.parametrize(("engine", "devices"), [(None, 64), ("sglang", 32)])
def test_bounds_are_the_same_whatever_slice_of_expert_layouts_is_held_at_once(monkeypatch, engine, devices):
    """The bounds' working arrays are built a slice of MoE layouts at a time (memory); the slice size must not
    change a single value."""
    import planner.candidates.colocated_candidates as cc

    request, ctx, (dt, di), (pt, pi) = _tables(devices, engine)
    slo = request.slo
    args = (ctx, dt, di, pt, pi, int(slo.tpot_ms * 1000), int(slo.ttft_ms * 1000), int(3 * slo.tpot_ms * 1000))
    results = []
    for elements in (1, 1 << 40):  # one MoE layout a slice, and every layout at once
        monkeypatch.setattr(cc, "BOUND_SLICE_ELEMENTS", elements)
        pt.memo.pop(("colocated_bound", dt.devices, *args[5:]), None)
        results.append(colocated_upper_bounds(*args)[0])
    assert di.time_us["moe"].shape[0] > 1, "one MoE layout: nothing to slice"
    assert float(results[0].max()) > 0
    np.testing.assert_array_equal(results[0], results[1])
