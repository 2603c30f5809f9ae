"""Why nothing is feasible: the constraint that binds, and the nearest feasible point."""

from __future__ import annotations

import math

from planner.candidates.phase_candidates import lowest_latency_us
from planner.costmodel.context import CostContext
from planner.search.phase_space import PhaseSpace
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
            return (
                f"HBM: no {space.phase} configuration of {where} fits in "
                f"{hw.hbm_bytes / 2**30:.0f} GiB per device (tried instance sizes {space.sizes}); "
                "raise --max-cards or use a smaller quantization."
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
