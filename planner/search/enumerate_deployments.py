"""Every deployment of the candidates ranked exactly, without the solver: the oracle of the CP-SAT
model (planner.search.cpsat_model), its starting point, the runner-ups and the best of each
other structure, and the feasibility check the diagnosis asks.

A deployment is a structure with one candidate per role and that choice's best instance counts
(planner.search.instance_counts). Choices of one role are each a deployment. Choices of two roles
(a decode and a prefill candidate) are visited best bound first -- no pair can beat r_a r_b /
(w_a r_b + w_b r_a), its perfectly matched fractional ratio -- and the visit stops when no pair
left can enter the top k. With a target rate every choice is counted and deployments are ranked
by least weight. Order among equals: more throughput, then less weight, then candidate order
(one-role structures first), as `sort_key` says.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from planner.candidates.afd_candidates import AfdCandidate
from planner.candidates.colocated_candidates import ColocatedCandidate
from planner.candidates.phase_candidates import PhaseCandidate
from planner.candidates.visit_order import LazyOrder
from planner.search.budget import Budget, role_offers
from planner.search.deployment import Choice, Deployment, Objective, Offer, Role, Structure, counts_key, sort_key
from planner.search.instance_counts import Counts, OfferArrays, best_counts, pairs_best_counts, target_counts

# pairs counted at once (numpy) between two checks of the k-th best; doubled up to the cap as the
# visit goes on (the first pairs usually settle the k-th best)
FIRST_CHUNK, MAX_CHUNK = 64, 8192


def rank_deployments(
    structures: list[Structure],
    offers: dict[Role, list[Offer]],
    budget: Budget,
    objective: Objective,
    k: int,
    exclude: frozenset[Choice] = frozenset(),
) -> list[Deployment]:
    """The k best distinct deployments (different choices), best first."""
    found: list[tuple[tuple, Deployment]] = []  # the k best so far, sorted by key (keys are unique)
    order = 0
    worst = -1.0  # the ratio objective: the k-th best's requests/s per weight, once k are found

    def keep(key: tuple, structure: Structure, picks: tuple[int, ...], got: Counts) -> None:
        nonlocal worst
        if len(found) >= k and key >= found[-1][0]:
            return
        dep = Deployment(structure, picks, got.counts, got.rate_milli, got.devices, got.weight)
        bisect.insort(found, (key, dep))
        del found[k:]
        if objective.kind == "ratio" and len(found) >= k:
            worst = float(-found[-1][0][0])

    def offer(structure: Structure, picks: tuple[int, ...], got: Counts | None) -> None:
        nonlocal order
        if got is None or (exclude and Choice(structure.name, picks) in exclude):
            return
        # (a ratio clearly below the k-th best cannot enter: its exact key is not needed)
        if got.rate_milli / max(got.weight, 1) >= worst * (1 - 1e-9):
            keep(counts_key(got.rate_milli, got.weight, objective, order), structure, picks, got)
        order += 1

    for s in structures:
        if len(s.roles) == 1:
            role_offers_ = offers.get(s.roles[0], [])
            for i in range(len(role_offers_)):
                offer(s, (i,), best_counts((role_offers_[i],), budget, objective))
    for s in structures:
        if len(s.roles) != 2:
            continue
        a, b = offers.get(s.roles[0], []), offers.get(s.roles[1], [])
        if not a or not b:
            continue
        # every pair's bound at once, visited best first (then less weight, then index order)
        oa, ob = OfferArrays.of(a, len(budget.limits)), OfferArrays.of(b, len(budget.limits))
        if objective.kind == "target":
            order = _target_pairs(s, a, b, budget, objective, k, exclude, (oa, ob), order, found)
            continue
        ra, wa, rb, wb = oa.rate[:, None], oa.weight[:, None], ob.rate[None, :], ob.weight[None, :]
        usable = (ra > 0) & (rb > 0)
        for cap, lim in enumerate(budget.limits):
            usable &= oa.uses[:, cap][:, None] + ob.uses[:, cap][None, :] <= lim
        with np.errstate(divide="ignore", invalid="ignore"):
            bound_a = np.where(usable, (ra * rb) / np.where(usable, wa * rb + wb * ra, 1), 0.0)
        i_a, j_a = np.nonzero(usable)
        # (sorted a head at a time: the visit usually stops within the first thousands of pairs)
        order_a = LazyOrder(-bound_a[i_a, j_a], (j_a, i_a, wa[i_a, 0] + wb[0, j_a]), 4 * MAX_CHUNK)
        # Pairs in bound order, a chunk at a time: the visit stops at the first pair whose bound is
        # below the k-th best found (no pair after it can enter the top k). Pairs of a chunk past
        # that point (the k-th best rose within the chunk) are counted too; they cannot enter the
        # top k either (each is at most its bound), so the result is the pair-by-pair visit's.
        start, size = 0, FIRST_CHUNK
        while start < order_a.size:
            chunk = order_a.upto(start + size)[start:]
            ii, jj = i_a[chunk], j_a[chunk]
            stop = False
            if objective.kind == "ratio" and len(found) >= k:  # (with --objective total every pair counts)
                kth = float(-found[k - 1][0][0])
                below = np.flatnonzero(bound_a[ii, jj] * (1 + 1e-12) < kth)
                if below.size:
                    ii, jj, stop = ii[: below[0]], jj[: below[0]], True
            # (pairs below the k-th best's ratio come back None: offer would not keep them, and skipping
            # them leaves the order counter monotonic in the visit, all that ties read)
            least = worst * (1 - 1e-9) if objective.kind == "ratio" and worst > 0 else None
            for q, got in enumerate(pairs_best_counts(oa, ob, ii, jj, budget, objective, least)):
                if got is not None:
                    offer(s, (int(ii[q]), int(jj[q])), got)
            if stop:
                break
            start += size
            size = min(2 * size, MAX_CHUNK)
    return [dep for _, dep in found]


def _target_pairs(
    s: Structure,
    a: list[Offer],
    b: list[Offer],
    budget: Budget,
    objective: Objective,
    k: int,
    exclude: frozenset[Choice],
    arrays: tuple[OfferArrays, OfferArrays],
    order: int,
    found: list[tuple[tuple, Deployment]],
) -> int:
    """With a target rate every pair is counted (planner.search.instance_counts.target_counts, all
    at once); the k least-weight pairs (then more rate, then the visit order: best bound first, then
    less weight of one instance each, then index) join `found` (sorted, the k best kept). Returns
    the order counter after them (as if each pair that fits had been offered in turn).

    Only the pairs that can be among the k best are put in visit order: every pair lighter than
    the k-th lightest, and of the k-th's weight those with at least the rate that completes k.
    Their order among themselves is their order among all pairs, and each enters `found` with
    `order` plus its place among them: the counter after this structure is the same, so the
    comparison with other structures' deployments is too."""
    assert objective.target_rate_milli is not None
    oa, ob = arrays
    t = target_counts(a, b, budget, objective.target_rate_milli)
    ok = t.fits
    for choice in exclude:
        if choice.structure == s.name:
            ok[choice.picks[0], choice.picks[1]] = False
    i_v, j_v = np.nonzero(ok)
    weight = t.weight_matrix()[ok]  # (row-major, as np.nonzero lists the pairs)
    if i_v.size > k:
        w_k = np.partition(weight, k - 1)[k - 1]
        lighter = weight < w_k
        level = np.flatnonzero(weight == w_k)
        rate_level = t.rate(i_v[level], j_v[level])
        need = k - int(np.count_nonzero(lighter))
        r_k = -np.partition(-rate_level, need - 1)[need - 1]
        keep = lighter
        keep[level[rate_level >= r_k]] = True
        i_s, j_s, weight = i_v[keep], j_v[keep], weight[keep]
    else:
        i_s, j_s = i_v, j_v
    rate = t.rate(i_s, j_s)
    # the visit order of rank_deployments' pairs: the pair's ratio bound (one instance each), then
    # their weight, then index (the same float expression as its bound matrix)
    ra, rb, wa, wb = oa.rate[i_s], ob.rate[j_s], oa.weight[i_s], ob.weight[j_s]
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = (ra * rb) / (wa * rb + wb * ra)
    places = np.empty(i_s.size, dtype=np.int64)
    places[np.lexsort((j_s, i_s, wa + wb, -bound))] = np.arange(i_s.size)
    for q in np.lexsort((places, -rate, weight))[:k]:
        i, j = int(i_s[q]), int(j_s[q])
        dep = Deployment(s, (i, j), (int(t.n[i]), int(t.m[j])), int(rate[q]), int(t.devices(i, j)), int(weight[q]))
        bisect.insort(found, (sort_key(dep, objective, order + int(places[q])), dep))
    del found[k:]
    return order + int(i_v.size)


