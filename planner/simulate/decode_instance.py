"""A decode instance: continuous batching over DP ranks, under its seats and its real KV cache.

Requests reach the instance with their prompt's KV cache (after the transfer from prefill, or at
once for a decode-only plan) and join the queue of one DP rank (`routing`). Between two steps each
rank admits from its queue, in order, while it has a seat (the plan's `concurrency_per_device` x
the rank's devices: the engine's max running requests) and while its KV cache holds the prompt
next to the tokens its running sequences hold and the tokens the next step adds to them (vLLM V1
allocates the running requests' next slots before it admits a waiting one). A step runs every
sequence of every rank at once (DP attention waits for its slowest rank, `DecodeTimes.step_s`).
A request's first token reaches the client with its first step (the PD proxies stream from the
decode instance; the token the prefill computed rides on it); a sequence leaves at the end of the
step that generates its last token. How many steps that takes is drawn when it is admitted, with
the MTP acceptance drawn per step about the request's own acceptance (`mtp.StepSampler`,
`mtp.request_steps_scale`); meanwhile its KV grows by the mean tokens a step generates, and is
counted exactly when it leaves.

When the tokens the running sequences hold outgrow a rank's KV cache, the rank preempts its most
recently admitted sequences until they fit (vLLM V1's scheduler preempts the last of its running
queue); a preempted request goes back to the head of its rank's queue and, readmitted, has its
prompt and the tokens it had generated recomputed on this instance before its next step (its KV
cache was dropped), which lengthens that step by the prefill forward of those tokens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.simulate.mtp import StepSampler
from planner.simulate.predictor import DecodeTimes, KvPool

if TYPE_CHECKING:
    from planner.simulate.host import SimulationHost

# a running sequence: [rank, first step, KV tokens at admission, steps, tokens to generate, admission order]
RANK, START, CTX0, STEPS, TOKENS, ORDER = range(6)


@dataclass(frozen=True)
class DecodeSetup:
    """What every decode (or colocated) instance of a plan shares: its step times, its KV pool, its DP
    ranks and their seats, MTP, the DP routing, and the time to recompute a preempted sequence."""

    times: DecodeTimes
    pool: KvPool
    dp: int
    seats_per_rank: int
    mtp_tokens: int
    acceptance: float
    dp_policy: str
    recompute_s: Callable[[float], float]


class DecodeInstance:
    """One decode instance: DP ranks with their queues and their running sequences."""

    def __init__(self, index: int, sim: SimulationHost, setup: DecodeSetup) -> None:
        self.index = index
        self.sim = sim
        self.times = setup.times
        self.pool = setup.pool
        self.dp = dp = setup.dp
        self.tp = setup.times.attention_tp
        self.devices = setup.times.devices
        self.seats = setup.seats_per_rank
        self.mtp = setup.mtp_tokens
        self.sampler = StepSampler(setup.mtp_tokens, setup.acceptance, sim.rng)
        self.per_step = self.sampler.mean  # tokens a sequence generates per step, on average
        self.dp_policy = setup.dp_policy
        self.recompute_s = setup.recompute_s
        self.running: dict[int, list[float]] = {}
        self.finishing: dict[int, list[int]] = {}  # step number -> sequences whose last step it is
        self.new: list[int] = []  # admitted for the next step: their first token comes with it
        self.odd: dict[int, float] = {}  # sequences whose next gap does not start at the last step's end
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
        self.step_no = 0  # the step in flight, or the next one
        self.in_step = 0  # sequences in the step in flight
        self.busy = False
        self.prev_end = -1.0  # end of the previous decode step
        self.extra_s = 0.0  # recompute time added to the next step
        self._rr = 0
        # what the report says of this instance
        self.steps = 0
        self.busy_s = 0.0
        self.kv_blocked_steps = 0  # steps that began with a request refused for KV alone
        self.seat_blocked_steps = 0  # steps that began with every seat of a rank with a queue taken
        self.preemptions = 0
        self.prefill_delayed_steps = 0  # colocated: decode steps SGLang's prefill delayer ran while prompts waited
        self.drafts = 0
        self.accepted = 0
        self.peak_kv_fraction = 0.0

    @property
    def n(self) -> int:
        """Sequences decoding."""
        return len(self.running)

    # ---- arrivals and admission ------------------------------------------------------------
    def choose_rank(self) -> int:
        """The DP rank a new request joins (round robin, or vLLM's least waiting x 4 + running)."""
        if self.dp == 1:
            return 0
        if self.dp_policy == "random":
            return int(self.sim.rng.integers(self.dp))
        if self.dp_policy == "round-robin":
            r = self._rr
            self._rr = (r + 1) % self.dp
            return r
        # vLLM keeps the first rank of the lowest score from its client's start index (0 for one API
        # server); the request then counts as waiting there, which spreads ties
        return int(np.argmin(4 * self.queued + self.rank_n + self.reserved_n))

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
        """KV bytes per device of a rank holding `sequences` sequences of `tokens` tokens in all (arrays too)."""
        return (tokens + sequences * self.mtp) * self.pool.bytes_per_token + sequences * self.pool.bytes_per_sequence

    def kv_fits(self, r: int, prompt_tokens: float) -> bool:
        """Whether rank r can take a sequence of `prompt_tokens` and still grow its running ones one step."""
        growth = self.rank_n[r] * (1 + self.mtp)
        held = self.rank_tokens[r] + self.reserved_tokens[r]
        need = self.kv_bytes(held + growth + prompt_tokens, int(self.rank_n[r] + self.reserved_n[r]) + 1)
        return bool(need <= self.pool.pool_bytes)

    def seat_free(self, r: int) -> bool:
        """Whether rank r has a seat for one more sequence."""
        return bool(self.rank_n[r] + self.reserved_n[r] < self.seats)

    def _admit(self, now: float) -> None:
        if not self.pending:
            return
        table = self.sim.table
        kv_blocked = seat_blocked = False
        free = (self.seats - self.rank_n - self.reserved_n).tolist()
        for r in sorted(self.pending):
            q = self.rank_queue[r]
            while q:
                if free[r] <= 0:
                    seat_blocked = True
                    break
                rid = q[0]
                delivered = int(table.delivered_tokens[rid])
                tokens = float(table.input_tokens[rid] + delivered)
                if not self.kv_fits(r, tokens):
                    kv_blocked = True
                    break
                q.popleft()
                self.queued[r] -= 1
                free[r] -= 1
                if rid in self.recompute:
                    self.recompute.discard(rid)
                    self.extra_s += self.recompute_s(tokens)
                # the first token (the prefill's) rides on the first step: the steps generate the rest
                remaining = int(table.output_tokens[rid]) - max(delivered, 1)
                self._place(rid, r, tokens, remaining, first=delivered == 0, last_s=self.resume_last.pop(rid, None))
            if not q:
                self.pending.discard(r)
        self.kv_blocked_steps += kv_blocked
        self.seat_blocked_steps += seat_blocked

    def _place(
        self, rid: int, r: int, tokens: float, to_generate: int, first: bool, last_s: float | None = None
    ) -> None:
        """A sequence starts decoding with the next step; `first`: its first token comes with that step;
        `last_s`: when it last emitted, if not at the previous step's end."""
        steps = self.sampler.steps(to_generate, float(self.sim.table.steps_scale[rid])) if to_generate > 0 else 1
        self.running[rid] = [r, self.step_no, tokens, steps, max(to_generate, 0), self.admitted]
        self.admitted += 1
        self.finishing.setdefault(self.step_no + steps - 1, []).append(rid)
        self.rank_n[r] += 1
        self.rank_tokens[r] += tokens
        if first:
            self.new.append(rid)
        elif last_s is not None:
            self.odd[rid] = last_s

    def preload(self, rids: np.ndarray, ranks: np.ndarray, tokens: np.ndarray, to_generate: np.ndarray) -> None:
        """Sequences already decoding at time 0 (a warm start): each emitted its last token then."""
        steps = self.sampler.steps_many(to_generate, self.sim.table.steps_scale[rids])
        for rid, r, t, s, g in zip(
            rids.tolist(), ranks.tolist(), tokens.tolist(), steps.tolist(), to_generate.tolist(), strict=True
        ):
            self.running[rid] = [r, self.step_no, t, s, g, self.admitted]
            self.admitted += 1
            self.finishing.setdefault(self.step_no + s - 1, []).append(rid)
            self.odd[rid] = 0.0
        self.rank_n += np.bincount(ranks, minlength=self.dp)
        self.rank_tokens += np.bincount(ranks, weights=tokens, minlength=self.dp)

    # ---- steps ------------------------------------------------------------------------------
    def decode_step_s(self) -> float:
        """The cost model's step at the running batch: mean batch and context, the slowest rank's attention."""
        return self.times.step_s(self.n, float(self.rank_tokens.sum()), self.rank_n, self.rank_tokens)

    def _start(self, now: float) -> None:
        self._admit(now)
        if not self.running:
            self.busy = False
            return
        duration = self.decode_step_s() + self.extra_s
        self.extra_s = 0.0
        self.in_step = self.n
        self._launch(now, duration)

    def _launch(self, now: float, duration: float) -> None:
        self.busy = True
        self.busy_s += duration
        self.sim.schedule(now + duration, self)

    def on_event(self, now: float) -> None:
        """The step in flight ends: tokens reach the client, finished sequences leave, the next step starts."""
        self._finish_step(now)
        self._start(now)

    def _finish_step(self, now: float) -> None:
        k = self.in_step
        if k == 0:
            return
        sim = self.sim
        self.steps += 1
        self.drafts += k * self.mtp
        self.rank_tokens += self.rank_n * self.per_step
        new = self.new
        sim.tokens_emitted(k * self.per_step + len(new), now)
        # gaps: sequences that emitted at the previous step's end waited this step; the others on their own
        odd = self.odd
        sim.gaps.add(now - self.prev_end, float(k - len(new) - len(odd)), now)
        if odd:
            sim.gaps.add_each(now - np.fromiter(odd.values(), dtype=float, count=len(odd)), now)
            self.odd = {}
        if new:
            sim.first_tokens(new, now)
            self.new = []
        self.prev_end = now
        done = self.finishing.pop(self.step_no, None)
        self.step_no += 1
        if done:
            self._leave(done, now)
        self._check_kv(now)

    def _leave(self, rids: list[int], now: float) -> None:
        """Sequences whose last token this step generated."""
        table = self.sim.table
        correction = 0.0
        for rid in rids:
            seq = self.running.pop(rid)
            r = int(seq[RANK])
            self.rank_n[r] -= 1
            self.rank_tokens[r] -= seq[CTX0] + seq[STEPS] * self.per_step
            correction += seq[TOKENS] - seq[STEPS] * self.per_step  # the exact tokens, for the counters
            if seq[TOKENS] > 0:
                self.accepted += int(seq[TOKENS] - seq[STEPS])
            else:  # only the prefill's token: its one step made no token, so its drafts count for nothing
                self.drafts -= int(seq[STEPS]) * self.mtp
            table.delivered_tokens[rid] = table.output_tokens[rid]
        self.sim.tokens_emitted(correction, now)
        self.sim.complete(rids, now)

    def _check_kv(self, now: float) -> None:
        tokens = self.rank_tokens + self.reserved_tokens
        seqs = self.rank_n + self.reserved_n
        # a bound first: the most tokens and the most sequences of any rank, even if not the same rank's
        bound = self.kv_bytes(float(tokens.max()), int(seqs.max()))
        pool = self.pool.pool_bytes
        if bound <= 0.9 * pool:
            self.peak_kv_fraction = max(self.peak_kv_fraction, bound / pool)
            return
        use = self.kv_bytes(tokens, seqs)
        self.peak_kv_fraction = max(self.peak_kv_fraction, float(use.max()) / pool)
        for r in np.flatnonzero(use > pool):
            self._preempt_rank(int(r), now)

    def _preempt_rank(self, r: int, now: float) -> None:
        table = self.sim.table
        mine = sorted((seq[ORDER], rid) for rid, seq in self.running.items() if seq[RANK] == r)
        tokens = float(self.rank_tokens[r] + self.reserved_tokens[r])
        seqs = int(self.rank_n[r] + self.reserved_n[r])
        victims: list[int] = []
        for _, rid in reversed(mine):  # the latest admitted first
            if self.kv_bytes(tokens, seqs) <= self.pool.pool_bytes or seqs <= 1:
                break
            seq = self.running.pop(rid)
            ran = self.step_no - int(seq[START])
            held = seq[CTX0] + ran * self.per_step
            tokens -= held
            seqs -= 1
            self.rank_n[r] -= 1
            self.rank_tokens[r] -= held
            self.finishing[int(seq[START] + seq[STEPS] - 1)].remove(rid)
            made = max(0, min(int(round(ran * self.per_step)), int(seq[TOKENS]) - 1))  # generated so far, about
            before = int(table.delivered_tokens[rid])  # delivered before this admission
            table.delivered_tokens[rid] = (max(before, 1) if ran else before) + made
            self.sim.tokens_emitted(made - ran * self.per_step, now)
            self.odd.pop(rid, None)
            victims.append(rid)
        for rid in reversed(victims):  # back to the head of the queue, in admission order
            self.rank_queue[r].appendleft(rid)
            self.queued[r] += 1
            self.recompute.add(rid)
            table.preemptions[rid] += 1
            if table.delivered_tokens[rid]:
                self.resume_last[rid] = self.prev_end
        if victims:
            self.pending.add(r)
            self.preemptions += len(victims)

    # ---- what the report and the time series read -------------------------------------------
    @property
    def waiting(self) -> int:
        """Requests queued for admission (a seat, KV room, the next step)."""
        return int(self.queued.sum())

    def kv_fraction(self) -> tuple[float, float]:
        """(KV use over the pool, mean over ranks; the fullest rank)."""
        held = self.kv_bytes(self.rank_tokens + self.reserved_tokens, self.rank_n + self.reserved_n)
        use = held / self.pool.pool_bytes
        return float(np.mean(use)), float(np.max(use))
