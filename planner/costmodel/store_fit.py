"""Fit every machine group's factors and the expert-imbalance parameters to the measured rows, jointly.

The rows are the usable `compare: static` figures of the validation/ store (planner.specs.validation);
the groups, the factors each fits and their bounds are in validation/_fit.yaml (`FitConfig`). One
parameter vector holds every group's fitted factors and the engine imbalance model's three
parameters (popularity skew sigma, drift between placement windows, request correlation;
planner.costmodel.imbalance), so a row determines whatever it is sensitive to: a CloudMatrix384
decode row with one expert per die the skew, a prefill row with its default placement and its
perfectly balanced twin the drift, and so on. The objective is the fitter's
(planner.costmodel.fitting): bounded least squares on relative errors, each row weighted by its
`weight`, with SciPy's trust-region reflective method; the Jacobian is sparse (a group's factors
touch only its machines' rows), which SciPy's grouped finite differences use.

A group may be fitted `after` another (one engine on a chip whose kernel factors another group's rows
already determine): its machines take that group's factors except those it fits itself, and the fit
runs in two stages, so its rows move only its own factors. Stage one fits every other group and the
imbalance parameters on their rows; then each late group's own factors are fitted on its rows, stage
one's values held (one least squares per late group: they share no row, so one group's values do not
depend on where the solver stops for another's).

Leave-one-out (`leave_one_out`) refits every parameter without one deployment at a time (rows of
one plan, or sharing a `deployment` key, go together) and predicts the rows left out; a parameter
no remaining row is sensitive to cannot be refitted and stays at the full fit's value (it is
listed: for it the held-out prediction is not out-of-sample). Each refit starts four times, from the full
fit's values, from the configured start and from two seeded perturbations of the full fit, and keeps,
stage by stage, the one that fits that stage's remaining rows best (`_best_refit`).

A ratio figure (`ratio_to`) is predicted as the ratio of its plan's figure to its base figure's.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, load_plan_specs, plan_cost_context
from planner.costmodel.fitting import SENSITIVE_ELASTICITY, factor_value, metric_value, with_factors
from planner.costmodel.imbalance import (
    DEFAULT_DRIFT_SIGMA,
    DEFAULT_POPULARITY_SIGMA,
    DEFAULT_REQUEST_CORRELATION,
    EngineImbalance,
    ImbalanceModel,
)
from planner.costmodel.prefill import prefill_forward, prompt_alone_s
from planner.costmodel.reference import condition_imbalance
from planner.specs.catalog import load_hardware, load_plan, plan_base_dir
from planner.specs.files import load_mapping, validate_model
from planner.specs.hardware import HardwareSpec, Strict
from planner.specs.plan import Plan
from planner.specs.validation import StoredFigure, all_figures, usable_figures, validation_dir

IMBALANCE_PARAMS = ("popularity_sigma", "drift_sigma", "request_correlation")
IMBALANCE_DEFAULTS = {
    "popularity_sigma": DEFAULT_POPULARITY_SIGMA,
    "drift_sigma": DEFAULT_DRIFT_SIGMA,
    "request_correlation": DEFAULT_REQUEST_CORRELATION,
}
FIT_TOLERANCE = 1e-8  # xtol / ftol of the least-squares solver
DIFF_STEP = 2e-3  # relative finite-difference step (placements are discrete: a too small step sees steps)


class FitGroup(Strict):
    """Machines sharing one factor set, and the factors fitted with their bounds."""

    machines: list[str] = Field(min_length=1)
    note: str = ""
    factors: dict[str, tuple[float, float]]
    after: str | None = Field(
        None,
        description="a group whose fitted factors this group's machines take (those it does not fit itself); "
        "this group is fitted after that one, on its own rows, so its rows do not move the factors it takes",
    )


class SharedFactors(Strict):
    """Factors several groups share, one value fitted on all their rows: one chip's kernels under several
    stacks, or one engine's on several chips (validation/_fit.yaml says which and why)."""

    groups: list[str] = Field(min_length=2)
    note: str = ""
    factors: dict[str, tuple[float, float]]


