"""Fit a machine's named factors to measured figures: bounded least squares on relative errors.

A *factor* is any `Factor` (fraction of peak) or `Seconds` (fixed cost) of a hardware spec's
`efficiency`, `fixed_costs` and `overlap` sections, named by its dotted path
(`efficiency.matmul`, `fixed_costs.collective`, ...), so factors a machine file adds later are
fittable without touching this module. An *observation* is a plan, a metric (a dotted path into
its `predicted` block) and the measured value.

`fit_factors` minimises sum_i w_i (predicted_i / measured_i - 1)^2 over the chosen factors within
bounds, with `scipy.optimize.least_squares` (method "trf", the bounded trust-region reflective
algorithm; SciPy reference, scipy.optimize.least_squares, SciPy >= 1.11). It returns the factors,
an interval per factor (two standard errors from the Jacobian covariance J^T J at the solution,
scaled by the residual variance, clipped to the bounds; the whole bounds for a factor the rows
cannot determine), every row's residual, each row's sensitivity to each factor (elasticity
d ln predicted / d ln factor), and which factors the rows cannot determine: no row is sensitive to
it, or only a combination of it with others is determined (a near-zero singular value of the
weighted elasticity matrix), or there are fewer rows than factors.

SciPy is imported inside the functions that need it: commands that do not fit never load it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.costmodel.evaluate import PlanSpecs, evaluate_plan
from planner.costmodel.imbalance import ImbalanceModel
from planner.costmodel.prediction import Prediction
from planner.errors import BadInputError
from planner.specs.hardware import Factor, HardwareSpec, Seconds
from planner.specs.plan import Plan

FACTOR_SECTIONS = ("efficiency", "fixed_costs", "overlap")
SENSITIVE_ELASTICITY = 0.05  # a row "determines" a factor when 1% on the factor moves it by >= 0.05%
DEGENERATE_SINGULAR_RATIO = 1e-2  # singular values below this share of the largest: a combination only
NOISE_FLOOR = 0.01  # relative measurement noise assumed when the rows leave no degrees of freedom
FINITE_STEP = 0.02  # relative step of the finite differences behind the sensitivities


def factor_names(hw: HardwareSpec) -> list[str]:
    """Every fittable factor of the machine, as 'section.field'."""
    names = []
    for section in FACTOR_SECTIONS:
        obj = getattr(hw, section)
        for fname in type(obj).model_fields:
            if isinstance(getattr(obj, fname), Factor | Seconds):
                names.append(f"{section}.{fname}")
    return names


# optional factors a machine may leave out, and the factor that stands for them then
OPTIONAL_FACTORS = {"efficiency.prefill_attention_compute": "efficiency.attention_compute"}


def factor_spec(hw: HardwareSpec, name: str) -> Factor | Seconds:
    """The Factor or Seconds at a dotted name; unknown names are a BadInputError listing the known ones.

    An optional factor the machine leaves out (OPTIONAL_FACTORS) is the factor standing for it.
    """
    section, _, fname = name.partition(".")
    obj = getattr(hw, section, None) if section in FACTOR_SECTIONS else None
    spec = getattr(obj, fname, None) if obj is not None else None
    if spec is None and name in OPTIONAL_FACTORS:
        return factor_spec(hw, OPTIONAL_FACTORS[name])
    if not isinstance(spec, Factor | Seconds):
        raise BadInputError(f"unknown factor '{name}' of hardware '{hw.name}'; known: {', '.join(factor_names(hw))}.")
    return spec


def factor_value(hw: HardwareSpec, name: str) -> float:
    """The value of a named factor."""
    return float(factor_spec(hw, name).value)


def is_efficiency(hw: HardwareSpec, name: str) -> bool:
    """True for a fraction of peak (higher is faster); False for a fixed cost (higher is slower)."""
    return isinstance(factor_spec(hw, name), Factor)


def with_factors(
    hw: HardwareSpec, values: Mapping[str, float], updates: Mapping[str, Mapping[str, Any]] | None = None
) -> HardwareSpec:
    """A copy of `hw` with named factors set to `values` (and other fields of them from `updates`)."""
    by_section: dict[str, dict[str, Any]] = {}
    for name in set(values) | set(updates or {}):
        section, _, fname = name.partition(".")
        spec = factor_spec(hw, name)
        change: dict[str, Any] = dict((updates or {}).get(name, {}))
        if name in values:
            change["value"] = float(values[name])
        by_section.setdefault(section, {})[fname] = spec.model_copy(update=change)
    out: dict[str, Any] = {s: getattr(hw, s).model_copy(update=u) for s, u in by_section.items()}
    return hw.model_copy(update=out)


def default_bounds(hw: HardwareSpec, name: str) -> tuple[float, float]:
    """Physically meaningful bounds: a fraction of peak in [0.05, 1]; a fixed cost in [0, 10x its value]."""
    if is_efficiency(hw, name):
        return 0.05, 1.0
    v = factor_value(hw, name)
    return 0.0, max(10.0 * v, 1e-3)


def metric_value(prediction: Prediction, metric: str) -> float:
    """The figure at a dotted path such as 'decode.tokens_per_s_per_card' (KeyError when absent or
    not a number: a section, a yes/no flag, a name)."""
    node: Any = prediction.model_dump()
    for part in metric.split("."):
        if not isinstance(node, dict) or node.get(part) is None:
            raise KeyError(metric)
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise KeyError(metric)
    return float(node)


@dataclass(frozen=True)
class Observation:
    """One measured figure of one plan."""

    label: str
    plan: Plan
    specs: PlanSpecs
    metric: str
    measured: float
    weight: float = 1.0
    imbalance: ImbalanceModel | None = None
    base_dir: Path | None = None

    def predict(self, hw: HardwareSpec) -> float:
        """The cost model's figure for this observation on machine `hw`."""
        specs = PlanSpecs(self.specs.model, hw, self.specs.quant)
        return metric_value(evaluate_plan(self.plan, self.base_dir, self.imbalance, specs=specs), self.metric)


