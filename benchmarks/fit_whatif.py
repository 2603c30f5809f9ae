"""What a changed bound or share does to the fit and to its leave-one-out errors; writes nothing.

    python benchmarks/fit_whatif.py --bound 910c-open:efficiency.link_bandwidth=0.7,0.7
    python benchmarks/fit_whatif.py --unshare sglang-weight-reads     # one HBM factor per chip again
    python benchmarks/fit_whatif.py --share efficiency.hbm_bandwidth=910c-open,910c-huawei,910b-huawei
    python benchmarks/fit_whatif.py --bound 910c-huawei:efficiency.hbm_bandwidth=0.3,0.841 \\
        --loo sglang-a3-r1-w8a8-low-latency --loo sglang-a3-r1-w4a8-pd16
    python benchmarks/fit_whatif.py --collective-once --kept-aside kept-aside
                                      # each collective's fixed cost charged once, not twice

Refits every parameter of validation/_fit.yaml under the given bounds (equal bounds hold a factor at
that value, e.g. at a figure a source measured) and shares (`--share`: one value for several groups,
joining any share the groups' factor is in; `--unshare`: a share of _fit.yaml split back into each
group's own) from the fit's documented start, exactly as
benchmarks/calibrate_factors.py does, then refits without each `--loo` deployment (default: every
deployment; 3 to 6 minutes on a 2-core machine). It prints the weighted squared error, every parameter and every row's
error and leave-one-out error beside the shipped ones (planner/costmodel/data/fit_outcome.json), and
how many refitted figures fall outside their tolerance leave-one-out before and after. A bound chosen
with these figures in view is a choice made on the rows: a change that ships this way names the rows
in `chosen_on` (validation/*.yaml).

`--collective-once` fits a model that charges `fixed_costs.collective` once per collective (inside its
time only, an AllReduce once) instead of the shipped twice (planner/costmodel/comm.py's docstring says
why the shipped model charges it twice); the shipped columns stay the shipped model's. `--kept-aside
PATH` (a folder or file of runs kept aside from validation/) also prints each of their static figures
under the shipped values and under the what-if fit.

Bad arguments exit 2 with a sentence naming the flag and the fix.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.costmodel.store_fit import Row

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def parse_bound(text: str) -> tuple[str, tuple[float, float]]:
    """`NAME=LOW,HIGH` (or `NAME=VALUE` to hold it) as (name, (low, high)); ValueError with the fix."""
    name, sep, rest = text.partition("=")
    parts = rest.split(",")
    if not sep or not name or len(parts) not in (1, 2):
        raise ValueError(
            f"--bound {text!r}: write NAME=LOW,HIGH or NAME=VALUE (e.g. 910c-huawei:efficiency.hbm_bandwidth=0.3,0.9)"
        )
    try:
        low, high = float(parts[0]), float(parts[-1])
    except ValueError:
        raise ValueError(f"--bound {text!r}: LOW and HIGH must be numbers") from None
    return name.strip(), (low, high)


def parse_share(text: str) -> tuple[str, list[str]]:
    """`FACTOR=GROUP,GROUP,...` as (factor, groups); ValueError with the fix."""
    factor, sep, rest = text.partition("=")
    groups = [g.strip() for g in rest.split(",") if g.strip()]
    if not sep or not factor.strip() or len(groups) < 2:
        raise ValueError(
            f"--share {text!r}: write FACTOR=GROUP,GROUP (e.g. efficiency.hbm_bandwidth=910c-open,gh100-nvidia)"
        )
    return factor.strip(), groups


@contextmanager
def collective_charged_once() -> Iterator[None]:
    """Inside: every collective pays `fixed_costs.collective` once, inside its time (modules count no
    collective among their launches, and an AllReduce pays one launch, not its two halves' two)."""
    from planner.costmodel import attention_kinds, comm, modules

    fixed, allreduce = modules._fixed, comm.allreduce_s

    def fixed_once(ctx, matrix_ops, vector_ops, collectives=0):  # type: ignore[no-untyped-def]
        return fixed(ctx, matrix_ops, vector_ops, 0)

    def allreduce_once(hw, n, buffer_bytes):  # type: ignore[no-untyped-def]
        out = allreduce(hw, n, buffer_bytes)
        return out if n <= 1 else out - hw.fixed_costs.collective.value

    modules._fixed = attention_kinds._fixed = fixed_once
    comm.allreduce_s = allreduce_once
    try:
        yield
    finally:
        modules._fixed = attention_kinds._fixed = fixed
        comm.allreduce_s = allreduce


def kept_aside_rows(path: Path) -> list[Row]:
    """The static figures of the runs kept aside at `path` (a folder or one file), as fit rows, each
    checked against its plan as `moeplan fidelity --rows` checks it (planner.costmodel.fidelity.
    kept_aside_rows; planner.errors.BadInputError for a path that holds none, or a row its plan
    contradicts)."""
    from planner.costmodel.fidelity import kept_aside_rows as static_rows
    from planner.specs.validation import figures_at

    rows, _ = static_rows(figures_at(path))
    return rows


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:+.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bound", action="append", default=[], help="NAME=LOW,HIGH or NAME=VALUE (repeatable)")
    parser.add_argument(
        "--share", action="append", default=[], help="FACTOR=GROUP,GROUP,...: fit the factor as one value (repeatable)"
    )
    parser.add_argument("--unshare", action="append", default=[], help="split this share of _fit.yaml (repeatable)")
    parser.add_argument("--loo", action="append", default=[], help="refit without this deployment (repeatable)")
    parser.add_argument(
        "--collective-once", action="store_true", help="fit a model that charges each collective's fixed cost once"
    )
    parser.add_argument("--kept-aside", type=Path, help="also print these runs kept aside (a folder or file)")
    opts = parser.parse_args(argv)
    if opts.kept_aside is not None and not opts.kept_aside.exists():
        print(
            f"error: --kept-aside {str(opts.kept_aside)!r} does not exist; give a folder or file of kept-aside runs",
            file=sys.stderr,
        )
        return 2

    from planner.errors import BadInputError

    try:  # before any fitting: a row its plan contradicts is refused at once
        kept = kept_aside_rows(opts.kept_aside) if opts.kept_aside is not None else []
    except BadInputError as exc:
        print(f"error: --kept-aside: {exc}", file=sys.stderr)
        return 2

    import numpy as np

    from planner.costmodel.store_fit import (
        Model,
        fit,
        fit_config,
        fit_rows,
        leave_one_out,
        parameters,
        stored_outcome,
        weighted_sse,
        with_bounds,
        with_shared,
        without_share,
    )

    shipped_config = fit_config()
    every = fit_rows()
    rows = [r for r in every if r.figure.role == "fit"]
    shipped_params = parameters(shipped_config)
    try:
        config = shipped_config
        for name in opts.unshare:
            config = without_share(config, name)
        for text in opts.share:
            factor, groups = parse_share(text)
            config = with_shared(config, factor, groups)
        bounds = dict(parse_bound(b) for b in opts.bound)
        params = with_bounds(parameters(config), bounds)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    deployments = sorted({r.deployment for r in rows})
    unknown = [d for d in opts.loo if d not in deployments]
    if unknown:
        print(
            f"error: --loo {unknown[0]!r} is no deployment of the fitted rows; they are: {', '.join(deployments)}",
            file=sys.stderr,
        )
        return 2

    shipped_model = Model(shipped_config, rows, shipped_params)
    model = Model(config, rows, params)
    shipped = stored_outcome()
    x_shipped = shipped_model.start()
    # the shipped columns first, under the shipped model
    e_old = {r.id: shipped_model.predict(r, x_shipped) / r.measured - 1.0 for r in every}
    sse_old = weighted_sse(shipped_model, x_shipped)
    kept_old = {r.id: shipped_model.predict(r, x_shipped) / r.measured - 1.0 for r in kept}
    with collective_charged_once() if opts.collective_once else nullcontext():
        t0 = time.time()
        full = fit(model, start=model.configured_start())
        held = leave_one_out(model, full, opts.loo or None)
        print(f"fit and {len(held)} leave-one-out refits: {time.time() - t0:.0f} s")
        x_new = np.array([full.values[p.name] for p in params])
        e_new = {r.id: model.predict(r, x_new) / r.measured - 1.0 for r in every}
        sse_new = weighted_sse(model, x_new)
        kept_new = {r.id: model.predict(r, x_new) / r.measured - 1.0 for r in kept}
    if opts.collective_once:
        print("what-if: each collective's fixed cost charged once")
    print(f"weighted squared error: shipped {sse_old:.4g} -> what-if {sse_new:.4g}")
    print("\nparameter (what-if)                                          bounds          shipped   what-if")
    before = {p.name: (p.low, p.high) for p in shipped_params}
    for q, v in zip(params, model.start(), strict=True):  # start(): the shipped value of each (its first machine's)
        changed = f"[{q.low:g}, {q.high:g}]" if before.get(q.name) != (q.low, q.high) else ""
        print(f"  {q.name:58s} {changed:15s} {v:8.4g}  {full.values[q.name]:8.4g}")

    loo_new = {k: v for h in held for k, v in h.predicted.items()}
    head = ("row", "role", "tol", "error: shipped", "what-if", "leave-one-out: shipped", "what-if")
    print("\n  {:42s} {:7s} {:>4s} {:>15s} {:>8s} {:>23s} {:>8s}".format(*head))
    outside = [0, 0]
    loo_abs: tuple[list[float], list[float]] = ([], [])
    for r in every:
        tol = r.figure.tolerance
        refitted = r.id in loo_new
        l_old = shipped.loo_predicted.get(r.id) if shipped and refitted else None
        l_old_e = l_old / r.measured - 1.0 if l_old is not None else None
        l_new_e = loo_new[r.id] / r.measured - 1.0 if refitted else None
        if r.figure.role != "fit":  # a holdout's error is its out-of-sample error
            l_old_e, l_new_e = e_old[r.id], e_new[r.id]
        if l_old_e is not None and l_new_e is not None:
            loo_abs[0].append(abs(l_old_e))
            loo_abs[1].append(abs(l_new_e))
        if l_new_e is not None and tol:
            outside[0] += bool(l_old_e is not None and abs(l_old_e) > tol)
            outside[1] += abs(l_new_e) > tol
        print(
            f"  {r.id[:42]:42s} {r.figure.role:7s} {tol or 0:4.0%} {_pct(e_old[r.id]):>15s} {_pct(e_new[r.id]):>8s} "
            f"{_pct(l_old_e):>23s} {_pct(l_new_e):>8s}"
        )
    print(
        "\nfigures outside their tolerance (leave-one-out; holdouts as they are): "
        f"shipped {outside[0]} -> what-if {outside[1]}"
    )
    if loo_abs[0]:
        print(
            f"leave-one-out |error| over the {len(loo_abs[0])} rows both have (holdouts as they are): median "
            f"{100 * statistics.median(loo_abs[0]):.2f}% -> {100 * statistics.median(loo_abs[1]):.2f}%; beyond 10%: "
            f"{sum(e > 0.10 for e in loo_abs[0])} -> {sum(e > 0.10 for e in loo_abs[1])}; beyond 15%: "
            f"{sum(e > 0.15 for e in loo_abs[0])} -> {sum(e > 0.15 for e in loo_abs[1])}"
        )
    if kept:
        print(f"\n  {'kept aside (' + str(opts.kept_aside) + ')':58s} {'shipped':>8s} {'what-if':>8s}")
        for r in kept:
            print(f"  {r.id[:58]:58s} {_pct(kept_old[r.id]):>8s} {_pct(kept_new[r.id]):>8s}")
    if shipped is not None and not shipped.current:
        print("note: the shipped outcome is stale (run benchmarks/calibrate_factors.py): its columns are not current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
