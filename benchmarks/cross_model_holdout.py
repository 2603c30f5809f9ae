"""Hold out every row of one model in a machine group, refit, predict them: the transfer across models.

    python benchmarks/cross_model_holdout.py                 # the two CANN recipe groups' cases below
    python benchmarks/cross_model_holdout.py GROUP MODEL     # any group and model

Leave-one-out (`moeplan fidelity`) leaves out one launch at a time, so a model's other launches stay in
the fit. This is the harder question a user planning a new model on a stack asks: fitted without any row of
the model, how far off are its rows? The fit is the shipped one (validation/_fit.yaml, from its documented
start) on every row but the held-out model's rows of the group; the figures printed are the held-out rows'
errors against their published values, and the group's factors with and without them; then the group's
holdout rows (in neither fit, e.g. another model of the stack) under both fits.
"""

from __future__ import annotations

import sys

CASES = (("910c-cann", "deepseek-v4-flash"), ("910c-cann", "deepseek-v3.2"), ("950dt-cann", "deepseek-v4-pro"))


def held_out(group: str, model_name: str) -> list[str]:
    """The held-out rows' lines and the group's factors, as printed."""
    import numpy as np

    from planner.costmodel.store_fit import Model, fit, fit_config, fit_rows, parameters

    config = fit_config()
    stored = fit_rows()
    rows = [r for r in stored if r.figure.role == "fit"]  # the rows the shipped fit is made on
    # the group's holdouts (in neither fit): how far the held-out model's rows move a model no fit row has
    holdouts = [r for r in stored if r.figure.role == "holdout" and config.group_of(r.machine) == group]
    model = Model(config, rows, parameters(config))
    out = [r for r in rows if config.group_of(r.machine) == group and r.figure.row.model == model_name]
    if not out:
        raise SystemExit(f"no fit row of model {model_name!r} in group {group!r}")
    kept = [r for r in rows if r not in out]
    start = model.configured_start()
    full = fit(model, start=start, diagnostics=False)
    part = fit(model, rows=kept, start=start, diagnostics=False)
    predicted = model.predict_all(np.array([part.values[p.name] for p in model.params]), out)
    lines = [f"{group}: {model_name}'s {len(out)} rows held out, fitted on {len(kept)} rows"]
    for p in model.params:
        if group in p.groups:
            lines.append(f"  {p.factor:36s} {full.values[p.name]:.4g} with them, {part.values[p.name]:.4g} without")
    for r, v in zip(out, predicted, strict=True):
        lines.append(f"  {r.id:40s} published {r.measured:9.4g}  predicted {v:9.4g}  {v / r.measured - 1:+.1%}")
    if holdouts:
        with_them = model.predict_all(np.array([full.values[p.name] for p in model.params]), holdouts)
        without = model.predict_all(np.array([part.values[p.name] for p in model.params]), holdouts)
        lines.append(f"  the group's holdouts (in neither fit), predicted with and without {model_name}'s rows:")
        for r, a, b in zip(holdouts, with_them, without, strict=True):
            errors = f"{a / r.measured - 1:+.1%} with, {b / r.measured - 1:+.1%} without"
            lines.append(f"  {r.id:40s} published {r.measured:9.4g}  {errors}")
    return lines


def main(argv: list[str]) -> int:
    cases = [tuple(argv[:2])] if len(argv) >= 2 else list(CASES)
    for group, model_name in cases:
        print("\n".join(held_out(group, model_name)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
