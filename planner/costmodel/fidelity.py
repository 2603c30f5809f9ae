"""Leave-one-out fidelity: how the cost model does on published rows it was not fitted to.

For every machine of the validation/ store, the factors its hardware file marks
`fitted_on: published` (the set benchmarks/calibrate_factors.py fits) are refitted, with the
fitter of `planner.costmodel.fitting`, on the machine's `role: fit` rows minus one; the row left
out is then predicted under the refitted factors (its leave-one-out error). A row with
`role: validation`, or on a machine with no published-fitted factor, was never fitted to: its
error is already out-of-sample and is reported as such. Rows of one plan (a step's TPOT and its tokens/s) are one
measurement and are left out together; a fitted factor that no other deployment determines
stays at the full fit's value and is listed (`loo_undetermined`): for it the row is not
out-of-sample. Each fit row also lists the fitted factors
it determines (elasticity >= `SENSITIVE_ELASTICITY`), and the spread of the refitted factors is
what `hardware/*.yaml` stores as each fitted factor's range (`factor_spread`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from planner.costmodel.evaluate import PlanSpecs, load_plan_specs
from planner.costmodel.fitting import (
    SENSITIVE_ELASTICITY,
    FitResult,
    Observation,
    factor_names,
    factor_spec,
    fit_factors,
    leave_out,
    sensitivities,
)
from planner.costmodel.reference import condition_imbalance, evaluate_row, published_rows
from planner.costmodel.uncertainty import prediction_uncertainty
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.hardware import HardwareSpec
from planner.specs.plan import Plan
from planner.specs.validation import StoredFigure, all_figures

# The imbalance parameters of planner/costmodel/imbalance.py were each chosen on one figure; until
# they are fitted jointly with the machine factors these rows are in-sample for them.
IMBALANCE_CHOSEN_ON = {
    "CM-D": "expert skew sigma",
    "CM-D TPOT": "expert skew sigma",
    "CM-P EPLB": "imbalance drift between placement windows",
    "SGLang-H100-P": "imbalance request routing correlation",
}


@dataclass
class FidelityRow:
    """One published row: in-sample and leave-one-out predictions, and what it determines."""

    row: StoredFigure
    hardware: str
    plan: str
    predicted: float
    loo_predicted: float | None
    used_for_fit: bool
    fitted_factors: list[str]
    sensitivity: dict[str, float]
    band: tuple[float, float] | None = None
    loo_undetermined: list[str] = field(default_factory=list)

    @property
    def chosen(self) -> str:
        """The imbalance parameter chosen on this figure ('' for none)."""
        return IMBALANCE_CHOSEN_ON.get(self.row.id, "")

    @property
    def in_band(self) -> bool | None:
        """Whether the published figure lies inside the prediction's band (None without a band)."""
        return None if self.band is None else self.band[0] <= self.row.published <= self.band[1]

    @property
    def error(self) -> float:
        """Relative error under the shipped factors."""
        return self.predicted / self.row.published - 1.0

    @property
    def loo_error(self) -> float | None:
        """Relative error with the factors refitted without this row (the error itself for validation rows)."""
        return None if self.loo_predicted is None else self.loo_predicted / self.row.published - 1.0

    def as_json(self) -> dict[str, object]:
        """The row of `moeplan fidelity --json`."""
        return {
            "name": self.row.id,
            "hardware": self.hardware,
            "metric": self.row.metric,
            "published": self.row.published,
            "predicted": round(self.predicted, 4),
            "error": round(self.error, 6),
            "loo_predicted": None if self.loo_predicted is None else round(self.loo_predicted, 4),
            "loo_error": None if self.loo_error is None else round(self.loo_error, 6),
            "out_of_sample": not self.used_for_fit,
            "loo_undetermined": self.loo_undetermined,
            "fitted_factors": self.fitted_factors,
            "sensitivity": {k: round(v, 4) for k, v in self.sensitivity.items()},
            "band": None if self.band is None else [round(x, 4) for x in self.band],
            "in_band": self.in_band,
        }


@dataclass
class MachineFit:
    """The published-row fit of one machine."""

    hardware: str
    names: list[str]
    full: FitResult | None
    loo_values: list[dict[str, float]] = field(default_factory=list)

    def determined_by(self, name: str) -> list[str]:
        """Labels of the fit rows that are sensitive to fitted factor `name`."""
        if self.full is None or name not in self.full.names:
            return []
        return [self.full.labels[i] for i in range(len(self.full.labels)) if name in self.full.determined_by(i)]

    def spread(self) -> dict[str, tuple[float, float]]:
        """Lowest and highest value of each fitted factor over the full fit and the leave-one-out refits."""
        out: dict[str, tuple[float, float]] = {}
        if self.full is None:
            return out
        for n in self.names:
            vals = [self.full.values[n]] + [v[n] for v in self.loo_values if n in v]
            out[n] = (min(vals), max(vals))
        return out


