"""A phase's candidates over its instance sizes, with the cost tables they came from.

Its own module so that planner.search.diagnose (which reads it) and planner.search.plan_search
(which builds it and calls diagnose) import it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.candidates.phase_candidates import PhaseCandidate
from planner.candidates.tables import IntTables, PhaseTables


@dataclass
class PhaseSpace:
    """A phase's candidates over all its instance sizes, and what was evaluated."""

    phase: str
    sizes: list[int]
    candidates: list[PhaseCandidate]
    points_evaluated: int
    tables: dict[int, tuple[PhaseTables, IntTables]] = field(default_factory=dict)
