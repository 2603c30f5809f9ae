"""Every duration the simulator needs, asked of the cost model once, as tables over a grid.

The cost model prices one decode step at a batch size and a mean context (`decode_step`), one
prefill forward at a token count and a prompt length (`prefill_forward`), the time a chunk of
prompt tokens adds to a decode step (`chunk_time_s`) and the bytes of one prompt's cache
(`kv_transfer_bytes_per_request`). It reads the lengths from the workload of its `CostContext`,
so a table row at context c is the cost model asked with a workload whose requests sit at c:

- decode: `Workload(input_tokens=i, output_tokens=o)` with o in {1, 2} has mean decode context
  i + o/2 and a spread of o/sqrt(12) < 0.6 tokens, so the cost model's statistical DP straggler
  (which assumes the workload's spread of contexts) is nil in the table. The simulator knows every
  DP rank's actual sequences and charges the slowest rank itself (`DecodeTimes.step_s`): the step
  at the instance's mean batch and context, with the attention part replaced by the busiest rank's.
- prefill: `Workload(input_tokens=X, prefix_hit_rate=h)` prices a forward whose computed tokens
  attend on average to (1 + h) X / 2 earlier positions, the causal mean of whole prompts of X
  tokens with a cached prefix of h X. A batch of chunks [s_i, e_i) attends on average to
  sum(e_i^2 - s_i^2) / (2 sum(e_i - s_i)): the simulator looks it up at the X with that mean.

Tables are numpy arrays over geometric grids that hold the plan's own operating point exactly (its
concurrency and mean context, its batch tokens and prompt length), read by bilinear
interpolation; a step between grid points is off by the curvature of the cost between them
(the tests bound it against direct cost-model calls).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from planner.costmodel.colocated import chunk_time_s, chunked_reference_tokens
from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step, emitted_tokens_per_step
from planner.costmodel.memory import attention_hbm, decode_hbm, kv_transfer_bytes_per_request
from planner.costmodel.prefill import busiest_rank_forward_s, prefill_forward
from planner.specs.plan import DecodePlan, PrefillPlan
from planner.specs.workload import Workload

DECODE_BATCH_POINTS = 40  # geometric points of the batch grid (per device), plus the top quarter linearly
DECODE_CONTEXT_POINTS = 20
PREFILL_TOKEN_POINTS = 40
PREFILL_LENGTH_POINTS = 20


def _grid(lo: float, hi: float, points: int, exact: tuple[float, ...] = (), linear_top: int = 0) -> np.ndarray:
    """Geometric points from lo to hi, the `exact` values, and `linear_top` points over [0.75 hi, hi]."""
    lo = max(lo, 1e-9)
    hi = max(hi, lo * (1 + 1e-9))
    parts = [np.geomspace(lo, hi, points), np.asarray(exact, dtype=float)]
    if linear_top:
        parts.append(np.linspace(0.75 * hi, hi, linear_top))
    g = np.unique(np.concatenate(parts))
    return g[(g >= lo) & (g <= hi)]


def _locate(grid: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(left index, fraction) of each x between two grid points (clamped to the grid)."""
    x = np.minimum(np.maximum(x, grid[0]), grid[-1])
    i = np.minimum(np.searchsorted(grid, x, side="right") - 1, len(grid) - 2)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def bilinear(x_grid: np.ndarray, y_grid: np.ndarray, table: np.ndarray, x, y) -> np.ndarray:
    """table[y, x] read at (x, y) by bilinear interpolation (arrays broadcast)."""
    i, fx = _locate(x_grid, np.asarray(x, dtype=float))
    j, fy = _locate(y_grid, np.asarray(y, dtype=float))
    low = table[j, i] * (1 - fx) + table[j, i + 1] * fx
    high = table[j + 1, i] * (1 - fx) + table[j + 1, i + 1] * fx
    return low * (1 - fy) + high * fy


