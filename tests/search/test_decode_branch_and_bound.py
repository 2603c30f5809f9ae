"""The decode candidate search visits layout combinations best bound first and stops early
(planner.candidates.phase_candidates.decode_candidates); it must keep exactly what scoring every
combination keeps, ties included, for any SLO, step limit, MTP filter, micro-batch count and K."""

from __future__ import annotations

import pytest

from planner.candidates.phase_candidates import (
    _candidate,
    _decode_scores,
    _top,
    decode_candidates,
    decode_micro_batch_factor,
    decode_ratio,
)
from planner.candidates.space import DENSE_NODE_COUNTS, SpaceLimits
from planner.candidates.tables import MODULES
from planner.search.candidate_spaces import build_phase_space
from planner.search.contexts import make_context
from planner.search.plan_search import TableCache
from planner.search.request import PlanRequest
from planner.specs.plan import integral_as_int

CACHE = TableCache()


def _every_combination(t, ints, tpot, keep, itl, factor, mtp, ep_not=None):
    """The `keep` best by scoring every combination (what the search did before branch and bound)."""
    scores, per_k, kept = _decode_scores(t, ints, tpot, itl, factor)
    scores = scores.copy()  # (memoised with the tables)
    if mtp is not None:
        for j, k in enumerate(t.k_values):
            if (k > 0) != mtp:
                scores[j] = -1.0
    if ep_not is not None:
        for m, i in enumerate(kept["moe"]):
            if t.options.moe[i].moe.ep == ep_not:
                scores[:, :, :, m, :] = -1.0
    out = []
    for pos in _top(scores, keep):
        j, idx = pos[0], pos[1:]
        k, e, step_at, hbm_at, b_idx = per_k[j]
        b, s = int(b_idx[idx]), int(step_at[idx])
        orig = tuple(int(kept[mod][i]) for mod, i in zip(MODULES, idx, strict=True))
        x = integral_as_int(float(t.x_values[b]))
        num, den = decode_ratio(x, e, s, t.options.attention[orig[0]].tp)
        out.append(_candidate(t, ints, orig, k, x, s, -(-s * 1000 // e), int(hbm_at[idx]), num, den))
    return out


@pytest.mark.parametrize(("hardware", "devices"), [("a2", 16), ("a2", 32), ("cm384", 64), ("cm384", 288)])
@pytest.mark.parametrize(("tpot_ms", "itl_ms"), [(100, None), (50, 150), (35, None), (None, None)])
def test_branch_and_bound_keeps_what_scoring_every_combination_keeps(hardware, devices, tpot_ms, itl_ms):
    request = PlanRequest(hardware=hardware, max_cards=1024)
    ctx = make_context(request)
    space = build_phase_space(
        ctx, "decode", [devices], request, SpaceLimits(max_devices=DENSE_NODE_COUNTS * 64), keep=1, cache=CACHE
    )
    factor_two = decode_micro_batch_factor(ctx.model.num_layers, ctx.hw.overlap.decode_micro_batch_efficiency.value)
    _, tables = space.tables[devices][0].memo["decode_micro_batch_tables"]
    tpot = None if tpot_ms is None else tpot_ms * 1000
    itl = None if itl_ms is None else itl_ms * 1000
    compared = 0
    for t, ints in tables:
        factor = factor_two if t.micro_batches > 1 else 0
        for mtp in (None, True, False):
            for keep in (1, 3, 7):
                fast = decode_candidates(t, ints, tpot, keep, itl, factor, mtp=mtp)
                every = _every_combination(t, ints, tpot, keep, itl, factor, mtp)
                assert fast == every
                compared += len(every)
        # the "decode EP other than N" alternative: configurations whose experts span another count
        best = decode_candidates(t, ints, tpot, 1, itl, factor)
        if best and best[0].moe is not None:
            ep = best[0].moe.moe.ep
            for keep in (1, 3):
                other = decode_candidates(t, ints, tpot, keep, itl, factor, ep_not=ep)
                assert other == _every_combination(t, ints, tpot, keep, itl, factor, None, ep_not=ep)
                assert all(c.moe is not None and c.moe.moe.ep != ep for c in other)
    assert compared > 0, "no feasible decode configuration: the comparison would be empty"
