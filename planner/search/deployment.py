"""What a deployment is: a structure, the candidate it picks for each role, and instance counts.

A *structure* names the roles its instances play, and every role must carry the rate served:

- disaggregated: decode instances and prefill instances (the rate is the smaller capacity);
- colocated: instances that prefill and decode in turn (one role);
- decode only, prefill only (`--phase decode` / `prefill`): that role alone.

The deployment question (planner.search.instance_counts for the counts of one choice,
planner.search.enumerate_deployments and planner.search.cpsat_model for the choice itself) sees
each candidate as an `Offer`: what one instance serves, its devices, the machine it draws them
from, and what it costs in the objective's unit. A new structure (attention-FFN
disaggregation, issue 21) is a new `Structure` with its roles and an offer list per new role;
the count solver, the enumerator and the CP-SAT model take any structure of one or two roles.

The objective (`Objective`) is what the choice maximises: requests/s per unit of weight (tokens/s
per card on one machine, per cost unit across machines), or with a target rate the least weight
that serves it. Other objectives (issues 20 and 21: total tokens/s in the budget, cost or energy
per token) are new `Objective` kinds: `sort_key` ranks deployments under each, and the count
solver and the CP-SAT model each have one method per kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from planner.candidates.afd_candidates import AfdCandidate
from planner.candidates.colocated_candidates import ColocatedCandidate
from planner.candidates.phase_candidates import EMITTED_SCALE, PhaseCandidate

RATE_SCALE = 1000  # requests per second, in thousandths: the one conversion of rates to integers

Role = Literal["decode", "prefill", "colocated", "afd"]


@dataclass(frozen=True)
class Structure:
    """A kind of deployment: the roles its instances play (each must carry the rate)."""

    name: str
    roles: tuple[Role, ...]


DISAGGREGATED = Structure("disaggregated", ("decode", "prefill"))
COLOCATED = Structure("colocated", ("colocated",))
DECODE_ONLY = Structure("decode only", ("decode",))
PREFILL_ONLY = Structure("prefill only", ("prefill",))
# attention-FFN disaggregated decode instances fed by prefill instances (planner.candidates.afd_candidates)
AFD = Structure("AFD", ("afd", "prefill"))
AFD_DECODE_ONLY = Structure("AFD decode only", ("afd",))


def structures_for(phase: str, colocated: bool, disaggregated: bool = True, afd: bool = False) -> tuple[Structure, ...]:
    """The structures a request searches: both phases disaggregated (`--structure pd`), colocated
    (`colocated`: one machine) and AFD decode instances fed by prefill instances (`afd`), or the
    one phase asked for (decode: plain or AFD instances). The order is the order among equal
    deployments."""
    if phase == "decode":
        return ((DECODE_ONLY,) if disaggregated or not afd else ()) + ((AFD_DECODE_ONLY,) if afd else ())
    if phase == "prefill":
        return (PREFILL_ONLY,)
    out: tuple[Structure, ...] = (DISAGGREGATED,) if disaggregated else ()
    out += (COLOCATED,) if colocated else ()
    return out + ((AFD,) if afd else ())


@dataclass(frozen=True)
class Offer:
    """One candidate as the deployment question sees it (all integers)."""

    rate_milli: int  # requests/s one instance serves, in thousandths
    devices: int  # devices of one instance
    weight: int  # what one instance costs in the objective's unit (devices on one machine)
    uses: tuple[int, ...]  # what one instance uses of each cap of the budget (planner.search.budget)


@dataclass(frozen=True)
class Objective:
    """What a deployment choice optimises.

    "ratio": most requests/s per unit of weight (tokens/s per card on one machine; per cost unit or
    per watt with --objective cost or energy, planner.search.budget);
    "target": serve `target_rate_milli` with the least weight;
    "total": most requests/s within the budget (--objective total: fill the budget), then the least
    weight.
    """

    kind: Literal["ratio", "target", "total"] = "ratio"
    target_rate_milli: int | None = None

    @staticmethod
    def for_rate(rate_per_s: float | None, total: bool = False) -> Objective:
        """The objective of a request: with --rate, the least weight that serves it; with
        --objective total, the most throughput within the budget."""
        if rate_per_s is not None:
            return Objective("target", int(math.ceil(rate_per_s * RATE_SCALE)))
        return Objective("total") if total else Objective()


@dataclass(frozen=True)
class Deployment:
    """One solution: a structure, the candidate index and instance count of each of its roles,
    and the rate (thousandths of requests/s), devices and weight they add up to."""

    structure: Structure
    picks: tuple[int, ...]  # candidate index per role of the structure
    counts: tuple[int, ...]  # instances per role
    rate_milli: int
    devices: int
    weight: int

    def _of(self, role: Role) -> tuple[int | None, int]:
        if role in self.structure.roles:
            i = self.structure.roles.index(role)
            return self.picks[i], self.counts[i]
        return None, 0

    @property
    def decode(self) -> int | None:
        return self._of("decode")[0]

    @property
    def decode_instances(self) -> int:
        return self._of("decode")[1]

    @property
    def prefill(self) -> int | None:
        return self._of("prefill")[0]

    @property
    def prefill_instances(self) -> int:
        return self._of("prefill")[1]

    @property
    def colocated(self) -> int | None:
        return self._of("colocated")[0]

    @property
    def colocated_instances(self) -> int:
        return self._of("colocated")[1]

    @property
    def afd(self) -> int | None:
        return self._of("afd")[0]

    @property
    def afd_instances(self) -> int:
        return self._of("afd")[1]

    @property
    def choice(self) -> Choice:
        """What the deployment picks (runner-ups differ in it)."""
        return Choice(self.structure.name, self.picks)

    def remapped(self, index: dict[Role, list[int]]) -> Deployment:
        """The same deployment with each role's candidate index looked up in `index[role]` (from a
        sub-list of candidates back to the full list)."""
        picks = tuple(index[r][p] if r in index else p for r, p in zip(self.structure.roles, self.picks, strict=True))
        return Deployment(self.structure, picks, self.counts, self.rate_milli, self.devices, self.weight)


@dataclass(frozen=True)
class Choice:
    """What a deployment picks: its structure and a candidate index per role."""

    structure: str
    picks: tuple[int, ...]


def sort_key(dep: Deployment, objective: Objective, order: int) -> tuple:
    """Sort key of a deployment, best first (`order`: position among equals). Among equals: more
    throughput, then less weight, then candidate order, as the CP-SAT model breaks ties."""
    return counts_key(dep.rate_milli, dep.weight, objective, order)


def counts_key(rate_milli: int, weight: int, objective: Objective, order: int) -> tuple:
    """`sort_key` of a deployment of this rate and weight (before the deployment is built)."""
    if objective.kind == "target":
        return (weight, -rate_milli, order)
    if objective.kind == "total":
        return (-rate_milli, weight, order)
    return (-Fraction(rate_milli, max(weight, 1)), -rate_milli, weight, order)


def order_figures(rate_milli: int, weight: int, objective: Objective) -> tuple[int, float]:
    """A deployment as the ranked list orders it under `objective` (planner.ranking.rows): what two
    plans must share to be compared (the weight, with a target rate) and the figure near-ties compare
    (higher first): requests/s per weight (ratio), requests/s (total), or requests/s at that weight
    (target). The same integers `sort_key` ranks by, so the list's order and the search's agree."""
    if objective.kind == "target":
        return weight, float(rate_milli)
    if objective.kind == "total":
        return 0, float(rate_milli)
    return 0, rate_milli / max(weight, 1)


def decode_rate_milli(c: PhaseCandidate, output_tokens: int) -> int:
    """Requests/s (thousandths) one decode instance finishes: tokens/s per instance / output length."""
    tokens_per_s = c.devices * c.num / EMITTED_SCALE / c.den * 1e6
    return int(math.floor(tokens_per_s / output_tokens * RATE_SCALE))


def prefill_rate_milli(c: PhaseCandidate) -> int:
    """Requests/s (thousandths) one prefill instance takes in."""
    return int(math.floor(c.num / c.den * 1e6 * RATE_SCALE))


def rate_milli_of(c: PhaseCandidate | ColocatedCandidate | AfdCandidate, output_tokens: int) -> int:
    """Requests/s (thousandths) one instance of a candidate serves."""
    if isinstance(c, ColocatedCandidate):
        return c.rate_milli
    if isinstance(c, AfdCandidate):
        return int(math.floor(c.requests_per_s(output_tokens) * RATE_SCALE))
    return decode_rate_milli(c, output_tokens) if c.phase == "decode" else prefill_rate_milli(c)