def bilinear_scalar(x_grid: list[float], y_grid: list[float], table: list[list[float]], x: float, y: float) -> float:
    """table[y][x] at one point by bilinear interpolation, in plain Python (clamped to the grid): a step or
    a forward asks a handful of points, where numpy's per-call cost would dominate."""
    x = min(max(x, x_grid[0]), x_grid[-1])
    y = min(max(y, y_grid[0]), y_grid[-1])
    i = min(bisect_right(x_grid, x) - 1, len(x_grid) - 2)
    j = min(bisect_right(y_grid, y) - 1, len(y_grid) - 2)
    fx = (x - x_grid[i]) / (x_grid[i + 1] - x_grid[i])
    fy = (y - y_grid[j]) / (y_grid[j + 1] - y_grid[j])
    lo, hi = table[j], table[j + 1]
    return (lo[i] * (1 - fx) + lo[i + 1] * fx) * (1 - fy) + (hi[i] * (1 - fx) + hi[i + 1] * fx) * fy


def interp_scalar(x_grid: list[float], values: list[float], x: float) -> float:
    """values at x by linear interpolation, in plain Python (clamped to the grid)."""
    x = min(max(x, x_grid[0]), x_grid[-1])
    i = min(bisect_right(x_grid, x) - 1, len(x_grid) - 2)
    f = (x - x_grid[i]) / (x_grid[i + 1] - x_grid[i])
    return values[i] * (1 - f) + values[i + 1] * f


def _decode_workload(context: float, w: Workload) -> tuple[Workload, float]:
    """A workload whose decode pool sits at `context` (to half a token), and that exact context."""
    twice = max(3, int(round(2.0 * context)))
    out = 1 if twice % 2 else 2  # in + out/2 = context: odd 2c -> out 1, even -> out 2
    inp = (twice - out) // 2
    return Workload(input_tokens=inp, output_tokens=out, mtp_acceptance=w.mtp_acceptance), inp + out / 2.0


def prefill_workload(length: int, w: Workload) -> Workload:
    return Workload(
        input_tokens=max(1, int(length)),
        output_tokens=1,
        mtp_acceptance=w.mtp_acceptance,
        prefix_hit_rate=w.prefix_hit_rate,
    )


_TABLES: dict[tuple, tuple[object, object]] = {}  # key -> (table, the context whose objects the key names by id)
TABLE_MEMO_SIZE = 32


def _ctx_key(ctx: CostContext) -> tuple:
    """What a table depends on besides the phase and the grid: model, machine, scheme, imbalance, workload
    (by content; the catalog hands out one object per model and machine, kept alive with the table)."""
    return (
        id(ctx.model),
        id(ctx.hw),
        ctx.quant.name,
        ctx.imbalance.describe(),
        ctx.hbm_utilization,
        ctx.kv_transfer_bytes_per_s,
        ctx.workload.model_dump_json(),
    )


def _memo(key: tuple, ctx: CostContext, make):  # type: ignore[no-untyped-def]
    """`make()`, or the table made before for the same key in this process (plan --simulate checks
    several plans that share a phase; sweeps and the fidelity runs repeat plans)."""
    hit = _TABLES.get(key)
    if hit is None:
        if len(_TABLES) >= TABLE_MEMO_SIZE:
            _TABLES.pop(next(iter(_TABLES)))
        hit = _TABLES[key] = (make(), ctx)
    return hit[0]


def with_workload(ctx: CostContext, w: Workload) -> CostContext:
    return dataclasses.replace(ctx, workload=w)


