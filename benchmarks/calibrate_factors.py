"""Fit a machine's published-fitted factors to its rows of the validation/ store, and derive ranges.

    python benchmarks/calibrate_factors.py a2        # the fit behind hardware/a2.yaml
    python benchmarks/calibrate_factors.py cm384     # residuals of cm384's sourced factors
    python benchmarks/calibrate_factors.py ranges    # the factor ranges stored in hardware/*.yaml
    python benchmarks/calibrate_factors.py sigma     # the CM rows against the skew sigma
    python benchmarks/calibrate_factors.py imbalance # the engine imbalance's three fitted parameters

The factors fitted are those the machine's file marks `fitted_on: published` (A2: matmul, HBM
and link efficiency; the attention efficiency is published by the report). The fit is the one of
`moeplan fidelity` and `moeplan calibrate` (planner.costmodel.fitting: bounded least squares on
relative errors, each row weighted by its `weight` in validation/: 1 for measured figures,
0.25 for estimates and low-latency points). hardware/a2.yaml ships the 0.05-grid values of the
original grid search (0.50, 0.55, 0.50); the continuous fit printed here is within their ranges.

`ranges` prints, for every factor of every machine, the range hardware/*.yaml stores:
- a factor fitted to published rows: the union of its leave-one-out refits and the full fit's
  two-standard-error interval;
- a factor whose source states a spread (a kernel range, "55% to 60%"): that spread (written in
  the YAML by hand, from the source; this script says so);
- a sourced single figure of a kind fitted on another machine: the relative leave-one-out spread
  of that kind (e.g. cm384's HBM efficiency gets A2's relative HBM spread);
- a fixed cost given by its source as an approximate figure ("~5 us"): +-50%, an assumption.
"""

from __future__ import annotations

import sys

from planner.costmodel.fidelity import fidelity_report, published_fitted_factors
from planner.costmodel.fitting import factor_names, factor_spec, is_efficiency
from planner.costmodel.reference import evaluate_row, published_rows
from planner.specs.catalog import load_hardware, load_plan

FIXED_COST_SPREAD = 0.5  # assumed relative range of an approximate ("~") fixed cost


def main(machine: str) -> None:
    report = fidelity_report()
    rows = [r for r in report.rows if r.hardware == machine]
    if not rows:
        raise SystemExit(f"no published rows run on '{machine}'")
    hw = load_hardware(machine)
    names = published_fitted_factors(hw)
    print(f"{machine}: {len(rows)} rows; fitted factors: {', '.join(names) or 'none (all sourced)'}")
    for r in rows:
        loo = f"{r.loo_error:+6.1%}" if r.loo_error is not None else "   -  "
        print(
            f"  {r.row.id:14s} predicted {r.predicted:9.1f}  published {r.row.published:8.1f}  "
            f"error {r.error:+6.1%}  leave-one-out {loo}{'' if r.used_for_fit else ' (out-of-sample)'}"
        )
    fit = report.machines[machine]
    if fit.full is not None:
        spread = fit.spread()
        for n in names:
            lo, hi = fit.full.intervals[n]
            print(
                f"  {n}: shipped {factor_spec(hw, n).value:.3f}, continuous fit {fit.full.values[n]:.4f} "
                f"(2 s.e. {lo:.4f}-{hi:.4f}), leave-one-out {spread[n][0]:.4f}-{spread[n][1]:.4f}"
            )
        for n, why in fit.full.undetermined.items():
            print(f"  {n}: {why}")


