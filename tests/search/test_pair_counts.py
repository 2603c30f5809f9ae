"""The pair visit counts many (decode, prefill) pairs at once: `pairs_best_counts` must give exactly
the counts `_two_roles` gives pair by pair, ties included, under every objective it serves, and the
ranked deployments must be what counting every pair and sorting gives."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from planner.search.budget import Budget
from planner.search.deployment import DISAGGREGATED, Objective, Offer, sort_key
from planner.search.enumerate_deployments import rank_deployments
from planner.search.instance_counts import Counts, OfferArrays, _two_roles, pairs_best_counts


def _offer(rate: int, devices: int, weight_per_device: int, caps: int) -> Offer:
    return Offer(rate, devices, devices * weight_per_device, tuple([devices] * caps))


offers = st.lists(
    st.builds(
        _offer,
        st.integers(0, 40_000),
        st.sampled_from([1, 2, 4, 8, 16, 24, 32]),
        st.integers(1, 3),
        st.just(1),
    ),
    min_size=1,
    max_size=7,
)


def _budget(limit: int) -> Budget:
    return Budget(limits=(limit,), per_device=((1,),), weight_per_device=(1,), pool_devices=(limit,))


@given(offers, offers, st.integers(1, 200), st.sampled_from(["ratio", "total"]))
def test_at_once_is_pair_by_pair(a: list[Offer], b: list[Offer], limit: int, kind: str):
    budget, objective = _budget(limit), Objective(kind)  # type: ignore[arg-type]
    ia, jb = (x.ravel() for x in np.meshgrid(np.arange(len(a)), np.arange(len(b)), indexing="ij"))
    got = pairs_best_counts(OfferArrays.of(a, 1), OfferArrays.of(b, 1), ia, jb, budget, objective)
    want = [_two_roles(a[i], b[j], budget, objective) for i, j in zip(ia, jb, strict=True)]
    assert got == want


@given(offers, offers, st.integers(1, 200), st.integers(1, 6))
def test_the_ranking_is_every_pair_sorted(a: list[Offer], b: list[Offer], limit: int, k: int):
    budget, objective = _budget(limit), Objective()
    ranked = rank_deployments([DISAGGREGATED], {"decode": a, "prefill": b}, budget, objective, k)
    every: list[tuple[int, int]] = []
    for i in range(len(a)):
        for j in range(len(b)):
            c = _two_roles(a[i], b[j], budget, objective)
            if isinstance(c, Counts):
                every.append((c.rate_milli, c.weight))
    best = sorted(every, key=lambda x: (-Fraction(x[0], max(x[1], 1)), -x[0], x[1]))[:k]
    assert [(d.rate_milli, d.weight) for d in ranked] == best
    assert [sort_key(d, objective, 0)[:3] for d in ranked] == sorted(sort_key(d, objective, 0)[:3] for d in ranked)
