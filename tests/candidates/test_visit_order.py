"""The head-at-a-time visit order is np.lexsort's, whatever the ties and head sizes."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from planner.candidates.visit_order import LazyOrder, sorted_heads


@given(
    n=st.integers(0, 400),
    distinct=st.integers(1, 30),
    first=st.integers(1, 50),
    seed=st.integers(0, 2**32 - 1),
)
def test_heads_join_to_the_full_lexsort(n: int, distinct: int, first: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    primary = -rng.integers(0, distinct, n).astype(float) / 7.0  # many ties on the primary key
    weight = rng.integers(0, 3, n).astype(float)
    index = np.arange(n)
    heads = list(sorted_heads(primary, (index, weight), first))
    joined = np.concatenate(heads) if heads else np.empty(0, dtype=np.int64)
    assert joined.tolist() == np.lexsort((index, weight, primary)).tolist()
    if heads:
        assert heads[0].size >= min(first, n)


@given(n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1), reads=st.lists(st.integers(0, 320), max_size=6))
def test_lazy_reads_are_prefixes_of_the_order(n: int, seed: int, reads: list[int]) -> None:
    rng = np.random.default_rng(seed)
    primary = rng.integers(0, 5, n).astype(float)
    index = np.arange(n)
    full = np.lexsort((index, primary))
    order = LazyOrder(primary, (index,), 4)
    for stop in sorted(reads):
        assert order.upto(stop).tolist() == full[:stop].tolist()
