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
  prefill forward of as many waiting prompts as fit in `prefill_batch_tokens`, and decoding stops
  meanwhile (SGLang's and vLLM V0's scheduler try a new prefill batch before each decode batch);
  otherwise it runs a decode step. Prompts longer than the batch take several forwards.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from planner.simulate.decode_instance import DecodeInstance, DecodeSetup
from planner.simulate.predictor import ChunkTimes, PrefillTimes

if TYPE_CHECKING:
    from planner.simulate.host import SimulationHost


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

    def _start(self, now: float) -> None:
        self._admit(now)
        if self.chunk_tokens is None and self.prefilling:
            tokens, attended, _, _ = self._take_prompt_tokens(self.batch_tokens)
            duration = self.forward_times.forward_s(tokens, attended / tokens)
            self.in_forward = True
            self.in_step = 0
            self.prefill_busy_s += duration
            self._launch(now, duration)
            return
        chunk_s = 0.0
        if self.chunk_tokens is not None and self.prefilling:
            assert self.chunk is not None
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