@dataclass(frozen=True)
class DecodeTimes:
    """Step time of one decode instance over (batch per device, mean context), and its attention part.

    `step[c, b]` and `attention[c, b]` in seconds; `emitted_per_step` the mean tokens one sequence
    emits per step at the workload's MTP acceptance (the cost model's own figure).
    """

    batch_grid: np.ndarray
    context_grid: np.ndarray
    step: np.ndarray
    attention: np.ndarray
    emitted_per_step: float
    devices: int
    attention_tp: int

    def __post_init__(self) -> None:
        # plain lists for scalar lookups (a step asks a handful; numpy's per-call cost would dominate)
        object.__setattr__(self, "_b", self.batch_grid.tolist())
        object.__setattr__(self, "_c", self.context_grid.tolist())
        object.__setattr__(self, "_step", self.step.tolist())
        object.__setattr__(self, "_att", self.attention.tolist())

    def _at(self, table: list[list[float]], b: float, c: float) -> float:
        return bilinear_scalar(self._b, self._c, table, b, c)  # type: ignore[attr-defined]

    def step_at(self, batch_per_device: float, mean_context: float) -> float:
        """The step with every rank at the mean batch and context."""
        return self._at(self._step, batch_per_device, mean_context)  # type: ignore[attr-defined]

    def attention_at(self, batch_per_device: float, mean_context: float) -> float:
        """The attention part of that step (per rank: a rank's own batch and context)."""
        return self._at(self._att, batch_per_device, mean_context)  # type: ignore[attr-defined]

    def step_s(self, sequences: int, tokens: float, rank_sequences: np.ndarray, rank_tokens: np.ndarray) -> float:
        """One step of `sequences` sequences holding `tokens` KV tokens, spread over DP ranks as given:
        the step at the instance's mean batch and context, with the attention of its slowest rank.

        The slowest rank is found from the attention's local slopes in sequences and in tokens at the
        mean (a rank's attention is close to linear in both), then costed exactly from the table."""
        tp = self.attention_tp
        b, c = sequences / self.devices, tokens / sequences
        base = self.step_at(b, c)
        if rank_sequences.size == 1:
            return base
        n_r = sequences / rank_sequences.size
        mean_att = self.attention_at(n_r / tp, c)
        per_seq = self.attention_at((n_r + 1) / tp, tokens / rank_sequences.size / (n_r + 1)) - mean_att
        per_token = self.attention_at(n_r / tp, c + 1.0 / max(n_r, 1e-9)) - mean_att
        r = int(np.argmax(rank_sequences * per_seq + rank_tokens * per_token))
        seqs = float(rank_sequences[r])
        slowest = self.attention_at(seqs / tp, float(rank_tokens[r]) / seqs) if seqs else 0.0
        return base - mean_att + max(slowest, mean_att)


def decode_times(ctx: CostContext, phase: DecodePlan, max_context: float, static_context: float) -> DecodeTimes:
    """The decode tables of `phase` for contexts up to `max_context` (the plan's own mean context exact)."""
    key = ("decode", _ctx_key(ctx), phase.model_dump_json(), max_context, static_context)
    return _memo(key, ctx, lambda: _decode_times(ctx, phase, max_context, static_context))  # type: ignore[no-any-return]


def _decode_times(ctx: CostContext, phase: DecodePlan, max_context: float, static_context: float) -> DecodeTimes:
    tp = phase.attention.tp
    cap = float(phase.concurrency_per_device)
    lo = min(1.0 / phase.devices, 1.0 / tp) * 0.5
    batch = _grid(lo, cap, DECODE_BATCH_POINTS, (cap, 1.0), linear_top=9)
    contexts, rows_step, rows_att = [], [], []
    targets = _grid(1.5, max(max_context, static_context, 4.0), DECODE_CONTEXT_POINTS, (static_context,))
    seen: set[float] = set()
    for target in targets:
        w, exact = _decode_workload(float(target), ctx.workload)
        if exact in seen:
            continue
        seen.add(exact)
        step = decode_step(with_workload(ctx, w), phase, batch)
        contexts.append(exact)
        rows_step.append(step.step_s)
        rows_att.append(step.breakdown_s["attention"])
    order = np.argsort(contexts)
    return DecodeTimes(
        batch_grid=batch,
        context_grid=np.asarray(contexts)[order],
        step=np.asarray(rows_step)[order],
        attention=np.asarray(rows_att)[order],
        emitted_per_step=emitted_tokens_per_step(phase.mtp_tokens, ctx.workload.mtp_acceptance),
        devices=phase.devices,
        attention_tp=tp,
    )