def predict_all(observations: Sequence[Observation], hw: HardwareSpec) -> np.ndarray:
    """Every observation's predicted figure on `hw`."""
    return np.array([o.predict(hw) for o in observations], dtype=float)


@dataclass
class FitResult:
    """What a fit found, and how well the rows pin it down."""

    names: list[str]
    start: dict[str, float]
    values: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    stderr: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    predicted: np.ndarray
    measured: np.ndarray
    weights: np.ndarray
    sensitivity: np.ndarray  # rows x factors: d ln predicted / d ln factor
    undetermined: dict[str, str]
    at_bound: list[str]
    hw: HardwareSpec
    success: bool = True
    message: str = ""
    labels: list[str] = field(default_factory=list)

    @property
    def residuals(self) -> np.ndarray:
        """Relative error of every row under the fitted factors."""
        out: np.ndarray = self.predicted / self.measured - 1.0
        return out

    def determined_by(self, row: int) -> list[str]:
        """The fitted factors row `row` is sensitive to."""
        return [n for j, n in enumerate(self.names) if abs(self.sensitivity[row, j]) >= SENSITIVE_ELASTICITY]


def _scales(hw: HardwareSpec, names: Sequence[str]) -> np.ndarray:
    """Unit of each fitted parameter: 1 for fractions, the nominal value (or 1 us) for fixed costs."""
    out = []
    for n in names:
        v = factor_value(hw, n)
        out.append(1.0 if is_efficiency(hw, n) else (v if v > 0 else 1e-6))
    return np.array(out, dtype=float)


