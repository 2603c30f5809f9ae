"""The imbalance a real engine sees: intrinsic skew, drift between windows, per-step overdispersion."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.evaluate import load_plan_specs
from planner.costmodel.imbalance import (
    DEFAULT_DRIFT_SIGMA,
    DEFAULT_POPULARITY_SIGMA,
    DEFAULT_REQUEST_CORRELATION,
    EngineImbalance,
    SkewImbalance,
    busiest_over_mean,
    default_imbalance_model,
    drifted_windows,
    gini_of_lognormal,
    lognormal_sigma_for_gini,
)
from planner.costmodel.prefill import prefill_forward
from planner.specs.catalog import catalog_dir, load_plan


def test_default_is_the_engine_model_with_sourced_parameters():
    model = default_imbalance_model()
    assert isinstance(model, EngineImbalance)
    assert (model.popularity_sigma, model.drift_sigma, model.request_correlation) == (
        DEFAULT_POPULARITY_SIGMA,
        DEFAULT_DRIFT_SIGMA,
        DEFAULT_REQUEST_CORRELATION,
    )
    assert "drift" in model.describe()


def test_gini_and_sigma_are_inverse():
    for g in (0.1, 0.24, 0.4):
        assert gini_of_lognormal(lognormal_sigma_for_gini(g)) == pytest.approx(g, rel=1e-9)
    assert lognormal_sigma_for_gini(0.24) == pytest.approx(0.432, abs=1e-3)


def test_drift_keeps_the_skew_of_both_windows():
    a, b = drifted_windows(256, 0.35, 0.25, layers=64)
    sa, sb = np.log(a).std(axis=1).mean(), np.log(b).std(axis=1).mean()
    assert sa == pytest.approx(0.35, rel=0.05)
    assert sb == pytest.approx(0.35, rel=0.05)
    change = (np.log(b) - np.log(a)).std()
    assert change == pytest.approx(0.25, rel=0.05)


# the mechanism tests use a stated skew (the Gini of 0.24 that arXiv 2605.20982 reports for MLA-routed
# models, facts.md section 9) and drift, not the fitted ones: the fit may put the skew anywhere
SKEW_SIGMA = lognormal_sigma_for_gini(0.24)


def test_placement_scored_on_the_next_window_is_worse_than_on_its_own():
    m = EngineImbalance(popularity_sigma=SKEW_SIGMA, drift_sigma=0.3)
    for ep, slots in ((288, 2), (32, 9), (72, 4)):
        assert m.static_factor(256, ep, slots) > m.fitted_factor(256, ep, slots) + 0.02


def test_without_drift_the_next_window_is_the_fitted_one():
    m = EngineImbalance(drift_sigma=0.0)
    assert m.static_factor(256, 32, 9) == pytest.approx(m.fitted_factor(256, 32, 9))


def test_one_expert_per_device_cannot_be_balanced_and_drift_does_not_change_it_much():
    # no placement freedom: the hottest expert sets the factor, whatever the window
    still = EngineImbalance(popularity_sigma=SKEW_SIGMA, drift_sigma=0.0).static_factor(256, 256, 1)
    drifting = EngineImbalance(popularity_sigma=SKEW_SIGMA, drift_sigma=0.3).static_factor(256, 256, 1)
    assert still > 1.6  # the busiest die carries the hottest expert's share, well above the mean
    assert drifting == pytest.approx(still, rel=0.1)


def test_overdispersion_grows_with_a_requests_share_of_a_device():
    m = EngineImbalance()
    d = m.dispersion(np.array([0.06, 1.0, 1024.0]))
    assert d[0] == pytest.approx(1.0) and d[1] == pytest.approx(1.0)
    assert d[2] > 100
    # Poisson-only models have no such term
    assert not hasattr(SkewImbalance(), "dispersion")


def test_overdispersion_shrinks_more_slowly_than_poisson():
    lam = np.array([1e3, 1e4, 1e5])
    poisson = busiest_over_mean(lam, 1.0, 32) - 1.0
    # a request of 4K tokens at EP32: a fixed share of each device's count comes in chunks
    correlated = busiest_over_mean(lam, 1.0, 32, EngineImbalance().dispersion(1024.0)) - 1.0
    assert np.all(correlated > poisson)
    assert correlated[-1] / correlated[0] == pytest.approx(poisson[-1] / poisson[0], rel=1e-6)
    assert correlated[-1] > 3 * poisson[-1]


def test_real_imbalance_costs_prefill_throughput_against_perfect_balance():
    plan, _ = load_plan("cm-p-paper")
    specs = load_plan_specs(plan, catalog_dir("plans"))
    real = CostContext(specs.model, specs.hw, specs.quant, plan.workload)
    perfect = CostContext(specs.model, specs.hw, specs.quant, plan.workload, SkewImbalance(0.0))
    assert plan.prefill is not None
    r = prefill_forward(real, plan.prefill).tokens_per_s_per_device[0]
    p = prefill_forward(perfect, plan.prefill).tokens_per_s_per_device[0]
    # the CloudMatrix384 paper measures 6,688 / 5,655 = 1.18; the joint fit leaves the model's gap larger
    # (validation/ marks CM-P balanced as a known miss), but imbalance always costs prefill throughput
    assert 1.1 < p / r < 1.4
