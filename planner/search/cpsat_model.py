"""The CP-SAT model of a whole deployment: which structure, which candidate per role, how many.

Inputs are the offers of the candidates (planner.search.deployment: what one instance serves,
its devices and weight, what it uses of each budget cap), never a cost formula. The model picks
one structure (disaggregated, colocated, one phase alone), one candidate for each of its roles,
the number of instances of each, and the request rate R they serve together:

    R <= sum_i n_i * r_i                      for every role of the chosen structure
    sum_i n_i * use_k,i <= limit_k            for every cap k of the budget
    weight = sum_i n_i * w_i                  (devices on one machine; cost or cards across two)

The candidates already fit HBM and meet the SLOs and the ITL limit (planner.candidates filters
them; the validator, planner.search.validate, checks every plan again without the solver).

Objective: most requests/s per weight (R / weight, a ratio solved exactly by Dinkelbach rounds:
maximise w* R - r* weight, from the exact enumerator's best as the start), or with a target
rate, the least weight, or (--objective total) the most R within the budget, then the least
weight. Ties are broken by a last solve with a fixed key (more throughput, then
less weight, then candidate order), so the result does not depend on the number of workers.
Any cut -- the time limit, the round cap, an interrupt -- leaves the answer unproven.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planner.search.budget import Budget
from planner.search.cpsat import cp_model as _cp_model
from planner.search.deployment import Deployment, Objective, Offer, Role, Structure
from planner.search.settings import SolverSettings

MAX_DINKELBACH_ROUNDS = 50  # each round strictly raises the ratio; hitting the cap leaves it unproven
MAX_OBJECTIVE = 2**62  # CP-SAT's integers: a tie-break objective beyond this is not attempted


@dataclass
class DeploymentResult:
    """The best deployment (None: none found), whether it is proven best, and the solver's status."""

    deployment: Deployment | None
    optimal: bool
    status: str  # OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN or INTERRUPTED
    solves: int
    seconds: float

    @property
    def deployments(self) -> list[Deployment]:
        return [] if self.deployment is None else [self.deployment]


