"""Colocated candidates: one instance size, one set of layouts, prefill and decode in turn.

For each instance size, the layout combinations and MTP depths that make the best pure-decode
instances (the first `top_combos`, from the integer decode tables) are tried as colocated
instances over every concurrency B, every prefill batch R and 1 or 2 micro-batches: the rate,
the prefill time fraction, the stretched TPOT and the TTFT follow
planner.costmodel.colocated; HBM adds the prefill batch's KV cache and activations to the decode
instance's. The best (B, R, micro-batches) per combination by requests per second is kept.
Restricting the layouts to the best decode ones is a heuristic (a colocated instance spends most
of its time decoding, so its best layouts are decode's best), not an exhaustive search: the
colocated candidates are good, not proven best, and `moeplan plan` says so.

The same combinations are also tried with chunked prefill (planner.costmodel.colocated): every
concurrency B against the chunk sizes of `CHUNK_TOKENS_PER_DEVICE` (times the instance's
devices), the chunk's time from the float cost model of the combination's prefill forward. Each
combination keeps its best whole-forward and its best chunked instance; `max_itl_us` (the
longest gap between two tokens, --max-itl-ms) prunes both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.candidates.phase_candidates import (
    EMITTED_SCALE,
    OVERLAP_SCALE,
    PhaseCandidate,
    _combine,
    _top,
    engine_mask,
)
from planner.candidates.tables import MODULES, IntTables, PhaseTables
from planner.costmodel.colocated import (
    chunk_time_s,
    chunked_rate_and_latency,
    chunked_reference_tokens,
    colocated_rate_and_latency,
)
from planner.costmodel.context import CostContext
from planner.costmodel.memory import prefill_hbm
from planner.costmodel.prefill import prefill_forward
from planner.specs.plan import PrefillPlan

MIB = 1024.0 * 1024.0
# chunked prefill: prompt tokens per step of the instance, per device of it (vLLM's default
# per-engine budget, SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS, is 2048 tokens in v0.11)
CHUNK_TOKENS_PER_DEVICE = (32, 64, 128, 256, 512, 1024, 2048)


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


def _one_request_prefill_mib(ctx: CostContext, dt: PhaseTables) -> int:
    """MiB of KV cache and activations one prompt needs in prefill (first layouts of the size)."""
    use = prefill_hbm(ctx, _prefill_phase(dt, (0, 0, 0, 0), ctx.prefill_tokens_per_request, 1))
    return int(math.ceil(float(use.breakdown_bytes["kv_cache"][0] + use.breakdown_bytes["activations"][0]) / MIB))


def _forward_us(ctx: CostContext, pi: IntTables, idx: tuple[int, ...], mb: int) -> np.ndarray:
    """Prefill forward (us) of the layouts `idx` over the requests-per-forward axis."""
    comp = sum(pi.time_us[mod][i, 0, :] for mod, i in zip(MODULES, idx, strict=True))
    comm = sum(pi.comm_us[mod][i, 0, :] for mod, i in zip(MODULES, idx, strict=True))
    fixed = sum(int(pi.fixed_us[mod][i, 0, 0]) for mod, i in zip(MODULES, idx, strict=True))
    hidden: np.ndarray | int = 0
    if mb > 1:
        factor = int(
            np.floor(
                ctx.hw.overlap.prefill_micro_batch_efficiency.value
                * (1.0 - 1.0 / (mb * ctx.model.num_layers))
                * OVERLAP_SCALE
            )
        )
        hidden = (factor * np.minimum(comp, comm)) // OVERLAP_SCALE
    return (comp + comm + mb * fixed - hidden).astype(float)  # type: ignore[union-attr]


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


def _chunk_figures(
    ctx: CostContext, dt: PhaseTables, idx: tuple[int, ...], chunks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(t_c in us, HBM MiB of the prompts in prefill) per chunk size, for the layouts `idx`."""
    w = ctx.workload
    phase = _prefill_phase(dt, idx, w.input_tokens, 1)
    x = chunked_reference_tokens(chunks, w.input_tokens)
    fwd = prefill_forward(ctx, phase, np.concatenate([x, 2.0 * x]))
    t_c = chunk_time_s(fwd.forward_s[: x.size], fwd.forward_s[x.size :], chunks, x) * 1e6
    use = prefill_hbm(ctx, phase, np.concatenate([chunks + w.input_tokens, chunks]).astype(float))
    extra = use.breakdown_bytes["kv_cache"][: chunks.size] + use.breakdown_bytes["activations"][chunks.size :]
    return np.ceil(t_c), np.ceil(extra / MIB)


