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


def _one_request_prefill_mib(ctx: CostContext, dt: PhaseTables) -> int:
    """MiB of KV cache and activations one prompt needs in prefill (first layouts of the size)."""
    use = prefill_hbm(ctx, _prefill_phase(dt, (0, 0, 0, 0), ctx.workload.input_tokens, 1))
    return int(math.ceil(float(use.breakdown_bytes["kv_cache"][0] + use.breakdown_bytes["activations"][0]) / MIB))


def colocated_candidates(
    ctx: CostContext,
    dt: PhaseTables,
    di: IntTables,
    pt: PhaseTables,
    pi: IntTables,
    tpot_slo_us: int | None,
    ttft_slo_us: int | None,
    keep: int,
    top_combos: int = 32,
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
    out: list[ColocatedCandidate] = []
    w = ctx.workload
    for pos in _top(np.stack(scores), top_combos):
        j, idx = pos[0], pos[1:]
        if idx[0] >= n_att:
            continue
        e, step, hbm_d = per_k[j]
        step_b = step[idx].astype(float)  # [B]
        hbm_b = hbm_d[idx].astype(float)
        emitted = e / EMITTED_SCALE
        comp = sum(pi.time_us[mod][i, 0, :] for mod, i in zip(MODULES, idx, strict=True))
        comm = sum(pi.comm_us[mod][i, 0, :] for mod, i in zip(MODULES, idx, strict=True))
        fixed = sum(int(pi.fixed_us[mod][i, 0, 0]) for mod, i in zip(MODULES, idx, strict=True))
        opts = dt.options
        dense = opts.dense_ffn[idx[1]] if opts.dense_ffn else None
        moe = opts.moe[idx[2]] if opts.moe else None
        best: tuple | None = None
        for mb in pt.k_values:
            hidden = 0
            if mb > 1:
                factor = int(np.floor(ctx.hw.overlap.prefill_micro_batch_efficiency.value
                                      * (1.0 - 1.0 / (mb * ctx.model.num_layers)) * OVERLAP_SCALE))
                hidden = (factor * np.minimum(comp, comm)) // OVERLAP_SCALE
            forward = (comp + comm + mb * fixed - hidden).astype(float)  # [R]
            phase = _prefill_phase(dt, idx, w.input_tokens, mb)
            use = prefill_hbm(ctx, phase, rs * w.input_tokens)
            extra = np.ceil((use.breakdown_bytes["kv_cache"] + use.breakdown_bytes["activations"]) / MIB)
            rate, _, tpot, ttft = colocated_rate_and_latency(
                step_b[:, None] / 1e6, emitted, n, xs[:, None].astype(float), forward[None, :] / 1e6,
                rs[None, :].astype(float), w.output_tokens,
            )
            ok = hbm_b[:, None] + extra[None, :] <= di.hbm_capacity_mib
            if tpot_slo_us is not None:
                ok &= tpot * 1e6 <= tpot_slo_us
            if ttft_slo_us is not None:
                ok &= ttft * 1e6 <= ttft_slo_us
            score = np.where(ok, rate, -1.0)
            flat = int(np.argmax(score))
            b_i, r_i = np.unravel_index(flat, score.shape)
            if score[b_i, r_i] > 0 and (best is None or score[b_i, r_i] > best[0]):
                best = (float(score[b_i, r_i]), int(b_i), int(r_i), mb, float(tpot[b_i, r_i]),
                        float(ttft[b_i, r_i]), int(hbm_b[b_i] + extra[r_i]))
        if best is None:
            continue
        rate_v, b_i, r_i, mb, tpot_v, ttft_v, hbm_v = best
        s_us = int(step[idx + (b_i,)])
        decode = PhaseCandidate(
            phase="decode", devices=n, attention=opts.attention[idx[0]], dense_ffn=dense, moe=moe,
            lm_head=opts.lm_head[idx[3]], k=dt.k_values[j], x=int(xs[b_i]), time_us=s_us,
            latency_us=-(-s_us * EMITTED_SCALE // e), hbm_mib=int(hbm_d[idx + (b_i,)]),
            hbm_capacity_mib=di.hbm_capacity_mib, num=int(xs[b_i]) * e, den=s_us, option_index=tuple(idx),
        )
        out.append(ColocatedCandidate(
            decode=decode, batch_requests=int(rs[r_i]), micro_batches=mb,
            rate_milli=int(math.floor(rate_v * 1000)), tpot_us=int(math.ceil(tpot_v * 1e6)),
            ttft_us=int(math.ceil(ttft_v * 1e6)), hbm_mib=hbm_v,
        ))
    out.sort(key=lambda c: (-c.rate_milli, c.decode.key()))
    return out[:keep]