@dataclass(frozen=True)
class PrefillTimes:
    """Forward time of one prefill instance over (computed tokens, equivalent prompt length).

    `forward[x, t]` seconds; `experts[x, t]` the routed experts' compute in it (the part spread over
    expert parallelism by the tokens of every DP rank together); `kv_bytes` the cache one prompt of each
    grid length sends to decode."""

    token_grid: np.ndarray
    length_grid: np.ndarray
    forward: np.ndarray
    kv_bytes: np.ndarray
    hit_rate: float
    experts: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_t", self.token_grid.tolist())
        object.__setattr__(self, "_x", self.length_grid.tolist())
        object.__setattr__(self, "_f", self.forward.tolist())
        object.__setattr__(self, "_kv", self.kv_bytes.tolist())
        object.__setattr__(self, "_e", None if self.experts is None else self.experts.tolist())

    def forward_s(self, tokens: float, attended_mean: float) -> float:
        """A forward of `tokens` computed tokens whose mean attended position is `attended_mean`."""
        x = 2.0 * attended_mean / (1.0 + self.hit_rate)
        return bilinear_scalar(self._t, self._x, self._f, tokens, x)  # type: ignore[attr-defined]

    def rank_forward_s(self, busiest_rank_tokens: float, tokens: float, attended_mean: float, dp: int) -> float:
        """A forward in which each of `dp` attention-DP ranks prefills its own prompts, `tokens` in all and
        `busiest_rank_tokens` on the busiest rank, by the cost model's busiest-rank rule
        (planner.costmodel.prefill.busiest_rank_forward_s) on these tables: one rank alone costs more than
        `forward_s(tokens)`, which spreads its prompt over every rank. With one rank (or tables without the
        experts' part) it is `forward_s(tokens)`."""
        if self._e is None:  # type: ignore[attr-defined]
            return self.forward_s(tokens, attended_mean)
        x = 2.0 * attended_mean / (1.0 + self.hit_rate)
        t, lengths, experts = self._t, self._x, self._e  # type: ignore[attr-defined]

        def parts_at(n: float) -> tuple[float, float]:
            return self.forward_s(n, attended_mean), bilinear_scalar(t, lengths, experts, n, x)

        return busiest_rank_forward_s(parts_at, busiest_rank_tokens, tokens, dp)

    def prompt_kv_bytes(self, prompt_tokens: float) -> float:
        """Cache bytes of a whole prompt (cached prefix included), by linear interpolation in length."""
        return interp_scalar(self._x, self._kv, prompt_tokens)  # type: ignore[attr-defined]


def prefill_times(ctx: CostContext, phase: PrefillPlan, max_prompt: float, static_prompt: float) -> PrefillTimes:
    """The prefill tables of `phase`: token counts up to its batch, prompt lengths up to twice the longest
    prompt (a chunk late in a long prompt attends like a longer whole prompt)."""
    key = ("prefill", _ctx_key(ctx), phase.model_dump_json(), max_prompt, static_prompt)
    return _memo(key, ctx, lambda: _prefill_times(ctx, phase, max_prompt, static_prompt))  # type: ignore[no-any-return]


def _prefill_times(ctx: CostContext, phase: PrefillPlan, max_prompt: float, static_prompt: float) -> PrefillTimes:
    budget = float(phase.batch_tokens)
    tokens = _grid(1.0, budget, PREFILL_TOKEN_POINTS, (budget, static_prompt), linear_top=5)
    lengths = np.unique(
        np.round(_grid(1.0, 2.0 * max(max_prompt, static_prompt), PREFILL_LENGTH_POINTS, (static_prompt,)))
    )
    rows, experts, kv = [], [], []
    for length in lengths:
        c = with_workload(ctx, prefill_workload(int(length), ctx.workload))
        forward = prefill_forward(c, phase, tokens)
        rows.append(forward.forward_s)
        experts.append(forward.breakdown_s.get("moe", np.zeros_like(forward.forward_s)))
        kv.append(kv_transfer_bytes_per_request(c))
    return PrefillTimes(
        tokens, lengths.astype(float), np.asarray(rows), np.asarray(kv), ctx.workload.hit_rate, np.asarray(experts)
    )


