"""Every deployment of the candidates ranked exactly, without the solver (runner-ups and the best
of each structure; CP-SAT proves rank 1, planner.search.deployment_model).

A deployment is a choice of candidates with their best instance counts: a colocated or
single-phase candidate on its own (its tokens/s per card does not depend on the count, so the
count is the most that fit, for the most throughput), or a decode and prefill pair with the
counts n, m that maximise min(n r_d, m r_p) / (n s_d + m s_p). For a given n the best m is one of
the two integers around n r_d / r_p (the ratio rises with m below that point and falls above
it), so a pair is solved exactly by one pass over n. Pairs are visited best bound first -- no
pair can beat r_d r_p / (s_d r_p + s_p r_d), its perfectly matched fractional ratio -- and the
visit stops when no pair left can enter the top k. With a target rate, counts are the fewest
that serve it and deployments are ranked by fewest devices. Order among equals: more
throughput, then fewer devices, then candidate order, as the CP-SAT model breaks ties.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from planner.search.deployment_model import Deployment


@dataclass(frozen=True)
class Choice:
    """What a deployment picks: candidate indices (decode, prefill, colocated)."""

    decode: int | None
    prefill: int | None
    colocated: int | None


def choice_of(dep: Deployment) -> Choice:
    return Choice(dep.decode, dep.prefill, dep.colocated)


def sort_key(dep: Deployment, target: int | None, order: int) -> tuple:
    """Sort key of a deployment, best first (`order`: position among equals)."""
    if target is not None:
        return (dep.devices, -dep.rate_milli, order)
    return (-Fraction(dep.rate_milli, max(dep.devices, 1)), -dep.rate_milli, dep.devices, order)


def _best_pair(rd: int, sd: int, rp: int, sp: int, budget: int, target: int | None) -> tuple[int, int, int, int] | None:
    """(n, m, rate, devices) of the best counts of one decode/prefill pair, or None if none fit."""
    if rd <= 0 or rp <= 0:
        return None
    if target is not None:
        n_t, m_t = -(-target // rd), -(-target // rp)
        devices_t = n_t * sd + m_t * sp
        return (n_t, m_t, min(n_t * rd, m_t * rp), devices_t) if devices_t <= budget else None
    n_max = (budget - sp) // sd
    if n_max < 1:
        return None
    n = np.arange(1, n_max + 1, dtype=np.int64)
    m_room = (budget - n * sd) // sp
    m_lo = np.maximum(1, (n * rd) // rp)
    best: tuple[Fraction, int, int, int, int] | None = None
    for m in (np.minimum(m_lo, m_room), np.minimum(m_lo + 1, m_room)):
        rate = np.minimum(n * rd, m * rp)
        devices = n * sd + m * sp
        ok = m >= 1
        if not ok.any():
            continue
        ratio = np.where(ok, rate / devices, -1.0)
        top = ratio.max()
        for i in np.flatnonzero(ratio >= top * (1 - 1e-12)):
            f = Fraction(int(rate[i]), int(devices[i]))
            cand = (f, int(rate[i]), -int(devices[i]), int(n[i]), int(m[i]))
            if best is None or cand[:3] > best[:3]:
                best = cand
    if best is None:
        return None
    _, rate_v, neg_dev, n_v, m_v = best
    return n_v, m_v, rate_v, -neg_dev


def rank_deployments(
    decode_devices: list[int],
    decode_rates: list[int],
    prefill_devices: list[int],
    prefill_rates: list[int],
    colocated_devices: list[int],
    colocated_rates: list[int],
    budget: int,
    k: int,
    target: int | None = None,
    exclude: frozenset[Choice] = frozenset(),
) -> list[Deployment]:
    """The k best distinct deployments (different candidate choices), best first."""
    found: list[tuple[tuple, Deployment]] = []
    keys: list[tuple] = []  # sorted
    order = 0

    def offer(dep: Deployment) -> None:
        nonlocal order
        if choice_of(dep) in exclude:
            return
        key = sort_key(dep, target, order)
        found.append((key, dep))
        bisect.insort(keys, key)
        order += 1

    def single(rates: list[int], sizes: list[int], kind: str) -> None:
        for i, (r, s) in enumerate(zip(rates, sizes, strict=True)):
            if r <= 0 or s > budget:
                continue
            count = budget // s if target is None else -(-target // r)
            if count * s > budget:
                continue
            dep = {
                "decode": Deployment(i, count, None, 0, r * count, s * count),
                "prefill": Deployment(None, 0, i, count, r * count, s * count),
                "colocated": Deployment(None, 0, None, 0, r * count, s * count, i, count),
            }[kind]
            offer(dep)

    single(colocated_rates, colocated_devices, "colocated")
    if decode_rates and not prefill_rates:
        single(decode_rates, decode_devices, "decode")
    elif prefill_rates and not decode_rates:
        single(prefill_rates, prefill_devices, "prefill")
    elif decode_rates and prefill_rates:
        # every pair's bound at once, visited best first (then fewer devices, then index order)
        rd_a = np.array(decode_rates, dtype=np.int64)[:, None]
        sd_a = np.array(decode_devices, dtype=np.int64)[:, None]
        rp_a = np.array(prefill_rates, dtype=np.int64)[None, :]
        sp_a = np.array(prefill_devices, dtype=np.int64)[None, :]
        usable = (rd_a > 0) & (rp_a > 0) & (sd_a + sp_a <= budget)
        with np.errstate(divide="ignore", invalid="ignore"):
            bound_a = np.where(usable, (rd_a * rp_a) / np.where(usable, sd_a * rp_a + sp_a * rd_a, 1), 0.0)
        i_a, j_a = np.nonzero(usable)
        order_a = np.lexsort((j_a, i_a, sd_a[i_a, 0] + sp_a[0, j_a], -bound_a[i_a, j_a]))
        for pos in order_a:
            i, j = int(i_a[pos]), int(j_a[pos])
            bound = float(bound_a[i, j])
            if Choice(i, j, None) in exclude:
                continue
            if target is None and len(keys) >= k and bound * (1 + 1e-12) < float(-keys[k - 1][0]):
                break  # no pair left can enter the top k
            got = _best_pair(decode_rates[i], decode_devices[i], prefill_rates[j], prefill_devices[j], budget, target)
            if got is not None:
                n, m, rate, devices = got
                offer(Deployment(i, n, j, m, rate, devices))
    found.sort(key=lambda f: f[0])
    return [dep for _, dep in found[:k]]


def deployment_ratio(dep: Deployment) -> float:
    """Requests/s (thousandths) per device of a deployment."""
    return dep.rate_milli / dep.devices if dep.devices else 0.0
