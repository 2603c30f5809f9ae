"""What a simulation records: one row per request, the inter-token gaps, and a sampled time series.

Per request (numpy arrays, a few numbers each): when the client had it ready and sent it, when its
first token and its last token reached the client, where it ran and how often it was preempted.
Per-token times are never kept: every running sequence of a decode step waits the same step, so a
step adds one weighted gap (its duration, the number of sequences that had emitted before) and
only the rare gap of another length (a sequence resumed after preemption, a colocated prompt's
first decode step) is kept on its own. Memory is a few dozen bytes per request and per step.

The time series samples the state (queues, running sequences, KV use) at most every `interval_s`
of simulated time; when it grows past `MAX_SAMPLES` every other sample is dropped and the interval
doubles, so it stays bounded whatever the run's length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_SAMPLES = 4000


class RequestTable:
    """Per-request timings and placement (NaN: not reached).

    The first `clients` rows are the client's requests, in sending order; rows after them are
    sequences a warm start put in the decode instances at time 0 (never sent, never measured)."""

    def __init__(self, input_tokens: np.ndarray, output_tokens: np.ndarray, ready_s: np.ndarray) -> None:
        n = int(input_tokens.size)
        self.clients = n
        self.input_tokens = np.asarray(input_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(output_tokens, dtype=np.int64)
        self.ready_s = np.asarray(ready_s, dtype=float)
        self.cached_tokens = np.zeros(n, dtype=np.int64)
        self.sent_s = np.full(n, np.nan)
        self.prefill_done_s = np.full(n, np.nan)
        self.kv_ready_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.end_s = np.full(n, np.nan)
        self.prefill_instance = np.full(n, -1, dtype=np.int32)
        self.decode_instance = np.full(n, -1, dtype=np.int32)
        self.dp_rank = np.full(n, -1, dtype=np.int32)
        self.preemptions = np.zeros(n, dtype=np.int32)
        self.delivered_tokens = np.zeros(n, dtype=np.int64)
        # each request's factor on the decode steps its tokens take (its own MTP acceptance; mtp.py)
        self.steps_scale = np.ones(n)

    @property
    def count(self) -> int:
        """Number of rows (client requests and preloaded sequences)."""
        return int(self.input_tokens.size)

    def add_preloaded(self, input_tokens: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
        """Rows for sequences already decoding at time 0 (a warm start); their row numbers."""
        first = self.count
        k = int(input_tokens.size)
        grow_float = ("ready_s", "sent_s", "prefill_done_s", "kv_ready_s", "first_token_s", "end_s")
        for name in grow_float:
            setattr(self, name, np.concatenate([getattr(self, name), np.full(k, np.nan)]))
        self.ready_s[first:] = np.inf
        self.input_tokens = np.concatenate([self.input_tokens, np.asarray(input_tokens, dtype=np.int64)])
        self.output_tokens = np.concatenate([self.output_tokens, np.asarray(output_tokens, dtype=np.int64)])
        for name in ("cached_tokens", "delivered_tokens"):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(k, dtype=np.int64)]))
        self.steps_scale = np.concatenate([self.steps_scale, np.ones(k)])
        for name in ("prefill_instance", "decode_instance", "dp_rank"):
            setattr(self, name, np.concatenate([getattr(self, name), np.full(k, -1, dtype=np.int32)]))
        self.preemptions = np.concatenate([self.preemptions, np.zeros(k, dtype=np.int32)])
        return np.arange(first, first + k)


@dataclass
class GapSamples:
    """Inter-token gaps as (seconds, how many sequences saw it, when the gap ended)."""

    _values: list[float] = field(default_factory=list)
    _weights: list[float] = field(default_factory=list)
    _times: list[float] = field(default_factory=list)

    def add(self, seconds: float, weight: float, now: float) -> None:
        """`weight` sequences waited `seconds` for the tokens they got at `now`."""
        if weight > 0:
            self._values.append(seconds)
            self._weights.append(weight)
            self._times.append(now)

    def add_each(self, seconds: np.ndarray, now: float) -> None:
        """One sequence per value."""
        self._values.extend(float(x) for x in seconds)
        self._weights.extend([1.0] * len(seconds))
        self._times.extend([now] * len(seconds))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values, weights, times)."""
        return (
            np.asarray(self._values, dtype=float),
            np.asarray(self._weights, dtype=float),
            np.asarray(self._times, dtype=float),
        )


SERIES_FIELDS = (
    "client_waiting",
    "prefill_queue",
    "prefill_busy",
    "decode_waiting",
    "running",
    "kv_use",
    "kv_use_max_rank",
)


class TimeSeries:
    """The state sampled over time (see the module docstring)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = max(interval_s, 1e-6)
        self.next_s = 0.0
        self.time_s: list[float] = []
        self.values: dict[str, list[float]] = {name: [] for name in SERIES_FIELDS}

    def due(self, now: float) -> bool:
        """True when a sample is due at `now`."""
        return now >= self.next_s

    def add(self, now: float, **state: float) -> None:
        """Record the state at `now`."""
        self.time_s.append(now)
        for name in SERIES_FIELDS:
            self.values[name].append(float(state.get(name, 0.0)))
        self.next_s = now + self.interval_s
        if len(self.time_s) > MAX_SAMPLES:
            self.time_s = self.time_s[::2]
            self.values = {k: v[::2] for k, v in self.values.items()}
            self.interval_s *= 2.0

    def arrays(self) -> dict[str, np.ndarray]:
        """Every series as an array, with 'time_s'."""
        out = {name: np.asarray(v) for name, v in self.values.items()}
        out["time_s"] = np.asarray(self.time_s)
        return out
