"""A colocated instance: the same devices run prefill forwards and decode steps in turn.

Per request an instance spends out * step / (n B e) seconds decoding (n devices, B sequences per
device, e tokens per step per sequence) and forward / R prefilling (R requests per forward), so it
serves lambda = 1 / (out * step / (n B e) + forward / R) requests per second. A fraction
f = lambda * forward / R of its time goes to prefill, during which decoding stalls: a sequence
sees TPOT = (step / e) / (1 - f) on average, but the gap between two of its tokens reaches a
whole forward plus a step when a prefill comes between them (reported as the longest pause). A
new request waits for the decode step in flight and the forward in flight (half a forward on
average), then its own forward: TTFT = step + 1.5 forward; its KV cache stays on the instance
(no transfer). HBM holds the decode instance's weights, KV and buffers plus the prefill batch's
KV cache and activations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.memory import HbmUse, decode_hbm, prefill_hbm
from planner.costmodel.prefill import prefill_forward
from planner.specs.plan import DecodePlan, PrefillPlan


@dataclass
class ColocatedFigures:
    """One colocated instance at its concurrency and batch."""

    requests_per_s: float
    prefill_time_fraction: float
    tpot_s: float
    ttft_s: float
    pause_s: float  # a decoding sequence waits a whole prefill forward (plus its step) now and then
    hbm: HbmUse


def colocated_rate_and_latency(
    step_s, emitted, devices: int, concurrency, forward_s, requests_per_forward, output_tokens: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(requests/s, prefill time fraction, TPOT s, TTFT s) by the formulas of the module docstring."""
    decode_s_per_request = output_tokens * np.asarray(step_s) / (devices * np.asarray(concurrency) * emitted)
    prefill_s_per_request = np.asarray(forward_s) / np.asarray(requests_per_forward)
    rate = 1.0 / (decode_s_per_request + prefill_s_per_request)
    fraction = rate * prefill_s_per_request
    tpot = np.asarray(step_s) / emitted / np.maximum(1.0 - fraction, 1e-12)
    ttft = np.asarray(step_s) + 1.5 * np.asarray(forward_s)
    return rate, fraction, tpot, ttft


def colocated_figures(ctx: CostContext, decode: DecodePlan, prefill: PrefillPlan) -> ColocatedFigures:
    """Figures of one colocated instance described by the plan's two sections."""
    step = decode_step(ctx, decode)
    fwd = prefill_forward(ctx, prefill)
    emitted = float(step.step_s[0] / step.tpot_s[0])
    rate, fraction, tpot, ttft = colocated_rate_and_latency(
        step.step_s[0],
        emitted,
        decode.devices,
        decode.concurrency_per_device,
        fwd.forward_s[0],
        fwd.requests_per_forward[0],
        ctx.workload.output_tokens,
    )
    d_use, p_use = decode_hbm(ctx, decode), prefill_hbm(ctx, prefill)
    parts = dict(d_use.breakdown_bytes)
    parts["prefill_kv_cache"] = p_use.breakdown_bytes["kv_cache"]
    parts["prefill_activations"] = p_use.breakdown_bytes["activations"]
    return ColocatedFigures(
        requests_per_s=float(rate),
        prefill_time_fraction=float(fraction),
        tpot_s=float(tpot),
        ttft_s=float(ttft),
        pause_s=float(fwd.forward_s[0] + step.step_s[0]),
        hbm=HbmUse(parts, d_use.role, ctx.hbm_capacity_bytes),
    )