def ranges() -> None:
    """The range of every factor of every machine with published rows (see the module docstring)."""
    report = fidelity_report()
    relative: dict[str, tuple[float, float]] = {}
    fitted_ranges: dict[tuple[str, str], tuple[float, float]] = {}
    for hw_name, fit in report.machines.items():
        if fit.full is None:
            continue
        hw = load_hardware(hw_name)
        spread = fit.spread()
        for n in fit.names:
            lo = min(spread[n][0], fit.full.intervals[n][0], factor_spec(hw, n).value)
            hi = max(spread[n][1], fit.full.intervals[n][1], factor_spec(hw, n).value)
            fitted_ranges[(hw_name, n)] = (lo, hi)
            v = factor_spec(hw, n).value
            relative[n] = (lo / v, hi / v)
    for hw_name in report.machines:
        hw = load_hardware(hw_name)
        print(f"{hw_name}:")
        for n in factor_names(hw):
            v = factor_spec(hw, n).value
            if (hw_name, n) in fitted_ranges:
                lo, hi = fitted_ranges[(hw_name, n)]
                how = "leave-one-out refits and 2 s.e. of the fit"
            elif is_efficiency(hw, n) and n in relative:
                lo, hi = v * relative[n][0], min(1.0, v * relative[n][1])
                how = f"relative leave-one-out spread of {n} on the machine it is fitted on"
            elif not is_efficiency(hw, n):
                lo, hi = v * (1 - FIXED_COST_SPREAD), v * (1 + FIXED_COST_SPREAD)
                how = "approximate source figure: +-50% assumed"
            else:
                print(f"  {n}: {v:g} -> range from its source (written by hand)")
                continue
            print(f"  {n}: {v:g} -> [{lo:.4g}, {hi:.4g}]  ({how})")


def scan_sigma() -> None:
    """CM384 rows (the ones that depend on expert skew) for a range of log-normal sigmas."""
    from planner.costmodel.imbalance import SkewImbalance

    rows = [r for r in published_rows() if load_plan(r.plan)[0].hardware == "cm384"]
    for sigma in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7):
        cells = []
        for row in rows:
            imb = SkewImbalance(0.0 if row.experts == "balanced" else sigma)
            res = evaluate_row(row, imbalance=imb)
            cells.append(f"{row.id}:{res.error:+.1%}")
        print(f"sigma {sigma:.1f}  " + "  ".join(cells))


def scan_imbalance() -> None:
    """The fits behind planner/costmodel/imbalance.py's defaults, one published figure each.

    popularity sigma: CM-D (one expert per die, no redundancy); request correlation: SGLang's H100
    prefill price of imbalance (in-distribution EPLB, so no drift); drift: CloudMatrix384's prefill
    price of imbalance (default EPLB), given the request correlation.
    """
    from planner.costmodel.imbalance import (
        DEFAULT_DRIFT_SIGMA,
        DEFAULT_POPULARITY_SIGMA,
        DEFAULT_REQUEST_CORRELATION,
        EngineImbalance,
    )

    rows = {r.id: r for r in published_rows()}
    for sigma in (0.30, 0.33, 0.35, 0.37, 0.40):
        err = evaluate_row(rows["CM-D"], EngineImbalance(popularity_sigma=sigma)).error
        print(f"popularity sigma {sigma:.2f}: CM-D {err:+.1%}")
    s_bal = evaluate_row(rows["SGLang-H100-P balanced"]).predicted
    c_bal = evaluate_row(rows["CM-P balanced"]).predicted
    sg_pub = rows["SGLang-H100-P balanced"].published / rows["SGLang-H100-P"].published
    cm_pub = rows["CM-P balanced"].published / rows["CM-P EPLB"].published
    for rho in (0.3, 0.5, 0.65, 0.8, 1.0):
        imb = EngineImbalance(popularity_sigma=DEFAULT_POPULARITY_SIGMA, drift_sigma=0.0, request_correlation=rho)
        sg = s_bal / evaluate_row(rows["SGLang-H100-P"], imb).predicted
        cells = []
        for drift in (0.1, 0.2, 0.25, 0.3):
            imb = EngineImbalance(DEFAULT_POPULARITY_SIGMA, drift, rho)
            cells.append(f"drift {drift}: {c_bal / evaluate_row(rows['CM-P EPLB'], imb).predicted:.3f}")
        print(
            f"request correlation {rho}: SGLang balanced/default {sg:.3f} (published {sg_pub:.3f}); "
            f"CM384 balanced/EPLB (published {cm_pub:.3f}) " + ", ".join(cells)
        )
    print(
        f"shipped: sigma {DEFAULT_POPULARITY_SIGMA}, drift {DEFAULT_DRIFT_SIGMA}, "
        f"request correlation {DEFAULT_REQUEST_CORRELATION}"
    )


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else "a2"
    {"sigma": scan_sigma, "ranges": ranges, "imbalance": scan_imbalance}.get(arg, lambda: main(arg))()
