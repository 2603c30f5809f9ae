"""Fit the machine factors and the imbalance parameters to the measured rows, and write them where they ship.

    python benchmarks/calibrate_factors.py            # fit, leave one out, write everything
    python benchmarks/calibrate_factors.py --no-loo   # fit and write the factors only (minutes faster)
    python benchmarks/calibrate_factors.py --check    # exit 1 if a shipped value differs from the fit
    python benchmarks/calibrate_factors.py --restarts 4 --restarts-out start.json
                                                      # fit from 4 more starts too; write nothing but
                                                      # the best start (for --start, then _fit.yaml)

The fit is planner.costmodel.store_fit's: every group of validation/_fit.yaml and the engine
imbalance model's three parameters, jointly, by bounded least squares on the relative errors of
the usable `compare: static` figures of validation/ (holdout rows aside), started from the shipped
values. It writes:

- each fitted factor into the hardware file of every machine of its group: value, source (the
  group and the rows), `fitted_on: validation`, and a range: the lowest and highest value over the
  full fit, the leave-one-out refits and the refits from perturbed starts that fit the rows as well
  (within 1% of the full fit's weighted squared error; --range-restarts) (without --no-loo; else the
  range the file had, widened to hold the value);
- planner/costmodel/data/imbalance.yaml: the imbalance parameters with the same kind of range;
- planner/costmodel/data/fit_outcome.json: the full fit's predictions and elasticities and every
  leave-one-out refit, with a digest of what they were computed from (`moeplan fidelity` reads
  them; tests/costmodel/test_store_fit.py checks the digest is current and that a fit started from
  the shipped values stays on them).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RANGE_DIGITS = 4
RANGE_RESTARTS = 8


def _fmt(v: float) -> str:
    return f"{v:.6g}"


def _block(section: str, factor: str, value: float, lo: float, hi: float, source: str, derived: str) -> str:
    """The YAML lines of one fitted factor inside its section."""
    return (
        f"  {factor}:\n"
        f"    value: {_fmt(value)}\n"
        f'    source: "{source}"\n'
        f"    fitted_on: validation\n"
        f'    range: {{low: {_fmt(lo)}, high: {_fmt(hi)}, derived: "{derived}"}}\n'
    )


def set_factor(text: str, section: str, factor: str, block: str) -> str:
    """`text` (a hardware YAML) with the factor's block replaced, or added at the end of its section."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == f"{section}:"), None)
    if start is None:
        return text.rstrip("\n") + f"\n{section}:\n{block}"
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith(" ")), len(lines)
    )
    fstart = next((i for i in range(start + 1, end) if re.match(rf"^  {re.escape(factor)}:\s*$", lines[i])), None)
    if fstart is None:
        # after the section's last non-blank line
        last = max(i for i in range(start, end) if lines[i].strip())
        return "".join(lines[: last + 1]) + block + "".join(lines[last + 1 :])
    fend = next(
        (i for i in range(fstart + 1, end) if lines[i].strip() and not lines[i].startswith("    ")),
        end,
    )
    # keep comment lines that precede the next factor
    return "".join(lines[:fstart]) + block + "".join(lines[fend:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-loo", action="store_true", help="skip the leave-one-out refits")
    parser.add_argument("--check", action="store_true", help="compare with the shipped values, write nothing")
    parser.add_argument(
        "--start", help="a JSON file of {parameter: value} to start from instead of validation/_fit.yaml's"
    )
    parser.add_argument(
        "--restarts",
        type=int,
        default=0,
        help="also fit from this many seeded perturbations of the start, print each one's weighted squared "
        "error, and write nothing but the best start (--restarts-out)",
    )
    parser.add_argument("--restarts-out", help="where --restarts writes the best start as JSON (default: stdout)")
    parser.add_argument(
        "--range-restarts",
        type=int,
        default=RANGE_RESTARTS,
        help="after the full fit, refit from this many seeded perturbations of its start; those within 1%% of "
        "its weighted squared error widen the ranges (the rows do not choose between them); 0: none",
    )
    opts = parser.parse_args()

    import numpy as np

    from planner.costmodel.store_fit import (
        NEAR_OPTIMAL_SSE_FRACTION,
        OUTCOME_FILE,
        Model,
        fit,
        fit_config,
        fit_rows,
        heldout_errors,
        inputs_digest,
        leave_one_out,
        near_optimal,
        outcome_json,
        parameters,
        restarts,
        spread,
        weighted_sse,
    )

    config = fit_config()
    every_row = fit_rows()
    rows = [r for r in every_row if r.figure.role == "fit"]
    params = parameters(config)
    model = Model(config, rows, params)
    t0 = time.time()
    start = model.configured_start()
    if opts.start:
        given = json.loads(Path(opts.start).read_text())
        start = np.array([float(given.get(p.name, v)) for p, v in zip(params, start, strict=True)])
    if opts.restarts:
        t0 = time.time()
        tried = restarts(model, start, opts.restarts)
        print(f"{len(tried)} fits in {time.time() - t0:.1f} s; weighted squared error of each:")
        for k, (sse, _) in enumerate(tried):
            print(f"  {'the start' if k == 0 else f'restart {k}'}: {sse:.6g}")
        best = {p.name: float(v) for p, v in zip(params, min(tried, key=lambda t: t[0])[1], strict=True)}
        text = json.dumps(best, indent=1, sort_keys=True) + "\n"
        if opts.restarts_out:
            Path(opts.restarts_out).write_text(text, encoding="utf-8")
            print(f"best start written to {opts.restarts_out} (fit from it: --start {opts.restarts_out})")
        else:
            print(text, end="")
        return 0
    full = fit(model, start=start)
    print(f"fit of {len(params)} parameters on {len(rows)} rows: {time.time() - t0:.1f} s, {full.message}")
    for p in params:
        print(f"  {p.name:55s} {full.values[p.name]:.6g}  [{p.low:g}, {p.high:g}]")
    shipped = model.start()
    if opts.check:
        bad = [
            (p.name, s, full.values[p.name])
            for p, s in zip(params, shipped, strict=True)
            if abs(s - full.values[p.name]) > 1e-3 * max(abs(s), 1e-6) + 1e-9
        ]
        for name, s, f in bad:
            print(f"  differs: {name}: shipped {s:.6g}, fit {f:.6g}")
        return 1 if bad else 0
    held = []
    if not opts.no_loo:
        t0 = time.time()
        held = leave_one_out(model, full)
        print(f"leave-one-out over {len(held)} deployments: {time.time() - t0:.1f} s")
    alternatives = []
    if opts.range_restarts and not opts.no_loo:
        t0 = time.time()
        best_sse = weighted_sse(model, np.array([full.values[p.name] for p in params]))
        tried = restarts(model, start, opts.range_restarts, include_start=False)
        alternatives = near_optimal(tried, best_sse)
        print(
            f"{len(tried)} refits from perturbed starts: {time.time() - t0:.1f} s; {len(alternatives)} within "
            f"{NEAR_OPTIMAL_SSE_FRACTION:.0%} of the full fit's weighted squared error ({best_sse:.6g}) widen "
            "the ranges"
        )
        better = min(sse for sse, _ in tried)
        if better < best_sse * (1.0 - NEAR_OPTIMAL_SSE_FRACTION):
            print(
                f"  warning: a refit reaches {better:.6g}, below the full fit's {best_sse:.6g}: find the better "
                "start with --restarts and write it into validation/_fit.yaml (start:)"
            )
    ranges = spread(full, held, alternatives)
    from planner.specs.catalog import catalog_dir

    nrows = {g: sum(1 for r in rows if config.group_of(r.machine) == g) for g in config.groups}
    for p in params:
        value = full.values[p.name]
        lo, hi = ranges[p.name]
        lo, hi = min(lo, value), max(hi, value)
        derived = (
            f"lowest and highest over the full fit, its {len(held)} leave-one-out refits"
            f" and {len(alternatives)} refits from other starts within {NEAR_OPTIMAL_SSE_FRACTION:.0%} of its"
            " squared error"
            if held
            else "the full fit's value (no leave-one-out run)"
        )
        if not p.groups:
            continue
        machines = [m for g in p.groups for m in config.groups[g].machines]
        after = sorted({config.groups[g].after for g in p.groups} - {None})
        how = (
            f"after group {', '.join(repr(g) for g in after)} and the imbalance parameters, whose values it holds"
            if after
            else "jointly with every other group and the imbalance parameters"
        )
        source = (
            f"fitted on the {sum(nrows[g] for g in p.groups)} measured rows of validation/ from group"
            f"{'s' if len(p.groups) > 1 else ''} {', '.join(repr(g) for g in p.groups)} ({', '.join(machines)}), "
            f"{how} (benchmarks/calibrate_factors.py)"
        )
        blocks = {m: source for m in machines}
        for name, g in config.groups.items():
            if g.after in p.groups and p.factor not in g.factors:
                taken = (
                    f"the value of group '{g.after}', which group '{name}' ({', '.join(g.machines)}) takes: that "
                    f"group is fitted after it, on its own rows, which do not move this value; {source}"
                )
                blocks.update({m: taken for m in g.machines})
        section, _, factor = p.factor.partition(".")
        for machine, text_source in blocks.items():
            path = catalog_dir("hardware") / f"{machine}.yaml"
            text = path.read_text(encoding="utf-8")
            path.write_text(
                set_factor(text, section, factor, _block(section, factor, value, lo, hi, text_source, derived))
            )

    imb_path = REPO / "planner" / "costmodel" / "data" / "imbalance.yaml"
    lines = [
        "# The engine imbalance model's parameters (planner/costmodel/imbalance.py), written by",
        "# benchmarks/calibrate_factors.py from the joint fit on the measured rows of validation/;",
        "# low/high: the lowest and highest value over the full fit, its leave-one-out refits and the refits",
        "# from other starts within 1% of its weighted squared error (benchmarks/calibrate_factors.py).",
        "parameters:",
    ]
    for p in params:
        if p.groups:
            continue
        value = full.values[p.name]
        lo, hi = ranges[p.name]
        lines.append(
            f"  {p.factor}: {{value: {_fmt(value)}, low: {_fmt(min(lo, value))}, high: {_fmt(max(hi, value))}}}"
        )
    imb_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    if held:
        x_full = np.array([full.values[p.name] for p in params])
        holdouts = [r for r in every_row if r.figure.role != "fit"]
        errors = heldout_errors(model, held, x_full, holdouts)
        doc = outcome_json(full, held, inputs_digest(), errors)
        OUTCOME_FILE.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        errs = []
        loo = {k: v for h in held for k, v in h.predicted.items()}
        for r in rows:
            errs.append(abs(loo[r.id] / r.measured - 1.0))
        print(f"leave-one-out |error|: median {np.median(errs):.1%}, max {max(errs):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
