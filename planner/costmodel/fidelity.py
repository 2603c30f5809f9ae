"""Fidelity: the cost model against every measured row of validation/, in-sample and leave-one-out.

The shipped factors and imbalance parameters are one joint fit (planner.costmodel.store_fit) of
every group of machines on the usable static rows. For each row:

- `predicted`, `error`: under the shipped values (the full fit), the figure the tool prints;
- `fitted_to`: every factor or parameter fitted on this row (those its figure is sensitive to,
  elasticity >= `SENSITIVE_ELASTICITY`, for a row of the fit; none for a holdout row or a row on a
  machine no group fits), then every choice made with the row in view (its `chosen_on`, each as
  "chosen: ..."); `out_of_sample` is true only when that list is empty;
- `loo_predicted`, `loo_error`: with every parameter refitted without the row's deployment (same
  baseline as `error`: the joint fit, less that deployment); `loo_undetermined` lists the
  parameters no other deployment determines, kept at the full fit's value (for them the held-out
  prediction is still in-sample);
- `band`: the figure with every ranged factor and every imbalance parameter at the slow and at the
  fast end of its range (`corners`), widened by `BAND_Z` times the group's held-out RMS error over the
  other figures (`heldout_rms`; planner.costmodel.uncertainty); `in_band_at` asks the same at another
  multiple of that error, so the bands' coverage can be read at more than one level.

The leave-one-out refits take minutes; they are shipped (planner/costmodel/data/fit_outcome.json,
written by benchmarks/calibrate_factors.py with a digest of what they depend on) and recomputed
here only when the rows, catalogs or code changed since (`report.stale` says so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, load_plan_specs
from planner.costmodel.fitting import SENSITIVE_ELASTICITY, metric_value
from planner.costmodel.reference import condition_imbalance
from planner.costmodel.store_fit import Row, heldout_error
from planner.costmodel.uncertainty import BAND_Z, imbalance_corner, prediction_uncertainty, scenarios, widened
from planner.errors import BadInputError
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.hardware import HardwareSpec
from planner.specs.plan import Plan
from planner.specs.validation import StoredFigure, all_figures


@dataclass
class FidelityRow:
    """One measured figure: predicted under the shipped values and with its deployment left out."""

    row: StoredFigure
    hardware: str
    plan: str
    predicted: float
    loo_predicted: float
    fitted_to: list[str]
    sensitivity: dict[str, float]
    corners: tuple[float, float] | None = None
    heldout_rms: float = 0.0
    loo_undetermined: list[str] = field(default_factory=list)

    @property
    def used_for_fit(self) -> bool:
        """True when the fit used this row (it is in-sample for `fitted_to`)."""
        return bool(self.fitted_to)

    @property
    def out_of_sample(self) -> bool:
        """True only when no factor or parameter was fitted or chosen on this row."""
        return not self.fitted_to

    def band_at(self, z: float) -> tuple[float, float] | None:
        """The corners widened by `z` times the held-out RMS error (None without corners)."""
        return None if self.corners is None else widened(list(self.corners), z * self.heldout_rms)

    @property
    def band(self) -> tuple[float, float] | None:
        """The row's band: its corners widened by `BAND_Z` held-out errors, as every band of a plan."""
        return self.band_at(BAND_Z)

    def in_band_at(self, z: float) -> bool | None:
        """Whether the measured figure lies inside the band widened by `z` held-out errors."""
        band = self.band_at(z)
        return None if band is None else band[0] <= self.row.published <= band[1]

    @property
    def in_band(self) -> bool | None:
        """Whether the measured figure lies inside the prediction's band (None without a band)."""
        return self.in_band_at(BAND_Z)

    @property
    def error(self) -> float:
        """Relative error under the shipped values."""
        return self.predicted / self.row.published - 1.0

    @property
    def loo_error(self) -> float:
        """Relative error with every parameter refitted without the row's deployment."""
        return self.loo_predicted / self.row.published - 1.0

    @property
    def phase(self) -> str:
        """decode or prefill (the block of the predicted figure)."""
        return self.row.metric.split(".", 1)[0]

    def as_json(self) -> dict[str, object]:
        """The row of `moeplan fidelity --json`."""
        return {
            "name": self.row.id,
            "hardware": self.hardware,
            "model": self.row.row.model or None,
            "metric": self.row.metric,
            "ratio_to": self.row.figure.ratio_to or None,
            "published": self.row.published,
            "unit": self.row.unit,
            "reliability": self.row.reliability,
            "role": self.row.role,
            "source": self.row.citation,
            "predicted": round(self.predicted, 4),
            "error": round(self.error, 6),
            "loo_predicted": round(self.loo_predicted, 4),
            "loo_error": round(self.loo_error, 6),
            "fitted_to": self.fitted_to,
            "out_of_sample": self.out_of_sample,
            "loo_undetermined": self.loo_undetermined,
            "sensitivity": {k: round(v, 4) for k, v in self.sensitivity.items()},
            "band": None if self.band is None else [round(x, 4) for x in self.band],
            "band_corners": None if self.corners is None else [round(x, 4) for x in self.corners],
            "band_heldout_rms": round(self.heldout_rms, 6),
            "in_band": self.in_band,
            "tolerance": self.row.tolerance,
        }


