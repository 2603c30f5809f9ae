"""How many instances of each role: the counts that serve a rate, or give the most per weight.

The one answer to "how many prefill instances per decode instance", for every caller: the exact
enumerator (planner.search.enumerate_deployments) and through it the CP-SAT model's start and
the runner-ups, on one machine and across two. For one choice of candidates (one per role of a
structure, planner.search.deployment) and a budget of linear caps (planner.search.budget):

- one role (colocated, or one phase alone): requests/s per weight does not depend on the count,
  so the count is the most that fit (most throughput at the best ratio); with a target rate,
  the fewest that serve it.
- two roles a and b (decode and prefill), n and m instances: the rate is min(n r_a, m r_b) and
  the weight n w_a + m w_b. For a given n the ratio rises with m while m r_b < n r_a (prefill
  binds: the rate grows faster than the weight) and falls after (decode binds: only the weight
  grows), so the best m is one of the two integers around n r_a / r_b, clipped to [1, the room
  the caps leave]; one vectorised pass over every n that fits is exact. With a target rate T,
  n = ceil(T / r_a) and m = ceil(T / r_b): each role must carry T on its own, one instance fewer
  of either misses it, and one more only adds weight.

Among equals: more throughput, then less weight, then fewer instances of the first role (the
CP-SAT model breaks ties the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from planner.search.budget import Budget
from planner.search.deployment import Objective, Offer


@dataclass(frozen=True)
class Counts:
    """Instances of each role, and the rate (thousandths of requests/s), devices and weight."""

    counts: tuple[int, ...]
    rate_milli: int
    devices: int
    weight: int


def best_counts(offers: tuple[Offer, ...], budget: Budget, objective: Objective) -> Counts | None:
    """The best instance counts of one choice of candidates, or None if no count fits the budget
    (or serves the target rate within it)."""
    if len(offers) == 1:
        return _one_role(offers[0], budget, objective)
    if len(offers) == 2:
        return _two_roles(offers[0], offers[1], budget, objective)
    raise ValueError(f"a structure of {len(offers)} roles has no count solver")


def _one_role(o: Offer, budget: Budget, objective: Objective) -> Counts | None:
    most = budget.most_instances(o)
    if o.rate_milli <= 0 or most < 1:
        return None
    if objective.kind == "target":
        assert objective.target_rate_milli is not None
        count = -(-objective.target_rate_milli // o.rate_milli)
        if count > most:
            return None
    else:
        count = most
    return Counts((count,), o.rate_milli * count, o.devices * count, o.weight * count)


def _two_roles(a: Offer, b: Offer, budget: Budget, objective: Objective) -> Counts | None:
    if a.rate_milli <= 0 or b.rate_milli <= 0:
        return None
    if objective.kind == "target":
        assert objective.target_rate_milli is not None
        t = target_counts([a], [b], budget, objective.target_rate_milli)
        if not t.fits[0, 0]:
            return None
        return Counts((int(t.n[0]), int(t.m[0])), int(t.rate(0, 0)), int(t.devices(0, 0)), int(t.weight(0, 0)))
    # every n that leaves room for one instance of b under every cap
    if any(u == 0 and v > lim for lim, u, v in zip(budget.limits, a.uses, b.uses, strict=True)):
        return None
    room_a = [(lim - v) // u for lim, u, v in zip(budget.limits, a.uses, b.uses, strict=True) if u > 0]
    n_max = min(room_a) if room_a else 0
    if n_max < 1:
        return None
    n = np.arange(1, n_max + 1, dtype=np.int64)
    m_room = np.full(n.shape, np.iinfo(np.int64).max // 4, dtype=np.int64)
    for lim, u, v in zip(budget.limits, a.uses, b.uses, strict=True):
        if v > 0:
            m_room = np.minimum(m_room, (lim - n * u) // v)
    rd, rp = a.rate_milli, b.rate_milli
    m_lo = np.maximum(1, (n * rd) // rp)
    best: tuple[Fraction, int, int, int, int] | None = None
    for m in (np.minimum(m_lo, m_room), np.minimum(m_lo + 1, m_room)):
        rate = np.minimum(n * rd, m * rp)
        weight = n * a.weight + m * b.weight
        ok = m >= 1
        if not ok.any():
            continue
        if objective.kind == "total":
            # the most throughput (it rises with m until m r_b >= n r_a), then the least weight
            score = np.where(ok, rate.astype(float), -1.0)
        else:
            score = np.where(ok, rate / np.maximum(weight, 1), -1.0)
        top = score.max()
        for i in np.flatnonzero(score >= top * (1 - 1e-12)):
            first = Fraction(int(rate[i])) if objective.kind == "total" else Fraction(int(rate[i]), int(weight[i]))
            cand = (first, int(rate[i]), -int(weight[i]), int(n[i]), int(m[i]))
            if best is None or cand[:3] > best[:3]:
                best = cand
    if best is None:
        return None
    _, rate_v, neg_weight, n_v, m_v = best
    return Counts((n_v, m_v), rate_v, n_v * a.devices + m_v * b.devices, -neg_weight)


@dataclass(frozen=True)
class OfferArrays:
    """One role's offers as integer arrays (built once per ranking, read by every chunk of pairs)."""

    offers: list[Offer]
    rate: np.ndarray  # [n] thousandths of requests/s per instance
    weight: np.ndarray  # [n]
    uses: np.ndarray  # [n, caps]

    @staticmethod
    def of(offers: list[Offer], caps: int) -> OfferArrays:
        return OfferArrays(
            offers,
            np.array([o.rate_milli for o in offers], dtype=np.int64),
            np.array([o.weight for o in offers], dtype=np.int64),
            np.array([o.uses for o in offers], dtype=np.int64).reshape(len(offers), caps),
        )