class FitConfig(Strict):
    """validation/_fit.yaml."""

    groups: dict[str, FitGroup]
    shared: dict[str, SharedFactors] = Field(default_factory=dict)
    imbalance: dict[str, tuple[float, float]]
    start: dict[str, float] = Field(default_factory=dict, description="where the fit starts, per parameter")

    @model_validator(mode="after")
    def _after_names_a_first_stage_group(self) -> FitConfig:
        for name, g in self.groups.items():
            if g.after is None:
                continue
            if g.after not in self.groups:
                raise ValueError(f"group {name!r}: after names {g.after!r}, which is not a group here")
            if self.groups[g.after].after is not None:
                raise ValueError(f"group {name!r}: after names {g.after!r}, which is itself fitted after another")
        return self

    def group_of(self, machine: str) -> str | None:
        """The group a machine's factors are fitted in (None: not fitted)."""
        for name, g in self.groups.items():
            if machine in g.machines:
                return name
        return None

    def takes_from(self, group: str | None) -> list[str]:
        """The groups whose fitted factors a group's machines take, the group's own last (they win)."""
        if group is None:
            return []
        after = self.groups[group].after
        return [after, group] if after else [group]

    def late_groups(self) -> set[str]:
        """Groups fitted in the second stage (they name a group they are fitted after)."""
        return {name for name, g in self.groups.items() if g.after is not None}


def with_shared(config: FitConfig, factor: str, groups: Sequence[str]) -> FitConfig:
    """`config` with `factor` fitted as one value for `groups`, named `shared-<groups>` (benchmarks/fit_whatif.py).

    Each group gives up its own `factor` (or leaves the share of it it was in, whose other groups join
    this one); the share's bounds span the groups'. Raises ValueError naming a group that is not one
    or does not fit the factor."""
    groups_out = {n: g.model_copy(deep=True) for n, g in config.groups.items()}
    shared_out = {n: sh.model_copy(deep=True) for n, sh in config.shared.items()}
    members: list[str] = []
    bounds: list[tuple[float, float]] = []
    for g in groups:
        if g not in groups_out:
            raise ValueError(f"no group {g!r}; the groups: {', '.join(config.groups)}")
        if g in members:  # named twice, or already in through the share it was in
            continue
        if factor in groups_out[g].factors:
            bounds.append(groups_out[g].factors.pop(factor))
            members.append(g)
            continue
        held = [n for n, sh in shared_out.items() if g in sh.groups and factor in sh.factors]
        if not held:
            raise ValueError(f"group {g!r} does not fit {factor}")
        sh = shared_out[held[0]]
        bounds.append(sh.factors.pop(factor))
        members += [m for m in sh.groups if m not in members]
        if not sh.factors:
            del shared_out[held[0]]
    if len(members) < 2:
        raise ValueError(f"{factor}: a share needs two groups or more, got {members}")
    name = "shared-" + "-".join(members)
    shared_out[name] = SharedFactors(
        groups=members, factors={factor: (min(lo for lo, _ in bounds), max(hi for _, hi in bounds))}
    )
    return config.model_copy(update={"groups": groups_out, "shared": shared_out})


def without_share(config: FitConfig, name: str) -> FitConfig:
    """`config` with the share `name` split: each of its groups fits each of its factors on its own, in
    the share's bounds, from the share's start (benchmarks/fit_whatif.py). ValueError for an unknown name."""
    if name not in config.shared:
        raise ValueError(f"no share {name!r}; the shares: {', '.join(config.shared) or 'none'}")
    sh = config.shared[name]
    groups_out = {n: g.model_copy(deep=True) for n, g in config.groups.items()}
    start = dict(config.start)
    for g in sh.groups:
        groups_out[g].factors.update(sh.factors)
        for f in sh.factors:
            if f"{name}:{f}" in config.start:
                start[f"{g}:{f}"] = config.start[f"{name}:{f}"]
    shared_out = {n: s for n, s in config.shared.items() if n != name}
    return config.model_copy(update={"groups": groups_out, "shared": shared_out, "start": start})


def fit_config(folder: Path | None = None) -> FitConfig:
    """The shipped fit configuration (read once per folder)."""
    return _fit_config((folder or validation_dir()).resolve())


@lru_cache(maxsize=4)
def _fit_config(folder: Path) -> FitConfig:
    path = folder / "_fit.yaml"
    data, text = load_mapping(path, "fit configuration")
    return validate_model(FitConfig, data, str(path), "fit configuration", text)


@dataclass(frozen=True)
class Param:
    """One fitted parameter: a factor of one or more groups (`name:section.factor`) or an imbalance parameter."""

    name: str
    groups: tuple[str, ...]  # empty: an imbalance parameter (every row)
    factor: str
    low: float
    high: float

    @property
    def fixed(self) -> bool:
        """Whether the bounds meet: the parameter is held at that value, not fitted."""
        return self.low >= self.high

    @property
    def group(self) -> str | None:
        """The first group of a factor (None for an imbalance parameter)."""
        return self.groups[0] if self.groups else None