@dataclass
class FidelityReport:
    """Every row, and every machine's fit; the figures not compared, each with why."""

    rows: list[FidelityRow]
    machines: dict[str, MachineFit]
    not_compared: list[tuple[StoredFigure, str]] = field(default_factory=list)

    def worst_loo(self) -> FidelityRow | None:
        """The row with the largest |leave-one-out error|."""
        rows = [r for r in self.rows if r.loo_error is not None]
        return max(rows, key=lambda r: abs(r.loo_error or 0.0)) if rows else None


@lru_cache(maxsize=64)
def _plan_and_specs(name: str) -> tuple[Plan, PlanSpecs]:
    plan, _ = load_plan(name)
    return plan, load_plan_specs(plan, plan_base_dir(name))


def published_fitted_factors(hw: HardwareSpec) -> list[str]:
    """The factors of `hw` marked `fitted_on: published`."""
    return [n for n in factor_names(hw) if factor_spec(hw, n).fitted_on == "published"]


def row_observation(row: StoredFigure) -> Observation:
    """A published row as an observation for the fitter."""
    plan, specs = _plan_and_specs(row.plan)
    imb = condition_imbalance(row)
    return Observation(row.id, plan, specs, row.metric, row.published, row.weight, imb, plan_base_dir(row.plan))


def fidelity_report(rows: list[StoredFigure] | None = None) -> FidelityReport:
    """In-sample and leave-one-out errors of every published row (see the module docstring)."""
    rows = rows if rows is not None else published_rows()
    by_hw: dict[str, list[int]] = {}
    hws: dict[str, HardwareSpec] = {}
    for i, r in enumerate(rows):
        _, specs = _plan_and_specs(r.plan)
        by_hw.setdefault(specs.hw.name, []).append(i)
        hws[specs.hw.name] = specs.hw
    out: list[FidelityRow | None] = [None] * len(rows)
    machines: dict[str, MachineFit] = {}
    for hw_name, idx in by_hw.items():
        hw = hws[hw_name]
        names = published_fitted_factors(hw)
        obs = [row_observation(rows[i]) for i in idx]
        fit_idx = [k for k, i in enumerate(idx) if rows[i].role == "fit"] if names else []
        fit_obs = [obs[k] for k in fit_idx]
        sens_all = sensitivities(obs, hw, factor_names(hw))
        all_names = factor_names(hw)
        full = fit_factors(fit_obs, hw, names) if fit_obs else None
        # rows of one plan are one deployment: they are left out together
        by_plan: dict[str, list[int]] = {}
        for j, k in enumerate(fit_idx):
            by_plan.setdefault(rows[idx[k]].plan, []).append(j)
        refits = leave_out(fit_obs, hw, names, list(by_plan.values()), start=full.values if full else None)
        machines[hw_name] = MachineFit(hw_name, names, full, [r.values for r in refits])
        loo_of: dict[int, tuple[float, list[str]]] = {}
        for refit in refits:
            for j in refit.held_out:
                loo_of[fit_idx[j]] = (fit_obs[j].predict(refit.hw), refit.undetermined)
        for k, i in enumerate(idx):
            plan, specs = _plan_and_specs(rows[i].plan)
            res = evaluate_row(rows[i], specs=specs)
            unc = prediction_uncertainty(plan, specs, res.prediction, plan_base_dir(rows[i].plan), obs[k].imbalance)
            block, _, figure = rows[i].metric.partition(".")
            # a ratio of two runs has no band of its own (both plans' factors move together)
            fig = None if rows[i].figure.ratio_to else unc.bands.get(block, {}).get(figure)
            used = k in loo_of
            sens = {n: float(sens_all[k, j]) for j, n in enumerate(all_names) if abs(sens_all[k, j]) >= 1e-3}
            determined = [n for n in names if abs(sens.get(n, 0.0)) >= SENSITIVE_ELASTICITY] if used else []
            out[i] = FidelityRow(
                row=rows[i],
                hardware=hw_name,
                plan=rows[i].plan,
                predicted=res.predicted,
                loo_predicted=loo_of[k][0] if used else res.predicted,
                loo_undetermined=loo_of[k][1] if used else [],
                used_for_fit=used,
                fitted_factors=determined,
                sensitivity=sens,
                band=None if fig is None else (fig.low, fig.high),
            )
    return FidelityReport([r for r in out if r is not None], machines, not_compared_figures())


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