def sensitivities(observations: Sequence[Observation], hw: HardwareSpec, names: Sequence[str]) -> np.ndarray:
    """Elasticity of every row to every factor, by central differences of FINITE_STEP relative size."""
    base = predict_all(observations, hw)
    out = np.zeros((len(observations), len(names)))
    for j, n in enumerate(names):
        v = factor_value(hw, n)
        lo_b, hi_b = (0.0, 1.0) if is_efficiency(hw, n) else (0.0, math.inf)
        ref = v if v > 0 else _scales(hw, [n])[0]
        up, down = min(v + FINITE_STEP * ref, hi_b), max(v - FINITE_STEP * ref, lo_b)
        p_up = predict_all(observations, with_factors(hw, {n: up}))
        p_dn = predict_all(observations, with_factors(hw, {n: down}))
        out[:, j] = (p_up - p_dn) / base / ((up - down) / ref)
    return out


def _undetermined(elasticity: np.ndarray, weights: np.ndarray, names: Sequence[str], rows: int) -> dict[str, str]:
    """Factors the rows cannot pin down, each with the reason."""
    out: dict[str, str] = {}
    if not len(names):
        return out
    if rows == 0:
        return {n: "no rows to fit" for n in names}
    weighted = elasticity * np.sqrt(weights)[:, None]
    for j, n in enumerate(names):
        if np.max(np.abs(elasticity[:, j])) < SENSITIVE_ELASTICITY:
            out[n] = "no row is sensitive to it"
    live = [j for j, n in enumerate(names) if n not in out]
    if not live:
        return out
    sub = weighted[:, live]
    _, s, vt = np.linalg.svd(sub, full_matrices=True)
    s_full = np.zeros(len(live))
    s_full[: len(s)] = s
    smax = float(s_full.max()) if s_full.size else 0.0
    for k in range(len(live)):
        if s_full[k] <= DEGENERATE_SINGULAR_RATIO * smax:
            vec = vt[k]
            involved = [names[live[i]] for i in range(len(live)) if abs(vec[i]) >= 0.3]
            for i in range(len(live)):
                if abs(vec[i]) >= 0.3 and names[live[i]] not in out:
                    others = [x for x in involved if x != names[live[i]]]
                    out[names[live[i]]] = (
                        "only its combination with " + ", ".join(others) + " is determined"
                        if others
                        else "the rows do not determine it"
                    )
    return out


