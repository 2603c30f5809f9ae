"""CP-SAT model of a whole deployment: which decode and prefill configuration, how many of each.

Inputs are the phase candidates (planner.candidates.phase_candidates): fully costed instance
configurations with their layouts, MTP depth, concurrency or batch, HBM and latency, in integers.
The model picks one decode and one prefill candidate (or one of a phase only), the number of
instances of each, and the request rate R they serve together:

    R <= sum_i n_i * r_i            decode capacity (requests/s of candidate i, per instance)
    R <= sum_j m_j * q_j            prefill capacity
    sum_i n_i * s_i + sum_j m_j * s_j <= budget     devices
    HBM_i <= capacity, TPOT_i <= SLO, TTFT_j <= SLO  for the chosen candidates

Objective: most output tokens per second per card (R * output / cards, a ratio solved exactly
by Dinkelbach rounds: maximise d* R - n* D), or with a target rate, the fewest cards. Ties are
broken by a last solve with a fixed key (more throughput, then fewer devices, then candidate
order), so the result does not depend on the number of workers. Further plans come from
re-solving with the configuration pairs already returned excluded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from planner.candidates.colocated_candidates import ColocatedCandidate
from planner.candidates.phase_candidates import PhaseCandidate
from planner.search.cpsat import cp_model as _cp_model
from planner.search.settings import SolverSettings

RATE_SCALE = 1000  # requests per second, in thousandths


@dataclass(frozen=True)
class Deployment:
    """One solution: chosen candidates (indices) and instance counts."""

    decode: int | None
    decode_instances: int
    prefill: int | None
    prefill_instances: int
    rate_milli: int
    devices: int
    colocated: int | None = None
    colocated_instances: int = 0


class SearchInterrupted(Exception):
    """Ctrl-C or SIGTERM during a solve; carries the best deployment known at that moment."""

    def __init__(self, best: Deployment | None) -> None:
        super().__init__("interrupted")
        self.best = best


@dataclass
class DeploymentResult:
    """Ranked deployments and the solver's status."""

    deployments: list[Deployment]
    optimal: bool
    status: str
    solves: int
    seconds: float


