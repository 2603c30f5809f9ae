"""Bands on predictions: every figure at the slow and the fast end of the machine's factor ranges.

Each factor of a hardware file may carry a `range` (how it was derived is stored next to it:
leave-one-out spread of the published-row fit, the source's own spread, or a stated assumption).
A prediction's band is the plan evaluated twice more: on the *pessimistic* machine (every
efficiency at the low end of its range, every fixed cost at its high end) and on the *optimistic*
one (the other way round). Taking every factor at its end together is deliberate: the A2 factors
were fitted jointly to the same few rows, so their errors need not cancel. The cost model is
monotone in every factor (a higher efficiency or a lower fixed cost never slows a step), so the
two machines bound the figure over the ranges. The span is then widened by `BAND_Z` times the model's
held-out error on the machine's group, so that a band is meant to hold the measured figure nine times in
ten; `moeplan fidelity` counts how often it does, each row's band widened without its own error.

Two plans compared under the same machine (`FactorScenario`s: the two corners, then each factor
alone at either end) share their factor errors: `lead_scenarios` is how the ranking says whether
rank 1's lead survives the uncertainty.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, remembered
from planner.costmodel.fitting import factor_names, factor_spec, is_efficiency, with_factors
from planner.costmodel.imbalance import EngineImbalance, ImbalanceModel, default_imbalance_model, fitted_parameters
from planner.costmodel.prediction import BandFigure, Prediction, Uncertainty
from planner.specs.hardware import HardwareSpec
from planner.specs.plan import Plan

BAND_LEVEL = 0.90
# How far past the factor corners a band reaches, in held-out errors: the two-sided 90% point of a normal
# error (1.645), so that the band is meant to hold the measured figure nine times in ten. Not fitted: the
# store checks it held out (`moeplan fidelity`: the count of rows inside their bands, each widened without
# its own error, and the counts at 0, 1 and 1.96 held-out errors beside it).
BAND_Z = NormalDist().inv_cdf(0.5 + BAND_LEVEL / 2)

BAND_METHOD = (
    "slow/fast end: every factor at the end of its range that makes the figure slower/faster (a time or a "
    "cost per output token larger, a rate smaller; ranges in the hardware file), and the engine imbalance "
    "model's skew, drift and request correlation at the slow/fast end of theirs (ranges: the joint fit's "
    f"leave-one-out refits, and sources), widened by {BAND_Z:.3f} times (the two-sided {BAND_LEVEL:.0%} point "
    "of a normal error) the model's RMS held-out error on the machine's group of measured rows (the fit "
    "rows' leave-one-out errors and the holdout rows' errors, known misses excluded: each is named on the "
    "plans of its machine and phase; the largest group's on a machine with fewer than three such figures)"
)

# The figures that carry a band, per block of `predicted`.
BAND_FIGURES: dict[str, tuple[str, ...]] = {
    "decode": ("tokens_per_s_per_card", "tpot_ms", "step_ms"),
    "prefill": ("tokens_per_s_per_card", "ttft_ms", "forward_ms"),
    "colocated": ("tokens_per_s_per_card", "tpot_ms", "ttft_ms"),
    "afd": ("tokens_per_s_per_card", "tpot_ms", "step_ms"),
    "economics": ("cost_per_million_output_tokens", "joules_per_output_token"),
    "system": ("output_tokens_per_s_per_card", "requests_per_s"),
}


@dataclass(frozen=True)
class FactorScenario:
    """A machine with some factors moved to an end of their ranges."""

    label: str
    hw: HardwareSpec


def factor_ranges(hw: HardwareSpec) -> dict[str, tuple[float, float]]:
    """(low, high) of every factor that carries a range."""
    out = {}
    for n in factor_names(hw):
        r = factor_spec(hw, n).range
        if r is not None and r.high > r.low:
            out[n] = (float(r.low), float(r.high))
    return out


def _end(hw: HardwareSpec, name: str, slow: bool, ranges: dict[str, tuple[float, float]]) -> float:
    lo, hi = ranges[name]
    return (lo if slow else hi) if is_efficiency(hw, name) else (hi if slow else lo)


def corner(hw: HardwareSpec, slow: bool) -> HardwareSpec:
    """Every ranged factor at its slow (pessimistic) or fast (optimistic) end.

    Inside `evaluation_memo` a machine's corner is built once, so that the band and the lead check
    score plans on the same corner object (and the memo answers the second asking).
    """

    def make() -> HardwareSpec:
        ranges = factor_ranges(hw)
        return with_factors(hw, {n: _end(hw, n, slow, ranges) for n in ranges})

    return remembered(("corner", id(hw), slow), (hw,), make)


def scenarios(hw: HardwareSpec) -> list[FactorScenario]:
    """The two corners, then each ranged factor alone at its slow and at its fast end."""
    out = [FactorScenario("every factor at its slow end", corner(hw, True))]
    out.append(FactorScenario("every factor at its fast end", corner(hw, False)))
    ranges = factor_ranges(hw)
    for n in ranges:
        for slow in (True, False):
            value = _end(hw, n, slow, ranges)
            out.append(
                FactorScenario(f"{n} at {value:.4g} ({'slow' if slow else 'fast'} end)", with_factors(hw, {n: value}))
            )
    return out


def imbalance_corner(imbalance: ImbalanceModel | None, slow: bool) -> ImbalanceModel | None:
    """The engine imbalance model with every parameter at the slow (high) or fast (low) end of its
    fitted range; a drift of 0 (placed from the served distribution itself) stays 0. Other models
    (a user's measured loads, perfect balance, a chosen skew) are not varied."""
    imb = imbalance if imbalance is not None else default_imbalance_model()
    if not isinstance(imb, EngineImbalance):
        return imbalance
    r = fitted_parameters()
    end = "high" if slow else "low"

    def moved(name: str, value: float) -> float:
        lo, hi = r[name]["low"], r[name]["high"]
        default = r[name]["value"]
        # a parameter the caller set away from the fit (a what-if) keeps its own value
        return r[name][end] if abs(value - default) < 1e-12 and hi > lo else value

    drift = 0.0 if imb.drift_sigma == 0 else moved("drift_sigma", imb.drift_sigma)
    return EngineImbalance(
        moved("popularity_sigma", imb.popularity_sigma), drift, moved("request_correlation", imb.request_correlation)
    )


def _figures(prediction: Prediction, extra: dict[str, tuple[str, ...]] | None = None) -> dict[str, dict[str, float]]:
    dump: dict[str, Any] = prediction.model_dump()
    wanted = dict(BAND_FIGURES)
    for block, names in (extra or {}).items():
        have = wanted.get(block, ())
        wanted[block] = have + tuple(n for n in names if n not in have)
    out: dict[str, dict[str, float]] = {}
    for block, names in wanted.items():
        node = dump.get(block)
        if node:
            out[block] = {n: float(node[n]) for n in names if node.get(n) is not None}
    return out


def widened(values: list[float], error: float) -> tuple[float, float]:
    """(low, high) of `values` widened by the relative `error` on either side."""
    return min(values) * (1.0 - error), max(values) * (1.0 + error)


def band_widening(machine: str, without: str | None = None) -> float:
    """The relative widening of a band on `machine`: `BAND_Z` times the model's RMS held-out error on its
    group (`heldout_error`; `without`: a figure left out of that error)."""
    from planner.costmodel.store_fit import heldout_error

    return BAND_Z * heldout_error(machine, without)


def prediction_uncertainty(
    plan: Plan,
    specs: PlanSpecs,
    mid: Prediction,
    base_dir: Path | None = None,
    imbalance: ImbalanceModel | None = None,
    extra: dict[str, tuple[str, ...]] | None = None,
    error: float | None = None,
) -> Uncertainty:
    """The band of every banded figure of `mid` (the plan's prediction on `specs.hw`), and of the figures
    `extra` names (block -> figures; `moeplan fidelity` bands each row's own metric). `error`: the relative
    widening of the corners (default: the machine's, `band_widening`; 0 gives the corners alone)."""
    hw = specs.hw
    figures = {"mid": _figures(mid, extra)}
    for key, slow in (("slow", True), ("fast", False)):
        spec = PlanSpecs(specs.model, corner(hw, slow), specs.quant)
        imb = imbalance_corner(imbalance, slow)
        same = imb is imbalance
        figures[key] = _figures(evaluate_plan(plan, base_dir, imb, specs=spec, hbm_from=mid if same else None), extra)
    err = band_widening(hw.name) if error is None else error
    bands: dict[str, dict[str, BandFigure]] = {}
    for block, values in figures["mid"].items():
        bands[block] = {}
        for name, m in values.items():
            low, high = widened([figures["slow"][block][name], figures["fast"][block][name], m], err)
            bands[block][name] = BandFigure(low=round(low, 4), mid=m, high=round(high, 4))
    ranges = {n: [lo, hi] for n, (lo, hi) in factor_ranges(hw).items()}
    return Uncertainty(method=BAND_METHOD, factors=ranges, bands=bands)


def with_uncertainty(prediction: Prediction, uncertainty: Uncertainty) -> Prediction:
    """The prediction with its `uncertainty` block set."""
    return prediction.model_copy(update={"uncertainty": uncertainty})
