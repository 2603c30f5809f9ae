"""The event loop: the benchmark client, the router, the instances, and the clock.

One heap of timed events: an instance's step or forward ends, a prompt's KV cache reaches its
decode instance, the client's next request becomes ready. The client sends requests in order,
each as soon as it is ready and fewer than `--concurrency` of its requests are unfinished (vLLM's
`--max-concurrency` semaphore, SGLang's `--max-concurrency`); the time a request waits in the
client is not part of its latencies, as in both clients (they start the clock when the request is
sent). The router places a request on its instances when it is sent (`routing`).

Counters kept exactly at events: tokens delivered, requests in the system (sent, not finished)
and its time integral, snapshotted when the first measured request (after `warmup`) is sent and
when the last request is sent: the steady-state window of `metrics`.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.simulate.colocated_instance import ColocatedInstance
from planner.simulate.decode_instance import DecodeInstance
from planner.simulate.prefill_instance import PrefillInstance
from planner.simulate.records import GapSamples, RequestTable, TimeSeries

_INSTANCE, _KV_ARRIVAL, _CLIENT = 0, 1, 2


@dataclass
class Snapshot:
    """Counters at one instant."""

    time_s: float
    tokens: float
    completed: int
    area: float  # time integral of the requests in the system up to time_s


@dataclass
class Counters:
    """Exact running totals."""

    tokens: float = 0.0
    completed: int = 0
    in_system: int = 0
    area: float = 0.0
    last_change_s: float = 0.0
    per_second: dict[int, float] = field(default_factory=dict)  # tokens delivered in each second
    peak_in_system: int = 0

    def snapshot(self, now: float) -> Snapshot:
        return Snapshot(now, self.tokens, self.completed, self.area + self.in_system * (now - self.last_change_s))

    def change_in_system(self, now: float, delta: int) -> None:
        self.area += self.in_system * (now - self.last_change_s)
        self.last_change_s = now
        self.in_system += delta
        self.peak_in_system = max(self.peak_in_system, self.in_system)


class Simulation:
    """A plan's instances under one traffic (built by `planner.simulate.build`)."""

    def __init__(
        self,
        table: RequestTable,
        rng: np.random.Generator,
        concurrency: int | None,
        warmup: int,
        cooldown: int,
        instance_policy: str,
        kv_link_bytes_per_s: float,
        kv_bytes: Any,
        series_interval_s: float,
    ) -> None:
        self.table = table
        self.rng = rng
        self.cap = math.inf if concurrency is None else concurrency
        self.warmup = warmup
        self.cooldown = cooldown  # the last requests keep the load on and are not measured: the run stops first
        self.measured_left = max(0, table.clients - cooldown - warmup)
        self.instance_policy = instance_policy
        self.kv_link_bytes_per_s = kv_link_bytes_per_s
        self.kv_bytes = kv_bytes  # prompt tokens -> bytes sent to decode
        self.prefill: list[PrefillInstance] = []
        self.decode: list[DecodeInstance] = []  # decode instances, or colocated ones
        self.colocated = False
        self.gaps = GapSamples()
        self.series = TimeSeries(series_interval_s)
        self.counters = Counters()
        self.window_start: Snapshot | None = None
        self.window_end: Snapshot | None = None
        self.now = 0.0
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._next = 0
        self._arrival_pending = False
        self._rr_prefill = 0
        self._rr_decode = 0
        self._decode_outstanding: list[int] = []

    # ---- the clock -------------------------------------------------------------------------
    def schedule(self, time_s: float, instance: Any) -> None:
        """`instance.on_event` runs at `time_s`."""
        self._push(time_s, _INSTANCE, instance)

    def _push(self, time_s: float, kind: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time_s, self._seq, kind, payload))

    def measured(self) -> np.ndarray:
        """Which rows the figures are over: client requests after the warm-up and before the cool-down."""
        t = self.table
        mask = np.zeros(t.count, dtype=bool)
        mask[self.warmup : t.clients - self.cooldown] = True
        return mask

    def run(self) -> None:
        """Send the requests and run until every one finishes (with a cool-down: every measured one)."""
        if len(self._decode_outstanding) != len(self.decode):
            self._decode_outstanding = [0] * len(self.decode)
        self._pump(0.0)
        heap = self._heap
        series = self.series
        while heap and not (self.cooldown and self.measured_left == 0):
            now, _, kind, payload = heapq.heappop(heap)
            self.now = now
            if series.due(now):
                self._sample(now)
            if kind == _INSTANCE:
                payload.on_event(now)
            elif kind == _KV_ARRIVAL:
                self.table.kv_ready_s[payload] = now
                self.decode[self.table.decode_instance[payload]].add(payload, now)
            else:
                self._arrival_pending = False
                self._pump(now)
        self._sample(self.now)

    # ---- the client -----------------------------------------------------------------------
    def _pump(self, now: float) -> None:
        ready = self.table.ready_s
        count = self.table.clients
        while self._next < count and self.counters.in_system < self.cap:
            i = self._next
            if ready[i] > now:
                if not self._arrival_pending:
                    self._arrival_pending = True
                    self._push(float(ready[i]), _CLIENT, None)
                return
            self._next += 1
            self._send(i, now)

    def _send(self, i: int, now: float) -> None:
        t = self.table
        t.sent_s[i] = now
        self.counters.change_in_system(now, +1)
        if i == self.warmup:
            self.window_start = self.counters.snapshot(now)
        if i == t.clients - self.cooldown - 1:
            self.window_end = self.counters.snapshot(now)
        if self.colocated or not self.prefill:
            d = self._choose_decode()
            t.decode_instance[i] = d
            self._decode_outstanding[d] += 1
            self.decode[d].add(i, now)
            return
        p = self._choose_prefill()
        t.prefill_instance[i] = p
        if self.decode:
            d = self._choose_decode()
            t.decode_instance[i] = d
            self._decode_outstanding[d] += 1
        self.prefill[p].add(i, now)

    def _choose_prefill(self) -> int:
        if len(self.prefill) == 1:
            return 0
        if self.instance_policy == "random":
            return int(self.rng.integers(len(self.prefill)))
        if self.instance_policy == "round-robin":
            self._rr_prefill = (self._rr_prefill + 1) % len(self.prefill)
            return self._rr_prefill
        return min(range(len(self.prefill)), key=lambda k: self.prefill[k].queued_tokens)

    def _choose_decode(self) -> int:
        if len(self.decode) == 1:
            return 0
        if self.instance_policy == "random":
            return int(self.rng.integers(len(self.decode)))
        if self.instance_policy == "round-robin":
            self._rr_decode = (self._rr_decode + 1) % len(self.decode)
            return self._rr_decode
        out = self._decode_outstanding
        return min(range(len(out)), key=out.__getitem__)

    # ---- what the instances report -------------------------------------------------------------
    def prefill_done(self, rid: int, instance: PrefillInstance, now: float) -> None:
        """A prompt is computed: its KV cache leaves for decode (or, prefill-only, it is done)."""
        t = self.table
        t.prefill_done_s[rid] = now
        if not self.decode:
            t.delivered_tokens[rid] = 1
            self.first_tokens([rid], now)
            self.tokens_emitted(1, now)
            self.complete([rid], now)
            return
        seconds = self.kv_bytes(float(t.input_tokens[rid])) / self.kv_link_bytes_per_s
        self._push(now + seconds, _KV_ARRIVAL, rid)

    def first_tokens(self, rids: Any, now: float) -> None:
        """The first token of each of `rids` reaches the client."""
        self.table.first_token_s[np.asarray(rids, dtype=np.int64)] = now

    def tokens_emitted(self, count: float, now: float) -> None:
        """`count` tokens reach clients at `now` (a step's mean; the exact count when a sequence ends)."""
        c = self.counters
        c.tokens += count
        second = int(now)
        c.per_second[second] = c.per_second.get(second, 0.0) + count

    def complete(self, rids: Any, now: float) -> None:
        """Requests whose last token reached the client: the client may send more."""
        ids = np.asarray(rids, dtype=np.int64)
        t = self.table
        t.end_s[ids] = now
        sent = ids[ids < t.clients]  # not the sequences of a warm start
        if sent.size:
            self.counters.completed += int(sent.size)
            self.counters.change_in_system(now, -int(sent.size))
            self.measured_left -= int(np.count_nonzero((sent >= self.warmup) & (sent < t.clients - self.cooldown)))
        if self._decode_outstanding and sent.size:
            for d in t.decode_instance[sent]:
                if d >= 0:
                    self._decode_outstanding[d] -= 1
        self._pump(now)

    # ---- the time series --------------------------------------------------------------------
    def _sample(self, now: float) -> None:
        ready = int(np.searchsorted(self.table.ready_s[: self.table.clients], now, side="right"))
        kv = [inst.kv_fraction() for inst in self.decode]
        self.series.add(
            now,
            client_waiting=max(0, ready - self._next),
            prefill_queue=sum(p.waiting for p in self.prefill)
            + sum(len(getattr(d, "prefilling", ())) for d in self.decode),
            prefill_busy=sum(p.busy for p in self.prefill),
            decode_waiting=sum(d.waiting for d in self.decode),
            running=sum(d.n for d in self.decode),
            kv_use=float(np.mean([k[0] for k in kv])) if kv else 0.0,
            kv_use_max_rank=max((k[1] for k in kv), default=0.0),
        )

    @property
    def instances(self) -> list[Any]:
        """Every instance (prefill first)."""
        return [*self.prefill, *self.decode]


def is_colocated(instance: Any) -> bool:
    """True for a colocated instance."""
    return isinstance(instance, ColocatedInstance)
