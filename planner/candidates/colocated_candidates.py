"""Colocated candidates: one instance size, one set of layouts, prefill and decode in turn.

For each instance size, layout combinations and MTP depths are tried as colocated instances in
two schedules (planner.costmodel.colocated). Whole forwards: every concurrency B, every prefill
batch R and the engine's prefill micro-batch counts; the rate, the prefill time fraction, the
stretched TPOT and the TTFT follow the cost model, HBM adds the prefill batch's KV cache and
activations to the decode instance's. Chunked prefill: every concurrency B against the chunk
sizes of `CHUNK_TOKENS_PER_DEVICE` (times the instance's devices), the chunk's time t_c from the
float cost model of the combination's prefill forward; only with engines whose chunked prefill
moeplan writes (an engine profile's `chunked_prefill`: MindIE's SplitFuse is not written), and at MTP 0
with an engine whose mixed steps drop the draft tokens (`chunked_mtp`: SGLang). Whole forwards only with
engines that run prefill forwards apart from decode steps (`whole_prefill_forwards`: not vLLM, whose
every step mixes them). Each
combination keeps its best whole-forward and its best chunked instance; `max_itl_us` (the longest
gap between two tokens, --max-itl-ms) prunes both, and combinations the engine cannot run are never tried.

The combinations are evaluated best-bound first, in rounds (branch and bound), with a bound that
holds for both schedules (`colocated_upper_bounds`):

- whole forwards serve at most 1 / min over B of (out * step_B / (n B e) + p_B) requests/s, where
  R_B is the largest batch whose KV cache alone fits next to the decode instance's HBM at
  concurrency B, cut to the batches whose forward, after the step in flight at B, fits the TTFT
  (step + (k + 1/2) forwards) and the longest gap (step + k forwards) at the least forward over the
  micro-batch counts (`_batches_within_us`), and p_B a floor on the prefill seconds per request: a forward holds
  min(R, H_B) requests, H_B the prompts a full instance admits between forwards
  (planner.costmodel.colocated), so p_B is the least forward_R / R over the batches below H_B up
  to R_B whose 1.5 forwards meet the TTFT SLO and whose forward fits in the ITL limit (on a layout where
  a prompt takes several forwards on its attention DP rank at some batch, every batch up to R_B without
  those limits: a forward there holds R_h = min(R, H_B / k) requests' worth and reads the forwards of
  smaller batches, planner.costmodel.colocated), or, if a
  batch of at least H_B fits, F(H_B) / H_B read linearly between the shortest forwards (over the
  micro-batch counts) of the whole batches on either side of H_B -- and the TPOT stretched by
  that prefill share of time meets its SLO (the real instance also holds activations and waits
  a step, so the bound is never below the real rate);
- chunked prefill serves 1 / lambda = out * t / (N_d e) seconds per request, at least
  out * t_floor / (N e) (planner.costmodel.colocated: N_d <= N the seats that decode, the mean step
  t = step + busy (t_c - s_e) + phi s_e with busy = 1 - (1 - phi)^D over the layout's D DP ranks,
  phi = in N_d e / (out C), at least phi at the fewest seats the TTFT SLO lets decode;
  `_chunked_seconds_floor`), where t_c / C = max(F(2X) - F(X), 0) / X and s_e its experts' part.
  With one micro-batch a forward F is the sum of its modules' compute and communication plus
  launch costs that cancel in the difference, so t_c of every combination and chunk size comes
  exactly from one set of float tables per size (`_chunk_module_differences`, the same model
  `_chunk_figures` evaluates; the bound takes it a hair lower for float sums in another order, the
  evaluation rounds it up to whole microseconds). For each chunk size C, the bound is 1 / min over
  the B where phi < 1 (every seat decoding), the floor of the mean step stays within e * TPOT, the
  TTFT (step + t_c) (1 + ceil(in D / C) + phi / (2 (1 - phi))) within its SLO, the longest gap
  step + t_c within the ITL limit and the decode HBM plus one prompt's KV cache within capacity
  (the evaluation's own conditions at floors, with the activations and the rest of the prompts'
  KV left out, so a looser set of B) of those seconds per request: never below the exact chunked
  rate of the combination.

The bound of a combination is the larger of the two. Rounds stop once no combination left can
beat the `keep`-th best instance found, so the result is the exact best of the declared space,
not a heuristic cut; the bound depends only on the instance size, never on the card budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.candidates.phase_candidates import (
    EMITTED_SCALE,
    PhaseCandidate,
    TpotLimitUs,
    _combine,
    _option_lists,
    decode_ratio,
    engine_mask,
    engine_runs_forwards,
    prefill_forward_us,
    tpot_limit_at,
)
from planner.candidates.table_store import derived
from planner.candidates.tables import MODULES, IntTables, PhaseTables, prefill_tables
from planner.costmodel.colocated import (
    admitted_per_step,
    chunk_time_s,
    chunked_prefill_tokens,
    chunked_rate_and_latency,
    chunked_reference_tokens,
    colocated_rate_and_latency,
    decoding_seats,
    forward_below_axis,
    held_requests,
)
from planner.costmodel.context import CostContext
from planner.costmodel.memory import prefill_hbm
from planner.specs.plan import PrefillPlan, integral_as_int

MIB = 1024.0 * 1024.0
# chunked prefill: prompt tokens per step of the instance, per device of it (vLLM's default
# per-engine budget, SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS, is 2048 tokens in v0.11)
CHUNK_TOKENS_PER_DEVICE = (32, 64, 128, 256, 512, 1024, 2048)
# the colocated bounds' working arrays (one value per combination and concurrency) are built over this many
# elements at most at a time, a slice of the MoE layouts each: 16 MiB an array of 8-byte values
BOUND_SLICE_ELEMENTS = 1 << 21


@dataclass(frozen=True)
class ColocatedCandidate:
    """A colocated instance: its decode half (layouts, k, B) and its prefill batch."""

    decode: PhaseCandidate
    batch_requests: int
    micro_batches: int
    rate_milli: int  # requests per second per instance, in thousandths
    tpot_us: int
    ttft_us: int
    hbm_mib: int
    itl_max_us: int = 0  # the longest gap between two tokens of a decoding sequence
    chunk_tokens: int | None = None  # chunked prefill's prompt tokens per step (None: whole forwards)

    @property
    def devices(self) -> int:
        return self.decode.devices


def _prefill_phase(dt: PhaseTables, idx: tuple[int, ...], batch_tokens: int, mb: int) -> PrefillPlan:
    """The prefill section of a colocated instance with the decode layouts `idx`."""
    opts = dt.options
    layouts: dict = {"attention": opts.attention[idx[0]], "lm_head": opts.lm_head[idx[3]]}
    if opts.dense_ffn:
        layouts["dense_ffn"] = opts.dense_ffn[idx[1]]
    if opts.moe:
        layouts.update(moe=opts.moe[idx[2]].moe, shared_expert=opts.moe[idx[2]].shared)
    return PrefillPlan(devices=dt.devices, batch_tokens=batch_tokens, micro_batches=mb, **layouts)


def _forward_total_us(ctx: CostContext, comp: np.ndarray, comm: np.ndarray, fixed, mb: int) -> np.ndarray:
    """A prefill forward (us, as floats) from its compute, communication and launch parts
    (planner.candidates.phase_candidates.prefill_forward_us)."""
    efficiency = ctx.hw.overlap.prefill_micro_batch_efficiency.value
    return np.asarray(prefill_forward_us(comp, comm, fixed, mb, ctx.model.num_layers, efficiency)).astype(float)


def _forward_us(ctx: CostContext, pi: IntTables, idx: tuple[int, ...], mb: int) -> np.ndarray:
    """Prefill forward (us) of the layouts `idx` over the requests-per-forward axis."""
    comp = sum(pi.time_us[mod][i, 0, :] for mod, i in zip(MODULES, idx, strict=True))
    comm = sum(pi.comm_us[mod][i, 0, :] for mod, i in zip(MODULES, idx, strict=True))
    fixed = sum(int(pi.fixed_us[mod][i, 0, 0]) for mod, i in zip(MODULES, idx, strict=True))
    return _forward_total_us(ctx, comp, comm, fixed, mb)  # type: ignore[arg-type]


def _spanning_layouts(pi: IntTables, n_att: int) -> np.ndarray:
    """[A]: whether a prompt takes more than one forward on its rank at some batch of the axis, per
    attention layout of the decode options (the first `n_att` of the prefill list)."""
    return np.asarray((_prompt_forwards(pi, slice(0, n_att)) > 1).any(axis=-1))


def _spans(dt: PhaseTables, pi: IntTables) -> np.ndarray:
    """[A]: `_spanning_layouts` where the engine lets a prompt take several forwards on its rank (else none:
    it runs only the batches whose shares hold a prompt, `_first_whole_batch`)."""
    n_att = len(dt.options.attention)
    spanning = _spanning_layouts(pi, n_att)
    return spanning if dt.options.prompt_over_forwards else np.zeros_like(spanning)


def _first_whole_batch(dt: PhaseTables, pi: IntTables) -> np.ndarray:
    """[A]: per attention layout, the index of the first batch at which every rank's share holds a prompt
    (k = 1; the batch axis's size when none does), 0 where the engine lets a prompt take several forwards:
    with an engine that prefills a prompt whole on its rank, a batch below it does not run."""
    own = _prompt_forwards(pi, slice(0, len(dt.options.attention)))
    runs = np.broadcast_to(engine_runs_forwards(dt, own), own.shape)
    return np.where(runs.any(axis=-1), runs.argmax(axis=-1), own.shape[-1])


def _prompt_forwards(pi: IntTables, attention: int | slice) -> np.ndarray:
    """The forwards (k) a prompt takes on its attention DP rank, back to back, at each batch of the
    requests-per-forward axis, for the attention option(s) `attention` (planner.costmodel.colocated; the
    prefill tables' `forwards`)."""
    return np.asarray(pi.forwards["attention"][attention], dtype=float)


def _prefill_extra_mib(ctx: CostContext, dt: PhaseTables, pt: PhaseTables, idx: tuple[int, ...], mb: int) -> np.ndarray:
    """MiB of KV cache and activations of the prefill batch (memoised with the prefill tables)."""
    key = ("colocated_extra", idx, mb)
    if key not in pt.memo:
        rs = pt.x_values.astype(np.int64)
        use = prefill_hbm(
            ctx,
            _prefill_phase(dt, idx, ctx.prefill_tokens_per_request, mb),
            rs * ctx.prefill_tokens_per_request,
        )
        pt.memo[key] = np.ceil((use.breakdown_bytes["kv_cache"] + use.breakdown_bytes["activations"]) / MIB)
    return pt.memo[key]


def _chunk_module_differences(
    ctx: CostContext, dt: PhaseTables, pt: PhaseTables
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X per chunk size, F(2X) - F(X) in s [A, F, M, L, C] for every combination of the size, and the MoE
    module's compute part of it per MoE option [M, C]: the routed experts' share, which the DP ranks'
    chunks share, planner.costmodel.colocated). With one micro-batch a forward F is the sum over modules
    of compute and communication plus launch costs that cancel in the difference, so F(2X) - F(X) of a
    combination is the sum of its modules' differences, from one set of float tables (as
    planner.costmodel.prefill sums them). Memoised with the prefill tables (and kept on disk with them:
    planner.candidates.table_store)."""

    def compute() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = ctx.workload
        chunks = np.array([g * dt.devices for g in CHUNK_TOKENS_PER_DEVICE], dtype=float)
        x = chunked_reference_tokens(chunks, w.input_tokens)
        t = prefill_tables(ctx, dt.options, [1], np.concatenate([x, 2.0 * x]) / ctx.prefill_tokens_per_request)
        g = [t.time_s[mod][:, 0, :] + t.comm_s[mod][:, 0, :] for mod in MODULES]
        experts = t.time_s["moe"][:, 0, :]
        return x, _combine([a[:, x.size :] - a[:, : x.size] for a in g]), experts[:, x.size :] - experts[:, : x.size]

    return derived(pt, ("chunk_module_differences", dt.devices), compute)  # type: ignore[no-any-return]


def _chunk_figures(
    ctx: CostContext, dt: PhaseTables, pt: PhaseTables, idx: tuple[int, ...], chunks: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t_c in us, its routed experts' part in s, HBM MiB of the prompts in prefill) per chunk size, for
    the layouts `idx`."""
    w = ctx.workload
    x, diff, experts = _chunk_module_differences(ctx, dt, pt)
    t_c = chunk_time_s(0.0, diff[idx], chunks, x) * 1e6
    shared_s = chunk_time_s(0.0, experts[idx[2]], chunks, x)
    key = ("chunk_extra_mib", dt.devices, idx)
    if key not in pt.memo:
        phase = _prefill_phase(dt, idx, w.input_tokens, 1)
        tokens = chunked_prefill_tokens(chunks, w.input_tokens, phase.attention.dp)
        use = prefill_hbm(ctx, phase, tokens, carried_prompt=False)
        extra = use.breakdown_bytes["kv_cache"][: chunks.size] + use.breakdown_bytes["activations"][chunks.size :]
        pt.memo[key] = np.ceil(extra / MIB)
    return np.ceil(t_c), shared_s, pt.memo[key]


def _chunked_best(
    ctx: CostContext,
    dt: PhaseTables,
    pt: PhaseTables,
    idx: tuple[int, ...],
    step_b: np.ndarray,
    hbm_b: np.ndarray,
    emitted: float,
    xs: np.ndarray,
    capacity_mib: int,
    tpot_slo_us: int | None,
    ttft_slo_us: int | None,
    max_itl_us: int | None,
) -> tuple[float, tuple] | None:
    """The best chunked instance of one combination: (requests/s, its figures), or None."""
    w = ctx.workload
    chunks = np.array([g * dt.devices for g in CHUNK_TOKENS_PER_DEVICE], dtype=float)
    t_c, shared_s, extra = _chunk_figures(ctx, dt, pt, idx, chunks)
    rate, _, tpot, ttft, _, _, longest = chunked_rate_and_latency(
        step_b[:, None] / 1e6,
        emitted,
        dt.devices,
        xs[:, None].astype(float),
        t_c[None, :] / 1e6,
        chunks[None, :],
        w.input_tokens,
        w.output_tokens,
        dt.options.attention[idx[0]].dp,
        shared_s[None, :],
    )
    hbm = hbm_b[:, None] + extra[None, :]
    ok = (rate > 0) & (hbm <= capacity_mib)
    if tpot_slo_us is not None:
        ok &= tpot * 1e6 <= tpot_slo_us
    if ttft_slo_us is not None:
        ok &= ttft * 1e6 <= ttft_slo_us
    if max_itl_us is not None:
        ok &= longest * 1e6 <= max_itl_us
    score = np.where(ok, rate, -1.0)
    b_i, c_i = np.unravel_index(int(score.argmax()), score.shape)
    if score[b_i, c_i] <= 0:
        return None
    figures = (
        int(b_i),
        int(chunks[c_i]),
        float(tpot[b_i, c_i]),
        float(ttft[b_i, c_i]),
        int(hbm[b_i, c_i]),
        float(longest[b_i, c_i]),
    )
    return float(score[b_i, c_i]), figures


def _prefill_forwards_us(ctx: CostContext, dt: PhaseTables, pt: PhaseTables, pi: IntTables, n_att: int):
    """(micro-batches, forward us [A, F, M, L, R]) over the decode layouts' prefill options, as
    `_forward_us` computes them for one combination; infinite at several micro-batches with the expert
    layouts the engine runs only one with (`SizeOptions.moe_micro_ok`, as `_evaluate` skips them)."""
    micro_ok = dt.options.moe_micro_ok
    for mb in pt.k_values:
        comp = [pi.time_us[mod][:, 0, :] for mod in MODULES]
        comm = [pi.comm_us[mod][:, 0, :] for mod in MODULES]
        fixed = [pi.fixed_us[mod][:, 0, :1] for mod in MODULES]
        for arrays in (comp, comm, fixed):
            arrays[0] = arrays[0][:n_att]  # decode's attention options lead the prefill list
        forward = _forward_total_us(ctx, _combine(comp), _combine(comm), _combine(fixed), mb)
        if mb > 1 and micro_ok is not None and not micro_ok.all():
            forward = np.where(micro_ok[None, None, :, None, None], forward, np.inf)
        yield mb, forward


def _kv_one_prompt_mib(ctx: CostContext, dt: PhaseTables, pt: PhaseTables) -> np.ndarray:
    """MiB of KV cache one prompt leaves on a device spread over the DP ranks, per decode attention layout: the
    slope of the prefill batch's KV in its prompts, below what any batch holds (a rank holds one whole
    prompt at least), as the bounds need (memoised with the prefill tables, and kept on disk with them)."""

    def compute() -> np.ndarray:
        return np.array(
            [
                float(
                    prefill_hbm(
                        ctx, _prefill_phase(dt, (a, 0, 0, 0), ctx.workload.input_tokens, 1), carried_prompt=False
                    ).breakdown_bytes["kv_cache"][0]
                )
                / MIB
                for a in range(len(dt.options.attention))
            ]
        )

    return derived(pt, ("kv_one_prompt_mib", dt.devices), compute)


def _prefill_seconds_per_request(
    ctx: CostContext, dt: PhaseTables, pt: PhaseTables, pi: IntTables, ttft_slo_us: int | None, max_itl_us: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prefill seconds per request [A, F, M, L, R] at the best whole forward of at most R requests
    (any micro-batch count) whose 1.5 forwards meet the TTFT SLO and whose forward fits in the ITL limit
    (without those limits on layouts where a prompt takes several forwards at some batch:
    `_admitted_prefill_floor`), the shortest forward in us of R requests [A, F, M, L, R] over the
    micro-batch counts, without limits, and per batch the largest batch up to it whose forward meets its own
    TTFT and longest gap with its k (k + 1/2 forwards, k forwards) at some micro-batch count, -1 if none),
    memoised with the prefill tables."""
    key = ("prefill_s_upto", dt.devices, ttft_slo_us, max_itl_us)
    if key in pt.memo:
        return pt.memo[key]
    n_att = len(dt.options.attention)
    rs = pt.x_values.astype(float)
    shape = (n_att, *[len(o) or 1 for o in _option_lists(dt)[1:]], rs.size)
    prefill_s, shortest = np.full(shape, np.inf), np.full(shape, np.inf)
    # layouts on which a prompt takes several forwards at some batch [A, 1, 1, 1, 1]: there a batch's
    # prefill seconds per request read the forwards of smaller batches, whose own limits do not apply
    spans = _spans(dt, pi).reshape((n_att,) + (1,) * (len(shape) - 1))
    own = _prompt_forwards(pi, slice(0, n_att)).reshape((n_att,) + (1,) * (len(shape) - 2) + (rs.size,))
    # an engine that prefills a prompt whole on its rank runs only the batches whose shares hold one
    runnable = np.broadcast_to(engine_runs_forwards(dt, own), own.shape)
    runs = np.zeros(shape, dtype=bool)  # a batch meets its own limits at some micro-batch count
    for _, forward in _prefill_forwards_us(ctx, dt, pt, pi, n_att):
        ok = np.broadcast_to(runnable, forward.shape).copy()
        own_ok = ok.copy()
        if ttft_slo_us is not None:
            ok &= spans | (1.5 * forward <= ttft_slo_us)  # TTFT is at least 1.5 forwards
            own_ok &= (own + 0.5) * forward <= ttft_slo_us  # and at least its k + 1/2
        if max_itl_us is not None:
            ok &= spans | (forward <= max_itl_us)  # the longest gap holds a whole forward (and a step)
            own_ok &= own * forward <= max_itl_us  # and a prompt's k
        prefill_s = np.minimum(prefill_s, np.where(ok, forward * 1e-6 / rs, np.inf))
        shortest = np.minimum(shortest, forward)
        runs |= own_ok
    # per batch, the largest batch up to it that meets its own limits (-1: none)
    last_runs = np.maximum.accumulate(np.where(runs, np.arange(rs.size), -1), axis=-1)
    pt.memo[key] = (np.minimum.accumulate(prefill_s, axis=-1), shortest, last_runs)
    return pt.memo[key]


def _chunked_meets(
    step: np.ndarray,
    t_c_us: np.ndarray | float,
    phi: np.ndarray,
    e: int,
    in_tokens: int,
    chunk: float,
    tpot_slo_us: int | None,
    ttft_slo_us: int | None,
    max_itl_us: int | None,
    out_tokens: int = 0,
    dp: np.ndarray | int = 1,
) -> np.ndarray:
    """Where a chunked-prefill instance might meet its limits with chunks of `chunk` prompt tokens taking
    `t_c_us` (the module docstring): phi < 1 (every seat decoding), the mean step (TPOT), the TTFT
    (the step in flight, the queue and the prompt's own chunks over `dp` ranks, the fewest the
    combinations have) and the longest gap (a
    step with a chunk). Each is a floor of the evaluation's: the mean step takes the chunks at the
    fewest seats that may decode, those left when a request holds its seat for the longest prefill the
    TTFT SLO allows (none without one), and every condition grows with the step and t_c, so the bounds
    may pass floors of both."""
    ok = phi < 1.0
    if tpot_slo_us is not None:
        decode_steps = out_tokens * EMITTED_SCALE / max(e, 1)
        held = np.inf if ttft_slo_us is None else ttft_slo_us / np.maximum(step, 1)
        least_phi = phi * decoding_seats(1.0, decode_steps, held) if out_tokens else 0.0
        ok = ok & (step + least_phi * t_c_us <= tpot_slo_us * (e / EMITTED_SCALE) * (1 + 1e-9))
    if ttft_slo_us is not None:
        queue = np.where(phi < 1.0, phi / (2.0 * np.maximum(1.0 - phi, 1e-12)), np.inf)
        own = np.ceil(in_tokens * np.asarray(dp, dtype=float) / chunk - 1e-9)
        ok = ok & ((step + t_c_us) * (1.0 + own + queue) <= ttft_slo_us * (1 + 1e-9))
    if max_itl_us is not None:
        ok = ok & (step + t_c_us <= max_itl_us * (1 + 1e-9))
    return ok


def _chunked_seconds_floor(
    step: np.ndarray,
    least_step: np.ndarray,
    phi: np.ndarray,
    e: int,
    out_tokens: int,
    rank_s: np.ndarray | float,
    experts_s: np.ndarray | float,
    dp: np.ndarray | int,
    ttft_slo_us: int | None,
    sequences: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per request, mean step us) floors of chunked prefill (planner.costmodel.colocated) from
    floors of a chunk's rank part `rank_s` and experts' part `experts_s` (s), the DP ranks `dp`, phi at
    every seat decoding and `sequences` seats, per concurrency (the last axis): the seats that decode
    are at least those left when a request holds its seat for the longest prefill the TTFT SLO allows
    (ttft / `least_step` steps, the step's floor over the layouts; every seat without an SLO), which
    floors phi, and the steps waiting for a chunk are at least 1 - (1 - phi)^dp at that floor; the rate
    is at most every seat's at the floor of the mean step."""
    decode_steps = out_tokens * EMITTED_SCALE / max(e, 1)
    held = np.inf if ttft_slo_us is None else ttft_slo_us / np.maximum(least_step, 1)
    least_phi = np.minimum(phi, 1.0 - 1e-15) * decoding_seats(1.0, decode_steps, held)
    busy = -np.expm1(np.asarray(dp, dtype=float) * np.log1p(-least_phi))
    mean_us = step + 1e6 * (busy * rank_s + least_phi * experts_s)
    return out_tokens * 1e-3 * mean_us / (sequences * e), mean_us


def _least_forward_per_attention_us(ctx: CostContext, dt: PhaseTables, pt: PhaseTables, pi: IntTables) -> np.ndarray:
    """[A, R]: the shortest whole prefill forward (us) per decode attention layout, over the other modules'
    layouts and the micro-batch counts, per batch R (memoised with the prefill tables, and kept on disk with
    them: no SLO in it)."""

    def compute() -> np.ndarray:
        n_att = len(dt.options.attention)
        rows = [
            forward.reshape(n_att, -1, forward.shape[-1]).min(axis=1)
            for _, forward in _prefill_forwards_us(ctx, dt, pt, pi, n_att)
        ]
        return np.min(np.stack(rows), axis=0)

    return derived(pt, ("least_forward_per_attention_us", dt.devices), compute)


def _held(ctx: CostContext, n: int, xs: np.ndarray, emitted: float, rs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per concurrency B: (H_B, the prompts a forward holds when a full instance of n devices at B
    emits `emitted` tokens a step per sequence, never fewer than the batch axis's first, R_0
    (planner.costmodel.colocated.held_requests with no batch limit), and the index of the first
    batch of at least H_B requests: rs.size when no batch of the axis reaches H_B)."""
    admitted = admitted_per_step(n, xs, emitted, ctx.workload.output_tokens)
    held = held_requests(np.inf, admitted, int(rs[0]))
    return held, np.searchsorted(rs, held - 1e-9, side="left")


def _read_forward(rs: np.ndarray, forward_r: np.ndarray, held: np.ndarray) -> np.ndarray:
    """F at `held` requests' worth of prompt tokens from the forwards `forward_r` of the whole batches `rs`,
    as the evaluation reads it (planner.costmodel.colocated.forward_held_s): linearly between the batches on
    either side, below the axis's first batch by `forward_below_axis` (an axis of one batch, where the
    evaluation would read the next batch's forward, gives its floor, F(R_0) R_h / R_0)."""
    x = np.asarray(held, dtype=float)
    inside = np.interp(x, rs.astype(float), forward_r)
    if rs.size < 2:
        return np.where(x < rs[0], forward_r[0] * x / float(rs[0]), inside)
    below = forward_below_axis(x, rs[0], rs[1], forward_r[0], forward_r[1])
    return np.where(x < rs[0] - 1e-9, below, inside)


def _held_floor_s(shortest_us: np.ndarray, rs: np.ndarray, held: np.ndarray, first: np.ndarray) -> np.ndarray:
    """[..., B]: a floor on F(H_B) / H_B in seconds, F read linearly between the whole batches on
    either side of H_B as the evaluation reads it, from `shortest_us` [..., R], the shortest
    forward of each batch over the micro-batch counts (the reading of the shortest forwards is at
    most the reading of any one count's). Where no batch reaches H_B the value is unused
    (`_admitted_prefill_floor` takes it only where a batch of at least H_B fits)."""
    k = np.clip(first, 0, rs.size - 1)
    lo = np.maximum(k - 1, 0)
    frac = np.where(k > lo, (held - rs[lo]) / np.maximum(rs[k] - rs[lo], 1e-12), 0.0)
    f_lo, f_k = shortest_us[..., lo], shortest_us[..., k]
    return (f_lo + frac * (f_k - f_lo)) * 1e-6 / held * (1.0 - 1e-12)


_US_ROW = 1 << 40  # microseconds: above any forward or limit the bounds compare (12 days)


def _step_limit_floors_us(
    pi: IntTables, shortest_us: np.ndarray, n_att: int, ttft_slo_us: int | None, max_itl_us: int | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """What a whole forward leaves of the TTFT and ITL limits for the step in flight, as floors over
    the batches from each one up: (floors [limits, ..., R], limits [limits, 1, ..., 1]) or None without
    either limit.
    A batch R runs at concurrency B only if step_B + (k + 1/2) F(R) <= TTFT and step_B + k F(R) <= ITL
    (`_whole_forward_best`, k the forwards a prompt takes on its rank), F(R) at least the shortest forward
    over the micro-batch counts; each figure is floored by its least over the batches from R up (then
    non-decreasing in R) and rounded down to whole microseconds, one row per limit given, stacked
    [limits, A, F, M, L, R]."""
    if ttft_slo_us is None and max_itl_us is None:
        return None
    own = _prompt_forwards(pi, slice(0, n_att)).reshape((n_att,) + (1,) * (shortest_us.ndim - 2) + (-1,))
    rows, limits = [], []
    for limit, per_forward in ((ttft_slo_us, own + 0.5), (max_itl_us, own)):
        if limit is None:
            continue
        need = np.minimum(per_forward * shortest_us, float(_US_ROW - 1))
        rows.append(np.floor(np.minimum.accumulate(need[..., ::-1], axis=-1)[..., ::-1]).astype(np.int64))
        limits.append(int(limit))
    shape = (len(limits),) + (1,) * shortest_us.ndim
    return np.stack(rows), np.array(limits, dtype=np.int64).reshape(shape)


def _batches_within_us(floors: np.ndarray, limits: np.ndarray, step_us: np.ndarray) -> np.ndarray:
    """[..., B]: the index of the largest batch whose floors (`_step_limit_floors_us`, [limits, ..., R],
    non-decreasing in R) fit within every limit less the step at each concurrency (`step_us` [..., B]),
    -1 where none does: every batch that runs at B is at or below it. One sorted search over all rows:
    row i's floors are offset by i * 2**40 us, above every floor and limit of the rows before it."""
    r = floors.shape[-1]
    rows = int(np.prod(floors.shape[:-1]))
    steps = np.broadcast_to(step_us, floors.shape[:-1] + step_us.shape[-1:])
    left = np.clip(np.floor(limits - steps), -1, _US_ROW - 2).astype(np.int64)  # the floors are whole us
    offsets = np.arange(rows, dtype=np.int64).reshape(floors.shape[:-1] + (1,)) * _US_ROW
    counts = np.searchsorted((floors + offsets).reshape(-1), (left + offsets).reshape(-1), side="right")
    within = counts.reshape(left.shape) - offsets // _US_ROW * r - 1
    return within.min(axis=0)


def _admitted_prefill_floor(
    prefill_s: np.ndarray,
    held_floor_s: np.ndarray,
    r_idx: np.ndarray,
    first_held: np.ndarray,
    spans: np.ndarray | bool = False,
    last_runs: np.ndarray | None = None,
) -> np.ndarray:
    """A floor on the prefill seconds per request of a whole-forward instance at each concurrency
    B, over [..., B]: `prefill_s` [..., R] is the least F(R) / R up to R among the forwards that
    meet the TTFT and ITL limits, `held_floor_s` [..., B] a floor on F(H_B) / H_B (`_held_floor_s`),
    `r_idx` [..., B] the largest batch that fits, `first_held` [B] the first batch of at least H_B
    requests. A batch below H_B costs its own F(R) / R (the limits apply to it); every batch from
    H_B on costs F(H_B) / H_B (the forward of R, not of H_B, meets the limits, so that floor takes
    none), if one fits and meets its own limits (`last_runs`). Where a prompt may take several forwards on
    its rank (`spans` [..., 1], and
    then `prefill_s` is taken without limits), a forward holds R_h = min(R, H_B / k) requests' worth,
    read linearly between whole batches up to R or, below the first, at no fewer seconds per request
    than it (planner.costmodel.colocated.forward_below_axis): at least the least F(R') / R' over the
    batches up to the largest that fits and meets its own limits (`last_runs` [..., R], from
    `_prefill_seconds_per_request`; without it, up to the largest that fits)."""
    size = prefill_s.shape[-1]

    def at(table: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.take_along_axis(
            table,
            np.broadcast_to(np.clip(index, 0, size - 1), np.broadcast_shapes(index.shape, r_idx.shape)).astype(
                np.int64
            ),
            axis=-1,
        )

    # the largest batch that fits and meets its own limits (-1: none)
    top = (
        r_idx if last_runs is None else np.where(r_idx >= 0, at(np.broadcast_to(last_runs, prefill_s.shape), r_idx), -1)
    )
    below = np.minimum(r_idx, first_held - 1)  # the largest fitting batch of fewer than H_B requests
    at_below = np.where(below >= 0, at(prefill_s, below), np.inf)
    # a batch of at least H_B requests that fits and meets its own limits holds H_B
    at_held = np.where((first_held <= top) & (top >= 0), held_floor_s, np.inf)
    whole = np.minimum(at_below, at_held)
    if not np.any(spans):
        return whole
    # where prompts span forwards: the least F(R') / R' up to the largest batch that fits and meets its limits
    spanning = np.where(top >= 0, at(prefill_s, top), np.inf)
    return np.where(spans, spanning, whole)


def colocated_size_bound(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: TpotLimitUs,
    ttft_slo_us: int | None,
    max_itl_us: int | None = None,
    mtp: bool | None = None,
) -> float:
    """An upper bound on the requests/s of any colocated instance of this size, at least the
    largest `colocated_upper_bounds` entry, for a few hundredths of its cost: the same
    conditions per attention layout A and concurrency B, with the figures of A's combinations replaced
    by their least over the other modules' layouts. Per (A, B), the decode step and HBM are at least
    A's own plus the sum over the other modules of each one's least; a whole-forward batch's prefill
    seconds per request at least the least over A's combinations and the micro-batch counts at the
    largest batch whose KV fits next to that HBM and whose shortest forward, after that step, fits the TTFT and
    ITL limits (A's KV per prompt, its spanning and its prompts' forwards k); a chunk's time at least the least
    over A's combinations, its part but the experts'
    likewise, and the experts' part the least over the expert layouts, with A's DP ranks
    (`_chunked_seconds_floor`). Every condition (HBM, TPOT stretched by the prefill share, TTFT, ITL)
    grows with the step, t_c and the prefill time, so what fails with these floors fails for every
    combination of A: the bound of the size is the largest over A of 1 / min over B of (decode floor +
    prefill floor), the larger over the MTP depths (`mtp` True or False: only depths with or without
    MTP). (Taking the least over every layout, attention included, was 15-25% above the combinations'
    bound and pruned almost no size.) Memoised with the prefill tables."""
    key = ("colocated_size_bound", dt.devices, tpot_slo_us, ttft_slo_us, max_itl_us)
    if key not in pt.memo:  # per MTP depth, whatever `mtp` selects
        # the floors take no TPOT SLO: a sweep of it costs them once per size (`_SizeFloors`)
        floors_key = ("colocated_size_floors", dt.devices, ttft_slo_us, max_itl_us)
        if floors_key not in pt.memo:
            pt.memo[floors_key] = _size_floors_per_depth(ctx, dt, di, pt, pi, ttft_slo_us, max_itl_us)
        pt.memo[key] = _size_bound_per_depth(pt.memo[floors_key], tpot_slo_us)
    return max(
        (b for b, k in zip(pt.memo[key], dt.k_values, strict=True) if mtp is None or (k > 0) == mtp), default=0.0
    )


def _size_floors_per_depth(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    ttft_slo_us: int | None,
    max_itl_us: int | None,
) -> list[_SizeFloors | None]:
    """`colocated_size_bound`'s floors at each MTP depth of the decode tables, but for the TPOT SLO's
    conditions (`_size_bound_per_depth` applies them): None where nothing fits HBM and the ITL limit."""
    n = dt.devices
    xs = dt.x_values.astype(float)
    rs = pt.x_values.astype(float)
    w = ctx.workload
    cap = di.hbm_capacity_mib
    # prefill seconds per request at the best batch of at most R requests, least over the
    # combinations: at a given R the least seconds per request is the shortest forward, and if
    # that one misses the TTFT or ITL limit every forward does
    n_att = len(dt.options.attention)
    forward_a = _least_forward_per_attention_us(ctx, dt, pt, pi)  # [A, R]
    limit = min(math.inf if ttft_slo_us is None else ttft_slo_us / 1.5, math.inf if max_itl_us is None else max_itl_us)
    # where a prompt may take several forwards on its rank, a batch reads smaller batches' forwards, whose own
    # limits do not apply (`_admitted_prefill_floor`)
    spans = _spans(dt, pi)[:, None]  # [A, 1]
    first_whole = _first_whole_batch(dt, pi)[:, None]  # [A, 1]: batches below it do not run
    runnable = np.arange(rs.size) >= first_whole  # [A, R]
    prefill_least = np.minimum.accumulate(
        np.where(runnable & (spans | (forward_a <= limit)), forward_a * 1e-6 / rs, np.inf), axis=-1
    )  # [A, R]
    # a batch a plan holds meets its own limits with its layout's k
    own = _prompt_forwards(pi, slice(0, n_att))  # [A, R]
    runs = runnable.copy()
    if ttft_slo_us is not None:
        runs &= (own + 0.5) * forward_a <= ttft_slo_us
    if max_itl_us is not None:
        runs &= own * forward_a <= max_itl_us
    last_runs = np.maximum.accumulate(np.where(runs, np.arange(rs.size), -1), axis=-1)  # [A, R]
    step_limits = (
        _step_limit_floors_us(pi, forward_a, n_att, ttft_slo_us, max_itl_us)
        if dt.options.whole_prefill_forwards
        else None
    )
    kv_one = _kv_one_prompt_mib(ctx, dt, pt)[:, None]  # [A, 1]
    chunks = np.array([g * n for g in CHUNK_TOKENS_PER_DEVICE], dtype=float)
    x_tokens, diff, experts = _chunk_module_differences(ctx, dt, pt)
    # a chunk's seconds per prompt token, least per attention layout [C][A, 1], and of its part but the
    # experts' (per combination, then least per layout), and the experts' part, least
    slope_least = [
        (np.maximum(diff[..., c], 0.0) / x_tokens[c] * (1.0 - 1e-9)).min(axis=(1, 2, 3))[:, None]
        for c in range(chunks.size)
    ]
    experts_s = np.maximum(experts, 0.0) / x_tokens * chunks  # [M, C] seconds
    rank_least = [
        np.maximum(
            np.maximum(diff[..., c], 0.0) / x_tokens[c] * chunks[c] * (1.0 - 1e-9)
            - experts_s[None, None, :, None, c] * (1.0 + 1e-9),
            0.0,
        ).min(axis=(1, 2, 3))[:, None]
        for c in range(chunks.size)
    ]
    experts_lo = experts_s.min(axis=0) * (1.0 - 1e-9)
    dps = np.array([a.dp for a in dt.options.attention], dtype=float)[:, None]
    others = [mod for mod in MODULES if mod != "attention"]
    floors: list[_SizeFloors | None] = []
    for j, k in enumerate(dt.k_values):
        e = int(np.floor(dt.emitted[j] * EMITTED_SCALE + 1e-9))
        # per attention layout [A, B]: its own figures plus the other modules' least over their layouts
        step = np.asarray(
            di.time_us["attention"][:, j, :]
            + sum(di.time_us[mod][:, j, :].min(axis=0) for mod in others)
            + di.const_us[j],
            dtype=float,
        )
        hbm = np.asarray(
            di.hbm_mib["attention"][:, j, :] + sum(di.hbm_mib[mod][:, j, :].min(axis=0) for mod in others), dtype=float
        )
        ok = hbm <= cap
        if max_itl_us is not None:
            ok &= step <= max_itl_us
        if not ok.any():
            floors.append(None)
            continue
        decode_s = w.output_tokens * 1e-3 * step / (n * xs * e)
        # whole forwards: the largest batch whose KV alone fits next to the least decode HBM
        r_idx = np.searchsorted(rs, np.floor((cap - hbm) / np.maximum(kv_one, 1e-9)), side="right") - 1
        r_idx = np.where(r_idx >= first_whole, r_idx, -1)  # the largest fitting batch runs, or none does
        if step_limits is not None:  # and its forward, after the least step, meets the TTFT and ITL limits
            r_idx = np.minimum(r_idx, _batches_within_us(step_limits[0], step_limits[1], step))
        held, first = _held(ctx, n, xs, e / EMITTED_SCALE, rs)
        at = _admitted_prefill_floor(
            prefill_least, _held_floor_s(forward_a, rs, held, first), r_idx, first, spans, last_runs
        )
        whole_ok = ok & (r_idx >= 0) & dt.options.whole_prefill_forwards
        # chunked prefill, per chunk size: the module docstring's conditions with t_c at its floor
        sequences_e = n * xs * (e / EMITTED_SCALE)
        chunk_ok = ok & (hbm + kv_one <= cap)
        chunked = []
        for c, chunk in enumerate(chunks if _runs_chunked(dt, k) else ()):
            phi = w.input_tokens * sequences_e / (w.output_tokens * chunk)
            t_c_us = 1e6 * chunk * slope_least[c]
            c_ok = chunk_ok & _chunked_meets(
                step, t_c_us, phi, e, w.input_tokens, chunk, None, ttft_slo_us, max_itl_us, w.output_tokens, dps
            )
            floor_s, mean_us = _chunked_seconds_floor(
                step, step, phi, e, w.output_tokens, rank_least[c], experts_lo[c], dps, ttft_slo_us, n * xs
            )
            chunked.append((np.where(c_ok, floor_s, np.inf), mean_us))
        floors.append(_SizeFloors(e, step, ok, decode_s, at, np.where(whole_ok, decode_s + at, np.inf), chunked))
    return floors


@dataclass(frozen=True)
class _SizeFloors:
    """One MTP depth's floors per attention layout and concurrency [A, B] (`_size_floors_per_depth`),
    before the TPOT SLO: `e` emitted tokens a step in thousandths, the decode `step` (us), where HBM and
    the ITL limit are met (`ok`), the decode and whole-forward prefill seconds per request, the whole-forward
    total where such a batch runs (inf elsewhere), and per chunk size the chunked total where it meets the
    TTFT and ITL limits (inf elsewhere) with its mean step (us)."""

    e: int
    step: np.ndarray
    ok: np.ndarray
    decode_s: np.ndarray
    at: np.ndarray
    whole_total: np.ndarray
    chunked: list[tuple[np.ndarray, np.ndarray]]


def _size_bound_per_depth(floors: list[_SizeFloors | None], tpot_slo_us: TpotLimitUs) -> list[float]:
    """`colocated_size_bound` at each MTP depth (0 where nothing fits): the floors' totals where the
    TPOT SLO's conditions (the step, the whole-forward prefill share, the chunked mean step) hold."""
    best = [0.0] * len(floors)
    for j, f in enumerate(floors):
        if f is None:
            continue
        slo_us = tpot_limit_at(tpot_slo_us, j)
        e = f.e
        if slo_us is None:
            total = f.whole_total
            for floor_s, _ in f.chunked:
                total = np.minimum(total, floor_s)
        else:
            ok = f.ok & (f.step * EMITTED_SCALE <= slo_us * e)
            if not ok.any():
                continue
            whole_ok = ok & (
                f.at <= f.decode_s * (slo_us * e / (np.maximum(f.step, 1) * EMITTED_SCALE) - 1.0) * (1 + 1e-9)
            )
            total = np.where(whole_ok, f.whole_total, np.inf)
            for floor_s, mean_us in f.chunked:
                c_ok = ok & (mean_us * EMITTED_SCALE <= slo_us * e * (1 + 1e-9))
                total = np.minimum(total, np.where(c_ok, floor_s, np.inf))
        least = float(total.min())
        if math.isfinite(least):
            best[j] = 1.0 / least
    return best


@dataclass(frozen=True)
class DecodeAtDepth:
    """One MTP depth's decode figures per layout combination, summed from the integer tables on demand
    (the [A, F, M, L, B] arrays themselves are not kept: with many expert layouts they ran to gigabytes
    per size, memoised for every size and engine): `emitted` tokens per step in thousandths, and for a
    combination (attention, dense FFN, MoE, LM head indices) its step in us and HBM in MiB over B."""

    emitted: int
    j: int
    di: IntTables

    def step_us(self, idx: tuple[int, ...]) -> np.ndarray:
        t = self.di.time_us
        return (
            np.sum([t[mod][i, self.j, :] for mod, i in zip(MODULES, idx, strict=True)], axis=0)
            + self.di.const_us[self.j]
        )

    def hbm_mib(self, idx: tuple[int, ...]) -> np.ndarray:
        h = self.di.hbm_mib
        return np.sum([h[mod][i, self.j, :] for mod, i in zip(MODULES, idx, strict=True)], axis=0)


def _runs_chunked(dt: PhaseTables, mtp_tokens: int) -> bool:
    """Whether the engine runs chunked colocated instances at this MTP depth (its mixed steps are written by
    moeplan, and keep the draft tokens when there are any: planner.engines `chunked_prefill`, `chunked_mtp`)."""
    return dt.options.chunked_prefill and (mtp_tokens == 0 or dt.options.chunked_mtp)


def colocated_upper_bounds(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: TpotLimitUs,
    ttft_slo_us: int | None,
    max_itl_us: int | None = None,
) -> tuple[np.ndarray, list[DecodeAtDepth]]:
    """Per (MTP depth, layout combination) [K, A, F, M, L]: an upper bound on the requests/s of a
    colocated instance, whole-forward or chunked (module docstring; 0 when its decode half alone
    cannot fit or meet the SLOs, or the engine cannot run it), and per depth its decode figures
    (`DecodeAtDepth`). Memoised with the prefill tables (the bound depends on the SLOs, never on the
    budget)."""
    key = ("colocated_bound", dt.devices, tpot_slo_us, ttft_slo_us, max_itl_us)
    if key in pt.memo:
        return pt.memo[key]
    n = dt.devices
    xs = dt.x_values.astype(float)
    rs = pt.x_values.astype(float)
    out_tokens = ctx.workload.output_tokens
    # prefill seconds per request at the best batch of at most R requests [A, F, M, L, R]
    prefill_s, shortest_us, last_runs = _prefill_seconds_per_request(ctx, dt, pt, pi, ttft_slo_us, max_itl_us)
    # layouts on which a prompt takes several forwards at some batch [A, 1, 1, 1, 1] (`_admitted_prefill_floor`)
    spans = _spans(dt, pi)[:, None, None, None, None]
    first_whole = _first_whole_batch(dt, pi)[:, None, None, None, None]  # batches below it do not run
    # MiB of KV cache one prompt leaves on a device, per attention layout: the prefill batch's
    # KV alone (activations come on top) must fit next to the decode instance's HBM
    kv_one = _kv_one_prompt_mib(ctx, dt, pt)
    in_tokens = ctx.workload.input_tokens
    chunks = np.array([g * n for g in CHUNK_TOKENS_PER_DEVICE], dtype=float)
    x_tokens, diff, experts = _chunk_module_differences(ctx, dt, pt)
    # seconds per prompt token of a chunk, per combination and chunk size [C][A, F, M, L, 1]: t_c / C
    # as the evaluation computes it, a hair below (float sums in another order; it rounds t_c up)
    slopes = [(np.maximum(diff[..., c], 0.0) / x_tokens[c] * (1.0 - 1e-9))[..., None] for c in range(chunks.size)]
    # the experts' part of a chunk (s) per expert layout and chunk size, a hair above and below
    experts_s = np.maximum(experts, 0.0) / x_tokens * chunks
    experts_hi = experts_s[None, None, :, None, :, None] * (1.0 + 1e-9)
    experts_lo = experts_s[None, None, :, None, :, None] * (1.0 - 1e-9)
    dps = np.array([a.dp for a in dt.options.attention], dtype=float)[:, None, None, None, None]
    step_limits = (
        _step_limit_floors_us(pi, shortest_us, len(dt.options.attention), ttft_slo_us, max_itl_us)
        if dt.options.whole_prefill_forwards
        else None
    )
    per_k: list[DecodeAtDepth] = []
    totals, chunked_totals = [], []
    n_moe = di.time_us["moe"].shape[0]
    for j in range(len(dt.k_values)):
        slo_us = tpot_limit_at(tpot_slo_us, j)
        e = int(np.floor(dt.emitted[j] * EMITTED_SCALE + 1e-9))
        per_k.append(DecodeAtDepth(e, j, di))
        # concurrencies no layout can reach (HBM or TPOT even with every module at its least) are cut
        least_hbm = sum(di.hbm_mib[mod][:, j, :].min(axis=0) for mod in MODULES)
        least_step = sum(di.time_us[mod][:, j, :].min(axis=0) for mod in MODULES) + di.const_us[j]
        reach = least_hbm <= di.hbm_capacity_mib
        if slo_us is not None:
            reach &= least_step * EMITTED_SCALE <= slo_us * e
        if max_itl_us is not None:
            reach &= least_step <= max_itl_us
        nb = int(np.flatnonzero(reach).max(initial=-1)) + 1
        shape = tuple(di.time_us[mod].shape[0] for mod in MODULES)
        if nb == 0:
            totals.append(np.full(shape, np.inf))
            chunked_totals.append(totals[-1])
            continue
        # every figure below is per combination and concurrency: the MoE layouts are taken a slice at a time,
        # so the arrays held at once stay near BOUND_SLICE_ELEMENTS (the result is the same)
        per_slice = max(1, BOUND_SLICE_ELEMENTS // max(1, shape[0] * shape[1] * shape[3] * nb))
        whole_parts, chunked_parts = [], []
        for m0 in range(0, n_moe, per_slice):
            ms = slice(m0, min(n_moe, m0 + per_slice))

            def cut(a: np.ndarray, axis: int = 2, ms: slice = ms) -> np.ndarray:
                return a if a.shape[axis] == 1 else a[(slice(None),) * axis + (ms,)]

            parts = [di.time_us[mod][:, j, :nb] for mod in MODULES]
            parts[2] = parts[2][ms]
            step = _combine(parts) + di.const_us[j][None, None, None, None, :nb]
            parts = [di.hbm_mib[mod][:, j, :nb] for mod in MODULES]
            parts[2] = parts[2][ms]
            hbm = _combine(parts)
            ok = hbm <= di.hbm_capacity_mib
            if slo_us is not None:
                ok &= step * EMITTED_SCALE <= slo_us * e
            if max_itl_us is not None:
                ok &= step <= max_itl_us
            decode_s = out_tokens * 1e-3 * step / (n * xs[:nb] * e)  # decode seconds per request at each B
            # chunked, per chunk size C: decode seconds + in t_c / C at each B, where phi < 1, the mean
            # step, the TTFT and the longest gap (each growing with t_c) meet their limits with t_c at
            # its floor, and one prompt's KV cache fits next to the decode HBM (the module docstring)
            sequences_e = n * xs[:nb] * (e / EMITTED_SCALE)
            chunk_ok = ok & (hbm + kv_one[:, None, None, None, None] <= di.hbm_capacity_mib)
            chunked = np.full(step.shape[:-1], np.inf)
            for c, chunk in enumerate(chunks if _runs_chunked(dt, dt.k_values[j]) else ()):
                phi = in_tokens * sequences_e / (out_tokens * chunk)
                if not (phi < 1.0).any():
                    continue
                slope = cut(slopes[c])
                t_c_us = 1e6 * chunk * slope
                c_ok = chunk_ok & _chunked_meets(
                    step, t_c_us, phi, e, in_tokens, chunk, None, ttft_slo_us, max_itl_us, out_tokens, dps
                )
                rank_s = np.maximum(chunk * slope - cut(experts_hi[..., c, :]), 0.0)
                floor_s, mean_us = _chunked_seconds_floor(
                    step,
                    least_step[:nb],
                    phi,
                    e,
                    out_tokens,
                    rank_s,
                    cut(experts_lo[..., c, :]),
                    dps,
                    ttft_slo_us,
                    n * xs[:nb],
                )
                if slo_us is not None:
                    c_ok &= mean_us * EMITTED_SCALE <= slo_us * e * (1 + 1e-9)
                chunked = np.minimum(chunked, np.where(c_ok, floor_s, np.inf).min(axis=-1))
            chunked_parts.append(chunked)
            if not dt.options.whole_prefill_forwards:  # every step mixes prompt tokens in (vLLM): no whole forward
                whole_parts.append(np.full(step.shape[:-1], np.inf))
                continue
            room = (di.hbm_capacity_mib - hbm) / np.maximum(kv_one, 1e-9)[:, None, None, None, None]
            r_idx = np.searchsorted(rs, np.floor(room), side="right") - 1  # largest batch that fits
            r_idx = np.where(r_idx >= first_whole, r_idx, -1)  # it runs, or no batch does
            if step_limits is not None:  # and its forward, after the step in flight, meets the TTFT and ITL limits
                r_idx = np.minimum(r_idx, _batches_within_us(cut(step_limits[0], 3), step_limits[1], step))
            held, first = _held(ctx, n, xs[:nb], e / EMITTED_SCALE, rs)
            at = _admitted_prefill_floor(
                cut(prefill_s),
                _held_floor_s(cut(shortest_us), rs, held, first),
                r_idx,
                first,
                spans,
                cut(last_runs),
            )
            ok &= r_idx >= 0
            if slo_us is not None:
                # TPOT stretches to step / e / (1 - f) with f = p / (d + p) the prefill share of time:
                # within the SLO only if p <= d (SLO e / step - 1), and p is at least `at`
                ok &= at <= decode_s * (slo_us * e / (np.maximum(step, 1) * EMITTED_SCALE) - 1.0) * (1 + 1e-9)
            whole_parts.append(np.where(ok, decode_s + at, np.inf).min(axis=-1))
        totals.append(np.concatenate(whole_parts, axis=2))
        chunked_totals.append(np.concatenate(chunked_parts, axis=2))
    # chunked candidates are searched for every combination: the bound is the larger of the two
    total = np.minimum(np.stack(totals), np.stack(chunked_totals))
    bound = np.where(np.isfinite(total), 1.0 / np.where(np.isfinite(total), total, 1.0), 0.0)
    bound = np.maximum(engine_mask(bound, dt), 0.0)  # combinations the engine cannot run: 0
    pt.memo[key] = (bound, per_k)
    return bound, per_k


def colocated_candidates(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: TpotLimitUs,
    ttft_slo_us: int | None,
    keep: int,
    first_round: int = 8,
    prune: bool = True,
    mtp: bool | None = None,
    max_itl_us: int | None = None,
    least_rate_milli: int = 0,
    ep_not: int | None = None,
) -> list[ColocatedCandidate]:
    """The `keep` best colocated instances of one size (see the module docstring): exact over the
    layouts, depths, concurrencies, batches and micro-batches (`prune=False` evaluates every
    combination the engine can run, even those the bound calls infeasible, for tests; `mtp` True
    or False keeps only depths with or without MTP, `ep_not` only expert layouts over another
    device count than that). With `least_rate_milli`, only instances of at
    least that many thousandths of a request per second are wanted: combinations whose bound is
    below it are not evaluated, and the result holds the `keep` best of those that reach it."""
    bound, per_k = colocated_upper_bounds(ctx, dt, di, pt, pi, tpot_slo_us, ttft_slo_us, max_itl_us)
    runnable = engine_mask(np.ones(bound.shape), dt).reshape(-1) > 0
    if mtp is not None:  # only configurations with (True) or without (False) MTP draft tokens
        bound = bound * np.array([(k > 0) == mtp for k in dt.k_values], dtype=float)[:, None, None, None, None]
    if ep_not is not None and dt.options.moe:  # only expert layouts over another device count
        bound = bound * np.array([o.moe.ep != ep_not for o in dt.options.moe], dtype=float)[:, None]
    flat = bound.reshape(-1)
    order = [int(i) for i in np.lexsort((np.arange(flat.size), -flat)) if flat[i] > 0 or (runnable[i] and not prune)]
    found: list[tuple[float, ColocatedCandidate]] = []
    pos, size = 0, first_round
    while pos < len(order):
        # ranked as the search ranks them (rate in thousandths, then a fixed key): a combination is
        # dropped only when even its bound rounds below the `keep`-th rate, so ties are evaluated
        floor_milli = max(least_rate_milli, found[keep - 1][1].rate_milli if len(found) >= keep else 0)
        if prune and math.floor(flat[order[pos]] * 1000 * (1 + 1e-9)) < floor_milli:
            break  # no combination left can beat or tie the `keep`-th best found
        batch = [np.unravel_index(i, bound.shape) for i in order[pos : pos + size]]
        chosen = [(int(p[0]), tuple(int(v) for v in p[1:])) for p in batch]
        found.extend(_evaluate_memo(ctx, dt, di, pt, pi, tpot_slo_us, ttft_slo_us, chosen, per_k, max_itl_us))
        found.sort(key=lambda rc: (-rc[1].rate_milli, rc[1].decode.key(), rc[1].chunk_tokens or 0))
        pos += size
        size = min(2 * size, 256)
    return [c for _, c in found if c.rate_milli >= least_rate_milli][:keep]


def _evaluate_memo(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: TpotLimitUs,
    ttft_slo_us: int | None,
    chosen: list[tuple[int, tuple[int, ...]]],
    per_k: list[DecodeAtDepth],
    max_itl_us: int | None,
) -> list[tuple[float, ColocatedCandidate]]:
    """`_evaluate`, each combination's result memoised with the prefill tables (the MTP-filtered
    and `keep`=1 searches of the alternatives revisit the same combinations)."""
    memo = pt.memo.setdefault(("colocated_evaluated", dt.devices, tpot_slo_us, ttft_slo_us, max_itl_us), {})
    todo = [c for c in chosen if c not in memo]
    if todo:
        for c in todo:
            memo[c] = []
        for rc in _evaluate(ctx, dt, di, pt, pi, tpot_slo_us, ttft_slo_us, todo, per_k, max_itl_us):
            memo[(dt.k_values.index(rc[1].decode.k), rc[1].decode.option_index)].append(rc)
    return [rc for c in chosen for rc in memo[c]]


def _whole_forward_best(
    ctx: CostContext,
    n: int,
    capacity_mib: int,
    tpot_slo_us: int | None,
    ttft_slo_us: int | None,
    max_itl_us: int | None,
    step_b: np.ndarray,
    hbm_b: np.ndarray,
    emitted: float,
    xs: np.ndarray,
    forward_r: np.ndarray,
    extra_r: np.ndarray,
    rs: np.ndarray,
    mb: int,
    exhaustive: bool = False,
    prompt_forwards: np.ndarray | None = None,
    over_forwards: bool = True,
) -> tuple[float, tuple] | None:
    """The best whole-forward instance of one combination and prefill micro-batch count, exactly
    over every concurrency B and batch R: (requests/s, its figures), or None.

    A forward holds R_h = min(R, H_B) requests (H_B the prompts a full instance admits between
    forwards at B, planner.costmodel.colocated), so for a given B the rate is
    1 / (decode seconds + p), p = F(R_h) / R_h: F(R) / R below H_B, and the same p_H = F(H_B) / H_B
    at every batch from the first of at least H_B requests on. The TPOT (step / e / (1 - f),
    f = p / (decode seconds + p)) grows with p: the best R is the one of least p among those the
    other limits allow. Those limits are HBM (the batch's KV and activations next to the decode
    HBM), the TTFT (step + (k + 1/2) forwards of R) and the longest gap (step + k forwards of R),
    k the forwards a prompt takes on its rank at R (`prompt_forwards` [R], 1 by default). Where every
    k is 1 they each grow with R, so the batches they allow at B are the R up to the largest that
    meets all three: one search per limit per B, a running minimum of F(R) / R below H_B and p_H from
    the first batch of at least H_B give the best R at every B (a larger batch only adds to the
    limits). Where k falls as R grows (a larger batch gives each rank a larger share), the TTFT and the
    longest gap need not grow with R: the allowed (B, R) are then marked one by one and the least p
    taken over them; with `over_forwards` False (an engine that prefills a prompt whole on its rank)
    those batches are not run. Where a forward or its HBM falls with R somewhere (not monotone), or with
    `exhaustive` (the tests' reference), every (B, R) is evaluated instead."""
    w = ctx.workload
    k_r = np.ones(rs.size) if prompt_forwards is None else np.broadcast_to(np.asarray(prompt_forwards, float), rs.shape)
    held_b, first_h = _held(ctx, n, xs, emitted, rs)
    # the forward of H_B read linearly between the whole batches on either side (the batch axis is
    # every whole batch from R_0, so this is the cost model's reading)
    forward_h = np.interp(held_b, rs.astype(float), forward_r)
    per_held = forward_h / held_b
    monotone = not exhaustive and bool(np.all(np.diff(forward_r) >= 0) and np.all(np.diff(extra_r) >= 0))
    per_request = forward_r / rs
    if monotone:
        # from r1 on a rank's share holds a prompt (k = 1; k falls as R grows): there the limits grow with R
        r1 = int(np.argmax(k_r <= 1)) if bool(np.any(k_r <= 1)) else rs.size
        fits = np.searchsorted(extra_r, capacity_mib - hbm_b, side="right") - 1  # the largest batch HBM holds
        top = fits  # the largest batch index each B allows at k = 1 (-1: none)
        if max_itl_us is not None:  # the longest gap: a whole forward and a step
            top = np.minimum(top, np.searchsorted(forward_r, max_itl_us - step_b, side="right") - 1)
        if ttft_slo_us is not None:  # a new request waits for the step and 1.5 forwards
            top = np.minimum(top, np.searchsorted(3 * forward_r, 2 * ttft_slo_us - 2 * step_b, side="right") - 1)
        # index of the least prefill seconds per request among the batches from r1 to r (the first of equals)
        masked = np.where(np.arange(rs.size) >= r1, per_request, np.inf)
        lower = np.concatenate([[True], masked[1:] < np.minimum.accumulate(masked)[:-1]])
        least_upto = np.maximum.accumulate(np.where(lower, np.arange(rs.size), 0))
        below = np.minimum(top, first_h - 1)  # the largest allowed batch of fewer than H_B requests
        r_below = least_upto[np.maximum(below, 0)]
        p_below = np.where(below >= r1, masked[r_below], np.inf)
        first_b = np.maximum(first_h, r1)
        p_held = np.where(first_b <= top, per_held, np.inf)  # a batch of at least H_B allowed: it holds H_B
        r_at = np.where(p_held < p_below, np.minimum(first_b, rs.size - 1), r_below)
        p_at = np.minimum(p_below, p_held)
        if r1 > 0 and over_forwards:
            # below r1 a prompt takes k > 1 forwards: the TTFT and the longest gap need not grow with R, so
            # those batches are marked one by one [B, r1], each holding R_h = min(R, H_B / k) requests' worth
            ra, ka, fa = np.arange(r1), k_r[:r1], forward_r[:r1]
            allowed = ra[None, :] <= fits[:, None]
            if max_itl_us is not None:
                allowed &= step_b[:, None] + ka * fa <= max_itl_us
            if ttft_slo_us is not None:
                allowed &= 2 * step_b[:, None] + (2 * ka + 1) * fa <= 2 * ttft_slo_us
            held_ba = np.minimum(rs[None, :r1].astype(float), held_b[:, None] / ka[None, :])
            p_ba = np.where(allowed, _read_forward(rs, forward_r, held_ba) / held_ba, np.inf)
            r_a = p_ba.argmin(axis=1)
            p_a = p_ba[np.arange(xs.size), r_a]
            r_at = np.where(p_a <= p_at, r_a, r_at)  # ties: the smaller batch
            p_at = np.minimum(p_a, p_at)
        b_at = np.arange(xs.size)
        ok_b = np.isfinite(p_at)
    else:
        b_at, r_at = (a.reshape(-1) for a in np.meshgrid(np.arange(xs.size), np.arange(rs.size), indexing="ij"))
        ok_b = np.ones(b_at.size, dtype=bool)
    step, fwd, extra, own = step_b[b_at], forward_r[r_at], extra_r[r_at], k_r[r_at]
    if bool(np.any(k_r > 1)):  # R_h = min(R, H_B / k), read as the evaluation reads it
        held = np.minimum(rs[r_at].astype(float), held_b[b_at] / own)
        fwd_held = _read_forward(rs, forward_r, held)
    else:
        holds_h = r_at >= first_h[b_at]
        held = np.where(holds_h, held_b[b_at], rs[r_at])
        fwd_held = np.where(holds_h, forward_h[b_at], fwd)
    rate, _, tpot, ttft = colocated_rate_and_latency(
        step / 1e6,
        emitted,
        n,
        xs[b_at].astype(float),
        fwd / 1e6,
        rs[r_at].astype(float),
        w.output_tokens,
        fwd_held / 1e6,
        held,
        own,
    )
    ok = ok_b & (hbm_b[b_at] + extra <= capacity_mib)
    if not over_forwards:
        ok &= own <= 1
    if max_itl_us is not None:
        ok &= step + own * fwd <= max_itl_us
    if tpot_slo_us is not None:
        ok &= tpot * 1e6 <= tpot_slo_us
    if ttft_slo_us is not None:
        ok &= 2 * step + (2 * own + 1) * fwd <= 2 * ttft_slo_us
    score = np.where(ok, rate, -1.0)
    i = int(score.argmax())  # the first best: the smallest B, then the smallest R
    if score[i] <= 0:
        return None
    b_i, r_i = int(b_at[i]), int(r_at[i])
    figures = (
        b_i,
        int(rs[r_i]),
        mb,
        float(tpot[i]),
        float(ttft[i]),
        int(hbm_b[b_i] + extra_r[r_i]),
        float(step_b[b_i] + k_r[r_i] * forward_r[r_i]) / 1e6,
        None,
    )
    return float(score[i]), figures


def _evaluate(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: TpotLimitUs,
    ttft_slo_us: int | None,
    chosen: list[tuple[int, tuple[int, ...]]],
    per_k: list[DecodeAtDepth],
    max_itl_us: int | None = None,
) -> list[tuple[float, ColocatedCandidate]]:
    """The best whole-forward and the best chunked colocated instance (requests/s, candidate) of
    each chosen (depth, combination)."""
    n = dt.devices
    xs = dt.x_values.astype(float)
    rs = pt.x_values.astype(np.int64)
    # [C, B]: decode step and HBM of each chosen (combination, depth)
    step_cb = np.stack([per_k[j].step_us(idx) for j, idx in chosen]).astype(float)
    hbm_cb = np.stack([per_k[j].hbm_mib(idx) for j, idx in chosen]).astype(float)
    emitted_c = np.array([per_k[j].emitted / EMITTED_SCALE for j, _ in chosen])
    best_score = np.full(len(chosen), -1.0)
    best_at: list[tuple | None] = [None] * len(chosen)
    chunked_best: list[tuple[int, float, tuple]] = []
    # a colocated TPOT is at least the pure decode TPOT, and a TTFT at least 1.5 forwards: cut the
    # concurrency and batch axes to what could meet the SLOs at all
    b_ok = hbm_cb <= di.hbm_capacity_mib
    slo_c = [tpot_limit_at(tpot_slo_us, j) for j, _ in chosen]  # each chosen depth's TPOT limit
    if tpot_slo_us is not None:
        limits = np.array(slo_c, dtype=float)[:, None]
        b_ok &= step_cb * EMITTED_SCALE <= limits * (emitted_c[:, None] * EMITTED_SCALE)
    nb = int(np.flatnonzero(b_ok.any(axis=0)).max(initial=-1)) + 1
    if nb == 0:
        return []
    step_cb, hbm_cb, xs = step_cb[:, :nb], hbm_cb[:, :nb], xs[:nb]
    micro_ok = dt.options.moe_micro_ok
    for mb in pt.k_values if dt.options.whole_prefill_forwards else ():
        if mb > ctx.prefill_tokens_per_request:
            # a forward splits into micro-batches of whole tokens (a plan's prefill micro_batches <= its
            # batch_tokens): a prompt shorter than mb tokens cannot be split mb ways. A batch of several such
            # prompts could be, by requests, but at a handful of tokens a forward there is nothing to overlap.
            continue
        for c, (_, idx) in enumerate(chosen):
            if mb > 1 and micro_ok is not None and not micro_ok[idx[2]]:
                continue  # an engine that runs several micro-batches only with some MoE layouts
            forward = _forward_us(ctx, pi, idx, mb)  # [R]
            extra = _prefill_extra_mib(ctx, dt, pt, idx, mb)
            args = (step_cb[c], hbm_cb[c], float(emitted_c[c]), xs, forward, extra, rs, mb)
            found = _whole_forward_best(
                ctx,
                n,
                di.hbm_capacity_mib,
                slo_c[c],
                ttft_slo_us,
                max_itl_us,
                *args,
                prompt_forwards=_prompt_forwards(pi, idx[0]),
                over_forwards=dt.options.prompt_over_forwards,
            )
            if found is not None and found[0] > best_score[c]:
                best_score[c], best_at[c] = found
    for c, (j, idx) in enumerate(chosen):
        if not _runs_chunked(dt, dt.k_values[j]):
            continue
        found = _chunked_best(
            ctx,
            dt,
            pt,
            idx,
            step_cb[c],
            hbm_cb[c],
            float(emitted_c[c]),
            xs,
            di.hbm_capacity_mib,
            slo_c[c],
            ttft_slo_us,
            max_itl_us,
        )
        if found is not None:
            value, (b_i, chunk, tpot_v, ttft_v, hbm_v, longest_v) = found
            chunked_best.append((c, value, (b_i, 0, 1, tpot_v, ttft_v, hbm_v, longest_v, chunk)))
    out: list[tuple[float, ColocatedCandidate]] = []
    opts = dt.options
    whole = [(c, float(best_score[c]), best_at[c]) for c in range(len(chosen)) if best_at[c] is not None]
    for c, value, at in whole + chunked_best:
        j, idx = chosen[c]
        b_i, requests, mb, tpot_v, ttft_v, hbm_v, longest_v, chunk = at  # type: ignore[misc]
        e = per_k[j].emitted
        s_us = int(per_k[j].step_us(idx)[b_i])
        x = integral_as_int(float(xs[b_i]))
        num, den = decode_ratio(x, e, s_us, opts.attention[idx[0]].tp)
        decode = PhaseCandidate(
            phase="decode",
            devices=n,
            attention=opts.attention[idx[0]],
            dense_ffn=opts.dense_ffn[idx[1]] if opts.dense_ffn else None,
            moe=opts.moe[idx[2]] if opts.moe else None,
            lm_head=opts.lm_head[idx[3]],
            k=dt.k_values[j],
            x=x,
            time_us=s_us,
            latency_us=-(-s_us * EMITTED_SCALE // e),
            hbm_mib=int(per_k[j].hbm_mib(idx)[b_i]),
            hbm_capacity_mib=di.hbm_capacity_mib,
            num=num,
            den=den,
            option_index=idx,
        )
        out.append(
            (
                value,
                ColocatedCandidate(
                    decode=decode,
                    batch_requests=requests,
                    micro_batches=mb,
                    rate_milli=int(math.floor(value * 1000)),
                    tpot_us=int(math.ceil(tpot_v * 1e6)),
                    ttft_us=int(math.ceil(ttft_v * 1e6)),
                    hbm_mib=hbm_v,
                    itl_max_us=int(math.ceil(longest_v * 1e6)),
                    chunk_tokens=chunk,
                ),
            )
        )
    return out