def pairs_best_counts(
    oa: OfferArrays,
    ob: OfferArrays,
    ia: np.ndarray,
    jb: np.ndarray,
    budget: Budget,
    objective: Objective,
    below: float | None = None,
) -> list[Counts | None]:
    """`best_counts` of the pairs (oa[ia[q]], ob[jb[q]]) at once, for the ratio and total objectives:
    the same counts, to the tie (exact integer comparisons; first of equals in `_two_roles`' visiting
    order). A pair whose exact comparison would not fit in 64-bit integers is counted by `_two_roles`.
    `below` (ratio): a pair whose best requests/s per weight is below it is None, not counted out (the
    caller keeps none such: the k-th best's ratio less its tolerance)."""
    assert objective.kind in ("ratio", "total")
    out: list[Counts | None] = [None] * len(ia)
    if len(ia) == 0:
        return out
    a, b = oa.offers, ob.offers
    caps = len(budget.limits)
    lim = np.array(budget.limits, dtype=np.int64)
    ra, rb, wa, wb = oa.rate[ia], ob.rate[jb], oa.weight[ia], ob.weight[jb]
    u, v = oa.uses[ia], ob.uses[jb]  # [P, caps]
    # n_max as `_two_roles`: every n that leaves room for one instance of b under every cap
    blocked = ((u == 0) & (v > lim)).any(axis=1)
    room = np.where(u > 0, (lim - v) // np.maximum(u, 1), np.iinfo(np.int64).max)
    n_max = np.where((u > 0).any(axis=1), room.min(axis=1), 0)
    live = (ra > 0) & (rb > 0) & ~blocked & (n_max >= 1)
    if not live.any():
        return out
    width = int(n_max[live].max())
    n = np.arange(1, width + 1, dtype=np.int64)[None, :]  # [1, N]
    in_range = n <= n_max[:, None]
    m_room = np.full((len(ia), width), np.iinfo(np.int64).max // 4, dtype=np.int64)
    for c in range(caps):
        has = v[:, c] > 0
        m_room = np.where(
            has[:, None], np.minimum(m_room, (lim[c] - n * u[:, c : c + 1]) // np.maximum(v[:, c : c + 1], 1)), m_room
        )
    m_lo = np.maximum(1, (n * ra[:, None]) // np.maximum(rb, 1)[:, None])  # (rb <= 0: not live)
    m = np.stack([np.minimum(m_lo, m_room), np.minimum(m_lo + 1, m_room)], axis=1)  # [P, 2, N]
    nn = np.broadcast_to(n[:, None, :], m.shape)
    rate = np.minimum(nn * ra[:, None, None], m * rb[:, None, None])
    weight = nn * wa[:, None, None] + m * wb[:, None, None]
    ok = (m >= 1) & in_range[:, None, :] & live[:, None, None]
    flat = (len(ia), 2 * width)
    rate, weight, ok, mm = rate.reshape(flat), weight.reshape(flat), ok.reshape(flat), m.reshape(flat)
    nf = nn.reshape(flat)
    if objective.kind == "ratio":
        if (weight[ok] <= 0).any() or int(rate.max()) * int(weight.max()) >= 2**62:
            return [
                _two_roles(a[i], b[j], budget, objective) if live[q] else None
                for q, (i, j) in enumerate(zip(ia, jb, strict=True))
            ]
        score = np.where(ok, rate / np.maximum(weight, 1), -1.0)
        c = score.argmax(axis=1)
        rows = np.arange(len(ia))
        rc, wc = rate[rows, c][:, None], weight[rows, c][:, None]
        cross = rate * wc - rc * weight  # > 0: exactly better than the float's best
        exact_more = ((cross > 0) & ok).any(axis=1)
        tie = ok & (cross == 0)
    else:
        exact_more = np.zeros(len(ia), dtype=bool)
        tie = ok
    best_rate = np.where(tie, rate, -1).max(axis=1, keepdims=True)
    tie &= rate == best_rate
    least_weight = np.where(tie, weight, np.iinfo(np.int64).max).min(axis=1, keepdims=True)
    tie &= weight == least_weight
    pick = tie.argmax(axis=1)  # the first of equals: variant m_lo first, then n ascending
    wanted = live & ok.any(axis=1)
    if below is not None and objective.kind == "ratio":
        rows = np.arange(len(ia))
        best = rate[rows, pick] / np.maximum(weight[rows, pick], 1)  # as the caller divides (exact ints)
        wanted &= exact_more | (best >= below * (1 - 1e-12))
    for q in np.flatnonzero(wanted):
        if exact_more[q]:  # (float rounding hid an exactly better count: the scalar solver decides)
            out[q] = _two_roles(a[int(ia[q])], b[int(jb[q])], budget, objective)
            continue
        k = int(pick[q])
        n_v, m_v = int(nf[q, k]), int(mm[q, k])
        i, j = int(ia[q]), int(jb[q])
        out[q] = Counts((n_v, m_v), int(rate[q, k]), n_v * a[i].devices + m_v * b[j].devices, int(weight[q, k]))
    return out


@dataclass(frozen=True)
class PairCounts:
    """Counts of every pair with a target rate: the fewest instances of each role that carry it do
    not depend on the partner, so they are kept per offer (`n` of the first role's, `m` of the
    second's; 0 for an offer serving nothing), and a pair's rate, devices and weight are computed
    for the pairs asked (index arrays, or scalars). `fits` (axis 0: the first role's offers) says
    where both counts fit every cap of the budget."""

    n: np.ndarray
    m: np.ndarray
    rate_a: np.ndarray
    rate_b: np.ndarray
    devices_a: np.ndarray
    devices_b: np.ndarray
    weight_a: np.ndarray
    weight_b: np.ndarray
    fits: np.ndarray

    def rate(self, i: Any, j: Any) -> Any:
        return np.minimum(self.n[i] * self.rate_a[i], self.m[j] * self.rate_b[j])

    def devices(self, i: Any, j: Any) -> Any:
        return self.n[i] * self.devices_a[i] + self.m[j] * self.devices_b[j]

    def weight(self, i: Any, j: Any) -> Any:
        return self.n[i] * self.weight_a[i] + self.m[j] * self.weight_b[j]

    def weight_matrix(self) -> np.ndarray:
        """Every pair's weight (axis 0: the first role's offers)."""
        return (self.n * self.weight_a)[:, None] + (self.m * self.weight_b)[None, :]


def target_counts(a: list[Offer], b: list[Offer], budget: Budget, target_rate_milli: int) -> PairCounts:
    """The fewest instances of each role of every pair that serve the target rate (the module
    docstring), at once; `fits` says where they fit the budget. Offers serving nothing get counts
    that fit nowhere."""

    def column(offers: list[Offer], field: str) -> np.ndarray:
        return np.array([getattr(o, field) for o in offers], dtype=np.int64)

    ra, rb = np.maximum(column(a, "rate_milli"), 0), np.maximum(column(b, "rate_milli"), 0)
    n = np.where(ra > 0, -(-target_rate_milli // np.maximum(ra, 1)), 0)
    m = np.where(rb > 0, -(-target_rate_milli // np.maximum(rb, 1)), 0)
    fits = (ra > 0)[:, None] & (rb > 0)[None, :]
    for k, limit in enumerate(budget.limits):
        ua = np.array([o.uses[k] for o in a], dtype=np.int64)
        ub = np.array([o.uses[k] for o in b], dtype=np.int64)
        fits &= (n * ua)[:, None] + (m * ub)[None, :] <= limit
    return PairCounts(
        n, m, ra, rb, column(a, "devices"), column(b, "devices"), column(a, "weight"), column(b, "weight"), fits
    )


def most_rate_milli(offers: list[Offer], budget: Budget) -> int:
    """The most requests/s (thousandths) one role's candidates serve with the whole budget: a
    bound no deployment exceeds (0 without candidates)."""
    return max((o.rate_milli * budget.most_instances(o) for o in offers), default=0)
