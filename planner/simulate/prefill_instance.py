"""A prefill instance: a queue per attention DP rank, batches formed the way the engines form them.

Requests join the queue of the DP rank with the fewest computed tokens waiting (vLLM's DP load
balancer sends a request to the least loaded engine core, vllm/v1/engine/core_client.py
DPLBAsyncMPClient; SGLang's data parallel controller to one rank's scheduler). When the instance is
free every rank takes prompts from the head of its queue until it holds its token budget, the
plan's `batch_tokens` over the ranks (vLLM's `max_num_batched_tokens` and SGLang's
`--chunked-prefill-size` are per rank), splitting the prompt that does not fit: its first part fills
the rank's batch and the rest leads the rank's next one, as chunked prefill does in both engines
(vLLM V1 schedules partial prefills by default; SGLang chunks the last request of a prefill batch
when chunked prefill is on, its default). Cached prefix tokens are not computed: a request computes
`input - cached` tokens, each attending to every earlier position. A forward takes the cost model's
time at the batch's computed tokens and mean attended position (`predictor.PrefillTimes`) on its
busiest rank: every part but the experts' compute takes as long as there
(`PrefillTimes.rank_forward_s`), which is the even forward when every rank is full; with context
parallelism (`dp_ranks` 1) the instance is one queue. A request whose last chunk is computed has
its KV cache sent to decode (the host adds the transfer time).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from planner.simulate.predictor import PrefillTimes

if TYPE_CHECKING:
    from planner.simulate.host import SimulationHost


class PrefillInstance:
    """One prefill instance (the forward in flight, the queues behind it)."""

    def __init__(
        self, index: int, sim: SimulationHost, times: PrefillTimes, batch_tokens: int, dp_ranks: int = 1
    ) -> None:
        self.index = index
        self.sim = sim
        self.times = times
        self.dp_ranks = max(1, int(dp_ranks))
        self.budget = max(1, -(-int(batch_tokens) // self.dp_ranks))  # per rank, rounded up as the launch files
        self.queues: list[deque[int]] = [deque() for _ in range(self.dp_ranks)]
        self.head_done = [0] * self.dp_ranks  # computed tokens of each queue's head already done
        self.rank_queued = [0] * self.dp_ranks  # computed tokens waiting on each rank
        self.busy = False
        self.in_batch: list[int] = []  # requests whose prompt this forward completes
        self.queued_tokens = 0  # computed tokens waiting or in flight (the proxies' load)
        self.busy_s = 0.0
        self.forwards = 0

    def add(self, rid: int, now: float) -> None:
        """A request joins the least loaded rank's queue; a free instance starts a forward at once."""
        t = self.sim.table
        computed = int(t.input_tokens[rid] - t.cached_tokens[rid])
        rank = min(range(self.dp_ranks), key=lambda r: self.rank_queued[r])
        self.queues[rank].append(rid)
        self.rank_queued[rank] += computed
        self.queued_tokens += computed
        if not self.busy:
            self._start(now)

    def _start(self, now: float) -> None:
        t = self.sim.table
        tokens = 0
        busiest = 0
        attended = 0.0
        done: list[int] = []
        for rank, queue in enumerate(self.queues):
            taken = 0
            while queue and taken < self.budget:
                rid = queue[0]
                cached = int(t.cached_tokens[rid])
                computed = int(t.input_tokens[rid]) - cached
                take = min(computed - self.head_done[rank], self.budget - taken)
                a = cached + self.head_done[rank]
                e = a + take
                attended += (e * e - a * a) / 2.0
                taken += take
                if self.head_done[rank] + take >= computed:
                    queue.popleft()
                    self.head_done[rank] = 0
                    done.append(rid)
                else:
                    self.head_done[rank] += take
            self.rank_queued[rank] -= taken
            tokens += taken
            busiest = max(busiest, taken)
        if tokens == 0:
            self.busy = False
            return
        duration = self.times.rank_forward_s(float(busiest), float(tokens), attended / tokens, self.dp_ranks)
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
        if any(self.queues):
            self._start(now)

    @property
    def waiting(self) -> int:
        """Requests queued (those split over forwards included)."""
        return sum(len(q) for q in self.queues)
