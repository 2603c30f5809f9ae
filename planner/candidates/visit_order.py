"""Best-first visit orders sorted a head at a time.

The branch-and-bound visits (decode combinations by their bound, planner.candidates.
phase_candidates; deployment pairs by theirs, planner.search.enumerate_deployments) sort up to
millions of items and then stop after the first few thousand. `sorted_heads` yields the same order
in growing heads: each head is every remaining item whose primary key is at most the head's cut
(np.partition finds it, ties at the cut included), sorted with the full keys, so the heads joined
are exactly `np.lexsort((*ties, primary))` and a visit that stops early sorts only what it read.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

HEAD_GROWTH = 8  # each head holds this many times the items of the one before it


def sorted_heads(primary: np.ndarray, ties: tuple[np.ndarray, ...], first: int) -> Iterator[np.ndarray]:
    """Indices of `primary` in the order of np.lexsort((*ties, primary)), a head at a time: the
    first of at least `first` items (fewer only when fewer remain). `primary` must hold no NaN (a
    NaN has no place in the partition's order); `ties` break every tie for a total order (lexsort
    is stable, so each head's order is the full order restricted to it)."""
    rest = np.arange(primary.size)
    size = max(int(first), 1)
    while rest.size:
        if rest.size > size:
            values = primary[rest]
            cut = np.partition(values, size - 1)[size - 1]
            in_head = values <= cut
            head, rest = rest[in_head], rest[~in_head]
        else:
            head, rest = rest, rest[:0]
        yield head[np.lexsort(tuple(key[head] for key in ties) + (primary[head],))]
        size *= HEAD_GROWTH


class LazyOrder:
    """The order of `sorted_heads` read by position: `upto(stop)` gives its first `stop` items,
    sorting further heads only when a read reaches past those sorted so far."""

    def __init__(self, primary: np.ndarray, ties: tuple[np.ndarray, ...], first: int) -> None:
        self.size = int(primary.size)
        self._heads = sorted_heads(primary, ties, first)
        self._sorted = np.empty(0, dtype=np.int64)

    def upto(self, stop: int) -> np.ndarray:
        stop = min(stop, self.size)
        parts = [self._sorted]
        have = self._sorted.size
        while have < stop:
            head = next(self._heads)
            parts.append(head)
            have += head.size
        if len(parts) > 1:
            self._sorted = np.concatenate(parts)
        return self._sorted[:stop]