@dataclass(frozen=True)
class Question:
    """The deployment question of one request: its structures, budget and objective, and the
    output length that turns a decode instance's tokens/s into requests/s."""

    structures: tuple[Structure, ...]
    budget: Budget
    objective: Objective
    output_tokens: int

    def offers(
        self,
        d: list[PhaseCandidate],
        p: list[PhaseCandidate],
        cc: list[ColocatedCandidate],
        afd: list[AfdCandidate] | None = None,
    ) -> dict[Role, list[Offer]]:
        """Each role's offers, index for index with the candidate lists."""
        out = self.output_tokens
        return {
            "decode": role_offers(self.budget, "decode", d, out),
            "prefill": role_offers(self.budget, "prefill", p, out),
            "colocated": role_offers(self.budget, "colocated", cc, out),
            "afd": role_offers(self.budget, "afd", afd or [], out),
        }

    def ranked(
        self,
        d: list[PhaseCandidate],
        p: list[PhaseCandidate],
        cc: list[ColocatedCandidate],
        k: int,
        exclude: frozenset[Choice] = frozenset(),
        afd: list[AfdCandidate] | None = None,
    ) -> list[Deployment]:
        """The k best distinct deployments of these candidates, exactly, without the solver."""
        offers = self.offers(d, p, cc, afd)
        return rank_deployments(list(self.structures), offers, self.budget, self.objective, k, exclude)

    def kth_ratio(self, d: list[PhaseCandidate], p: list[PhaseCandidate], k: int) -> Fraction:
        """Requests/s (thousandths) per weight of the k-th best deployment of these decode and
        prefill candidates (0 when fewer than k exist, or with a target rate, where deployments
        are ranked by weight): what a colocated instance must reach to enter the k best."""
        if self.objective.kind != "ratio":
            return Fraction(0)
        found = self.ranked(d, p, [], k)
        return Fraction(found[-1].rate_milli, found[-1].weight) if len(found) >= k else Fraction(0)