class DeploymentModel:
    """One CP-SAT model; `solve_top` returns up to k distinct deployments, best first."""

    def __init__(
        self,
        decode: list[PhaseCandidate],
        prefill: list[PhaseCandidate],
        decode_rate_milli: list[int],
        prefill_rate_milli: list[int],
        budget_devices: int,
        settings: SolverSettings,
        tpot_slo_us: int | None = None,
        ttft_slo_us: int | None = None,
        target_rate_milli: int | None = None,
        distinct_sizes: bool = True,
        colocated: list[ColocatedCandidate] | None = None,
    ) -> None:
        self.decode, self.prefill = decode, prefill
        self.coloc = colocated or []
        self.d_rate, self.p_rate = decode_rate_milli, prefill_rate_milli
        self.budget = budget_devices
        self.settings = settings
        self.tpot_slo_us, self.ttft_slo_us = tpot_slo_us, ttft_slo_us
        self.target = target_rate_milli
        self.distinct_sizes = distinct_sizes
        self._partial: Deployment | None = None  # best deployment of the solve in progress
        self._excluded: list[Deployment] = []
        self.model = _cp_model().CpModel()
        self._create_variables()
        self._add_choice_constraints()
        self._add_capacity_constraints()
        self._add_budget_constraints()
        self._add_memory_and_latency_constraints()

    # ---- variables and constraints ---------------------------------------------------------
    def _create_variables(self) -> None:
        m = self.model
        self.x = [m.new_bool_var(f"decode_{i}") for i in range(len(self.decode))]
        self.y = [m.new_bool_var(f"prefill_{j}") for j in range(len(self.prefill))]
        self.n = [
            m.new_int_var(0, max(1, self.budget // c.devices), f"decode_n_{i}") for i, c in enumerate(self.decode)
        ]
        self.mp = [
            m.new_int_var(0, max(1, self.budget // c.devices), f"prefill_n_{j}") for j, c in enumerate(self.prefill)
        ]
        self.z = [m.new_bool_var(f"colocated_{i}") for i in range(len(self.coloc))]
        self.cc = [
            m.new_int_var(0, max(1, self.budget // c.devices), f"colocated_n_{i}") for i, c in enumerate(self.coloc)
        ]
        self.use_coloc = m.new_bool_var("colocated_mode") if self.coloc else None
        cap = [r * (self.budget // c.devices) for r, c in zip(self.d_rate, self.decode, strict=True)]
        cap += [r * (self.budget // c.devices) for r, c in zip(self.p_rate, self.prefill, strict=True)]
        cap += [c.rate_milli * (self.budget // c.devices) for c in self.coloc]
        self.rate = m.new_int_var(0, max(cap + [1]), "rate_milli")
        self.devices = m.new_int_var(0, self.budget, "devices")

    def _add_choice_constraints(self) -> None:
        """One configuration per searched phase (or one colocated configuration); its instances only."""
        m = self.model
        for lits, counts in ((self.x, self.n), (self.y, self.mp), (self.z, self.cc)):
            for lit, cnt in zip(lits, counts, strict=True):
                m.add(cnt >= 1).only_enforce_if(lit)
                m.add(cnt == 0).only_enforce_if(~lit)
        if self.use_coloc is None:
            for lits in (self.x, self.y):
                if lits:
                    m.add_exactly_one(lits)
            return
        # disaggregated (one decode and one prefill configuration) or colocated (one configuration)
        for lits in (self.x, self.y):
            if lits:
                m.add(sum(lits) == 1 - self.use_coloc)
        m.add(sum(self.z) == self.use_coloc)
        if not self.x and not self.y:
            m.add(self.use_coloc == 1)  # colocated candidates only

    def _add_capacity_constraints(self) -> None:
        """The served rate is what both phases can carry (one phase: what it carries)."""
        m = self.model
        coloc = sum(c.rate_milli * n for c, n in zip(self.coloc, self.cc, strict=True))
        if self.x:
            m.add(self.rate <= sum(r * n for r, n in zip(self.d_rate, self.n, strict=True)) + coloc)
        if self.y:
            m.add(self.rate <= sum(r * n for r, n in zip(self.p_rate, self.mp, strict=True)) + coloc)
        if self.target is not None:
            m.add(self.rate >= self.target)

    def _add_budget_constraints(self) -> None:
        """Devices of all instances within the card budget."""
        terms = [c.devices * n for c, n in zip(self.decode, self.n, strict=True)]
        terms += [c.devices * n for c, n in zip(self.prefill, self.mp, strict=True)]
        terms += [c.devices * n for c, n in zip(self.coloc, self.cc, strict=True)]
        self.model.add(self.devices == sum(terms))

    def _add_memory_and_latency_constraints(self) -> None:
        """The chosen configurations fit HBM and meet the SLOs (linear in the choice literals)."""
        m = self.model
        for lits, cands in ((self.x, self.decode), (self.y, self.prefill)):
            if not lits:
                continue
            m.add(
                sum(c.hbm_mib * lit for c, lit in zip(cands, lits, strict=True))
                <= min(c.hbm_capacity_mib for c in cands)
            )
        if self.x and self.tpot_slo_us is not None:
            m.add(sum(c.latency_us * lit for c, lit in zip(self.decode, self.x, strict=True)) <= self.tpot_slo_us)
        if self.y and self.ttft_slo_us is not None:
            m.add(sum(c.latency_us * lit for c, lit in zip(self.prefill, self.y, strict=True)) <= self.ttft_slo_us)
        if self.z:
            m.add(
                sum(c.hbm_mib * lit for c, lit in zip(self.coloc, self.z, strict=True))
                <= min(c.decode.hbm_capacity_mib for c in self.coloc)
            )
            if self.tpot_slo_us is not None:
                m.add(sum(c.tpot_us * lit for c, lit in zip(self.coloc, self.z, strict=True)) <= self.tpot_slo_us)
            if self.ttft_slo_us is not None:
                m.add(sum(c.ttft_us * lit for c, lit in zip(self.coloc, self.z, strict=True)) <= self.ttft_slo_us)

    # ---- solving ---------------------------------------------------------------------------
    def _read(self, solver: Any) -> Deployment:
        d = next((i for i, v in enumerate(self.x) if solver.value(v)), None)
        p = next((j for j, v in enumerate(self.y) if solver.value(v)), None)
        c = next((i for i, v in enumerate(self.z) if solver.value(v)), None)
        return Deployment(
            decode=d,
            decode_instances=int(solver.value(self.n[d])) if d is not None else 0,
            prefill=p,
            prefill_instances=int(solver.value(self.mp[p])) if p is not None else 0,
            rate_milli=int(solver.value(self.rate)),
            devices=int(solver.value(self.devices)),
            colocated=c,
            colocated_instances=int(solver.value(self.cc[c])) if c is not None else 0,
        )

    def _run(self, deadline: float | None) -> tuple[Any, Any]:
        remaining = None if deadline is None else deadline - time.perf_counter()
        solver = self.settings.make_solver(remaining)
        return solver.solve(self.model), solver

    def _solve_one(self, deadline: float | None) -> tuple[Deployment | None, bool, int]:
        """Best deployment under the current model; (solution, proven optimal, solves)."""
        m = self.model
        solves = 0
        if self.target is not None:
            m.minimize(self.devices)
            status, solver = self._run(deadline)
            solves += 1
            if status not in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
                return None, status == _cp_model().INFEASIBLE, solves
            proven = status == _cp_model().OPTIMAL
            best_devices = int(solver.value(self.devices))
            fix = m.add(self.devices <= best_devices)
            m.maximize(self.rate * 4 * (len(self.decode) + len(self.prefill) + len(self.coloc) + 1) - self._order_key())
            status, solver = self._run(deadline)
            solves += 1
            m.clear_objective()
            fix.proto.clear_linear()  # drop the temporary bound
            return self._read(solver), proven and status == _cp_model().OPTIMAL, solves
        # Dinkelbach on rate / devices, from a good feasible start when one is cheap to find
        start = self._heuristic_start()
        if start is not None:
            self._partial, proven = start, True
        else:
            m.maximize(self.rate * (self.budget + 1) - self.devices)
            status, solver = self._run(deadline)
            solves += 1
            if status not in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
                return None, status == _cp_model().INFEASIBLE, solves
            proven = status == _cp_model().OPTIMAL
            self._partial = self._read(solver)
        try:
            return self._dinkelbach(self._partial, proven, solves, deadline)
        except KeyboardInterrupt:
            raise SearchInterrupted(self._partial) from None

    def _dinkelbach(
        self, best: Deployment, proven: bool, solves: int, deadline: float | None
    ) -> tuple[Deployment | None, bool, int]:
        """Improve the ratio until no deployment beats it, then break ties."""
        m = self.model
        for _ in range(50):
            if best.devices == 0:
                break
            m.maximize(best.devices * self.rate - best.rate_milli * self.devices)
            status, solver = self._run(deadline)
            solves += 1
            if status not in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
                proven = False
                break
            cand = self._read(solver)
            if cand.devices and cand.rate_milli * best.devices > best.rate_milli * cand.devices:
                best = self._partial = cand
                continue
            proven &= status == _cp_model().OPTIMAL
            break
        # tie-break among optimal ratios: more throughput, then fewer devices, then candidate order
        fix = m.add(best.devices * self.rate - best.rate_milli * self.devices >= 0)
        weight = 4 * (len(self.decode) + len(self.prefill) + len(self.coloc) + 1)
        m.maximize(self.rate * (self.budget + 1) * weight - self.devices * weight - self._order_key())
        status, solver = self._run(deadline)
        solves += 1
        if status in (_cp_model().OPTIMAL, _cp_model().FEASIBLE):
            best = self._read(solver)
            proven &= status == _cp_model().OPTIMAL
        fix.proto.clear_linear()  # drop the temporary bound
        m.clear_objective()
        return best, proven, solves

    def _order_key(self) -> Any:
        offset = len(self.x) + len(self.y)
        return (
            sum(i * v for i, v in enumerate(self.x))
            + sum(j * v for j, v in enumerate(self.y))
            + sum((offset + i) * v for i, v in enumerate(self.z))
        )

    def _is_excluded(self, d: int | None, p: int | None, c: int | None) -> bool:
        """Whether a choice of candidates is forbidden by an earlier `_exclude`."""
        for old in self._excluded:
            pairs: tuple[tuple[int | None, int | None, list[Any]], ...] = (
                (d, old.decode, self.decode),
                (p, old.prefill, self.prefill),
                (c, old.colocated, self.coloc),
            )
            if all(
                (new is None) == (prev is None)
                and (
                    new is None
                    or prev is None
                    or (cands[new].devices == cands[prev].devices if self.distinct_sizes else new == prev)
                )
                for new, prev, cands in pairs
            ):
                return True
        return False

    def _heuristic_start(self) -> Deployment | None:
        """A good feasible deployment without the solver, to start Dinkelbach's rounds close to the
        optimum: every candidate pair with up to 64 decode instances and just enough prefill."""
        best: tuple[Fraction, Deployment] | None = None

        def offer(dep: Deployment) -> None:
            nonlocal best
            if dep.devices <= 0 or dep.devices > self.budget:
                return
            if self._is_excluded(dep.decode, dep.prefill, dep.colocated):
                return
            ratio = Fraction(dep.rate_milli, dep.devices)
            if best is None or ratio > best[0]:
                best = (ratio, dep)

        for c, coloc in enumerate(self.coloc):
            offer(Deployment(None, 0, None, 0, coloc.rate_milli, coloc.devices, c, 1))
        if self.decode and not self.prefill:
            for i, dec in enumerate(self.decode):
                offer(Deployment(i, 1, None, 0, self.d_rate[i], dec.devices))
        elif self.prefill and not self.decode:
            for j, pre in enumerate(self.prefill):
                offer(Deployment(None, 0, j, 1, self.p_rate[j], pre.devices))
        elif self.decode and self.prefill:
            sd = np.array([c.devices for c in self.decode])
            sp = np.array([c.devices for c in self.prefill])
            rd, rp = np.array(self.d_rate), np.array(self.p_rate)
            n = np.arange(1, 65)[None, None, :]
            m_need = np.maximum(1, -(-(n * rd[:, None, None]) // np.maximum(rp[None, :, None], 1)))
            room = (self.budget - n * sd[:, None, None]) // sp[None, :, None]
            m_cnt = np.minimum(m_need, room)
            devices = n * sd[:, None, None] + m_cnt * sp[None, :, None]
            rate = np.minimum(n * rd[:, None, None], m_cnt * rp[None, :, None])
            ok = (m_cnt >= 1) & (devices <= self.budget) & (rate > 0)
            score = np.where(ok, rate / np.maximum(devices, 1), -1.0)
            flat = score.reshape(len(self.decode), len(self.prefill), -1)
            order = np.argsort(-flat.max(axis=2), axis=None)
            for pos in order[: 4 * (len(self._excluded) + 1)]:
                i, j = divmod(int(pos), len(self.prefill))
                k = int(np.argmax(flat[i, j]))
                if flat[i, j, k] <= 0:
                    break
                offer(Deployment(i, k + 1, j, int(m_cnt[i, j, k]), int(rate[i, j, k]), int(devices[i, j, k])))
        return best[1] if best is not None else None

    def _exclude(self, dep: Deployment) -> None:
        """Forbid this deployment's pair of instance sizes (or of configurations) from now on."""
        self._excluded.append(dep)
        m = self.model
        groups = []
        choices: tuple[tuple[int | None, list[Any], list[Any]], ...] = (
            (dep.decode, self.x, self.decode),
            (dep.prefill, self.y, self.prefill),
            (dep.colocated, self.z, self.coloc),
        )
        for chosen, lits, cands in choices:
            if chosen is None:
                continue
            if self.distinct_sizes:
                size = cands[chosen].devices
                same = [lit for lit, c in zip(lits, cands, strict=True) if c.devices == size]
                flag = m.new_bool_var("")
                m.add_bool_or(same).only_enforce_if(flag)
                m.add_bool_and([~lit for lit in same]).only_enforce_if(~flag)
                groups.append(flag)
            else:
                groups.append(lits[chosen])
        m.add_bool_or([~g for g in groups])

    def solve_top(self, k: int, deadline: float | None = None) -> DeploymentResult:
        """Up to k distinct deployments, best first. On Ctrl-C/SIGTERM: what was found so far,
        with status INTERRUPTED (KeyboardInterrupt if nothing was found yet)."""
        start = time.perf_counter()
        found: list[Deployment] = []
        optimal, solves, status = True, 0, "OPTIMAL"
        for _ in range(k):
            try:
                best, proven, n = self._solve_one(deadline)
            except (KeyboardInterrupt, SearchInterrupted) as stop:
                partial = stop.best if isinstance(stop, SearchInterrupted) else None
                if partial is not None and not found:
                    found.append(partial)
                if not found:
                    raise KeyboardInterrupt from None
                return DeploymentResult(found, False, "INTERRUPTED", solves, time.perf_counter() - start)
            solves += n
            if best is None:
                if not found:
                    optimal = proven
                    status = "INFEASIBLE" if proven else "UNKNOWN"
                break
            if not found:
                optimal = proven
                status = "OPTIMAL" if proven else "FEASIBLE"
            found.append(best)
            self._exclude(best)
        return DeploymentResult(found, optimal, status, solves, time.perf_counter() - start)