@dataclass
class FidelityReport:
    """Every row, the fitted values, and the figures not compared (each with why)."""

    rows: list[FidelityRow]
    values: dict[str, float]
    loo_values: list[dict[str, float]]
    not_compared: list[tuple[StoredFigure, str]] = field(default_factory=list)
    stale: bool = False

    def worst_loo(self) -> FidelityRow | None:
        """The row with the largest |leave-one-out error|."""
        return max(self.rows, key=lambda r: abs(r.loo_error)) if self.rows else None

    def median_loo(self) -> float:
        """Median |leave-one-out error| (NaN without rows)."""
        return float(np.median([abs(r.loo_error) for r in self.rows])) if self.rows else float("nan")

    def misses(self) -> list[FidelityRow]:
        """Rows whose leave-one-out error is outside their tolerance."""
        return [r for r in self.rows if abs(r.loo_error) > r.row.tolerance]


@lru_cache(maxsize=64)
def _plan_and_specs(name: str) -> tuple[Plan, PlanSpecs]:
    plan, _ = load_plan(name)
    return plan, load_plan_specs(plan, plan_base_dir(name))


def not_compared_figures() -> list[tuple[StoredFigure, str]]:
    """Figures of the store the static model does not judge: excluded ones (with their reason) and
    queueing-dominated ones ('needs simulation')."""
    out = []
    for fig, why in all_figures():
        if why:
            out.append((fig, f"excluded: {why}"))
        elif fig.compare == "simulated":
            out.append((fig, "needs simulation: queueing-dominated (judged by the serving simulator)"))
    return out


def _corners(fig: StoredFigure, base: StoredFigure | None) -> tuple[float, float] | None:
    """The row's band before its widening: its own metric at the slow and the fast corner (every ranged
    factor and imbalance parameter at its end), as every band of a plan.

    A ratio of two runs (`ratio_to`) is banded as a ratio: both plans run on the same machine, so their
    factor errors are shared (as when the ranking compares two plans). The ratio is not monotone in the
    factors, so besides the two corners it is taken with each ranged factor alone at either end of its
    range; the span covers every such ratio."""
    plan, specs = _plan_and_specs(fig.plan)
    imb = condition_imbalance(fig)
    if base is None:
        block, _, name = fig.metric.partition(".")
        mid = evaluate_plan(plan, plan_base_dir(fig.plan), imb, specs=specs)
        unc = prediction_uncertainty(plan, specs, mid, plan_base_dir(fig.plan), imb, {block: (name,)}, 0.0)
        b = unc.bands.get(block, {}).get(name)
        return None if b is None else (b.low, b.high)
    base_plan, base_specs = _plan_and_specs(base.plan)
    if base_specs.hw.name != specs.hw.name:
        return None  # not a ratio on one machine: its factor errors are not shared
    base_imb = condition_imbalance(base)

    def ratio(hw: HardwareSpec, slow: bool | None) -> float | None:
        a_imb = imb if slow is None else imbalance_corner(imb, slow)
        b_imb = base_imb if slow is None else imbalance_corner(base_imb, slow)
        a = evaluate_plan(plan, plan_base_dir(fig.plan), a_imb, specs=PlanSpecs(specs.model, hw, specs.quant))
        b = evaluate_plan(
            base_plan, plan_base_dir(base.plan), b_imb, specs=PlanSpecs(base_specs.model, hw, base_specs.quant)
        )
        try:
            return metric_value(a, fig.metric) / metric_value(b, base.metric)
        except (KeyError, ZeroDivisionError):
            return None

    values = [ratio(specs.hw, None)]
    for i, scenario in enumerate(scenarios(specs.hw)):
        # the first two scenarios are the corners (every factor at its slow, then its fast end): the
        # imbalance parameters go to the same end there; each factor alone keeps the row's imbalance
        corner_end = {0: True, 1: False}.get(i)
        values.append(ratio(scenario.hw, corner_end))
    if any(v is None for v in values):
        return None
    kept = [float(v) for v in values if v is not None]
    return min(kept), max(kept)


