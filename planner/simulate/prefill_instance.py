"""A prefill instance: one queue, batches formed the way the engines form them.

Requests queue in arrival order. When the instance is free it takes prompts from the head of the
queue until the batch holds `batch_tokens` computed tokens (the plan's token budget per forward:
vLLM's `max_num_batched_tokens`, SGLang's `--chunked-prefill-size`), splitting the prompt that
does not fit: its first part fills the batch and the rest leads the next one, as chunked prefill
does in both engines (vLLM V1 schedules partial prefills by default; SGLang chunks the last
request of a prefill batch when chunked prefill is on, its default). Cached prefix tokens are not
computed: a request computes `input - cached` tokens, each attending to every earlier position.
A forward takes the cost model's time at the batch's computed tokens and mean attended position
(`predictor.PrefillTimes`). A request whose last chunk is computed has its KV cache sent to
decode (the host adds the transfer time).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from planner.simulate.predictor import PrefillTimes

if TYPE_CHECKING:
    from planner.simulate.host import SimulationHost


class PrefillInstance:
    """One prefill instance (the forward in flight, the queue behind it)."""

    def __init__(self, index: int, sim: SimulationHost, times: PrefillTimes, batch_tokens: int) -> None:
        self.index = index
        self.sim = sim
        self.times = times
        self.budget = int(batch_tokens)
        self.queue: deque[int] = deque()
        self.head_done = 0  # computed tokens of queue[0] already done (a prompt split over forwards)
        self.busy = False
        self.in_batch: list[int] = []  # requests whose prompt this forward completes
        self.queued_tokens = 0  # computed tokens waiting or in flight (the proxies' load)
        self.busy_s = 0.0
        self.forwards = 0

    def add(self, rid: int, now: float) -> None:
        """A request joins the queue; a free instance starts a forward at once."""
        t = self.sim.table
        self.queue.append(rid)
        self.queued_tokens += int(t.input_tokens[rid] - t.cached_tokens[rid])
        if not self.busy:
            self._start(now)

    def _start(self, now: float) -> None:
        t = self.sim.table
        tokens = 0
        attended = 0.0
        done: list[int] = []
        while self.queue and tokens < self.budget:
            rid = self.queue[0]
            cached = int(t.cached_tokens[rid])
            computed = int(t.input_tokens[rid]) - cached
            take = min(computed - self.head_done, self.budget - tokens)
            a = cached + self.head_done
            e = a + take
            attended += (e * e - a * a) / 2.0
            tokens += take
            if self.head_done + take >= computed:
                self.queue.popleft()
                self.head_done = 0
                done.append(rid)
            else:
                self.head_done += take
        if tokens == 0:
            self.busy = False
            return
        duration = self.times.forward_s(tokens, attended / tokens)
        self.busy = True
        self.in_batch = done
        self.queued_tokens -= tokens
        self.busy_s += duration
        self.forwards += 1
        self.sim.schedule(now + duration, self)

    def on_event(self, now: float) -> None:
        """The forward in flight ends: its completed prompts go to decode; the next forward starts."""
        for rid in self.in_batch:
            self.sim.prefill_done(rid, self, now)
        self.in_batch = []
        self.busy = False
        if self.queue:
            self._start(now)

    @property
    def waiting(self) -> int:
        """Requests queued (the one split over forwards included)."""
        return len(self.queue)
