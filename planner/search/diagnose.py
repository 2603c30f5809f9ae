"""Why nothing is feasible: the constraint that binds, and the nearest feasible point."""

from __future__ import annotations

import math

from planner.candidates.phase_candidates import lowest_latency_us
from planner.costmodel.context import CostContext
from planner.search.plan_search import PhaseSpace
from planner.search.request import PlanRequest


def _lowest(ctx: CostContext, space: PhaseSpace) -> tuple[int | None, int | None]:
    """(lowest latency in us, at which instance size) over the sizes of a phase."""
    best, at = None, None
    for n, (t, ints) in space.tables.items():
        v = lowest_latency_us(t, ints, ctx.model.num_layers, ctx.hw.overlap.prefill_micro_batch_efficiency.value)
        if v is not None and (best is None or v < best):
            best, at = v, n
    return best, at


def diagnose_infeasible(
    ctx: CostContext,
    request: PlanRequest,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    budget_devices: int,
) -> str:
    """A sentence naming the binding constraint and the nearest feasible point."""
    hw, m = ctx.hw, ctx.model
    where = f"{m.name} on {hw.name} with <= {request.max_cards:g} cards"
    for space, slo_name, flag, value in (
        (dspace, "TPOT", "--tpot-ms", request.slo.tpot_ms),
        (pspace, "TTFT", "--ttft-ms", request.slo.ttft_ms),
    ):
        if space is None or space.candidates:
            continue
        if not space.sizes:
            return f"card budget: no {space.phase} instance size fits {where}; raise --max-cards."
        lowest, at = _lowest(ctx, space)
        if lowest is None:
            context = _context_binds(ctx, space.phase, max(space.sizes))
            if context:
                return context
            return (
                f"HBM: no {space.phase} configuration of {where} fits in "
                f"{ctx.hbm_capacity_bytes / 2**30:.1f} GiB per device ({ctx.hbm_utilization:g} of "
                f"{hw.hbm_bytes / 2**30:.0f} GiB; tried instance sizes {space.sizes}); raise --max-cards, "
                "--hbm-utilization, or use a smaller quantization."
            )
        return (
            f"{slo_name}: the lowest {slo_name} reachable for {where} is {lowest / 1000:.1f} ms "
            f"(instances of {at} devices); the SLO asks for {value:g} ms. Relax {flag} to at least "
            f"{math.ceil(lowest / 100) / 10:.1f}."
        )
    if request.rate_per_s is not None:
        return (
            f"rate: {where} cannot serve {request.rate_per_s:g} requests/s under the SLOs; raise "
            "--max-cards or lower --rate."
        )
    smallest = []
    for space in (dspace, pspace):
        if space is not None and space.candidates:
            smallest.append(min(c.devices for c in space.candidates))
    need = sum(smallest)
    return (
        f"card budget: the smallest deployment that meets the SLOs needs {need} devices "
        f"({math.ceil(need / hw.devices_per_card)} cards) but --max-cards {request.max_cards:g} allows "
        f"{budget_devices} devices; raise --max-cards."
    )


def _context_binds(ctx: CostContext, phase: str, devices: int) -> str | None:
    """The long-context diagnosis: one request's KV cache alone does not fit next to the weights.

    A device serves at least one sequence (concurrency_per_device >= 1), and a request's KV lives
    on its attention DP rank: tensor parallelism splits the KV heads over the TP group, but that
    group then serves TP sequences, so every layout holds at least one request's whole KV per
    device (MLA's latent is not split at all). No layout fits a request whose KV exceeds what a
    device has left after its share of the weights and reserves.
    """
    from planner.search.plan_search import _weights_bytes

    m, hw, w = ctx.model, ctx.hw, ctx.workload
    a = m.attention
    tokens = w.longest_context_tokens if phase == "decode" else max(w.slo_input_tokens, w.input_tokens)
    per_token = m.kv_elements_per_token_per_layer() * m.kv_layers() * ctx.quant.kv_bytes_per_element
    kv = tokens * per_token
    experts, other = _weights_bytes(ctx)
    reserve = hw.memory.comm_buffers.value + hw.memory.runtime_reserve.value
    free = hw.hbm_bytes - reserve - (experts + other) / max(1, devices)
    if kv <= 0.5 * max(free, 0.0):
        return None
    gib = 2.0**30
    fit = max(0, int(max(free, 0.0) // per_token))
    return (
        f"context: one {tokens:,}-token request needs {kv / gib:.1f} GiB of KV cache on its device "
        f"({per_token / 1024:.1f} KiB per token, {a.kind.upper()}; every layout holds at least one whole request "
        "per device), "
        f"but each {hw.name} device of the largest {phase} instance tried ({devices} devices) has at most "
        f"{max(free, 0.0) / gib:.1f} GiB left after weights and reserves (about {fit:,} tokens). Shorten the "
        "context, use a scheme with a smaller KV format (fp8-c8 or hif8 where the chip lists FP8/HiF8), or "
        "a machine with more HBM per device."
    )