def _heldout_rms(fig: StoredFigure) -> float:
    """The held-out RMS error that widens the row's band: its machine group's over the other figures, so
    the row's own error does not widen its own band and the count of rows inside their bands is a
    held-out check of the bands."""
    _, specs = _plan_and_specs(fig.plan)
    return heldout_error(specs.hw.name, without=fig.id)


def _band(fig: StoredFigure, base: StoredFigure | None) -> tuple[float, float] | None:
    """The row's band: its corners (`_corners`) widened by `BAND_Z` times its held-out error (`_heldout_rms`)."""
    span = _corners(fig, base)
    return None if span is None else widened(list(span), BAND_Z * _heldout_rms(fig))


def _fidelity_row(
    r: Row,
    predicted: float,
    loo_predicted: float,
    fitted_to: list[str],
    sensitivity: dict[str, float],
    heldout_rms: float,
    loo_undetermined: Iterable[str] = (),
) -> FidelityRow:
    """One row of a fidelity report: the figure, both predictions, what was fitted on it, its band's corners."""
    return FidelityRow(
        row=r.figure,
        hardware=r.machine,
        plan=r.figure.plan,
        predicted=predicted,
        loo_predicted=loo_predicted,
        fitted_to=fitted_to,
        sensitivity=sensitivity,
        corners=_corners(r.figure, r.base),
        heldout_rms=heldout_rms,
        loo_undetermined=list(loo_undetermined),
    )


def fidelity_report(subset: list[StoredFigure] | None = None) -> FidelityReport:
    """Every usable static row (or those of `subset`) with its in-sample and leave-one-out figures (see the
    module docstring); the fit always covers every row."""
    from planner.costmodel.store_fit import (
        Model,
        fit,
        fit_config,
        fit_rows,
        leave_one_out,
        parameters,
        stored_outcome,
    )

    config = fit_config()
    rows = fit_rows()
    params = parameters(config)
    fitted = [r for r in rows if r.figure.role == "fit"]
    stored = stored_outcome()
    stale = stored is None or not stored.current
    model = Model(config, fitted, params)
    x = model.start()
    if stale:
        # what benchmarks/calibrate_factors.py would ship now: the fit from the configured start, whose
        # values are then the baseline of both columns (the shipped files are out of date)
        full = fit(model, start=model.configured_start())
        x = np.array([full.values[p.name] for p in params])
        held = leave_one_out(model, full)
        elasticity = full.elasticity
        loo_pred = {k: v for h in held for k, v in h.predicted.items()}
        kept = {r: h.kept for h in held for r in h.rows}
        loo_values = [h.values for h in held]
    else:
        assert stored is not None
        elasticity, loo_pred, kept, loo_values = (
            stored.elasticity,
            stored.loo_predicted,
            stored.loo_kept,
            stored.loo_values,
        )
    values = model.values(x)
    out = []
    all_model = Model(config, rows, params)
    wanted = None if subset is None else {f.id for f in subset}
    for r in rows:
        if wanted is not None and r.id not in wanted:
            continue
        predicted = all_model.predict(r, x)
        sens = {k: v for k, v in elasticity.get(r.id, {}).items() if abs(v) >= 1e-3}
        group = config.group_of(r.machine)
        in_fit = r.figure.role == "fit" and group is not None
        fitted_to = [k for k, v in sens.items() if abs(v) >= SENSITIVE_ELASTICITY] if r.figure.role == "fit" else []
        if group in config.late_groups():
            # fitted in the second stage (validation/_fit.yaml `after`): on its own group's factors only
            fitted_to = [k for k in fitted_to if k.startswith(f"{group}:")]
        if not in_fit:
            # imbalance parameters are fitted on every fit row, a machine outside the groups included
            fitted_to = [k for k in fitted_to if k.startswith("imbalance.")] if r.figure.role == "fit" else []
        fitted_to += [f"chosen: {c}" for c in r.figure.row.chosen_on]
        loo = loo_pred.get(r.id, predicted)
        out.append(_fidelity_row(r, predicted, loo, fitted_to, sens, _heldout_rms(r.figure), kept.get(r.id, [])))
    return FidelityReport(out, values, loo_values, not_compared_figures(), stale)


