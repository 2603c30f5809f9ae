"""The TPOT of the request at the judged percentile of its own MTP acceptance, in every prediction."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costmodel.acceptance_spread import (
    default_acceptance_spread,
    spread_fit_runs,
    tpot_percentile_factor,
)
from planner.costmodel.evaluate import evaluate_plan
from planner.simulate.mtp import request_steps_scale
from planner.specs.catalog import load_plan
from planner.specs.plan import SLO


@pytest.mark.parametrize("k,a,tau", [(1, 0.8, 0.37), (3, 0.7146, 0.37), (2, 0.6, 1.0)])
@pytest.mark.parametrize("pct", [10.0, 50.0, 90.0, 99.0])
def test_the_factor_is_the_quantile_of_the_requests_the_simulator_draws(k, a, tau, pct):
    drawn = request_steps_scale(k, a, tau, 400_000, np.random.default_rng(7))
    assert tpot_percentile_factor(k, a, tau, pct) == pytest.approx(float(np.percentile(drawn, pct)), rel=0.003)


def test_the_factor_grows_with_the_percentile_the_drafts_and_tau():
    a, tau = 0.78, default_acceptance_spread()
    by_pct = [tpot_percentile_factor(3, a, tau, p) for p in (10, 50, 90, 99, 100)]
    assert by_pct == sorted(by_pct) and by_pct[0] < 1.0 < by_pct[2]
    assert tpot_percentile_factor(1, a, tau, 90) < tpot_percentile_factor(3, a, tau, 90)
    assert tpot_percentile_factor(3, a, tau, 90) < tpot_percentile_factor(3, a, 2 * tau, 90)
    # at 100 the request that accepts no draft: one token a step, over the mean steps per token (drawn)
    z = np.random.default_rng(3).standard_normal(400_000)
    drawn = 1.0 / (1.0 + np.exp(-(np.log(a / (1 - a)) + tau * z)))
    mean_steps_per_token = float(np.mean(1.0 / (1.0 + drawn + drawn**2 + drawn**3)))
    assert by_pct[-1] == pytest.approx(1.0 / mean_steps_per_token, rel=1e-3)
    assert tpot_percentile_factor(0, a, tau, 90) == 1.0 and tpot_percentile_factor(3, a, 0.0, 99) == 1.0
    with pytest.raises(ValueError, match="percentile"):
        tpot_percentile_factor(3, a, tau, 0.0)


def test_a_plan_with_mtp_carries_the_percentile_tpot_and_says_when_only_the_mean_meets_the_slo():
    plan, _ = load_plan("a2-d70")  # MTP 1 draft, TPOT SLO 100 ms, mean TPOT about 98 ms
    d = evaluate_plan(plan).decode
    assert d is not None and d.acceptance_percentile == 90.0
    factor = tpot_percentile_factor(1, plan.workload.mtp_acceptance, default_acceptance_spread(), 90.0)
    assert d.tpot_at_acceptance_percentile_ms == pytest.approx(d.tpot_ms * factor, rel=1e-3)
    assert d.meets_tpot_slo and d.tpot_at_acceptance_percentile_ms > 100.0
    notes = [n for n in evaluate_plan(plan).notes if n.startswith("TPOT at p90")]
    assert len(notes) == 1 and f"{len(spread_fit_runs())} DeepSeek-R1 MTP runs" in notes[0]
    ask = float(notes[0].rsplit("--tpot-ms ", 1)[1])
    assert ask == pytest.approx(100.0 / factor, abs=0.1)
    # judged at the median the request takes about the mean, and the SLO holds there: no note
    median = plan.model_copy(update={"workload": plan.workload.model_copy(update={"slo_percentile": 50.0})})
    pm = evaluate_plan(median)
    assert pm.decode is not None and pm.decode.acceptance_percentile == 50.0
    assert pm.decode.tpot_at_acceptance_percentile_ms < d.tpot_ms
    assert not [n for n in pm.notes if n.startswith("TPOT at p")]
    # a looser SLO that the p90 request meets too: no note
    loose = plan.model_copy(update={"slo": SLO(tpot_ms=120.0)})
    assert not [n for n in evaluate_plan(loose).notes if n.startswith("TPOT at p")]


def test_a_plan_without_drafts_carries_no_percentile_tpot():
    plan, _ = load_plan("a2-d70")
    plan = plan.model_copy(update={"decode": plan.decode.model_copy(update={"mtp_tokens": 0})})
    d = evaluate_plan(plan).decode
    assert d is not None and d.acceptance_percentile is None and d.tpot_at_acceptance_percentile_ms is None
