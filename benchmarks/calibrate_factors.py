"""Fit a machine's matmul, HBM and link efficiencies to its rows of plans/published.yaml.

    python benchmarks/calibrate_factors.py a2        # the fit behind hardware/a2.yaml
    python benchmarks/calibrate_factors.py cm384     # residuals of cm384's sourced factors
    python benchmarks/calibrate_factors.py sigma     # the CM rows against the skew sigma
    python benchmarks/calibrate_factors.py imbalance # the engine imbalance's three fitted parameters

Grid search on a 0.05 grid (0.35..0.85) minimising the weighted sum of squared log errors over
the rows whose plan runs on the machine (weights from published.yaml: 1 for measured figures,
0.25 for estimates and low-latency points). The attention efficiency is not fitted: the report
and the CloudMatrix384 paper publish it. Prints the ten best factor sets with every row's error,
and the rows' errors under the factors the catalog ships.
"""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np

from planner.costmodel.evaluate import load_plan_specs
from planner.costmodel.reference import evaluate_row, published_rows
from planner.specs.catalog import catalog_dir, load_plan
from planner.specs.hardware import HardwareSpec


def with_efficiency(hw: HardwareSpec, matmul: float, hbm: float, link: float) -> HardwareSpec:
    """A copy of `hw` with three efficiencies replaced."""
    e = hw.efficiency
    eff = e.model_copy(
        update={
            "matmul": e.matmul.model_copy(update={"value": matmul}),
            "hbm_bandwidth": e.hbm_bandwidth.model_copy(update={"value": hbm}),
            "link_bandwidth": e.link_bandwidth.model_copy(update={"value": link}),
        }
    )
    return hw.model_copy(update={"efficiency": eff})


def main(machine: str) -> None:
    rows = []
    for row in published_rows():
        plan, _ = load_plan(row.plan)
        if plan.hardware == machine:
            rows.append((row, load_plan_specs(plan, catalog_dir("plans"))))
    if not rows:
        raise SystemExit(f"no published rows run on '{machine}'")
    shipped = rows[0][1].hw
    print(
        f"{machine}: {len(rows)} rows; shipped factors matmul "
        f"{shipped.efficiency.matmul.value}, hbm {shipped.efficiency.hbm_bandwidth.value}, "
        f"link {shipped.efficiency.link_bandwidth.value}"
    )
    for row, specs in rows:
        res = evaluate_row(row, specs=specs)
        print(
            f"  {row.id:14s} predicted {res.predicted:9.1f}  published {row.published:8.1f}  "
            f"error {res.error:+6.1%}  (tolerance {row.tolerance:.0%})"
        )
    grid = np.round(np.arange(0.35, 0.86, 0.05), 2)
    fits = []
    for mm, hbm, link in itertools.product(grid, grid, grid):
        errs = []
        for row, specs in rows:
            hw = with_efficiency(specs.hw, float(mm), float(hbm), float(link))
            res = evaluate_row(row, specs=type(specs)(specs.model, hw, specs.quant))
            errs.append(res.error)
        loss = sum(r.weight * math.log1p(e) ** 2 for (r, _), e in zip(rows, errs, strict=True))
        fits.append((loss, float(mm), float(hbm), float(link), errs))
    fits.sort(key=lambda f: f[0])
    print("best fits (matmul, hbm, link): errors per row")
    for loss, mm, hbm, link, errs in fits[:10]:
        cells = "  ".join(f"{r.id}:{e:+.1%}" for (r, _), e in zip(rows, errs, strict=True))
        print(f"  loss {loss:.4f}  ({mm:.2f}, {hbm:.2f}, {link:.2f})  {cells}")


def scan_sigma() -> None:
    """CM384 rows (the ones that depend on expert skew) for a range of log-normal sigmas."""
    from planner.costmodel.imbalance import SkewImbalance

    rows = [r for r in published_rows() if load_plan(r.plan)[0].hardware == "cm384"]
    for sigma in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7):
        cells = []
        for row in rows:
            imb = SkewImbalance(row.skew_sigma if row.skew_sigma is not None else sigma)
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
    if arg == "sigma":
        scan_sigma()
    elif arg == "imbalance":
        scan_imbalance()
    else:
        main(arg)