class DeploymentModel:
    """One CP-SAT model (see the module docstring); `solve` returns the best deployment."""

    def __init__(
        self,
        structures: list[Structure],
        offers: dict[Role, list[Offer]],
        budget: Budget,
        objective: Objective,
        settings: SolverSettings,
        start: Deployment | None = None,
    ) -> None:
        self.structures = [s for s in structures if all(offers.get(r) for r in s.roles)]
        self.roles: list[Role] = list(dict.fromkeys(r for s in self.structures for r in s.roles))
        self.offers = {r: offers[r] for r in self.roles}
        self.budget, self.objective, self.settings = budget, objective, settings
        self.start = start if start is not None and start.structure in self.structures else None
        self._partial: Deployment | None = None  # best deployment of the solve in progress
        self.model = _cp_model().CpModel()
        self._create_variables()
        self._add_choice_constraints()
        self._add_capacity_constraints()
        self._add_budget_constraints()

    # ---- variables and constraints ---------------------------------------------------------
    def _create_variables(self) -> None:
        m = self.model
        self.lit: dict[Role, list[Any]] = {}
        self.count: dict[Role, list[Any]] = {}
        # bounds: a role's rate, weight and devices with all the budget on its best candidate
        self.rate_most, self.weight_most, devices_most = 1, 1, 1
        for r in self.roles:
            most = [max(1, self.budget.most_instances(o)) for o in self.offers[r]]
            self.lit[r] = [m.new_bool_var(f"{r}_{i}") for i in range(len(most))]
            self.count[r] = [m.new_int_var(0, k, f"{r}_n_{i}") for i, k in enumerate(most)]
            pairs = list(zip(self.offers[r], most, strict=True))
            self.rate_most = max([self.rate_most] + [o.rate_milli * k for o, k in pairs])
            self.weight_most += max(o.weight * k for o, k in pairs)
            devices_most += max(o.devices * k for o, k in pairs)
        self.structure_lit = [m.new_bool_var(f"structure_{s.name}") for s in self.structures]
        self.rate = m.new_int_var(0, self.rate_most, "rate_milli")
        self.weight = m.new_int_var(0, self.weight_most, "weight")
        self.devices = m.new_int_var(0, devices_most, "devices")
        # the fixed order among equals: a role's candidates are numbered after those of the
        # roles of earlier structures (disaggregated first, then colocated)
        self.order_offset: dict[Role, int] = {}
        running = 0
        for s in self.structures:
            new = [r for r in s.roles if r not in self.order_offset]
            for r in new:
                self.order_offset[r] = running
            running += sum(len(self.offers[r]) for r in new)

    def _add_choice_constraints(self) -> None:
        """One structure; one candidate for each of its roles, with at least one instance; no
        instance of any other candidate."""
        m = self.model
        m.add_exactly_one(self.structure_lit)
        for r in self.roles:
            using = [lit for s, lit in zip(self.structures, self.structure_lit, strict=True) if r in s.roles]
            m.add(sum(self.lit[r]) == sum(using))
            for lit, cnt in zip(self.lit[r], self.count[r], strict=True):
                m.add(cnt >= 1).only_enforce_if(lit)
                m.add(cnt == 0).only_enforce_if(~lit)

    def _capacity(self, r: Role) -> Any:
        return sum(o.rate_milli * n for o, n in zip(self.offers[r], self.count[r], strict=True))

    def _add_capacity_constraints(self) -> None:
        """The served rate is what every role of the chosen structure can carry."""
        m = self.model
        for s, lit in zip(self.structures, self.structure_lit, strict=True):
            for r in s.roles:
                m.add(self.rate <= self._capacity(r)).only_enforce_if(lit)
        if self.objective.kind == "target":
            assert self.objective.target_rate_milli is not None
            m.add(self.rate >= self.objective.target_rate_milli)

    def _add_budget_constraints(self) -> None:
        """Every cap of the budget holds; weight and devices add up the instances."""
        m = self.model
        instances = [(o, n) for r in self.roles for o, n in zip(self.offers[r], self.count[r], strict=True)]
        for k, limit in enumerate(self.budget.limits):
            m.add(sum(o.uses[k] * n for o, n in instances) <= limit)
        m.add(self.weight == sum(o.weight * n for o, n in instances))
        m.add(self.devices == sum(o.devices * n for o, n in instances))

    # ---- solving ---------------------------------------------------------------------------
    def _read(self, solver: Any) -> Deployment:
        s = next(s for s, lit in zip(self.structures, self.structure_lit, strict=True) if solver.value(lit))
        picks = tuple(next(i for i, v in enumerate(self.lit[r]) if solver.value(v)) for r in s.roles)
        counts = tuple(int(solver.value(self.count[r][p])) for r, p in zip(s.roles, picks, strict=True))
        return Deployment(
            s,
            picks,
            counts,
            int(solver.value(self.rate)),
            int(solver.value(self.devices)),
            int(solver.value(self.weight)),
        )

    def _run(self, deadline: float | None) -> tuple[Any, Any]:
        remaining = None if deadline is None else deadline - time.perf_counter()
        solver = self.settings.make_solver(remaining)
        return solver.solve(self.model), solver

    def _hint(self, d: Deployment) -> None:
        """Hint every variable with deployment `d` (the exact enumerator's best): the solver starts
        from a solution of the round's optimum, so its search only has to prove the bound."""
        m = self.model
        m.clear_hints()
        for s, lit in zip(self.structures, self.structure_lit, strict=True):
            m.add_hint(lit, s == d.structure)
        for r in self.roles:
            pick, count = d._of(r)
            for i, (lit, cnt) in enumerate(zip(self.lit[r], self.count[r], strict=True)):
                m.add_hint(lit, i == pick)
                m.add_hint(cnt, count if i == pick else 0)
        m.add_hint(self.rate, d.rate_milli)
        m.add_hint(self.weight, d.weight)
        m.add_hint(self.devices, d.devices)

    def _order_key(self) -> Any:
        return sum((self.order_offset[r] + i) * v for r in self.roles for i, v in enumerate(self.lit[r]))

    def _tie_weight(self) -> int:
        return 4 * (sum(len(self.offers[r]) for r in self.roles) + 1)

    def _solve_target(self, deadline: float | None) -> tuple[Deployment | None, bool, int]:
        """The least weight that serves the target rate, then the tie-break."""
        self.model.minimize(self.weight)
        return self._then_tie_break(
            deadline,
            lambda solver: self.weight <= int(solver.value(self.weight)),
            lambda: self.model.maximize(self.rate * self._tie_weight() - self._order_key()),
        )

    def _solve_total(self, deadline: float | None) -> tuple[Deployment | None, bool, int]:
        """The most requests/s within the budget (--objective total), then the tie-break (less
        weight, then candidate order)."""
        self.model.maximize(self.rate)
        return self._then_tie_break(
            deadline,
            lambda solver: self.rate >= int(solver.value(self.rate)),
            lambda: self.model.minimize(self.weight * self._tie_weight() + self._order_key()),
        )

    def _then_tie_break(
        self, deadline: float | None, hold: Callable[[Any], Any], tie_break: Callable[[], None]
    ) -> tuple[Deployment | None, bool, int]:
        """Solve the objective set on the model; then, with its optimum held (`hold(solver)`: the
        constraint), solve the tie-break objective `tie_break()` sets. Proven when both solves are."""
        m = self.model
        status, solver = self._run(deadline)
        if status not in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
            return None, status == _cp_model().INFEASIBLE, 1
        proven = status == _cp_model().OPTIMAL
        self._partial = self._read(solver)
        fix = m.add(hold(solver))
        tie_break()
        status, solver = self._run(deadline)
        m.clear_objective()
        fix.proto.clear_linear()  # drop the temporary bound
        if status in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
            self._partial = self._read(solver)
        return self._partial, proven and status == _cp_model().OPTIMAL, 2

    def _solve_ratio(self, deadline: float | None) -> tuple[Deployment | None, bool, int]:
        """Dinkelbach on rate / weight from the start (or a first solve), then the tie-break."""
        m = self.model
        solves = 0
        if self.start is not None:
            self._partial, proven = self.start, True
            self._hint(self.start)
        else:
            m.maximize(self.rate * (self.weight_most + 1) - self.weight)
            status, solver = self._run(deadline)
            solves += 1
            if status not in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
                return None, status == _cp_model().INFEASIBLE, solves
            proven = status == _cp_model().OPTIMAL
            self._partial = self._read(solver)
        best = self._partial
        converged = False
        for _ in range(MAX_DINKELBACH_ROUNDS):
            if best.weight == 0:
                converged = True
                break
            m.maximize(best.weight * self.rate - best.rate_milli * self.weight)
            status, solver = self._run(deadline)
            solves += 1
            if status not in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
                proven = False
                break
            cand = self._read(solver)
            if cand.weight and cand.rate_milli * best.weight > best.rate_milli * cand.weight:
                best = self._partial = cand
                continue
            # no deployment beats the ratio: proven if the solver proved this round's optimum
            proven &= status == _cp_model().OPTIMAL
            converged = True
            break
        proven &= converged  # the round cap cut the rounds short: the ratio is not proven best
        # tie-break among optimal ratios: more throughput, then less weight, then candidate order
        weight = self._tie_weight()
        scale = (self.weight_most + 1) * weight
        if self.rate_most * scale + self.weight_most * weight < MAX_OBJECTIVE:
            fix = m.add(best.weight * self.rate - best.rate_milli * self.weight >= 0)
            m.maximize(self.rate * scale - self.weight * weight - self._order_key())
            status, solver = self._run(deadline)
            solves += 1
            if status in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
                best = self._read(solver)
                proven &= status == _cp_model().OPTIMAL
            fix.proto.clear_linear()  # drop the temporary bound
        m.clear_objective()
        return best, proven, solves

    def solve(self, deadline: float | None = None) -> DeploymentResult:
        """The best deployment. On Ctrl-C/SIGTERM: the best known so far, with status INTERRUPTED
        (KeyboardInterrupt if none is known yet)."""
        start = time.perf_counter()
        if not self.structures:
            return DeploymentResult(None, True, "INFEASIBLE", 0, 0.0)
        try:
            if self.objective.kind == "target":
                best, proven, solves = self._solve_target(deadline)
            elif self.objective.kind == "total":
                best, proven, solves = self._solve_total(deadline)
            else:
                best, proven, solves = self._solve_ratio(deadline)
        except KeyboardInterrupt:
            if self._partial is None:
                raise
            return DeploymentResult(self._partial, False, "INTERRUPTED", 0, time.perf_counter() - start)
        seconds = time.perf_counter() - start
        if best is None:
            return DeploymentResult(None, proven, "INFEASIBLE" if proven else "UNKNOWN", solves, seconds)
        return DeploymentResult(best, proven, "OPTIMAL" if proven else "FEASIBLE", solves, seconds)