def _chunked_best(
    ctx: CostContext,
    dt: PhaseTables,
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
    t_c, extra = _chunk_figures(ctx, dt, idx, chunks)
    rate, _, tpot, ttft, _, _, longest = chunked_rate_and_latency(
        step_b[:, None] / 1e6,
        emitted,
        dt.devices,
        xs[:, None].astype(float),
        t_c[None, :] / 1e6,
        chunks[None, :],
        w.input_tokens,
        w.output_tokens,
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


def colocated_candidates(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: int | None,
    ttft_slo_us: int | None,
    keep: int,
    top_combos: int = 16,
    max_itl_us: int | None = None,
) -> list[ColocatedCandidate]:
    """The `keep` best colocated instances of one size (see the module docstring)."""
    n = dt.devices
    xs = dt.x_values.astype(np.int64)
    rs = pt.x_values.astype(np.int64)
    n_att = len(dt.options.attention)
    # decode layouts are ranked with the HBM of a one-request prefill batch set aside, so that
    # layouts leaving room for prefill are not crowded out by pure-decode ones
    reserve = _one_request_prefill_mib(ctx, dt)
    scores, per_k = [], []
    for j in range(len(dt.k_values)):
        e = int(np.floor(dt.emitted[j] * EMITTED_SCALE + 1e-9))
        step = _combine([di.time_us[mod][:, j, :] for mod in MODULES]) + di.const_us[j][None, None, None, None, :]
        hbm = _combine([di.hbm_mib[mod][:, j, :] for mod in MODULES])
        ok = hbm + reserve <= di.hbm_capacity_mib
        if tpot_slo_us is not None:
            ok &= step * EMITTED_SCALE <= tpot_slo_us * e
        ratio = np.where(ok, (xs * e) / np.maximum(step, 1), -1.0)
        scores.append(ratio.max(axis=-1))
        per_k.append((e, step, hbm))
    w = ctx.workload
    chosen = [(pos[0], tuple(pos[1:])) for pos in _top(engine_mask(np.stack(scores), dt), top_combos) if pos[1] < n_att]
    if not chosen:
        return []
    # [C, B]: decode step and HBM of each chosen (combination, depth)
    step_cb = np.stack([per_k[j][1][idx] for j, idx in chosen]).astype(float)
    hbm_cb = np.stack([per_k[j][2][idx] for j, idx in chosen]).astype(float)
    emitted_c = np.array([per_k[j][0] / EMITTED_SCALE for j, _ in chosen])
    best_score = np.full(len(chosen), -1.0)
    best_at: list[tuple | None] = [None] * len(chosen)
    chunked_best: list[tuple[int, float, tuple]] = []
    # a colocated TPOT is at least the pure decode TPOT, and a TTFT at least 1.5 forwards: cut the
    # concurrency and batch axes to what could meet the SLOs at all
    b_ok = hbm_cb + reserve <= di.hbm_capacity_mib
    if tpot_slo_us is not None:
        b_ok &= step_cb * EMITTED_SCALE <= tpot_slo_us * (emitted_c[:, None] * EMITTED_SCALE)
    nb = int(np.flatnonzero(b_ok.any(axis=0)).max(initial=-1)) + 1
    if nb == 0:
        return []
    step_cb, hbm_cb, xs = step_cb[:, :nb], hbm_cb[:, :nb], xs[:nb]
    for mb in pt.k_values:
        forward_cr = np.stack([_forward_us(ctx, pi, idx, mb) for _, idx in chosen])  # [C, R]
        extra_cr = np.stack([_prefill_extra_mib(ctx, dt, pt, idx, mb) for _, idx in chosen])
        nr = rs.size
        if ttft_slo_us is not None:
            nr = int(np.flatnonzero((1.5 * forward_cr <= ttft_slo_us).any(axis=0)).max(initial=-1)) + 1
            if nr == 0:
                continue
        forward_cr, extra_cr, rs = (
            forward_cr[:, :nr],
            extra_cr[:, :nr],
            pt.x_values.astype(np.int64)[:nr],
        )
        rate, _, tpot, ttft = colocated_rate_and_latency(
            step_cb[:, :, None] / 1e6,
            emitted_c[:, None, None],
            n,
            xs[None, :, None].astype(float),
            forward_cr[:, None, :] / 1e6,
            rs[None, None, :].astype(float),
            w.output_tokens,
        )
        ok = hbm_cb[:, :, None] + extra_cr[:, None, :] <= di.hbm_capacity_mib
        if max_itl_us is not None:  # the longest gap: a whole forward and a step
            ok &= step_cb[:, :, None] + forward_cr[:, None, :] <= max_itl_us
        if tpot_slo_us is not None:
            ok &= tpot * 1e6 <= tpot_slo_us
        if ttft_slo_us is not None:
            ok &= ttft * 1e6 <= ttft_slo_us
        score = np.where(ok, rate, -1.0).reshape(len(chosen), -1)
        micro_ok = dt.options.moe_micro_ok
        if mb > 1 and micro_ok is not None:  # an engine that runs several micro-batches only with some MoE layouts
            score[[not micro_ok[idx[2]] for _, idx in chosen]] = -1.0
        flat = score.argmax(axis=1)
        for c, f in enumerate(flat):
            value = float(score[c, f])
            if value > 0 and value > best_score[c]:
                b_i, r_i = np.unravel_index(int(f), (xs.size, rs.size))  # (rs: this pass's batch axis)
                best_score[c] = value
                best_at[c] = (
                    int(b_i),
                    int(rs[r_i]),
                    mb,
                    float(tpot[c, b_i, r_i]),
                    float(ttft[c, b_i, r_i]),
                    int(hbm_cb[c, b_i] + extra_cr[c, r_i]),
                    float(step_cb[c, b_i] + forward_cr[c, r_i]) / 1e6,
                    None,
                )
    for c, (_, idx) in enumerate(chosen):
        found = _chunked_best(
            ctx,
            dt,
            idx,
            step_cb[c],
            hbm_cb[c],
            float(emitted_c[c]),
            xs,
            di.hbm_capacity_mib,
            tpot_slo_us,
            ttft_slo_us,
            max_itl_us,
        )
        if found is not None:
            value, (b_i, chunk, tpot_v, ttft_v, hbm_v, longest_v) = found
            chunked_best.append((c, value, (b_i, 0, 1, tpot_v, ttft_v, hbm_v, longest_v, chunk)))
    out: list[ColocatedCandidate] = []
    opts = dt.options
    whole = [(c, float(best_score[c]), best_at[c]) for c in range(len(chosen)) if best_at[c] is not None]
    for c, value, at in whole + chunked_best:
        j, idx = chosen[c]
        b_i, requests, mb, tpot_v, ttft_v, hbm_v, longest_v, chunk = at  # type: ignore[misc]
        e, step, hbm_d = per_k[j]
        s_us = int(step[idx + (b_i,)])
        decode = PhaseCandidate(
            phase="decode",
            devices=n,
            attention=opts.attention[idx[0]],
            dense_ffn=opts.dense_ffn[idx[1]] if opts.dense_ffn else None,
            moe=opts.moe[idx[2]] if opts.moe else None,
            lm_head=opts.lm_head[idx[3]],
            k=dt.k_values[j],
            x=int(xs[b_i]),
            time_us=s_us,
            latency_us=-(-s_us * EMITTED_SCALE // e),
            hbm_mib=int(hbm_d[idx + (b_i,)]),
            hbm_capacity_mib=di.hbm_capacity_mib,
            num=int(xs[b_i]) * e,
            den=s_us,
            option_index=idx,
        )
        out.append(
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
            )
        )
    out.sort(key=lambda c: (-c.rate_milli, c.decode.key(), c.chunk_tokens or 0))
    return out[:keep]