def parameters(config: FitConfig) -> list[Param]:
    """Every fitted parameter: groups' factors, shared factors, imbalance last."""
    out = [
        Param(f"{g}:{f}", (g,), f, lo, hi) for g, grp in config.groups.items() for f, (lo, hi) in grp.factors.items()
    ]
    out += [
        Param(f"{name}:{f}", tuple(sh.groups), f, lo, hi)
        for name, sh in config.shared.items()
        for f, (lo, hi) in sh.factors.items()
    ]
    out += [Param(f"imbalance.{p}", (), p, *config.imbalance[p]) for p in IMBALANCE_PARAMS if p in config.imbalance]
    return out


@lru_cache(maxsize=256)
def _plan_and_specs(ref: str) -> tuple[Plan, PlanSpecs, Path | None]:
    plan, _ = load_plan(ref)
    base = plan_base_dir(ref)
    return plan, load_plan_specs(plan, base), base


def _fast_metric(plan: Plan, specs: PlanSpecs, imbalance: ImbalanceModel, metric: str, base: Path | None) -> float:
    """The metric, from the decode step or prefill forward alone where it is one of theirs."""
    phase = metric.split(".", 1)[0]
    name = metric.split(".", 1)[1] if "." in metric else ""
    if phase == "decode" and plan.decode is not None and name in ("tpot_ms", "step_ms", "tokens_per_s_per_card"):
        ctx = plan_cost_context(plan, specs, imbalance)
        step = decode_step(ctx, plan.decode)
        if name == "tpot_ms":
            return float(step.tpot_s[0]) * 1e3
        if name == "step_ms":
            return float(step.step_s[0]) * 1e3
        return float(step.tokens_per_s_per_device[0]) * specs.hw.devices_per_card
    prefill_metrics = ("forward_ms", "prompt_alone_ms", "tokens_per_s_per_card")
    if phase == "prefill" and plan.prefill is not None and name in prefill_metrics:
        ctx = plan_cost_context(plan, specs, imbalance, plan.prefill.kv_transfer_bytes_per_s)
        if name == "prompt_alone_ms":
            return prompt_alone_s(ctx, plan.prefill) * 1e3
        fwd = prefill_forward(ctx, plan.prefill)
        if name == "forward_ms":
            return float(fwd.forward_s[0]) * 1e3
        return float(fwd.tokens_per_s_per_device[0]) * specs.hw.devices_per_card
    return metric_value(evaluate_plan(plan, base, imbalance, specs=specs), metric)


@dataclass(frozen=True)
class Row:
    """A fitted figure: what to predict, on which machine, and its base figure for a ratio."""

    figure: StoredFigure
    machine: str
    base: StoredFigure | None = None

    @property
    def id(self) -> str:
        return self.figure.id

    @property
    def measured(self) -> float:
        return self.figure.published

    @property
    def weight(self) -> float:
        return self.figure.weight

    @property
    def deployment(self) -> str:
        return self.figure.deployment


def fit_rows() -> list[Row]:
    """The usable static figures of the store, as rows of the fit (ratios with their base figure)."""
    every = {f.id: f for f, _ in all_figures()}
    out = []
    for fig in usable_figures(compare="static"):
        plan, _, _ = _plan_and_specs(fig.plan)
        base = every[fig.figure.ratio_to] if fig.figure.ratio_to else None
        out.append(Row(fig, plan.hardware, base))
    return out


