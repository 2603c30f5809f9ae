"""The nearest value of one flag at which an infeasible request becomes feasible, found by asking.

A bound from one phase alone (the lowest TPOT any decode instance reaches) is not the answer: a
deployment must also hold the other phase within the budget, meet the ITL limit (3x TPOT by
default, so it moves with --tpot-ms), fit HBM, and a colocated instance's decode shares its steps
with prefill. So the value is searched for with the feasibility check of the search itself
(`planner.search.plan_search.is_feasible`, passed in as `feasible`): the request is re-checked with
only that flag changed, by doubling and then bisection on the grid the value is printed on (0.1 ms
for SLOs, whole cards, 0.001 requests/s). Feasibility grows with a looser SLO, a larger budget or a
lower rate; both ends of the answer are checked, never assumed: the value named works, and the
value one step nearer the request's does not.

The cost tables do not depend on the SLOs, the budget or the rate, so every check reuses the
tables of the search (its TableCache); a check costs milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from planner.search.request import ITL_TPOT_MULTIPLE, MAX_CARDS, PlanRequest, default_max_itl_ms
from planner.specs.plan import SLO

Feasible = Callable[[PlanRequest], bool]

SLO_FIELDS = {"--tpot-ms": "tpot_ms", "--ttft-ms": "ttft_ms", "--max-itl-ms": "max_itl_ms"}
SLO_LIMIT_MS = 1e9  # the largest SLO the spec accepts
MAX_CHECKS = 80  # a search that has not converged by then gives up (each check is one feasibility run)


@dataclass(frozen=True)
class Nearest:
    """`value` works; `next_value` (one step towards the request's value) does not, checked
    (None when there is no such step: a smallest SLO of 0.1 ms, a budget of one card)."""

    flag: str
    value: float
    next_value: float | None
    checks: int


def with_slo(request: PlanRequest, flag: str, ms: float | None) -> PlanRequest:
    """The request with one SLO flag set to `ms` (None: no limit), as the CLI would build it:
    with --max-itl-ms left at its default, a new --tpot-ms moves the ITL limit too."""
    fields = request.slo.model_dump()
    fields[SLO_FIELDS[flag]] = ms
    if flag == "--tpot-ms" and request.itl_from_tpot:
        fields["max_itl_ms"] = default_max_itl_ms(ms)
    return replace(request, slo=SLO(**fields))


def _smallest(works: Callable[[int], bool], lo: int, hi_limit: int, first_step: int) -> tuple[int, int, int] | None:
    """(hi, lo, checks): the smallest integer hi in (lo, hi_limit] at which `works` holds, by
    doubling steps from `lo` then bisection; lo is the largest integer below hi seen not to work
    (the caller's `lo` if it was never checked). None if `works(hi_limit)` does not hold."""
    checks = 0
    step = max(1, first_step)
    hi = min(lo + step, hi_limit)
    while True:
        checks += 1
        if works(hi):
            break
        if hi >= hi_limit or checks >= MAX_CHECKS:
            return None
        lo, step = hi, step * 2
        hi = min(lo + step, hi_limit)
    while hi - lo > 1 and checks < MAX_CHECKS:
        mid = (lo + hi) // 2
        checks += 1
        if works(mid):
            hi = mid
        else:
            lo = mid
    return (hi, lo, checks) if hi - lo == 1 else None


def smallest_slo(request: PlanRequest, flag: str, feasible: Feasible, at_least_us: int = 0) -> Nearest | None:
    """The smallest value of SLO `flag` on the 0.1 ms grid at which `request` is feasible with only
    that flag changed, with the value 0.1 ms below it checked infeasible; None if none is (not
    even without that limit). `at_least_us`: a value below which it cannot be feasible (the
    phase's lowest latency), where the search starts."""
    current = getattr(request.slo, SLO_FIELDS[flag])
    if current is None or not feasible(with_slo(request, flag, None)):
        return None
    checks = 1
    # tenths of a ms; t / 10 is the float the printed value parses to, so a check asks exactly
    # what the same command with that value would
    lo = max(int(math.floor(current * 10)), int(math.ceil(at_least_us / 100)) - 1, 0)

    def works(tenths: int) -> bool:
        return feasible(with_slo(request, flag, tenths / 10))

    moves_itl = flag == "--tpot-ms" and request.itl_from_tpot
    limit = SLO_LIMIT_MS / ITL_TPOT_MULTIPLE if moves_itl else SLO_LIMIT_MS  # (the ITL limit stays valid)
    if lo >= int(limit * 10):
        return None
    found = _smallest(works, lo, int(limit * 10), lo // 20)
    if found is None:
        return None
    hi, below, more = found
    checks += more
    if below == lo and below > 0:  # the start was not checked (it is below the request's value or the bound)
        checks += 1
        if works(below):
            return None  # not monotone: no claim about the values below
    return Nearest(flag, hi / 10, below / 10 if below > 0 else None, checks)


def smallest_cards(request: PlanRequest, feasible: Feasible) -> Nearest | None:
    """The smallest --max-cards at which `request` is feasible with only the budget changed (one
    card fewer checked infeasible); None if no budget up to MAX_CARDS is."""
    lo = int(math.floor(request.max_cards))

    def works(cards: int) -> bool:
        return feasible(replace(request, max_cards=float(cards)))

    found = _smallest(works, lo, MAX_CARDS, max(1, lo // 4))
    if found is None:
        return None
    hi, below, checks = found
    if below == lo:  # the request's own budget: checked here too, as the others
        checks += 1
        if works(below):
            return None
    return Nearest("--max-cards", float(hi), float(below), checks)


def largest_rate(request: PlanRequest, feasible: Feasible) -> Nearest | None:
    """The largest --rate (in thousandths of a request/s) at which `request` is feasible with only
    the rate changed (0.001 more checked infeasible); None if not even 0.001 requests/s is."""
    assert request.rate_per_s is not None
    top = int(math.ceil(request.rate_per_s * 1000))

    # searched as the smallest number of thousandths removed from the request's rate that works
    def works(removed: int) -> bool:
        return feasible(replace(request, rate_per_s=(top - removed) / 1000))

    found = _smallest(works, 0, top - 1, max(1, top // 8))
    if found is None:
        return None
    hi, below, checks = found
    if below == 0:  # the request's own rate (or its thousandth above): check it as the others
        checks += 1
        if works(0):
            return None
    return Nearest("--rate", (top - hi) / 1000, (top - below) / 1000, checks)


def tenths(ms: float) -> str:
    """An SLO value as the advice prints it."""
    return f"{ms:.1f}"


def thousandths(rate: float) -> str:
    """A rate as the advice prints it (up to three decimals)."""
    return f"{rate:.3f}".rstrip("0").rstrip(".")
