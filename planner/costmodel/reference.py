"""The published figures the cost model is checked against (plans/published.yaml).

Each row names a shipped plan, the predicted figure to compare (a dotted path into `predicted`),
the published value and the tolerance. Tests, the calibration script, the README table and
`moeplan fidelity` all read the rows from that one file.

`role` says whether a row is one factors may be fitted to or a validation row (a public figure
from another document, e.g. arXiv 2506.12708 or 2508.02520, named in the row's `source` and kept
aside); `fitted` names what a row determines (a parameter fitted to one row is marked so, e.g.
the engine imbalance's); `known_miss` explains a validation row the cost model does
not reproduce within its tolerance yet (reported, not hidden; the tolerance test skips only those
rows and checks they still miss). `drift_sigma: 0` says a deployment placed its experts from the
very distribution it served (no drift between placement windows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from planner.costmodel.evaluate import evaluate_plan
from planner.costmodel.fitting import metric_value
from planner.costmodel.imbalance import EngineImbalance, ImbalanceModel, SkewImbalance
from planner.costmodel.prediction import Prediction
from planner.specs.catalog import catalog_dir, load_plan
from planner.specs.files import load_mapping, validate_model
from planner.specs.hardware import Strict


class PublishedRow(Strict):
    """One published figure and how to reproduce it."""

    id: str
    plan: str
    metric: str
    published: float
    tolerance: float = Field(gt=0, lt=1)
    weight: float = Field(default=1.0, gt=0)
    skew_sigma: float | None = Field(default=None, ge=0)
    drift_sigma: float | None = Field(
        default=None, ge=0, description="the deployment placed experts from the served distribution itself: 0"
    )
    role: Literal["fit", "validation"] = Field(
        default="fit",
        description="fit: factors marked fitted_on 'published' are fitted to it; validation: never fitted to",
    )
    unit: str = ""
    source: str
    note: str = ""
    fitted: str = Field(default="", description="the factors fitted to this row ('' : an out-of-sample check)")
    known_miss: str = Field(default="", description="why a validation row is outside its tolerance today")


class PublishedRows(Strict):
    """The file's top level."""

    rows: list[PublishedRow]


@dataclass(frozen=True)
class RowResult:
    """A row with what the cost model predicts for it."""

    row: PublishedRow
    predicted: float
    prediction: Prediction

    @property
    def error(self) -> float:
        """Relative error of the prediction against the published figure."""
        return self.predicted / self.row.published - 1.0

    @property
    def within_tolerance(self) -> bool:
        """True when |error| <= the row's tolerance."""
        return abs(self.error) <= self.row.tolerance


def published_rows() -> list[PublishedRow]:
    """The rows of plans/published.yaml."""
    path = catalog_dir("plans") / "published.yaml"
    data, text = load_mapping(path, "published figures")
    return validate_model(PublishedRows, data, str(path), "published figures", text).rows


def evaluate_row(row: PublishedRow, imbalance: ImbalanceModel | None = None, **plan_specs: Any) -> RowResult:
    """Evaluate a row's plan (with its skew override) and pick its metric."""
    plan, _ = load_plan(row.plan)
    if imbalance is None and row.skew_sigma is not None:
        imbalance = SkewImbalance(row.skew_sigma)
    if imbalance is None and row.drift_sigma is not None:
        imbalance = EngineImbalance(drift_sigma=row.drift_sigma)
    prediction = evaluate_plan(plan, catalog_dir("plans"), imbalance, **plan_specs)
    return RowResult(row, metric_value(prediction, row.metric), prediction)