@dataclass(frozen=True)
class ChunkTimes:
    """Colocated chunked prefill: seconds one prompt token adds to a decode step, by prompt length, and the
    routed experts' part of them (the part DP ranks' chunks share)."""

    length_grid: np.ndarray
    seconds_per_token: np.ndarray
    expert_seconds_per_token: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_x", self.length_grid.tolist())
        object.__setattr__(self, "_s", self.seconds_per_token.tolist())
        experts = self.expert_seconds_per_token
        object.__setattr__(self, "_e", None if experts is None else experts.tolist())

    def chunk_s(self, tokens: list[int], prompt_tokens: list[int]) -> float:
        """What chunks of `tokens` prompt tokens (of prompts of `prompt_tokens`) add to a step."""
        xs, ss = self._x, self._s  # type: ignore[attr-defined]
        return sum(t * interp_scalar(xs, ss, p) for t, p in zip(tokens, prompt_tokens, strict=True))

    def rank_chunk_s(self, parts: list[tuple[int, int, int]], dp: int) -> float:
        """What the own chunks of `dp` DP ranks, (tokens, prompt length, rank) each, add to a step: the
        busiest rank's chunks (its tokens take as long as `dp` times as many spread over the instance, the
        per-token seconds' view) but for the routed experts' part, which every rank's tokens add up to
        (planner.costmodel.colocated)."""
        xs, ss, es = self._x, self._s, self._e  # type: ignore[attr-defined]
        if es is None or dp <= 1:
            return self.chunk_s([t for t, _, _ in parts], [p for _, p, _ in parts])
        by_rank: dict[int, float] = {}
        shared = 0.0
        for t, p, r in parts:
            e = t * interp_scalar(xs, es, p)
            shared += e
            by_rank[r] = by_rank.get(r, 0.0) + (t * interp_scalar(xs, ss, p) - e) * dp
        return max(by_rank.values(), default=0.0) + shared


def chunk_times(ctx: CostContext, prefill: PrefillPlan, chunk_tokens: int, max_prompt: float) -> ChunkTimes:
    """t_c per token (planner.costmodel.colocated): the marginal forward at X = max(C, prompt)."""
    one = prefill.model_copy(update={"micro_batches": 1})
    lengths = np.unique(np.round(_grid(1.0, max(max_prompt, 2.0), PREFILL_LENGTH_POINTS)))
    slopes, experts = [], []
    for length in lengths:
        x = float(chunked_reference_tokens(chunk_tokens, int(length)))
        c = with_workload(ctx, prefill_workload(int(length), ctx.workload))
        fwd = prefill_forward(c, one, np.array([x, 2.0 * x]))
        slopes.append(float(chunk_time_s(fwd.forward_s[0], fwd.forward_s[1], 1.0, x)))
        moe = fwd.breakdown_s.get("moe", np.zeros(2))
        experts.append(float(chunk_time_s(moe[0], moe[1], 1.0, x)))
    return ChunkTimes(lengths.astype(float), np.asarray(slopes), np.asarray(experts))


@dataclass(frozen=True)
class KvPool:
    """The KV cache one DP rank of a decode instance really has (per device of the rank).

    `pool_bytes`: the engine's share of the device's HBM (`hbm_utilization`) less everything else
    the cost model puts there at the plan's concurrency (weights, activations, buffers, reserve);
    a rank holding sequences of t tokens in all uses t x `bytes_per_token` + sequences x
    `bytes_per_sequence` of it (the cost model's per-device KV terms, `attention_hbm`)."""

    pool_bytes: float
    bytes_per_token: float
    bytes_per_sequence: float

    def tokens_for(self, sequences: int) -> float:
        """Tokens the pool holds next to `sequences` sequences' fixed cache."""
        return (self.pool_bytes - sequences * self.bytes_per_sequence) / self.bytes_per_token


def kv_pool(ctx: CostContext, phase: DecodePlan, other_bytes: dict[str, float] | None = None) -> KvPool:
    """The KV pool of `phase`'s devices; `other_bytes`: more HBM beside the decode breakdown's (a colocated
    instance's prefill activations)."""
    use = decode_hbm(ctx, phase)
    parts = {k: float(v[0]) for k, v in use.breakdown_bytes.items()}
    parts.update(other_bytes or {})
    non_kv = sum(v for k, v in parts.items() if k != "kv_cache")
    tp = phase.attention.tp
    zero = np.zeros(1)
    per_token = float(attention_hbm(ctx, phase.attention, zero, np.array([1.0 / tp]))["kv_cache"][0])
    per_seq = float(attention_hbm(ctx, phase.attention, zero, zero, np.array([1.0 / tp]))["kv_cache"][0])
    return KvPool(ctx.hbm_capacity_bytes - non_kv, per_token, per_seq)