def fit_factors(
    observations: Sequence[Observation],
    hw: HardwareSpec,
    names: Sequence[str],
    bounds: Mapping[str, tuple[float, float]] | None = None,
    start: Mapping[str, float] | None = None,
    with_diagnostics: bool = True,
) -> FitResult:
    """Fit `names` of `hw` to the observations (see the module docstring)."""
    names = list(names)
    for n in names:
        factor_spec(hw, n)
    bnds = {n: (bounds or {}).get(n) or default_bounds(hw, n) for n in names}
    measured = np.array([o.measured for o in observations], dtype=float)
    weights = np.array([o.weight for o in observations], dtype=float)
    start_vals = {n: float((start or {}).get(n, factor_value(hw, n))) for n in names}
    scales = _scales(hw, names)
    lo = np.array([bnds[n][0] for n in names]) / scales
    hi = np.array([bnds[n][1] for n in names]) / scales
    success, message = True, "no factors to fit"
    values = dict(start_vals)
    if names and len(observations):
        from scipy.optimize import least_squares

        sw = np.sqrt(weights)

        def to_values(x: np.ndarray) -> dict[str, float]:
            return {n: float(v) for n, v in zip(names, x * scales, strict=True)}

        def residual(x: np.ndarray) -> np.ndarray:
            out: np.ndarray = sw * (predict_all(observations, with_factors(hw, to_values(x))) / measured - 1.0)
            return out

        x0 = np.clip(np.array([start_vals[n] for n in names]) / scales, lo, hi)
        x0 = np.where(x0 <= lo, lo + 1e-6 * np.maximum(hi - lo, 1e-9), x0)
        res = least_squares(residual, x0, bounds=(lo, hi), method="trf", diff_step=1e-3, xtol=1e-10, ftol=1e-10)
        values = to_values(res.x)
        success, message = bool(res.success), str(res.message)
        jac = res.jac
    fitted_hw = with_factors(hw, values) if names else hw
    predicted = predict_all(observations, fitted_hw) if len(observations) else np.zeros(0)
    stderr = {n: math.inf for n in names}
    intervals = {n: bnds[n] for n in names}
    undetermined: dict[str, str] = {}
    elasticity = np.zeros((len(observations), len(names)))
    at_bound = []
    if with_diagnostics and len(observations):
        elasticity = sensitivities(observations, fitted_hw, names)
        undetermined = _undetermined(elasticity, weights, names, len(observations))
        if names:
            m, k = len(observations), len(names)
            r = np.sqrt(weights) * (predicted / measured - 1.0)
            s2 = max(float(r @ r) / max(m - k, 1), NOISE_FLOOR**2)
            cov = np.linalg.pinv(jac.T @ jac) * s2
            for j, n in enumerate(names):
                if n in undetermined:
                    continue
                se = math.sqrt(max(float(cov[j, j]), 0.0)) * scales[j]
                stderr[n] = se
                intervals[n] = (max(bnds[n][0], values[n] - 2 * se), min(bnds[n][1], values[n] + 2 * se))
            for n in names:
                span = bnds[n][1] - bnds[n][0]
                if min(values[n] - bnds[n][0], bnds[n][1] - values[n]) <= 1e-4 * span:
                    at_bound.append(n)
    return FitResult(
        names=names,
        start=start_vals,
        values=values,
        bounds=bnds,
        stderr=stderr,
        intervals=intervals,
        predicted=predicted,
        measured=measured,
        weights=weights,
        sensitivity=elasticity,
        undetermined=undetermined,
        at_bound=at_bound,
        hw=fitted_hw,
        success=success,
        message=message,
        labels=[o.label for o in observations],
    )


@dataclass
class LeftOut:
    """One leave-out refit: the factors fitted without some rows, and what the rest could not pin."""

    held_out: list[int]
    values: dict[str, float]
    undetermined: list[str]
    hw: HardwareSpec


def leave_out(
    observations: Sequence[Observation],
    hw: HardwareSpec,
    names: Sequence[str],
    groups: Sequence[Sequence[int]] | None = None,
    start: Mapping[str, float] | None = None,
) -> list[LeftOut]:
    """For each group of rows (default: each row alone), refit `names` on the other rows.

    Rows of one deployment (a step's TPOT and its tokens/s) are one measurement: group them, or
    the row left out is still fitted through its twin. A factor no remaining row is sensitive to
    cannot be refitted; it stays at `start` (default: its value in `hw`) and is listed as
    undetermined, so the held-out prediction is not out-of-sample for it.
    """
    names = list(names)
    parts: list[list[int]] = (
        [list(g) for g in groups] if groups is not None else [[i] for i in range(len(observations))]
    )
    base = {n: float((start or {}).get(n, factor_value(hw, n))) for n in names}
    base_hw = with_factors(hw, base) if names else hw
    elasticity = sensitivities(observations, base_hw, names) if names and len(observations) else None
    out: list[LeftOut] = []
    for g in parts:
        rest = [k for k in range(len(observations)) if k not in g]
        if elasticity is None:
            out.append(LeftOut(g, {}, [], base_hw))
            continue
        live = [
            n for j, n in enumerate(names) if rest and float(np.abs(elasticity[rest, j]).max()) >= SENSITIVE_ELASTICITY
        ]
        stuck = [n for n in names if n not in live]
        if not live:
            out.append(LeftOut(g, dict(base), stuck, base_hw))
            continue
        fit = fit_factors([observations[k] for k in rest], base_hw, live, start=base, with_diagnostics=False)
        out.append(LeftOut(g, {**base, **fit.values}, stuck, fit.hw))
    return out
