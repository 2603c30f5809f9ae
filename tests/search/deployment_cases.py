"""Small deployment questions for the oracle tests: offers on one machine or two, and the
exhaustive oracle's answer in the form the tests compare with."""

from __future__ import annotations

from fractions import Fraction

from planner.search.budget import Budget
from planner.search.deployment import DISAGGREGATED, Objective, Offer
from planner.search.oracle import best_deployment


def one_machine(devices: int) -> Budget:
    """The budget of a single machine of `devices` devices (an instance weighs its devices)."""
    return Budget((devices,), ((1,),), (1,), (devices,))


def offers(rates_sizes, budget: Budget, pool: int = 0) -> list[Offer]:
    """Offers of (requests/s in thousandths, devices) candidates drawing on `pool`."""
    return [
        Offer(r, n, budget.weight_per_device[pool] * n, tuple(row[pool] * n for row in budget.per_device))
        for r, n in rates_sizes
    ]


def best_pair_ratio(decode, prefill, devices: int) -> Fraction:
    """The best requests/s per device of decode and prefill (rate, devices) candidates, one
    machine of `devices` devices, by exhaustive enumeration (0 if nothing fits)."""
    budget = one_machine(devices)
    found = best_deployment(
        [DISAGGREGATED], {"decode": offers(decode, budget), "prefill": offers(prefill, budget)}, budget, Objective()
    )
    return found or Fraction(0)
