"""The measured figures the cost model is checked against: the `validation/` store, as the cost model sees it.

The store (planner.specs.validation, docs/validation.md) holds one file per source; this module
turns each usable `compare: static` figure into something the cost model can evaluate: its plan,
the imbalance condition it was measured under, and the predicted figure to compare. Tests,
`benchmarks/calibrate_factors.py`, the README tables and `moeplan fidelity` all read the figures
through here.

The row's expert condition picks the imbalance model: `engine` (the default engine imbalance,
planner.costmodel.imbalance), `in_distribution` (the deployment placed its experts from the very
distribution it served: no drift between placement windows) or `balanced` (perfect balance: no
skew, no request correlation, Poisson sampling only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.costmodel.evaluate import evaluate_plan
from planner.costmodel.fitting import metric_value
from planner.costmodel.forced_balance import ForcedBalance
from planner.costmodel.imbalance import EngineImbalance, ImbalanceModel, SkewImbalance, default_imbalance_model
from planner.costmodel.prediction import Prediction
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.validation import StoredFigure, all_figures, usable_figures


@dataclass(frozen=True)
class RowResult:
    """A figure with what the cost model predicts for it."""

    row: StoredFigure
    predicted: float
    prediction: Prediction

    @property
    def error(self) -> float:
        """Relative error of the prediction against the measured figure."""
        return self.predicted / self.row.published - 1.0

    @property
    def within_tolerance(self) -> bool:
        """True when |error| <= the figure's tolerance."""
        return abs(self.error) <= self.row.tolerance


def published_rows() -> list[StoredFigure]:
    """Every usable figure the static cost model is compared with (`compare: static`)."""
    return usable_figures(compare="static")


def condition_imbalance(row: StoredFigure, engine: ImbalanceModel | None = None) -> ImbalanceModel:
    """The imbalance model of the row's expert condition, from `engine` (default: the shipped one)."""
    base = engine if engine is not None else default_imbalance_model()
    if row.experts == "balanced":
        return SkewImbalance(0.0)
    if row.experts == "forced":
        assert row.row.forced_experts_per_device is not None
        return ForcedBalance(row.row.forced_experts_per_device)
    if row.experts == "in_distribution" and isinstance(base, EngineImbalance):
        return EngineImbalance(base.popularity_sigma, 0.0, base.request_correlation)
    return base


def evaluate_row(row: StoredFigure, imbalance: ImbalanceModel | None = None, **plan_specs: Any) -> RowResult:
    """Evaluate a figure's plan under its expert condition (or `imbalance`, given) and pick its metric.

    A figure with `ratio_to` is a ratio of two runs: its prediction is the ratio of the two plans'
    predictions, each under its own row's condition (`imbalance`, if given, applies to both).
    """
    plan, _ = load_plan(row.plan)
    imb = imbalance if imbalance is not None else condition_imbalance(row)
    prediction = evaluate_plan(plan, plan_base_dir(row.plan), imb, **plan_specs)
    value = metric_value(prediction, row.metric)
    if row.figure.ratio_to:
        base = ratio_reference(row)
        base_plan, _ = load_plan(base.plan)
        base_imb = imbalance if imbalance is not None else condition_imbalance(base)
        value /= metric_value(evaluate_plan(base_plan, plan_base_dir(base.plan), base_imb), base.metric)
    return RowResult(row, value, prediction)


def ratio_reference(row: StoredFigure) -> StoredFigure:
    """The figure a `ratio_to` figure is a ratio to."""
    for fig, _ in all_figures():
        if fig.id == row.figure.ratio_to:
            return fig
    raise KeyError(row.figure.ratio_to)
