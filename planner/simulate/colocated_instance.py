"""A colocated instance: prefill and decode on the same devices, scheduled the way the plan says.

Prompts queue on a DP rank (`routing`) and are admitted, in order, while the rank has a seat and
its KV cache holds the prompt (a prompt being prefilled holds its seat and its cache, as in both
engines' running set). Then, with the plan's `chunk_tokens` C:

- **chunked prefill**: every step runs the decode batch and up to C prompt tokens of the admitted
  prompts, oldest first, split where the budget ends (vLLM's chunked-prefill scheduler fills the
  step's token budget with the running decodes first, then prompt chunks: vllm-project/vllm PR
  #7874). The chunks lengthen the step by the cost model's marginal chunk time
  (`predictor.ChunkTimes`, the `t_c` of planner.costmodel.colocated); a step with no decoding
  sequence is the prefill forward of its chunk alone. A prompt's first token comes at the end of
  the step that computes its last chunk; it decodes from the next step.
- **whole forwards** (no `chunk_tokens`): when prompts wait and a seat is free, the instance runs a
  prefill forward, and decoding stops meanwhile (SGLang's and vLLM V0's scheduler try a new prefill
  batch before each decode batch); otherwise it runs a decode step. Prompts longer than the batch
  take several forwards. Two ways to form the forward's batch:
  - **instance** (the default; the static model's, planner.costmodel.colocated): each DP rank's admitted
    prompts, oldest first, up to its share `prefill_batch_tokens / dp` (every engine's per-rank budget:
    vLLM's max_num_batched_tokens per DP engine core, SGLang's divided --chunked-prefill-size; a prompt
    longer than the share takes several forwards in a row), the forward's tokens costed as if spread
    evenly over the DP ranks;
  - **per-rank** (SGLang with DP attention): each DP rank batches its own admitted prompts, up to its
    share `prefill_batch_tokens / dp`. SGLang runs one scheduler per attention-DP rank
    (python/sglang/srt/managers/scheduler_dp_attn_mixin.py gathers each rank's own batch;
    `--max-prefill-tokens` is a rank's budget, `--chunked-prefill-size` is divided by the DP size in
    server_args.py `_handle_data_parallelism`). The forward lasts as long as its busiest rank's
    attention, dense layers and dispatch, plus the experts' compute of every rank's tokens
    (`PrefillTimes.rank_forward_s`): a prompt prefilled on one rank alone costs more than the same
    prompt spread over the ranks. The other ranks do not decode meanwhile: with DP attention and MTP
    they idle while one rank prefills (sgl-project/sglang PR #14201 calls it "prefill/idle mode").
    The static model does not follow this: where few ranks prefill at once it is optimistic
    (docs/simulate.md).
- **the prefill delayer** (per-rank only): SGLang holds prefill back for up to P passes in a row (a
  pass is one step or forward) while its DP ranks disagree, so prompts gather and the ranks prefill
  together; then a prefill may run and the count starts again. Two versions, P = 30 in both:
  - `pr14201` (SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE=1 in SGLang main from sgl-project/sglang PR
    #14201, merged 2025-12-01, until PR #16269 rewrote it on 2026-01-01; scheduler_enhancer.py): held
    back while some ranks have every seat taken and others have a free one;
  - `sglang-0.5.23` (`--enable-prefill-delayer`, PrefillDelayer of sglang 0.5.23's
    managers/prefill_delayer.py, `prefill_delayer_max_delay_passes` = 30): held back while some ranks
    have a prompt they could admit (queued, with a free seat) and others do not; and, when every rank
    has one, while the fullest rank has fewer free seats than the largest prefill batch any rank ran
    in its last 16 (RecentPrefillBatchSizeTracker), except the first time.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from planner.simulate.decode_instance import DecodeInstance, DecodeSetup
from planner.simulate.predictor import ChunkTimes, PrefillTimes

if TYPE_CHECKING:
    from planner.simulate.host import SimulationHost


# SGLang's prefill delayers (module docstring) and the passes both hold prefill back at most by default:
# PR #14201's SchedulerEnhancer.max_stable_count and sglang 0.5.23's ServerArgs.prefill_delayer_max_delay_passes
PREFILL_DELAYERS = ("pr14201", "sglang-0.5.23")
PREFILL_BATCH_WINDOW = 16  # sglang 0.5.23: SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE default
SGLANG_PREFILL_DELAY_PASSES = 30


class ColocatedInstance(DecodeInstance):
    """One colocated instance: a decode instance that also prefills its own prompts."""

    def __init__(
        self,
        index: int,
        sim: SimulationHost,
        setup: DecodeSetup,
        forward_times: PrefillTimes,
        batch_tokens: int,
        chunk: ChunkTimes | None,
        chunk_tokens: int | None,
        per_rank: bool = False,
        prefill_delayer: str | None = None,
        prefill_delay_passes: int = SGLANG_PREFILL_DELAY_PASSES,
    ) -> None:
        super().__init__(index, sim, setup)
        self.forward_times = forward_times
        self.batch_tokens = int(batch_tokens)
        self.chunk = chunk
        self.chunk_tokens = chunk_tokens
        self.prefilling: deque[list[int]] = deque()  # [request, rank, tokens computed so far]
        self.completing: list[list[int]] = []  # prompts the step or forward in flight completes
        self.in_forward = False  # a whole forward is in flight (decoding stalls)
        self.prefill_busy_s = 0.0
        self.per_rank = per_rank
        self.delayer = prefill_delayer
        self.delay_passes = prefill_delay_passes
        self.delayed_passes = 0  # passes in a row the delayer has held prefill back
        self.first_hold_skipped = False  # sglang 0.5.23 lets the first full-seats hold through
        self.recent_batches: list[deque[int]] = [deque(maxlen=PREFILL_BATCH_WINDOW) for _ in range(self.dp)]

    def _admit(self, now: float) -> None:
        if not self.pending:
            return
        table = self.sim.table
        free = (self.seats - self.rank_n - self.reserved_n).tolist()  # seats left per rank (seat_free's test)
        for r in sorted(self.pending):
            q = self.rank_queue[r]
            while q and free[r] > 0:
                rid = q[0]
                tokens = float(table.input_tokens[rid])
                if not self.kv_fits(r, tokens):
                    self.kv_blocked_steps += 1
                    break
                q.popleft()
                self.queued[r] -= 1
                self.reserved_n[r] += 1
                free[r] -= 1
                self.reserved_tokens[r] += tokens
                self.prefilling.append([rid, r, int(table.cached_tokens[rid])])
            if q and free[r] <= 0:
                self.seat_blocked_steps += 1
            if not q:
                self.pending.discard(r)

    def _take_prompt_tokens(self, budget: int) -> tuple[int, float, list[int], list[int]]:
        """Up to `budget` prompt tokens of the admitted prompts, oldest first: (tokens, attended sum,
        per-prompt tokens, their prompt lengths); completed prompts move to `completing`."""
        table = self.sim.table
        tokens, attended = 0, 0.0
        parts: list[int] = []
        lengths: list[int] = []
        for entry in list(self.prefilling):
            if tokens >= budget:
                break
            rid, _, done = entry
            total = int(table.input_tokens[rid])
            take = min(total - done, budget - tokens)
            attended += ((done + take) ** 2 - done**2) / 2.0
            tokens += take
            parts.append(take)
            lengths.append(total)
            entry[2] = done + take
            if entry[2] >= total:
                self.prefilling.popleft()
                self.completing.append(entry)
        return tokens, attended, parts, lengths

    def _take_rank_tokens(self, budget: int, parts: list[tuple[int, int, int]] | None = None):
        """Up to `budget` prompt tokens of each DP rank's admitted prompts, oldest first: (tokens per rank,
        prompts per rank, attended sum); completed prompts move to `completing`. `parts` collects
        (tokens, prompt length, rank) of every prompt taken from."""
        table = self.sim.table
        taken = np.zeros(self.dp, dtype=np.int64)
        prompts = np.zeros(self.dp, dtype=np.int64)
        attended = 0.0
        left: deque[list[int]] = deque()
        for entry in self.prefilling:
            rid, r, done = entry
            total = int(table.input_tokens[rid])
            take = min(total - done, budget - int(taken[r]))
            if take <= 0:
                left.append(entry)
                continue
            attended += ((done + take) ** 2 - done**2) / 2.0
            taken[r] += take
            prompts[r] += 1
            if parts is not None:
                parts.append((take, total, r))
            entry[2] = done + take
            (self.completing if entry[2] >= total else left).append(entry)
        self.prefilling = left
        return taken, prompts, attended

    def _start_instance_forward(self, now: float) -> None:
        """A whole forward of each DP rank's admitted prompts, oldest first, up to the rank's share of the
        batch, costed as spread over the DP ranks (the static model's); the instance's decoding waits for it."""
        if self.dp > 1:
            taken, _, attended = self._take_rank_tokens(max(1, self.batch_tokens // self.dp))
            tokens = int(taken.sum())
        else:
            tokens, attended, _, _ = self._take_prompt_tokens(self.batch_tokens)
        self._launch_forward(now, self.forward_times.forward_s(tokens, attended / tokens))

    def _start_rank_forward(self, now: float) -> None:
        """A whole forward in which each DP rank with admitted prompts prefills up to its share of the batch,
        costed at its busiest rank (`PrefillTimes.rank_forward_s`); the instance's decoding waits for it."""
        taken, prompts, attended = self._take_rank_tokens(max(1, self.batch_tokens // self.dp))
        for r in np.flatnonzero(prompts):
            self.recent_batches[int(r)].append(int(prompts[r]))
        tokens = float(taken.sum())
        self._launch_forward(
            now, self.forward_times.rank_forward_s(float(taken.max()), tokens, attended / tokens, self.dp)
        )

    def _launch_forward(self, now: float, duration: float) -> None:
        """A whole prefill forward in flight: no sequence decodes until it ends."""
        self.prefill_busy_s += duration
        self.in_forward = True
        self.in_step = 0
        self._launch(now, duration)

    def _prefill_delayed(self) -> bool:
        """The prefill delayer's decision for this pass (module docstring): held back for up to
        `delay_passes` passes in a row."""
        if self.delayer is None:
            return False
        if self.delayer == "pr14201":  # SchedulerEnhancer.get_schedule_decision
            full = self.rank_n >= self.seats
            hold = bool(full.any() and not full.all())
        else:  # PrefillDelayer._negotiate_should_allow_prefill_pure
            can = (self.queued > 0) & (self.rank_n + self.reserved_n < self.seats)
            hold = bool(can.any() and not can.all())
            if can.all():
                largest = max((max(b, default=0) for b in self.recent_batches), default=0)
                hold = int(self.seats - self.rank_n.max()) < largest
                if hold and not self.first_hold_skipped:
                    self.first_hold_skipped, hold = True, False
        if hold:
            self.delayed_passes += 1
            if self.delayed_passes < self.delay_passes:
                return True
        self.delayed_passes = 0
        return False

    def _start(self, now: float) -> None:
        delayed = self.chunk_tokens is None and self._prefill_delayed()
        if delayed:
            self.prefill_delayed_steps += bool(self.pending)
        else:
            self._admit(now)
        if self.chunk_tokens is None and self.prefilling and not delayed:
            if self.per_rank:
                self._start_rank_forward(now)
            else:
                self._start_instance_forward(now)
            return
        chunk_s = 0.0
        if self.chunk_tokens is not None and self.prefilling:
            assert self.chunk is not None
            if self.dp > 1:
                # each DP rank chunks its own prompts, C / dp tokens a step (planner.costmodel.colocated)
                taken_parts: list[tuple[int, int, int]] = []
                taken, _, attended = self._take_rank_tokens(max(1, self.chunk_tokens // self.dp), taken_parts)
                tokens = int(taken.sum())
                if self.n:
                    chunk_s = self.chunk.rank_chunk_s(taken_parts, self.dp)
                else:
                    chunk_s = self.forward_times.rank_forward_s(
                        float(taken.max()), float(tokens), attended / tokens, self.dp
                    )
            else:
                tokens, attended, parts, lengths = self._take_prompt_tokens(self.chunk_tokens)
                if self.n:
                    chunk_s = self.chunk.chunk_s(parts, lengths)
                else:
                    chunk_s = self.forward_times.forward_s(tokens, attended / tokens)
            self.prefill_busy_s += chunk_s
        if self.n == 0 and chunk_s == 0.0:
            self.busy = False
            return
        self.in_forward = False
        self.in_step = self.n
        duration = (self.decode_step_s() if self.n else 0.0) + chunk_s + self.extra_s
        self.extra_s = 0.0
        self._launch(now, duration)

    def on_event(self, now: float) -> None:
        """The step or forward in flight ends: decoders emit (not after a whole forward), completed
        prompts deliver their first token and join the decode batch, the next step starts."""
        if not self.in_forward:
            self._finish_step(now)
        table = self.sim.table
        for rid, r, _ in self.completing:
            tokens = float(table.input_tokens[rid])
            self.reserved_n[r] -= 1
            self.reserved_tokens[r] -= tokens
            self.sim.first_tokens([rid], now)
            self.sim.tokens_emitted(1, now)
            table.delivered_tokens[rid] = 1
            remaining = int(table.output_tokens[rid]) - 1
            if remaining <= 0:
                self.sim.complete([rid], now)
                continue
            self._place(rid, r, tokens + 1, remaining, first=False, last_s=now)
        self.completing = []
        self.in_forward = False
        self._start(now)

    @property
    def waiting(self) -> int:
        """Prompts queued for a seat (those being prefilled not counted)."""
        return int(self.queued.sum())
