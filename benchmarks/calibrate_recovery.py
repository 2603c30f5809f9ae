"""How well `moeplan calibrate` recovers known factors (the figures in docs/calibration.md).

    python benchmarks/calibrate_recovery.py

Measurements are generated on the A2 plans with a2.yaml's factors replaced by known values, then
fitted from the shipped values; prints each factor's true, recovered value and interval, the
residuals, and the predictions on plans that were not measured, against the truth.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from planner.costmodel.calibration import calibrate, read_measurements
from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, load_plan_specs
from planner.costmodel.fitting import factor_value, metric_value, with_factors
from planner.specs.catalog import catalog_dir, load_hardware, load_plan
from planner.specs.hardware import HardwareSpec

TRUTH = {
    "efficiency.matmul": 0.62,
    "efficiency.attention_compute": 0.50,
    "efficiency.hbm_bandwidth": 0.60,
    "efficiency.link_bandwidth": 0.58,
    "fixed_costs.matrix_op": 7.0e-6,
}
ROWS = [
    ("a2-d70", "decode.tpot_ms"),
    ("a2-d70", "decode.breakdown_ms.attention"),
    ("a2-d70", "decode.breakdown_ms.moe"),
    ("a2-d70", "decode.breakdown_ms.moe_comm"),
    ("a2-d70", "decode.breakdown_ms.launch_overhead"),
    ("a2-p", "prefill.tokens_per_s_per_card"),
    ("a2-p", "prefill.breakdown_ms.moe"),
    ("a2-d-30ms", "decode.tpot_ms"),
    ("a2-d-30ms", "decode.breakdown_ms.attention"),
]
HELD_OUT = [("a2-d90", "decode.tokens_per_s_per_card"), ("a2-p-mb", "prefill.tokens_per_s_per_card")]


def predict(name: str, metric: str, hw_spec: HardwareSpec) -> float:
    """The cost model's figure for a shipped plan on `hw_spec`."""
    plan, _ = load_plan(name)
    specs = load_plan_specs(plan, catalog_dir("plans"))
    return metric_value(evaluate_plan(plan, specs=PlanSpecs(specs.model, hw_spec, specs.quant)), metric)


def main(noise: float = 0.0) -> None:
    """Recover TRUTH from measurements perturbed by +-noise (alternating signs, deterministic)."""
    a2 = load_hardware("a2")
    truth = with_factors(a2, TRUTH)
    print(f"measurement noise: +-{noise:.0%} (alternating)")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        lines = ["plan,metric,value"]
        for i, (name, metric) in enumerate(ROWS):
            (d / f"{name}.yaml").write_text((catalog_dir("plans") / f"{name}.yaml").read_text())
            value = predict(name, metric, truth) * (1 + noise * (-1) ** i)
            lines.append(f"{name}.yaml,{metric},{value:.6g}")
        (d / "m.csv").write_text("\n".join(lines) + "\n")
        t0 = time.perf_counter()
        result = calibrate(read_measurements(d / "m.csv", a2), a2, list(TRUTH))
        seconds = time.perf_counter() - t0
    print(f"{len(ROWS)} rows, {len(TRUTH)} factors, fitted in {seconds:.2f} s")
    for n, v in TRUTH.items():
        got = factor_value(result.hw, n)
        lo, hi = result.fit.intervals[n]
        inside = "covers the truth" if lo <= v <= hi else "MISSES the truth"
        print(
            f"  {n:32s} true {v:.4g}  recovered {got:.4g} ({got / v - 1:+.2%})  interval {lo:.4g}-{hi:.4g} ({inside})"
        )
    print(f"  largest residual {max(abs(r) for r in result.fit.residuals):.2e}")
    for name, metric in HELD_OUT:
        want, got = predict(name, metric, truth), predict(name, metric, result.hw)
        print(f"  not measured: {name} {metric}: truth {want:.1f}, calibrated {got:.1f} ({got / want - 1:+.2%})")


if __name__ == "__main__":
    main(0.0)
    main(0.02)
