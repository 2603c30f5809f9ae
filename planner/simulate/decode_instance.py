"""A decode instance: continuous batching over DP ranks, under its seats and its real KV cache.

Requests reach the instance with their prompt's KV cache (after the transfer from prefill, or at
once for a decode-only plan) and join the queue of one DP rank (`routing`). Between two steps each
rank admits from its queue, in order, while it has a seat (the plan's `concurrency_per_device` x
the rank's devices: the engine's max running requests) and while its KV cache holds the prompt
next to the tokens its running sequences have now and the tokens the next step adds to them (vLLM
V1 allocates the running requests' next slots before it admits a waiting one). A step runs every
sequence of every rank at once (DP attention waits for its slowest rank, `DecodeTimes.step_s`);
each sequence emits 1 + (accepted MTP drafts) tokens, its acceptances drawn at the workload's
rate each step. A request's first token reaches the client with its first step (the PD proxies
stream from the decode instance); a sequence whose output is complete leaves at the step's end.

When the tokens the running sequences hold outgrow a rank's KV cache, the rank preempts its most
recently admitted sequences until they fit (vLLM V1's scheduler preempts the last of its running
queue); a preempted request goes back to the head of its rank's queue and, readmitted, has its
prompt and the tokens it had generated recomputed on this instance before its next step (its
KV cache was dropped), which lengthens that step by the prefill forward of those tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from planner.simulate.predictor import DecodeTimes, KvPool

if TYPE_CHECKING:
    from planner.simulate.engine import Simulation


class DecodeInstance:
    """One decode instance: DP ranks with their queues, the running sequences packed in arrays."""

    def __init__(
        self,
        index: int,
        sim: Simulation,
        times: DecodeTimes,
        pool: KvPool,
        dp: int,
        seats_per_rank: int,
        mtp_tokens: int,
        acceptance: float,
        dp_policy: str,
        recompute_s: Callable[[float], float],
    ) -> None:
        self.index = index
        self.sim = sim
        self.times = times
        self.pool = pool
        self.dp = dp
        self.tp = times.attention_tp
        self.devices = times.devices
        self.seats = seats_per_rank
        self.mtp = mtp_tokens
        self.acceptance = acceptance
        self.dp_policy = dp_policy
        self.recompute_s = recompute_s
        size = seats_per_rank * dp
        self.rid = np.zeros(size, dtype=np.int64)
        self.rank = np.zeros(size, dtype=np.int64)
        self.ctx = np.zeros(size, dtype=np.float64)  # KV tokens each sequence holds now
        self.rem = np.zeros(size, dtype=np.int64)  # tokens it has still to emit
        self.new = np.zeros(size, dtype=bool)  # no token delivered yet (first token comes with the step)
        self.odd = np.zeros(size, dtype=bool)  # did not emit at the previous step's end (resumed, or colocated)
        self.last = np.zeros(size, dtype=np.float64)  # when an odd sequence last emitted
        self.order = np.zeros(size, dtype=np.int64)  # admission order (preemption takes the latest)
        self.n = 0
        self.rank_n = np.zeros(dp, dtype=np.int64)  # running sequences per rank
        self.rank_tokens = np.zeros(dp, dtype=np.float64)  # KV tokens they hold
        self.reserved_n = np.zeros(dp, dtype=np.int64)  # seats held by prompts being prefilled (colocated)
        self.reserved_tokens = np.zeros(dp, dtype=np.float64)  # and their KV tokens
        self.rank_queue: list[deque[int]] = [deque() for _ in range(dp)]
        self.queued = np.zeros(dp, dtype=np.int64)
        self.pending: set[int] = set()  # ranks whose queue is not empty
        self.recompute: set[int] = set()  # requests whose KV must be recomputed when readmitted
        self.resume_last: dict[int, float] = {}  # when a preempted request last emitted
        self.admitted = 0
        self.busy = False
        self.step_start = 0.0
        self.prev_end = -1.0  # end of the previous decode step
        self.extra_s = 0.0  # recompute time added to the step in flight
        self._rr = 0
        self._lb_start = 0
        # what the report says of this instance
        self.steps = 0
        self.busy_s = 0.0
        self.kv_blocked_steps = 0  # steps that began with a request refused for KV alone
        self.seat_blocked_steps = 0  # steps that began with every seat of a rank with a queue taken
        self.preemptions = 0
        self.drafts = 0
        self.accepted = 0
        self.peak_kv_fraction = 0.0

    # ---- arrivals and admission ------------------------------------------------------------
    def choose_rank(self) -> int:
        """The DP rank a new request joins (round robin, or vLLM's least waiting x 4 + running)."""
        if self.dp == 1:
            return 0
        if self.dp_policy == "round-robin":
            r = self._rr
            self._rr = (r + 1) % self.dp
            return r
        # vLLM scans from a rotating start and keeps the first rank of the lowest score
        score = 4 * self.queued + self.rank_n
        start = self._lb_start
        self._lb_start = (start + 1) % self.dp
        a = int(np.argmin(score[start:])) + start
        if start == 0:
            return a
        b = int(np.argmin(score[:start]))
        return a if score[a] <= score[b] else b

    def add(self, rid: int, now: float) -> None:
        """A request whose KV cache is here joins a rank's queue; an idle instance steps at once."""
        r = self.choose_rank()
        self.sim.table.dp_rank[rid] = r
        self.rank_queue[r].append(rid)
        self.queued[r] += 1
        self.pending.add(r)
        if not self.busy:
            self._start(now)

    def kv_bytes(self, tokens, sequences):  # type: ignore[no-untyped-def]
        """KV bytes per device of a rank holding `sequences` sequences of `tokens` tokens in all."""
        return (tokens + sequences * self.mtp) * self.pool.bytes_per_token + sequences * self.pool.bytes_per_sequence

    def kv_fits(self, r: int, prompt_tokens: float) -> bool:
        """Whether rank r can take a sequence of `prompt_tokens` and still grow its running ones one step."""
        growth = self.rank_n[r] * (1 + self.mtp)
        held = self.rank_tokens[r] + self.reserved_tokens[r]
        need = self.kv_bytes(held + growth + prompt_tokens, int(self.rank_n[r] + self.reserved_n[r]) + 1)
        return need <= self.pool.pool_bytes

    def seat_free(self, r: int) -> bool:
        """Whether rank r has a seat for one more sequence."""
        return bool(self.rank_n[r] + self.reserved_n[r] < self.seats)

    def _admit(self, now: float) -> None:
        if not self.pending:
            return
        table = self.sim.table
        kv_blocked = seat_blocked = False
        free = self.seats - self.rank_n - self.reserved_n
        for r in sorted(self.pending):
            if free[r] <= 0:
                seat_blocked = True
                continue
            q = self.rank_queue[r]
            while q:
                if not self.seat_free(r):
                    seat_blocked = True
                    break
                rid = q[0]
                tokens = float(table.input_tokens[rid] + table.delivered_tokens[rid])
                if not self.kv_fits(r, tokens):
                    kv_blocked = True
                    break
                q.popleft()
                self.queued[r] -= 1
                if rid in self.recompute:
                    self.recompute.discard(rid)
                    self.extra_s += self.recompute_s(tokens)
                delivered = int(table.delivered_tokens[rid])
                # the first token (the prefill's) rides on the first step: the step generates the rest
                remaining = int(table.output_tokens[rid]) - max(delivered, 1)
                self._place(rid, r, tokens, remaining, now)
            if not q:
                self.pending.discard(r)
        self.kv_blocked_steps += kv_blocked
        self.seat_blocked_steps += seat_blocked

    def _place(self, rid: int, r: int, tokens: float, remaining: int, now: float, first_done: bool = False) -> None:
        """Put a sequence in the running arrays."""
        i = self.n
        self.rid[i] = rid
        self.rank[i] = r
        self.ctx[i] = tokens
        self.rem[i] = remaining
        self.new[i] = not first_done and self.sim.table.delivered_tokens[rid] == 0
        self.last[i] = self.resume_last.pop(rid, now)
        self.odd[i] = not self.new[i]
        self.order[i] = self.admitted
        self.admitted += 1
        self.n += 1
        self.rank_n[r] += 1
        self.rank_tokens[r] += tokens

    # ---- steps ------------------------------------------------------------------------------
    def decode_step_s(self) -> float:
        """The cost model's step at the running batch: mean batch and context, the slowest rank's attention."""
        return self.times.step_s(self.n, float(self.rank_tokens.sum()), self.rank_n, self.rank_tokens)

    def _start(self, now: float) -> None:
        self._admit(now)
        if self.n == 0:
            self.busy = False
            return
        duration = self.decode_step_s() + self.extra_s
        self.extra_s = 0.0
        self._launch(now, duration)

    def _launch(self, now: float, duration: float) -> None:
        self.busy = True
        self.step_start = now
        self.busy_s += duration
        self.sim.schedule(now + duration, self)

    def on_event(self, now: float) -> None:
        """The step in flight ends: tokens reach the client, finished sequences leave, the next step starts."""
        self._finish_step(now)
        self._start(now)

    def _emitted(self, k: int) -> np.ndarray:
        """Tokens each sequence generates this step: 1 + its accepted drafts. A draft counts only if every
        earlier one of the step was accepted: P(at least m accepted) = a^m, drawn as u < a^m."""
        if self.mtp == 0 or self.acceptance <= 0.0:
            return np.ones(k, dtype=np.int64)
        if self.acceptance >= 1.0:
            out = np.full(k, 1 + self.mtp, dtype=np.int64)
        else:
            u = self.sim.rng.random(k)
            out = np.ones(k, dtype=np.int64)
            for m in range(1, self.mtp + 1):
                out += u < self.acceptance**m
        self.drafts += k * self.mtp
        self.accepted += int(out.sum()) - k
        return out

    def _finish_step(self, now: float) -> None:
        k = self.n
        if k == 0:
            return
        sim = self.sim
        self.steps += 1
        rid, rank, rem, new, odd = self.rid[:k], self.rank[:k], self.rem[:k], self.new[:k], self.odd[:k]
        generated = self._emitted(k)
        np.minimum(generated, rem, out=generated)
        rem -= generated
        deliver = generated + new  # a sequence's first step also delivers the prefill's token
        self.ctx[:k] += deliver
        if self.dp > 1:
            self.rank_tokens += np.bincount(rank, weights=deliver, minlength=self.dp)
        else:
            self.rank_tokens[0] += float(deliver.sum())
        sim.tokens_emitted(int(deliver.sum()), now)
        # gaps: sequences that emitted at the previous step's end wait this step; the others on their own
        n_new = int(np.count_nonzero(new))
        n_odd = int(np.count_nonzero(odd))
        sim.gaps.add(now - self.prev_end, float(k - n_new - n_odd), now)
        if n_odd:
            sim.gaps.add_each(now - self.last[:k][odd], now)
            odd[:] = False
        if n_new:
            sim.first_tokens(rid[new], now)
            new[:] = False
        self.prev_end = now
        done = rem <= 0
        if done.any():
            self._remove(done, now, finished=True)
        self._check_kv(now)

    def _remove(self, mask: np.ndarray, now: float, finished: bool) -> None:
        k = self.n
        gone_rank = self.rank[:k][mask]
        gone_ctx = self.ctx[:k][mask]
        if gone_rank.size < 16:  # the usual few: plain updates beat two bincounts over every rank
            for r, c in zip(gone_rank.tolist(), gone_ctx.tolist(), strict=True):
                self.rank_n[r] -= 1
                self.rank_tokens[r] -= c
        else:
            self.rank_n -= np.bincount(gone_rank, minlength=self.dp)
            self.rank_tokens -= np.bincount(gone_rank, weights=gone_ctx, minlength=self.dp)
        gone = self.rid[:k][mask].copy()
        out = self.sim.table.output_tokens[gone]
        self.sim.table.delivered_tokens[gone] = np.where(self.new[:k][mask], 0, out - self.rem[:k][mask])
        # fill the holes below the new end with the sequences that stay above it (order does not matter)
        leaving = np.flatnonzero(mask)
        m = k - leaving.size
        holes = leaving[leaving < m]
        if holes.size:
            movers = np.arange(m, k)[~mask[m:k]]
            for arr in (self.rid, self.rank, self.ctx, self.rem, self.new, self.odd, self.last, self.order):
                arr[holes] = arr[movers]
        self.n = m
        if finished:
            self.sim.complete(gone, now)

    def _check_kv(self, now: float) -> None:
        # a bound first: the most tokens and the most sequences of any rank, even if not the same rank's
        bound = self.kv_bytes(
            float((self.rank_tokens + self.reserved_tokens).max()), int((self.rank_n + self.reserved_n).max())
        )
        if bound <= 0.9 * self.pool.pool_bytes:
            self.peak_kv_fraction = max(self.peak_kv_fraction, bound / self.pool.pool_bytes)
            return
        use = self.kv_bytes(self.rank_tokens + self.reserved_tokens, self.rank_n + self.reserved_n)  # type: ignore[arg-type]
        peak = float(use.max()) / self.pool.pool_bytes if self.pool.pool_bytes > 0 else 1.0
        self.peak_kv_fraction = max(self.peak_kv_fraction, peak)
        over = np.flatnonzero(use > self.pool.pool_bytes)
        for r in over:
            self._preempt_rank(int(r), now)

    def _preempt_rank(self, r: int, now: float) -> None:
        k = self.n
        slots = np.flatnonzero(self.rank[:k] == r)
        slots = slots[np.argsort(-self.order[slots])]  # latest admitted first
        out = np.zeros(k, dtype=bool)
        tokens = float(self.rank_tokens[r] + self.reserved_tokens[r])
        seqs = int(self.rank_n[r] + self.reserved_n[r])
        for s in slots:
            if self.kv_bytes(tokens, seqs) <= self.pool.pool_bytes or seqs <= 1:
                break
            out[s] = True
            tokens -= self.ctx[s]
            seqs -= 1
        if not out.any():
            return
        victims = self.rid[:k][out].copy()
        for rid, last, odd in zip(victims, self.last[:k][out], self.odd[:k][out], strict=True):
            self.resume_last[int(rid)] = float(last) if odd else self.prev_end
        self._remove(out, now, finished=False)
        for rid in victims[::-1]:  # back to the head of the queue, in admission order
            self.rank_queue[r].appendleft(int(rid))
            self.queued[r] += 1
            self.recompute.add(int(rid))
            self.sim.table.preemptions[rid] += 1
        self.pending.add(r)
        self.preemptions += len(victims)

    # ---- what the report and the time series read -------------------------------------------
    @property
    def waiting(self) -> int:
        """Requests queued for a seat."""
        return int(self.queued.sum())

    def kv_fraction(self) -> tuple[float, float]:
        """(KV use over the pool, mean over ranks; the fullest rank)."""
        held = self.kv_bytes(self.rank_tokens + self.reserved_tokens, self.rank_n + self.reserved_n)  # type: ignore[arg-type]
        use = held / self.pool.pool_bytes
        return float(np.mean(use)), float(np.max(use))
