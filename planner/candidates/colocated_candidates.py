"""Colocated candidates: one instance size, one set of layouts, prefill and decode in turn.

For each instance size, layout combinations and MTP depths are tried as colocated instances over
every concurrency B, every prefill batch R and 1 or 2 micro-batches: the rate, the prefill time
fraction, the stretched TPOT and the TTFT follow planner.costmodel.colocated; HBM adds the
prefill batch's KV cache and activations to the decode instance's. The best (B, R,
micro-batches) per combination by requests per second is kept.

The combinations are evaluated best-bound first, in rounds (branch and bound): a colocated
instance serves at most 1 / min over B of (out * step_B / (n B e) + min over R <= R_B of
forward_R / R) requests/s, where R_B is the largest batch whose KV cache alone fits next to the
decode instance's HBM at concurrency B, the TPOT stretched by that prefill share of time meets
its SLO and 1.5 forwards meet the TTFT SLO (the real instance also holds activations, so the
bound is never below the real rate).
Rounds stop once no combination left can beat the `keep`-th best instance found, so the
result is the exact best of the declared space, not a heuristic cut; the bound depends only on
the instance size, never on the card budget.
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
    _option_lists,
)
from planner.candidates.tables import MODULES, IntTables, PhaseTables
from planner.costmodel.colocated import colocated_rate_and_latency
from planner.costmodel.context import CostContext
from planner.costmodel.memory import prefill_hbm
from planner.specs.plan import PrefillPlan

MIB = 1024.0 * 1024.0


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
            _prefill_phase(dt, idx, ctx.workload.input_tokens, mb),
            rs * ctx.workload.input_tokens,
        )
        pt.memo[key] = np.ceil((use.breakdown_bytes["kv_cache"] + use.breakdown_bytes["activations"]) / MIB)
    return pt.memo[key]


def _prefill_forwards_us(ctx: CostContext, pt: PhaseTables, pi: IntTables, n_att: int):
    """(micro-batches, forward us [A, F, M, L, R]) over the decode layouts' prefill options, as
    `_forward_us` computes them for one combination."""
    for mb in pt.k_values:
        comp = [pi.time_us[mod][:, 0, :] for mod in MODULES]
        comm = [pi.comm_us[mod][:, 0, :] for mod in MODULES]
        fixed = [pi.fixed_us[mod][:, 0, :1] for mod in MODULES]
        for arrays in (comp, comm, fixed):
            arrays[0] = arrays[0][:n_att]  # decode's attention options lead the prefill list
        c, m = _combine(comp), _combine(comm)
        hidden: np.ndarray | int = 0
        if mb > 1:
            factor = int(
                np.floor(
                    ctx.hw.overlap.prefill_micro_batch_efficiency.value
                    * (1.0 - 1.0 / (mb * ctx.model.num_layers))
                    * OVERLAP_SCALE
                )
            )
            hidden = (factor * np.minimum(c, m)) // OVERLAP_SCALE
        yield mb, (c + m + mb * _combine(fixed) - hidden).astype(float)


def prefill_floor_s(
    ctx: CostContext, dt: PhaseTables, pt: PhaseTables, pi: IntTables, ttft_slo_us: int | None
) -> float:
    """Fewest prefill seconds per request any layout of this size spends with 1.5 forwards within
    the TTFT SLO (a colocated instance's TTFT is a step plus 1.5 forwards); inf if none. Memoised
    with the prefill tables: it depends on the TTFT SLO only."""
    key = ("prefill_floor_s", ttft_slo_us)
    if key not in pt.memo:
        rs = pt.x_values.astype(float)
        best = np.inf
        for _, forward in _prefill_forwards_us(ctx, pt, pi, len(dt.options.attention)):
            ok = np.ones(forward.shape, dtype=bool) if ttft_slo_us is None else 1.5 * forward <= ttft_slo_us
            best = min(best, float(np.where(ok, forward * 1e-6 / rs, np.inf).min(initial=np.inf)))
        pt.memo[key] = best
    return float(pt.memo[key])


def colocated_upper_bounds(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: int | None,
    ttft_slo_us: int | None,
) -> tuple[np.ndarray, list[tuple[int, np.ndarray, np.ndarray]]]:
    """Per (MTP depth, layout combination) [K, A, F, M, L]: an upper bound on the requests/s of a
    colocated instance (0 when its decode or prefill half alone cannot fit or meet the SLO), and
    per depth (emitted tokens in thousandths, decode step us, decode HBM MiB) over [A, F, M, L, B].
    Memoised with the prefill tables (the bound depends on the SLOs, never on the budget)."""
    key = ("colocated_bound", dt.devices, tpot_slo_us, ttft_slo_us)
    if key in pt.memo:
        return pt.memo[key]
    n = dt.devices
    n_att = len(dt.options.attention)
    xs = dt.x_values.astype(np.int64)
    rs = pt.x_values.astype(float)
    out_tokens = ctx.workload.output_tokens
    # prefill seconds per request at the best batch of at most R requests [A, F, M, L, R]
    prefill_s = np.full((n_att, *[len(o) or 1 for o in _option_lists(dt)[1:]], rs.size), np.inf)
    for _, forward in _prefill_forwards_us(ctx, pt, pi, n_att):
        ok = np.ones(forward.shape, dtype=bool)
        if ttft_slo_us is not None:
            ok &= 1.5 * forward <= ttft_slo_us  # TTFT is at least 1.5 forwards
        prefill_s = np.minimum(prefill_s, np.where(ok, forward * 1e-6 / rs, np.inf))
    prefill_s = np.minimum.accumulate(prefill_s, axis=-1)
    # MiB of KV cache one prompt leaves on a device, per attention layout: the prefill batch's
    # KV alone (activations come on top) must fit next to the decode instance's HBM
    kv_one = np.array(
        [
            float(
                prefill_hbm(ctx, _prefill_phase(dt, (a, 0, 0, 0), ctx.workload.input_tokens, 1)).breakdown_bytes[
                    "kv_cache"
                ][0]
            )
            / MIB
            for a in range(n_att)
        ]
    )
    per_k: list[tuple[int, np.ndarray, np.ndarray]] = []
    totals = []
    for j in range(len(dt.k_values)):
        e = int(np.floor(dt.emitted[j] * EMITTED_SCALE + 1e-9))
        step = _combine([di.time_us[mod][:, j, :] for mod in MODULES]) + di.const_us[j][None, None, None, None, :]
        hbm = _combine([di.hbm_mib[mod][:, j, :] for mod in MODULES])
        per_k.append((e, step, hbm))
        # concurrencies no layout can reach (HBM or TPOT even with every module at its least) are cut
        least_hbm = sum(di.hbm_mib[mod][:, j, :].min(axis=0) for mod in MODULES)
        least_step = sum(di.time_us[mod][:, j, :].min(axis=0) for mod in MODULES) + di.const_us[j]
        reach = least_hbm <= di.hbm_capacity_mib
        if tpot_slo_us is not None:
            reach &= least_step * EMITTED_SCALE <= tpot_slo_us * e
        nb = int(np.flatnonzero(reach).max(initial=-1)) + 1
        if nb == 0:
            totals.append(np.full(step.shape[:-1], np.inf))
            continue
        step, hbm = step[..., :nb], hbm[..., :nb]
        ok = hbm <= di.hbm_capacity_mib
        if tpot_slo_us is not None:
            ok &= step * EMITTED_SCALE <= tpot_slo_us * e
        decode_s = out_tokens * 1e-3 * step / (n * xs[:nb] * e)  # decode seconds per request at each B
        room = (di.hbm_capacity_mib - hbm) / np.maximum(kv_one, 1e-9)[:, None, None, None, None]
        r_idx = np.searchsorted(rs, np.floor(room), side="right") - 1  # largest batch that fits
        at = np.take_along_axis(prefill_s, np.clip(r_idx, 0, rs.size - 1), axis=-1)
        ok &= r_idx >= 0
        if tpot_slo_us is not None:
            # TPOT stretches to step / e / (1 - f) with f = p / (d + p) the prefill share of time:
            # within the SLO only if p <= d (SLO e / step - 1), and p is at least `at`
            ok &= at <= decode_s * (tpot_slo_us * e / (np.maximum(step, 1) * EMITTED_SCALE) - 1.0) * (1 + 1e-9)
        total = np.where(ok, decode_s + at, np.inf)
        totals.append(total.min(axis=-1))
    total = np.stack(totals)
    bound = np.where(np.isfinite(total), 1.0 / np.where(np.isfinite(total), total, 1.0), 0.0)
    pt.memo[key] = (bound, per_k)
    return bound, per_k


def colocated_candidates(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: int | None,
    ttft_slo_us: int | None,
    keep: int,
    first_round: int = 16,
    prune: bool = True,
    mtp: bool | None = None,
) -> list[ColocatedCandidate]:
    """The `keep` best colocated instances of one size (see the module docstring): exact over the
    layouts, depths, concurrencies, batches and micro-batches (`prune=False` evaluates every
    combination, even those the bound calls infeasible, for tests; `mtp` True or False keeps only
    depths with or without MTP)."""
    bound, per_k = colocated_upper_bounds(ctx, dt, di, pt, pi, tpot_slo_us, ttft_slo_us)
    if mtp is not None:  # only configurations with (True) or without (False) MTP draft tokens
        bound = bound * np.array([(k > 0) == mtp for k in dt.k_values], dtype=float)[:, None, None, None, None]
    flat = bound.reshape(-1)
    order = [int(i) for i in np.lexsort((np.arange(flat.size), -flat)) if flat[i] > 0 or not prune]
    found: list[tuple[float, ColocatedCandidate]] = []
    pos, size = 0, first_round
    while pos < len(order):
        floor = found[keep - 1][0] if len(found) >= keep else 0.0
        if prune and flat[order[pos]] * (1 + 1e-9) <= floor:
            break  # no combination left can beat the `keep`-th best found
        batch = [np.unravel_index(i, bound.shape) for i in order[pos : pos + size]]
        chosen = [(int(p[0]), tuple(int(v) for v in p[1:])) for p in batch]
        found.extend(_evaluate(ctx, dt, di, pt, pi, tpot_slo_us, ttft_slo_us, chosen, per_k))
        found.sort(key=lambda rc: (-rc[0], rc[1].decode.key()))
        pos += size
        size = min(2 * size, 256)
    return [c for _, c in found[:keep]]


def _evaluate(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: int | None,
    ttft_slo_us: int | None,
    chosen: list[tuple[int, tuple[int, ...]]],
    per_k: list[tuple[int, np.ndarray, np.ndarray]],
) -> list[tuple[float, ColocatedCandidate]]:
    """The best colocated instance (requests/s, candidate) of each chosen (depth, combination)."""
    n = dt.devices
    xs = dt.x_values.astype(np.int64)
    rs = pt.x_values.astype(np.int64)
    w = ctx.workload
    # [C, B]: decode step and HBM of each chosen (combination, depth)
    step_cb = np.stack([per_k[j][1][idx] for j, idx in chosen]).astype(float)
    hbm_cb = np.stack([per_k[j][2][idx] for j, idx in chosen]).astype(float)
    emitted_c = np.array([per_k[j][0] / EMITTED_SCALE for j, _ in chosen])
    best_score = np.full(len(chosen), -1.0)
    best_at: list[tuple | None] = [None] * len(chosen)
    # a colocated TPOT is at least the pure decode TPOT, and a TTFT at least 1.5 forwards: cut the
    # concurrency and batch axes to what could meet the SLOs at all
    b_ok = hbm_cb <= di.hbm_capacity_mib
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
        if tpot_slo_us is not None:
            ok &= tpot * 1e6 <= tpot_slo_us
        if ttft_slo_us is not None:
            ok &= ttft * 1e6 <= ttft_slo_us
        score = np.where(ok, rate, -1.0).reshape(len(chosen), -1)
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
                )
    out: list[tuple[float, ColocatedCandidate]] = []
    opts = dt.options
    for c, (j, idx) in enumerate(chosen):
        if best_at[c] is None:
            continue
        b_i, requests, mb, tpot_v, ttft_v, hbm_v = best_at[c]  # type: ignore[misc]
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
            (
                float(best_score[c]),
                ColocatedCandidate(
                    decode=decode,
                    batch_requests=requests,
                    micro_batches=mb,
                    rate_milli=int(math.floor(best_score[c] * 1000)),
                    tpot_us=int(math.ceil(tpot_v * 1e6)),
                    ttft_us=int(math.ceil(ttft_v * 1e6)),
                    hbm_mib=hbm_v,
                ),
            )
        )
    return out
