"""Fit the simulator's per-request MTP acceptance spread (tau) on measured runs, and check it on others.

    python benchmarks/fit_acceptance_spread.py          # fit, print, write it
                                                        # (planner/costmodel/data/acceptance_spread.json)
    python benchmarks/fit_acceptance_spread.py --check  # refit; exit 1 if the shipped tau is not what it gives

A request's own MTP acceptance is logit-normal about the workload's (planner/costmodel/acceptance_spread.py); tau is
its standard deviation on the logit scale. It sets how far the requests' TPOTs spread around their
median, not the median itself, so it is fitted on the ratio of a run's P99 TPOT to its median TPOT:
the published ratio against the simulated one (each run simulated as its client ran it, seeds 0-2,
planner/simulate/validation.py), minimising the sum of squared log ratios. The ratio leaves out what
the cost model gets wrong about the step itself.

Fitted on `FIT_RUNS`: SGLang's first two single-wave DeepSeek-R1 runs on A3 in the page's order (32
requests decoding in one synchronous batch, MTP 3 drafts: a request's TPOT there differs from
another's by its own acceptance, and the page's only run without speculation, Qwen3-480B, spreads
2%). Every other run of the store with both figures is held out and printed: the two later
single-wave runs, and multi-wave runs whose TPOTs also hold queueing and prefill stalls.

Search: tau on a 0.05 grid over [0, 2], then a golden-section refinement to 0.001 around the best
grid point; the simulations are seeded, so the fit is deterministic.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from planner.costmodel.acceptance_spread import SPREAD_FILE, spread_record
from planner.simulate.validation import SEEDS, row_runs
from planner.specs.validation import StoredFigure, usable_figures

FIT_RUNS = ("SGLang-A3-R1-W8A8-LL 6K-1.6K run", "SGLang-A3-R1-W8A8-LL 3.9K-1K run")
GRID_STEP = 0.05
GRID_MAX = 2.0
TOLERANCE = 1e-3  # the refinement's resolution in tau; --check allows this much
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def runs_with_spread() -> dict[str, tuple[StoredFigure, float]]:
    """Every row with a published median and P99 TPOT: (a figure of it, published P99 / median)."""
    by_row: dict[str, dict[str, StoredFigure]] = {}
    for f in usable_figures(compare="simulated"):
        if f.figure.metric in ("median_tpot_ms", "p99_tpot_ms"):
            by_row.setdefault(f.row.id, {})[f.figure.metric] = f
    return {
        row: (figs["p99_tpot_ms"], figs["p99_tpot_ms"].published / figs["median_tpot_ms"].published)
        for row, figs in by_row.items()
        if len(figs) == 2
    }


def simulated_ratio(figure: StoredFigure, tau: float) -> float:
    """Mean over the seeds of the simulated P99 / median TPOT of the figure's run at `tau`."""
    ratios = [
        float(res.summary["p99_tpot_ms"]) / float(res.summary["median_tpot_ms"])
        for res, _ in row_runs(figure, acceptance_spread=tau)
    ]
    return float(np.mean(ratios))


def objective(fit: list[tuple[StoredFigure, float]], tau: float) -> float:
    """Sum over the fit runs of log(simulated ratio / published ratio) squared."""
    return sum(math.log(simulated_ratio(f, tau) / published) ** 2 for f, published in fit)


def fit_tau(fit: list[tuple[StoredFigure, float]]) -> tuple[float, float]:
    """(tau, objective): the best grid point, refined by golden-section search between its neighbours."""
    grid = np.round(np.arange(0.0, GRID_MAX + GRID_STEP / 2, GRID_STEP), 10)
    values = [objective(fit, float(t)) for t in grid]
    best = int(np.argmin(values))
    lo = float(grid[max(best - 1, 0)])
    hi = float(grid[min(best + 1, len(grid) - 1)])
    known = {float(grid[best]): values[best]}
    a, b = lo + (1 - GOLDEN) * (hi - lo), lo + GOLDEN * (hi - lo)
    fa, fb = objective(fit, a), objective(fit, b)
    known.update({a: fa, b: fb})
    while hi - lo > TOLERANCE:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = lo + (1 - GOLDEN) * (hi - lo)
            fa = objective(fit, a)
            known[a] = fa
        else:
            lo, a, fa = a, b, fb
            b = lo + GOLDEN * (hi - lo)
            fb = objective(fit, b)
            known[b] = fb
    tau = min(known, key=lambda t: (known[t], t))
    return round(tau, 4), known[tau]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="refit and compare with the shipped value")
    args = parser.parse_args(argv)
    runs = runs_with_spread()
    missing = [r for r in FIT_RUNS if r not in runs]
    if missing:
        print(f"error: the fit runs {missing} have no median and P99 TPOT figures in validation/", file=sys.stderr)
        return 2
    fit = [runs[r] for r in FIT_RUNS]
    tau, value = fit_tau(fit)
    print(f"tau = {tau:.4f} (logit scale), objective {value:.5f}, seeds {list(SEEDS)}")
    print(f"{'run':42s} {'role':8s} {'published':>9s} {'simulated':>9s} {'error':>7s}   (P99 / median TPOT)")
    record_rows: dict[str, dict[str, float | str]] = {}
    for row, (figure, published) in runs.items():
        sim = simulated_ratio(figure, tau)
        role = "fit" if row in FIT_RUNS else "held out"
        print(f"{row:42s} {role:8s} {published:9.3f} {sim:9.3f} {sim / published - 1:+7.1%}")
        record_rows[row] = {"role": role, "published_ratio": round(published, 4), "simulated_ratio": round(sim, 4)}
    if args.check:
        shipped = float(spread_record()["tau"])
        if abs(shipped - tau) > TOLERANCE or list(spread_record().get("fitted_on", [])) != list(FIT_RUNS):
            print(f"shipped tau {shipped:.4f} (on {spread_record().get('fitted_on')}) is not the fit's {tau:.4f}")
            return 1
        print(f"shipped tau {shipped:.4f} matches")
        return 0
    record = {
        "tau": tau,
        "meaning": "standard deviation of a request's own MTP acceptance on the logit scale "
        "(planner/costmodel/acceptance_spread.py)",
        "fitted_on": list(FIT_RUNS),
        "target": "published P99 TPOT / median TPOT of each fit run against the simulated one (seeds 0-2)",
        "objective": round(value, 6),
        "runs": record_rows,
        "fitted_by": "benchmarks/fit_acceptance_spread.py",
    }
    Path(SPREAD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {SPREAD_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