def _check_kept_aside(fig: StoredFigure, plan: Plan, specs: PlanSpecs) -> None:
    """A kept-aside row's model and machine are its plan's, and its metric is a figure the plan's prediction
    has (the store's own rows are held to this by its tests): else BadInputError naming the field."""
    from planner.costmodel.calibration import available_metrics

    where = f"{fig.file}: figure '{fig.id}'"
    for field_name, said, planned in (
        ("model", fig.row.model, plan.model),
        ("hardware", fig.row.hardware, plan.hardware),
    ):
        if said and said != planned:
            raise BadInputError(
                f"{where}: the row's {field_name} is '{said}' but its plan '{fig.plan}' is of '{planned}'; fix the "
                f"row's {field_name} or its plan."
            )
    known = available_metrics(evaluate_plan(plan, plan_base_dir(fig.plan), specs=specs))
    if fig.metric not in known:
        phase = fig.metric.split(".", 1)[0]
        near = [m for m in known if m.startswith(f"{phase}.") and m.count(".") == 1] or known
        raise BadInputError(
            f"{where}: metric '{fig.metric}' is not a figure moeplan predicts for plan '{fig.plan}'; use one of: "
            f"{', '.join(near[:40])}."
        )


def kept_aside_rows(figures: list[tuple[StoredFigure, str]]) -> tuple[list[Row], list[tuple[StoredFigure, str]]]:
    """The static rows of figures from outside the store (`figures_at`), each checked against its plan
    (`_check_kept_aside`), a ratio based on its run's row; and the figures not compared, each with why:
    excluded ones and queueing-dominated ones (`compare: simulated`). `kept_aside_report` predicts the
    rows under the shipped values; benchmarks/fit_whatif.py --kept-aside under a what-if fit's."""
    every = {f.id: f for f, _ in figures}
    rows: list[Row] = []
    not_compared: list[tuple[StoredFigure, str]] = []
    for fig, why in figures:
        if why:
            not_compared.append((fig, f"excluded: {why}"))
        elif fig.compare == "simulated":
            not_compared.append((fig, "needs simulation: queueing-dominated (judged by the serving simulator)"))
        else:
            plan, specs = _plan_and_specs(fig.plan)
            _check_kept_aside(fig, plan, specs)
            base = every[fig.figure.ratio_to] if fig.figure.ratio_to else None
            rows.append(Row(fig, plan.hardware, base))
    return rows, not_compared


def kept_aside_report(figures: list[tuple[StoredFigure, str]]) -> FidelityReport:
    """Figures from outside the store (runs kept aside from it, `figures_at`), predicted under the
    shipped values as every plan is: nothing is fitted on them, so each error is out-of-sample and
    its leave-one-out column the same. Bands as the store's rows have them, widened by the machine
    group's whole held-out RMS error (no row of theirs is in it). A figure whose id the store also
    holds is named in `fitted_to` (the fit may have seen it), and so is every choice made with the
    row's figures in view (its `chosen_on`). Excluded figures and queueing-dominated
    ones (`compare: simulated`) are listed as not compared, each with why."""
    from planner.costmodel.store_fit import Model, fit_config, parameters

    config = fit_config()
    params = parameters(config)
    in_store = {f.id for f, _ in all_figures()}
    rows, not_compared = kept_aside_rows(figures)
    model = Model(config, rows, params)
    x = model.start()
    out = []
    for r in rows:
        predicted = model.predict(r, x)
        seen = [f"chosen: the shipped store (validation/) holds a figure '{r.id}'"] if r.id in in_store else []
        seen += [f"chosen: {c}" for c in r.figure.row.chosen_on]
        out.append(_fidelity_row(r, predicted, predicted, seen, {}, heldout_error(r.machine)))
    return FidelityReport(out, model.values(x), [], not_compared, False)