class Model:
    """The cost model as a function of the parameter vector, for the fit's rows."""

    def __init__(self, config: FitConfig, rows: Sequence[Row], params: Sequence[Param]) -> None:
        self.config = config
        self.rows = list(rows)
        self.params = list(params)
        self._hw: dict[str, HardwareSpec] = {}
        for r in self.rows:
            self._hw.setdefault(r.machine, load_hardware(r.machine))

    def start(self) -> np.ndarray:
        """The shipped values (hardware files, imbalance defaults), clipped into the bounds."""
        out = []
        for p in self.params:
            if not p.groups:
                v = IMBALANCE_DEFAULTS[p.factor]
            else:
                machine = self.config.groups[p.groups[0]].machines[0]
                v = factor_value(self._hw.get(machine) or load_hardware(machine), p.factor)
            out.append(min(max(v, p.low), p.high))
        return np.array(out, dtype=float)

    def configured_start(self) -> np.ndarray:
        """The fit's documented start (validation/_fit.yaml `start`), the shipped value where it names none."""
        shipped = self.start()
        return np.array(
            [
                min(max(self.config.start.get(p.name, v), p.low), p.high)
                for p, v in zip(self.params, shipped, strict=True)
            ]
        )

    def values(self, x: np.ndarray) -> dict[str, float]:
        return {p.name: float(v) for p, v in zip(self.params, x, strict=True)}

    def machine(self, name: str, x: np.ndarray) -> HardwareSpec:
        """Machine `name` with its group's fitted factors from `x`."""
        hw = self._hw.get(name) or load_hardware(name)
        vals: dict[str, float] = {}
        for group in self.config.takes_from(self.config.group_of(name)):
            vals.update({p.factor: float(v) for p, v in zip(self.params, x, strict=True) if group in p.groups})
        return with_factors(hw, vals) if vals else hw

    def imbalance(self, x: np.ndarray) -> EngineImbalance:
        vals = dict(IMBALANCE_DEFAULTS)
        vals.update({p.factor: float(v) for p, v in zip(self.params, x, strict=True) if not p.groups})
        return EngineImbalance(vals["popularity_sigma"], vals["drift_sigma"], vals["request_correlation"])

    def _one(self, fig: StoredFigure, x: np.ndarray) -> float:
        plan, specs, base = _plan_and_specs(fig.plan)
        hw = self.machine(plan.hardware, x)
        imb = condition_imbalance(fig, self.imbalance(x))
        return _fast_metric(plan, PlanSpecs(specs.model, hw, specs.quant), imb, fig.metric, base)

    def predict(self, row: Row, x: np.ndarray) -> float:
        value = self._one(row.figure, x)
        return value / self._one(row.base, x) if row.base is not None else value

    def predict_all(self, x: np.ndarray, rows: Sequence[Row] | None = None) -> np.ndarray:
        return np.array([self.predict(r, x) for r in (self.rows if rows is None else rows)], dtype=float)

    def depends(self, row: Row, p: Param) -> bool:
        """Whether the row can depend on the parameter (its group or the one it takes from, or imbalance)."""
        return not p.groups or any(g in p.groups for g in self.config.takes_from(self.config.group_of(row.machine)))


@dataclass
class FitOutcome:
    """A fit: values, every row's prediction, and what the rows determine."""

    params: list[Param]
    values: dict[str, float]
    predicted: dict[str, float]
    elasticity: dict[str, dict[str, float]]  # row id -> parameter -> d ln predicted / d ln parameter
    undetermined: list[str] = field(default_factory=list)
    success: bool = True
    message: str = ""

    def sensitive(self, row_id: str) -> list[str]:
        """Parameters the row determines (elasticity >= SENSITIVE_ELASTICITY)."""
        return [n for n, e in self.elasticity.get(row_id, {}).items() if abs(e) >= SENSITIVE_ELASTICITY]


