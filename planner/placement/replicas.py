"""Replica counts: how many physical copies each logical expert gets.

`min_max_replica_counts` gives the counts DeepSeek EPLB's replication step produces: starting
from one replica each, add replicas one at a time to the expert with the highest load per
replica. Those counts minimise the heaviest per-replica load (each step lowers the current
maximum; no other distribution of the same number of slots can have a lower maximum), which is
also what the lower bound needs. The one-at-a-time loop is computed for all layers at once: the
greedy takes, in decreasing order, the values load/1, load/2, ... of every expert, so it takes
exactly every value above some threshold; a bisection finds the threshold per layer and the few
values left at it are taken in the loop's order.

A device never holds two replicas of one expert, so an expert has at most `max_replicas`
(= devices, or devices of its node) replicas.
"""

from __future__ import annotations

import numpy as np

_BISECTION_STEPS = 34


def min_max_replica_counts(loads: np.ndarray, physical_slots: int, max_replicas: int) -> np.ndarray:
    """Replica counts [layers, experts] summing to `physical_slots` in every layer (EPLB's rule).

    `loads` is [layers, experts] (non-negative); every expert gets at least one and at most
    `max_replicas` replicas. Raises ValueError when the slots cannot be filled that way.
    """
    return divisor_replica_counts(loads, physical_slots, max_replicas, 1.0)


def divisor_replica_counts(loads: np.ndarray, physical_slots: int, max_replicas: int, theta: float) -> np.ndarray:
    """Replica counts by a divisor method: the next replica goes to the expert with the highest
    load / (replicas - 1 + theta). theta = 1 is EPLB's rule (min-max per-replica load); smaller
    theta spreads replicas over more experts (theta = 0.5 is Sainte-Lague rounding), which can
    pack better when several slots per device must add up to the mean.
    """
    if not 0.0 < theta <= 1.0:
        raise ValueError("theta must be in (0, 1]")
    w = np.asarray(loads, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError("loads must be [layers, experts]")
    layers, experts = w.shape
    extra = physical_slots - experts
    if extra < 0 or max_replicas < 1 or experts * max_replicas < physical_slots:
        raise ValueError(f"{physical_slots} slots cannot hold {experts} experts with 1..{max_replicas} replicas each")
    counts = np.ones((layers, experts), dtype=np.int64)
    if extra == 0 or layers == 0:
        return counts
    cap = max_replicas - 1  # extra replicas an expert may take

    def picks(t: np.ndarray) -> np.ndarray:
        # Extra replicas whose priority load/(j + theta) (j = 0, 1, ...) exceeds t, per expert.
        # (the 1e-9 keeps values equal to t, up to rounding, out: they are taken in the tie loop
        # below, so rounding can never take more than `extra`)
        with np.errstate(divide="ignore", invalid="ignore"):
            n = np.ceil(w / t[:, None] - theta - 1e-9)
        return np.clip(np.nan_to_num(n, nan=0.0, posinf=cap), 0, cap)

    # No priority exceeds max load / theta; for theta = 1 at most total/t values exceed t.
    hi = w.max(axis=1) / theta
    if theta == 1.0:
        hi = np.minimum(hi, w.sum(axis=1) / extra)
    lo = np.zeros(layers)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ok = picks(np.where(mid > 0, mid, np.finfo(float).tiny)).sum(axis=1) <= extra
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    base = picks(np.where(hi > 0, hi, np.finfo(float).tiny)).astype(np.int64)
    counts += base
    remaining = extra - base.sum(axis=1)
    # The values left at the threshold, exactly in the loop's order: an expert's next value is
    # safe to take in this pass when no value exposed later (any expert's value after its next
    # one) can exceed it; the largest next value always qualifies.
    while (remaining > 0).any():
        open_ = counts < max_replicas
        nxt = np.where(open_, w / (counts - 1 + theta), -np.inf)
        after = np.where(counts + 1 < max_replicas, w / (counts + theta), -np.inf)
        qualify = open_ & (nxt >= after.max(axis=1, keepdims=True))
        order = np.argsort(-nxt, axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(experts)[None, :].repeat(layers, 0), axis=1)
        take = qualify & (rank < remaining[:, None])
        counts += take
        remaining -= take.sum(axis=1)
    return counts


def heaviest_replica(loads: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Heaviest per-replica load of each layer, [layers]."""
    return (np.asarray(loads, dtype=np.float64) / counts).max(axis=1)
