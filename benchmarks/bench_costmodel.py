"""Cost-model speed: evaluations per second for a decode step and a prefill forward.

    python benchmarks/bench_costmodel.py

An evaluation is one (layout, concurrency) or (layout, batch size) point. The search evaluates
whole concurrency ranges per layout in one vectorised call, so the figure that matters is the
batched rate; the one-point-per-call rate is printed too. Also times a full `evaluate_plan`
(every figure of `predicted`, HBM included).
"""

from __future__ import annotations

import time

import numpy as np

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs
from planner.costmodel.memory import decode_hbm, prefill_hbm
from planner.costmodel.prefill import prefill_forward
from planner.specs.catalog import catalog_dir, load_plan


def rate(fn, points: int, seconds: float = 1.0) -> float:
    """Evaluations per second of fn, which evaluates `points` points per call."""
    fn()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return calls * points / (time.perf_counter() - start)


def main() -> None:
    for name in ("a2-d70", "cm-d", "a2-p"):
        _bench(name)


def _bench(name: str) -> None:
    """Print the rates of one shipped plan."""
    plan, _ = load_plan(name)
    specs = load_plan_specs(plan, catalog_dir("plans"))
    ctx = CostContext(specs.model, specs.hw, specs.quant, plan.workload)
    if plan.decode is not None:
        phase = plan.decode
        grid = np.arange(1, 1025, dtype=float)
        batched = rate(lambda: (decode_step(ctx, phase, grid), decode_hbm(ctx, phase, grid)), grid.size)
        single = rate(lambda: decode_step(ctx, phase), 1)
        print(
            f"{name:8s} decode step + HBM: {batched:12,.0f} evaluations/s batched (1024 concurrencies "
            f"per call); {single:9,.0f}/s one point per call"
        )
    else:
        phase = plan.prefill
        grid = np.arange(1024, 1024 * 129, 1024, dtype=float)
        batched = rate(
            lambda: (prefill_forward(ctx, phase, grid), prefill_hbm(ctx, phase, grid)),
            grid.size,
        )
        single = rate(lambda: prefill_forward(ctx, phase), 1)
        print(
            f"{name:8s} prefill forward + HBM: {batched:12,.0f} evaluations/s batched (128 batch sizes "
            f"per call); {single:9,.0f}/s one point per call"
        )
    full = rate(lambda: evaluate_plan(plan, catalog_dir("plans"), specs=specs), 1)
    print(f"{'':8s} full evaluate_plan (all figures): {full:,.0f}/s")


if __name__ == "__main__":
    main()
