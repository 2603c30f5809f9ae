"""What an instance asks of the event loop that runs it: the clock, the request table and the
client-facing counters (a Protocol, so the instances do not import the loop that imports them)."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from planner.simulate.records import GapSamples, RequestTable


class SimulationHost(Protocol):
    """The event loop as an instance sees it (implemented by planner.simulate.engine.Simulation)."""

    table: RequestTable
    rng: np.random.Generator
    gaps: GapSamples

    def schedule(self, time_s: float, instance: Any) -> None:
        """Wake `instance` at `time_s` (its step or forward ends)."""

    def prefill_done(self, rid: int, instance: Any, now: float) -> None:
        """A prompt is computed: its KV cache leaves for decode (or, prefill-only, it is done)."""

    def first_tokens(self, rids: Any, now: float) -> None:
        """The first token of each of `rids` reaches the client."""

    def tokens_emitted(self, count: float, now: float) -> None:
        """`count` tokens reach clients at `now`."""

    def complete(self, rids: Any, now: float) -> None:
        """Requests whose last token reached the client."""