def _elasticities(model: Model, x: np.ndarray, rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """d ln predicted / d ln parameter of every row for every parameter it can depend on (central differences)."""
    base = model.predict_all(x, rows)
    out: dict[str, dict[str, float]] = {r.id: {} for r in rows}
    for j, p in enumerate(model.params):
        idx = [i for i, r in enumerate(rows) if model.depends(r, p)]
        if not idx:
            continue
        v = x[j]
        ref = v if v > 0 else max(p.high, 1e-6)
        step = 0.02 * ref
        up, dn = x.copy(), x.copy()
        up[j], dn[j] = min(v + step, p.high), max(v - step, p.low)
        if up[j] == dn[j]:
            continue
        sub = [rows[i] for i in idx]
        pu, pd = model.predict_all(up, sub), model.predict_all(dn, sub)
        for k, i in enumerate(idx):
            out[rows[i].id][p.name] = float((pu[k] - pd[k]) / base[i] / ((up[j] - dn[j]) / ref))
    return out


def _scales(params: Sequence[Param]) -> np.ndarray:
    return np.array([max(p.high - p.low, 1e-9) for p in params], dtype=float)


def weighted_residuals(model: Model, x: np.ndarray, rows: Sequence[Row]) -> np.ndarray:
    """Each row's relative error at `x`, times the square root of its weight (what the fit squares and sums)."""
    measured = np.array([r.measured for r in rows])
    sqrt_weight = np.sqrt(np.array([r.weight for r in rows]))
    out: np.ndarray = sqrt_weight * (model.predict_all(x, rows) / measured - 1.0)
    return out


def _stages(model: Model, rows: Sequence[Row], free_idx: Sequence[int]) -> list[tuple[list[Row], list[int]]]:
    """The fit's stages: every group not fitted after another (with the imbalance parameters) on its rows,
    then each group fitted after one (validation/_fit.yaml `after`) on its own rows, the first stage's
    values fixed. The late groups share no row and no parameter, so each is a least-squares problem of its
    own: fitted one by one, a group's values do not depend on where the solver stops for another's."""
    late = model.config.late_groups()
    if not late:
        return [(list(rows), list(free_idx))]
    late_idx = [j for j in free_idx if model.params[j].groups and set(model.params[j].groups) <= late]
    early_rows = [r for r in rows if model.config.group_of(r.machine) not in late]
    early_idx = [j for j in free_idx if j not in late_idx]
    stages = [(early_rows, early_idx)]
    for group in sorted(late):
        group_rows = [r for r in rows if model.config.group_of(r.machine) == group]
        group_idx = [j for j in late_idx if group in model.params[j].groups]
        stages.append((group_rows, group_idx))
    return stages


def _least_squares(
    model: Model, rows: Sequence[Row], x0: np.ndarray, free_idx: Sequence[int]
) -> tuple[np.ndarray, bool, str]:
    """Bounded least squares of the `free_idx` parameters on `rows`, the others held at `x0`."""
    from scipy.optimize import least_squares

    if not free_idx or not rows:
        return x0.copy(), True, "nothing to fit"
    free_idx = list(free_idx)
    lo = np.array([model.params[j].low for j in free_idx])
    hi = np.array([model.params[j].high for j in free_idx])
    scale = _scales([model.params[j] for j in free_idx])

    def full(z: np.ndarray) -> np.ndarray:
        x = x0.copy()
        x[free_idx] = z * scale
        return x

    def residual(z: np.ndarray) -> np.ndarray:
        return weighted_residuals(model, full(z), rows)

    sparsity = np.array([[1 if model.depends(r, model.params[j]) else 0 for j in free_idx] for r in rows], dtype=int)
    z0 = np.clip(x0[free_idx], lo, hi) / scale
    z0 = np.clip(z0, lo / scale + 1e-9, hi / scale - 1e-9)
    res = least_squares(
        residual,
        z0,
        bounds=(lo / scale, hi / scale),
        method="trf",
        diff_step=DIFF_STEP,
        xtol=FIT_TOLERANCE,
        ftol=FIT_TOLERANCE,
        # one parameter: a dense Jacobian (SciPy's sparse trust-region step needs two dimensions)
        jac_sparsity=sparsity if len(free_idx) > 1 else None,
    )
    return full(res.x), bool(res.success), str(res.message)


def fit(
    model: Model,
    rows: Sequence[Row] | None = None,
    start: np.ndarray | None = None,
    free: Sequence[str] | None = None,
    diagnostics: bool = True,
) -> FitOutcome:
    """Bounded least squares of every (or every `free`) parameter on `rows` (default: all), stage by stage."""
    rows = list(model.rows if rows is None else rows)
    x = model.start() if start is None else np.array(start, dtype=float)
    names = [p.name for p in model.params]
    # a parameter whose bounds meet is held at that value (benchmarks/fit_whatif.py fixes factors so)
    free_idx = [j for j, n in enumerate(names) if (free is None or n in free) and not model.params[j].fixed]
    success, messages = True, []
    for stage_rows, stage_idx in _stages(model, rows, free_idx):
        x, ok, message = _least_squares(model, stage_rows, x, stage_idx)
        success = success and ok
        messages.append(message)
    predicted = dict(zip([r.id for r in rows], model.predict_all(x, rows), strict=True))
    elasticity = _elasticities(model, x, rows) if diagnostics else {}
    undetermined = []
    if diagnostics:
        for j in free_idx:
            n = names[j]
            if not any(abs(elasticity[r.id].get(n, 0.0)) >= SENSITIVE_ELASTICITY for r in rows):
                undetermined.append(n)
    message = messages[0] if len(set(messages)) == 1 else "; ".join(messages)
    return FitOutcome(list(model.params), model.values(x), predicted, elasticity, undetermined, success, message)


def with_bounds(params: Sequence[Param], bounds: Mapping[str, tuple[float, float]]) -> list[Param]:
    """`params` with the named ones' bounds replaced (equal bounds hold a parameter at that value).

    Raises ValueError naming an unknown parameter (with the known ones) or bounds whose low exceeds high."""
    known = {p.name for p in params}
    for name, (low, high) in bounds.items():
        if name not in known:
            raise ValueError(f"no fitted parameter {name!r}; the fitted ones: {', '.join(sorted(known))}")
        if low > high:
            raise ValueError(f"{name}: low {low:g} is above high {high:g}")
    return [replace(p, low=bounds[p.name][0], high=bounds[p.name][1]) if p.name in bounds else p for p in params]


def weighted_sse(model: Model, x: np.ndarray, rows: Sequence[Row] | None = None) -> float:
    """The fit's objective at `x`: the weighted sum of squared relative errors over `rows` (default: all)."""
    return float(np.sum(weighted_residuals(model, x, model.rows if rows is None else rows) ** 2))


def _perturbed(model: Model, start: np.ndarray, rng: np.random.Generator, indices: Sequence[int]) -> np.ndarray:
    """`start` with each parameter of `indices` times U(0.7, 1.3) (a tenth of its bound's width standing
    in for a zero), clipped into its bounds."""
    x = np.array(start, dtype=float)
    for j in indices:
        p = model.params[j]
        base = x[j] if x[j] > 0 else 0.1 * (p.high - p.low)
        x[j] = min(max(base * rng.uniform(0.7, 1.3), p.low), p.high)
    return x


def restarts(
    model: Model, start: np.ndarray, count: int, seed: int = 0, include_start: bool = True
) -> list[tuple[float, np.ndarray]]:
    """Fits from `start` (unless `include_start` is False: the caller has that fit) and from `count`
    seeded perturbations of it (every parameter times U(0.7, 1.3), a tenth of its bound's width standing
    in for a zero, clipped into its bounds), in that order, each as (weighted squared error, values).
    The least-squares solver stops where its steps become small, which on this piecewise objective
    (placements are discrete) depends on where it starts."""
    rng = np.random.default_rng(seed)
    starts = [np.array(start, dtype=float)] if include_start else []
    every = range(len(model.params))
    starts += [_perturbed(model, start, rng, every) for _ in range(count)]
    out = []
    for x0 in starts:
        done = fit(model, start=x0, diagnostics=False)
        x = np.array([done.values[p.name] for p in model.params])
        out.append((weighted_sse(model, x), x))
    return out


@dataclass
class HeldOut:
    """One leave-out refit: the deployment's rows, their held-out predictions, and what could not be refitted."""

    deployment: str
    rows: list[str]
    predicted: dict[str, float]
    values: dict[str, float]
    kept: list[str]


LOO_PERTURBED_STARTS = 2  # seeded perturbations of the full fit each leave-one-out refit starts from too


def _best_refit(model: Model, rows: Sequence[Row], x_full: np.ndarray, live: Sequence[str], seed: int) -> np.ndarray:
    """The `live` parameters refitted on `rows` from several starts, stage by stage (`_stages`): each stage
    is fitted from the full fit's values, the configured start and `LOO_PERTURBED_STARTS` seeded
    perturbations of the full fit (each live parameter times U(0.7, 1.3), as `restarts`), and keeps the one
    that fits that stage's rows best, the stages before it held at their choice; the others stay at the
    full fit's values. The objective is piecewise (placements are discrete): from the full fit's values
    alone the solver can stop at once where a lower point of the same rows exists. Choosing by each stage's
    own rows keeps a late group's refit independent of another's."""
    names = [p.name for p in model.params]
    live_idx = [j for j, n in enumerate(names) if n in live and not model.params[j].fixed]
    starts = [x_full]
    configured = x_full.copy()
    configured[live_idx] = model.configured_start()[live_idx]
    starts.append(configured)
    rng = np.random.default_rng(seed)
    starts += [_perturbed(model, x_full, rng, live_idx) for _ in range(LOO_PERTURBED_STARTS)]
    x = np.array(x_full, dtype=float)
    for stage_rows, stage_idx in _stages(model, rows, live_idx):
        best: tuple[float, np.ndarray] | None = None
        for x0 in starts:
            begin = x.copy()
            begin[stage_idx] = x0[stage_idx]
            refit, _, _ = _least_squares(model, stage_rows, begin, stage_idx)
            sse = weighted_sse(model, refit, stage_rows)
            if best is None or sse < best[0]:
                best = (sse, refit)
        assert best is not None
        x = best[1]
    return x


def leave_one_out(model: Model, full_fit: FitOutcome, deployments: Sequence[str] | None = None) -> list[HeldOut]:
    """Refit every parameter without each deployment in turn (see the module docstring); `deployments`:
    only these (default: every deployment of the rows)."""
    x_full = np.array([full_fit.values[p.name] for p in model.params])
    groups: dict[str, list[Row]] = {}
    for r in model.rows:
        groups.setdefault(r.deployment, []).append(r)
    out = []
    for dep, held in groups.items():
        if deployments is not None and dep not in deployments:
            continue
        rest = [r for r in model.rows if r.deployment != dep]
        # a parameter only the held-out rows are sensitive to cannot be refitted without them
        live = [
            p.name
            for p in model.params
            if any(abs(full_fit.elasticity.get(r.id, {}).get(p.name, 0.0)) >= SENSITIVE_ELASTICITY for r in rest)
        ]
        kept = [
            p.name
            for p in model.params
            if p.name not in live
            and any(abs(full_fit.elasticity.get(r.id, {}).get(p.name, 0.0)) >= SENSITIVE_ELASTICITY for r in held)
        ]
        x = _best_refit(model, rest, x_full, live, seed=zlib.crc32(dep.encode()))
        pred = {r.id: model.predict(r, x) for r in held}
        out.append(HeldOut(dep, [r.id for r in held], pred, model.values(x), kept))
    return out


# A refit from another start whose weighted squared error is within this fraction of the full fit's fits the
# rows as well as it does: the rows do not choose between the two, so a parameter's range spans both.
NEAR_OPTIMAL_SSE_FRACTION = 0.01


def near_optimal(tried: Sequence[tuple[float, np.ndarray]], best_sse: float) -> list[np.ndarray]:
    """The values of the fits of `tried` (from `restarts`) that are within NEAR_OPTIMAL_SSE_FRACTION of
    `best_sse`, the full fit's weighted squared error."""
    return [x for sse, x in tried if sse <= best_sse * (1.0 + NEAR_OPTIMAL_SSE_FRACTION)]


def spread(
    full_fit: FitOutcome, held: Sequence[HeldOut], alternatives: Sequence[np.ndarray] = ()
) -> dict[str, tuple[float, float]]:
    """Lowest and highest value of every parameter over the full fit, the leave-one-out refits and
    `alternatives` (near-optimal fits from other starts: `near_optimal`)."""
    out = {}
    for j, p in enumerate(full_fit.params):
        vals = [full_fit.values[p.name]] + [h.values[p.name] for h in held] + [float(x[j]) for x in alternatives]
        out[p.name] = (min(vals), max(vals))
    return out


HELDOUT_MIN_FIGURES = 3  # a group's held-out RMS needs this many figures; one or two do not measure a spread


def heldout_errors(
    model: Model, held: Sequence[HeldOut], x_full: np.ndarray, holdouts: Sequence[Row] = ()
) -> dict[str, dict[str, Any]]:
    """Every held-out error the fit has measured: each fit row's leave-one-out error, and each holdout
    row's error at the full fit (no fit ever saw it), with the row's machine group and whether the store
    marks the figure `known_miss`."""

    def entry(r: Row, pred: float, kind: str) -> dict[str, Any]:
        return {
            "group": model.config.group_of(r.machine) or "*",
            "error": round(pred / r.measured - 1.0, 6),
            "kind": kind,
            "known_miss": bool(r.figure.known_miss),
        }

    by_id = {r.id: r for r in model.rows}
    out = {rid: entry(by_id[rid], pred, "leave-one-out") for h in held for rid, pred in h.predicted.items()}
    if holdouts:
        on_holdouts = Model(model.config, holdouts, model.params)
        out.update({r.id: entry(r, on_holdouts.predict(r, x_full), "holdout") for r in holdouts})
    return out


def group_rms(errors: Mapping[str, Mapping[str, Any]], without: str | None = None) -> dict[str, float]:
    """Root mean square held-out error of each machine group, over its figures but `without` and those
    marked `known_miss` (each known miss is reported by name on the plans of its machine and phase, not
    spread over every band there); a group with fewer than `HELDOUT_MIN_FIGURES` figures has none, and '*'
    is the largest group's (for machines no group or too few figures measure)."""
    by_group: dict[str, list[float]] = {}
    for rid, e in errors.items():
        if rid != without and not e["known_miss"]:
            by_group.setdefault(str(e["group"]), []).append(float(e["error"]))
    out = {g: float(np.sqrt(np.mean(np.square(v)))) for g, v in by_group.items() if len(v) >= HELDOUT_MIN_FIGURES}
    out["*"] = max(out.values()) if out else 0.0
    return out


def outcome_json(
    full_fit: FitOutcome,
    held: Sequence[HeldOut],
    digest: str,
    errors: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The fit and its leave-one-out refits as the JSON document shipped beside the cost model."""
    return {
        "digest": digest,
        "environment": fit_environment(),
        "values": {k: round(v, 8) for k, v in full_fit.values.items()},
        "predicted": {k: round(v, 6) for k, v in full_fit.predicted.items()},
        "elasticity": {r: {k: round(v, 5) for k, v in e.items()} for r, e in full_fit.elasticity.items()},
        "undetermined": full_fit.undetermined,
        "heldout_errors": {k: dict(v) for k, v in (errors or {}).items()},
        "leave_one_out": [
            {
                "deployment": h.deployment,
                "rows": h.rows,
                "predicted": {k: round(v, 6) for k, v in h.predicted.items()},
                "values": {k: round(v, 8) for k, v in h.values.items()},
                "kept": h.kept,
            }
            for h in held
        ],
    }


def fit_environment() -> dict[str, str]:
    """The numerical libraries the fit runs on. Other numpy or SciPy releases stop the bounded least
    squares elsewhere on the fit's flat directions (numpy 2.4.6 / SciPy 1.17.1 against the previous
    environment moved the A3 attention factor 0.2178 -> 0.2181), so the shipped outcome says which
    ones made it and the test extra pins them."""
    import scipy

    return {"numpy": np.__version__, "scipy": scipy.__version__}


def finite(values: Mapping[str, float]) -> bool:
    """True when every value is a finite number."""
    return all(math.isfinite(v) for v in values.values())


OUTCOME_FILE = Path(__file__).resolve().parent / "data" / "fit_outcome.json"
# what the fit's outcome depends on: the rows and plans, the catalogs and the cost model's code
_DIGEST_FOLDERS = ("validation", "plans", "models", "hardware")
_DIGEST_CODE = ("costmodel", "placement", "specs")


def inputs_digest() -> str:
    """A hash of everything the fit and its leave-one-out refits depend on."""
    import hashlib

    from planner.specs.catalog import catalog_dir

    h = hashlib.sha256()
    for kind in _DIGEST_FOLDERS:
        folder = catalog_dir(kind)  # type: ignore[arg-type]
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix in (".yaml", ".yml", ".json"):
                h.update(path.relative_to(folder).as_posix().encode())
                h.update(path.read_bytes())
    root = Path(__file__).resolve().parent.parent
    for sub in _DIGEST_CODE:
        for path in sorted((root / sub).glob("*.py")):
            h.update(path.read_bytes())
    h.update((Path(__file__).resolve().parent / "data" / "imbalance.yaml").read_bytes())
    return h.hexdigest()[:16]


@dataclass
class StoredOutcome:
    """The shipped fit outcome (planner/costmodel/data/fit_outcome.json)."""

    values: dict[str, float]
    predicted: dict[str, float]
    elasticity: dict[str, dict[str, float]]
    loo_predicted: dict[str, float]
    loo_kept: dict[str, list[str]]
    loo_values: list[dict[str, float]]
    current: bool
    environment: dict[str, str] = field(default_factory=dict)

    def sensitive(self, row_id: str) -> list[str]:
        return [n for n, e in self.elasticity.get(row_id, {}).items() if abs(e) >= SENSITIVE_ELASTICITY]


def stored_outcome() -> StoredOutcome | None:
    """The shipped outcome, or None if there is none; `current` says whether it matches the inputs."""
    import json

    try:
        doc = json.loads(OUTCOME_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    loo_pred: dict[str, float] = {}
    kept: dict[str, list[str]] = {}
    for h in doc.get("leave_one_out", []):
        loo_pred.update(h["predicted"])
        for r in h["rows"]:
            kept[r] = list(h["kept"])
    return StoredOutcome(
        values=doc["values"],
        predicted=doc["predicted"],
        elasticity=doc["elasticity"],
        loo_predicted=loo_pred,
        loo_kept=kept,
        loo_values=[h["values"] for h in doc.get("leave_one_out", [])],
        current=doc.get("digest") == inputs_digest(),
        environment={str(k): str(v) for k, v in doc.get("environment", {}).items()},
    )


@lru_cache(maxsize=1)
def shipped_heldout_errors() -> dict[str, dict[str, Any]]:
    """The shipped held-out errors (`heldout_errors`; {} when no outcome is shipped)."""
    import json

    try:
        doc = json.loads(OUTCOME_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): dict(v) for k, v in doc.get("heldout_errors", {}).items()}


def heldout_error(machine: str, without: str | None = None) -> float:
    """The model's measured held-out error (RMS) on the machine's group (`group_rms`); machines whose
    group no or too few figures measure get the largest group's. `without`: a figure left out of it (a
    row's own error does not widen its own band in `moeplan fidelity`)."""
    errors = shipped_heldout_errors()
    if not errors:
        return 0.0
    rms = group_rms(errors, without)
    group = fit_config().group_of(machine)
    return rms.get(group or "*", rms["*"])
