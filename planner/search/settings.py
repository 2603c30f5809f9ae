"""Solver settings in one place: time limit, workers, seed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.search.cpsat import cp_model

DEFAULT_TIME_LIMIT_S = 60.0


@dataclass(frozen=True)
class SolverSettings:
    """How CP-SAT runs. Results do not depend on `workers`: ties are broken by a second solve."""

    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    workers: int = 2
    seed: int = 0
    log: bool = False

    def make_solver(self, remaining_s: float | None = None) -> Any:
        """A CpSolver configured with these settings (and the time left of the whole search)."""
        solver = cp_model().CpSolver()  # ortools is imported here, on the first solve
        limit = self.time_limit_s if remaining_s is None else max(0.05, min(self.time_limit_s, remaining_s))
        solver.parameters.max_time_in_seconds = limit
        solver.parameters.num_workers = self.workers
        solver.parameters.random_seed = self.seed
        solver.parameters.log_search_progress = self.log
        # Ctrl-C / SIGTERM must reach Python (which keeps the best plan found so far), not be
        # swallowed by the solver; every solve is short and bounded by the time limit anyway.
        solver.parameters.catch_sigint_signal = False
        return solver
