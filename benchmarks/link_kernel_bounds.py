"""The A3 link bound of validation/_fit.yaml, derived from SGLang's measured dispatch and combine kernels.

    python benchmarks/link_kernel_bounds.py           # print the derivation
    python benchmarks/link_kernel_bounds.py --check   # exit 1 if _fit.yaml's bound differs from it

For each DeepEP-Ascend low-latency kernel timed on A3 HCCS, at EP8 and EP16 inside one server and
EP32 across two (planner.costmodel.link_kernels), it prints the measured time, the model's time at
the shipped link factor and the link factor at which the model takes the measured time. The open
engines' link factor (group 910c-open) is bounded by the slowest and fastest of those, rounded to
three decimals; tests/costmodel/test_link_kernels.py checks the bound in _fit.yaml against the same
derivation.
"""

from __future__ import annotations

import sys

from planner.costmodel.link_kernels import (
    DEEPEP_ASCEND_LOW_LATENCY_HCCS,
    LINK_FACTOR,
    SGL_KERNEL_NPU_SOURCE,
    implied_link_factor,
    link_factor_bounds,
    model_time_s,
)
from planner.costmodel.store_fit import fit_config
from planner.specs.catalog import load_hardware

GROUP, MACHINE = "910c-open", "a3"


def derived_bound() -> tuple[float, float]:
    """The bound the kernels give, rounded to three decimals."""
    low, high = link_factor_bounds(load_hardware(MACHINE), DEEPEP_ASCEND_LOW_LATENCY_HCCS)
    return round(low, 3), round(high, 3)


def shipped_bound() -> tuple[float, float]:
    """The bound validation/_fit.yaml states for the group's link factor."""
    low, high = fit_config().groups[GROUP].factors[LINK_FACTOR]
    return float(low), float(high)


def main(argv: list[str]) -> int:
    hw = load_hardware(MACHINE)
    shipped = hw.efficiency.link_bandwidth.value
    print(f"source: {SGL_KERNEL_NPU_SOURCE}")
    model_at = f"model at {shipped:.3f} us"
    print(f"{'kernel':<9} {'EP':>3} {'MB sent':>8} {'measured us':>12} {model_at:>18} {'implied factor':>15}")
    for k in DEEPEP_ASCEND_LOW_LATENCY_HCCS:
        print(
            f"{k.kernel:<9} {k.ep:>3} {k.bytes_out / 1e6:>8.2f} {k.measured_s * 1e6:>12.0f} "
            f"{model_time_s(hw, k, shipped) * 1e6:>18.1f} {implied_link_factor(hw, k):>15.3f}"
        )
    derived, stated = derived_bound(), shipped_bound()
    print(f"bound from the kernels: {list(derived)}; validation/_fit.yaml ({GROUP}): {list(stated)}")
    if "--check" in argv and derived != stated:
        print("validation/_fit.yaml's bound differs from the kernels' derivation: set it to the line above")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
