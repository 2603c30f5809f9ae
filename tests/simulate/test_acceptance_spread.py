"""Each request's own MTP acceptance: its steps' factor, what it does to a run, and the shipped fit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from planner.cli.app import app
from planner.costmodel.acceptance_spread import default_acceptance_spread, spread_record
from planner.simulate.build import RandomDataset, Traffic
from planner.simulate.mtp import StepSampler, request_steps_scale
from planner.simulate.routing import engine_routing
from planner.simulate.run import simulate_plan
from planner.simulate.validation import SimulatedFigure, simulate_figures, static_fit_rows_of_run
from planner.specs.catalog import load_plan
from planner.specs.validation import usable_figures

REPO = Path(__file__).resolve().parents[2]
LL_DEPLOY = "a3-sglang-r1-w8a8-pd32-ll-3k5k1k5-deploy"


@pytest.mark.parametrize("k,a,tau", [(1, 0.8, 0.5), (3, 0.775, 0.37), (3, 0.6, 1.0), (2, 0.9, 2.0)])
def test_the_factor_keeps_the_mean_steps_and_spreads_them_more_with_tau(k, a, tau):
    scale = request_steps_scale(k, a, tau, 200_000, np.random.default_rng(1))
    assert scale.mean() == pytest.approx(1.0, abs=0.004)
    # a request's tokens per step lie between 1 (no draft accepted) and 1 + k (every one)
    assert scale.max() / scale.min() <= 1 + k
    wider = request_steps_scale(k, a, 2 * tau, 200_000, np.random.default_rng(1))
    assert wider.std() > scale.std() > 0.0


@pytest.mark.parametrize("k,a,tau", [(0, 0.8, 0.5), (3, 0.8, 0.0), (3, 1.0, 0.5), (3, 0.0, 0.5)])
def test_no_drafts_no_spread_or_a_sure_acceptance_leave_every_request_at_one(k, a, tau):
    assert np.all(request_steps_scale(k, a, tau, 50, np.random.default_rng(0)) == 1.0)


def test_a_scaled_request_keeps_its_steps_within_what_its_tokens_allow():
    sampler = StepSampler(3, 0.775, np.random.default_rng(0))
    for tokens in (20, 1500):  # the exact draws and the normal limit
        assert sampler.steps(tokens, 100.0) == tokens
        assert sampler.steps(tokens, 0.01) == int(np.ceil(tokens / 4))
    plain = StepSampler(3, 0.775, np.random.default_rng(5)).steps_many(np.array([10, 1500, 3000]))
    same = StepSampler(3, 0.775, np.random.default_rng(5)).steps_many(np.array([10, 1500, 3000]), np.ones(3))
    assert np.array_equal(plain, same)


def _single_wave(tau: float | None) -> dict:
    plan, _ = load_plan(LL_DEPLOY)
    traffic = Traffic(requests=32, concurrency=32, random=RandomDataset(3500, 1500, 1.0, "sglang"), seed=0)
    return simulate_plan(plan, traffic, routing=engine_routing("sglang"), acceptance_spread=tau).summary


def test_the_spread_widens_the_tpot_tail_of_a_single_wave_and_keeps_its_mean():
    flat, spread = _single_wave(0.0), _single_wave(None)
    # every request decodes in the same steps: without the spread only the steps' own draws differ
    assert flat["p99_tpot_ms"] / flat["median_tpot_ms"] < 1.06
    # with it the slowest request is 12-30% slower than the median, as SGLang's four runs (17-27%)
    assert 1.12 < spread["p99_tpot_ms"] / spread["median_tpot_ms"] < 1.30
    assert spread["mean_tpot_ms"] == pytest.approx(flat["mean_tpot_ms"], rel=0.03)
    # the run ends with its slowest request: a wider tail is a longer run
    assert spread["duration"] > flat["duration"]


def test_the_shipped_spread_is_what_its_fitter_gives():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import fit_acceptance_spread as fitter
    finally:
        sys.path.pop(0)
    runs = fitter.runs_with_spread()
    tau, _ = fitter.fit_tau([runs[r] for r in fitter.FIT_RUNS])
    assert default_acceptance_spread() == pytest.approx(tau, abs=fitter.TOLERANCE)
    assert spread_record()["fitted_on"] == list(fitter.FIT_RUNS)
    held_out = [r for r, v in spread_record()["runs"].items() if v["role"] == "held out"]
    assert len(held_out) >= 5 and not set(held_out) & set(fitter.FIT_RUNS)


def test_fidelity_labels_the_figures_the_spread_was_fitted_on():
    fit_run = spread_record()["fitted_on"][0]
    figures = [f for f in usable_figures(compare="simulated") if f.row.id == fit_run]
    rows = {r.figure.metric: r.as_json() for r in simulate_figures(figures)}
    # the same run's decode TPOT is a static fit row: every figure of the run names it
    run = figures[0].row.where
    static = [f"static row '{f.row.id}'" for f in usable_figures(compare="static") if f.row.where == run]
    assert static
    assert rows["p99_tpot_ms"]["fitted_to"] == ["simulate.acceptance_spread", *static]
    assert rows["median_tpot_ms"]["fitted_to"] == ["simulate.acceptance_spread", *static]
    assert rows["mean_ttft_ms"]["fitted_to"] == static


def test_figures_of_runs_without_a_fitted_row_are_held_out():
    figures = [f for f in usable_figures(compare="simulated") if "mixed8 2K-2K" in f.row.id]
    assert figures and all(not static_fit_rows_of_run(f) for f in figures)
    assert all(SimulatedFigure(f).fitted_to == [] for f in figures)


def test_the_cli_takes_the_spread_and_refuses_one_out_of_range():
    runner = CliRunner()
    args = ["simulate", LL_DEPLOY, "--concurrency", "32", "--requests", "32", "--random-input-len", "3500"]
    args += ["--random-output-len", "1500", "--random-range-ratio", "1", "--random-convention", "sglang"]
    ok = runner.invoke(app, [*args, "--acceptance-spread", "0.5"])
    assert ok.exit_code == 0, ok.output
    assert "spread tau = 0.5 (--acceptance-spread)" in " ".join(ok.output.split())
    bad = runner.invoke(app, [*args, "--acceptance-spread", "-1"])
    assert bad.exit_code == 2 and "--acceptance-spread" in bad.output


def test_a_plan_missing_tpot_only_above_its_median_is_told_why_and_what_to_ask_for():
    from types import SimpleNamespace

    from planner.report.simulate_report import miss_lines
    from planner.simulate.run import SloVerdict

    def check(median: float, p90: float) -> SimpleNamespace:
        verdict = SloVerdict(90.0, {"tpot": (p90, 50.0, p90 <= 50.0)})
        return SimpleNamespace(rank=1, verdict=verdict, figures={"median_tpot_ms": median, "p90_tpot_ms": p90})

    (line,) = miss_lines([check(48.1, 54.2)])
    assert "TPOT p90 54 ms > 50 ms" in line and "its median TPOT, 48.1 ms, meets it" in line
    assert line.endswith("--tpot-ms 46)")  # 50 x 50 / 54.2
    (line,) = miss_lines([check(60.0, 66.0)])  # the median misses too: no such hint
    assert "median" not in line
    assert miss_lines([check(40.0, 45.0)]) == []


@pytest.mark.parametrize("command", [["plan"], ["whatif", "a2-d70"], ["sweep", "--tpot-ms", "50,100"]])
def test_the_spread_without_a_simulation_is_refused_by_name(command):
    r = CliRunner().invoke(app, [*command, "--acceptance-spread", "0.2"])
    assert r.exit_code == 2
    assert "--acceptance-spread sets the simulation's spread: add --simulate" in r.output


def test_whatif_simulates_with_the_spread_it_is_given_and_says_which():
    r = CliRunner().invoke(
        app, ["whatif", "a2-d70", "--tpot-ms", "50", "--simulate", "--acceptance-spread", "0", "--json", "-"]
    )
    assert r.exit_code == 0, r.output
    sims = json.loads(r.output)["simulated"]
    new = sims["new (re-planned)"]
    assert new["acceptance_spread"] == 0.0 and new["acceptance_spread_source"] == "--acceptance-spread"
    # with every request at the plan's acceptance the p90 stays within 2% of the mean step the search held
    # to the SLO; with the fitted spread it does not (test_simulate_cli's whatif tests)
    assert new["meets_slo"] is True and new["figures"]["p90_tpot_ms"] <= 1.02 * new["static"]["tpot_ms"]
    fitted = CliRunner().invoke(app, ["whatif", "a2-d70", "--tpot-ms", "50", "--simulate", "--json", "-"])
    fitted_new = json.loads(fitted.output)["simulated"]["new (re-planned)"]
    assert fitted_new["acceptance_spread"] == pytest.approx(default_acceptance_spread())
    assert fitted_new["acceptance_spread_source"] == "fitted"
    assert fitted_new["figures"]["p90_tpot_ms"] > new["figures"]["p90_tpot_ms"]


def test_the_table_labels_what_was_fitted_on_the_run_from_its_parts():
    # the report reads the figure's structured parts (the simulator's parameters, the run's static fit
    # rows), not the text of `fitted_to`
    from types import SimpleNamespace

    from planner.report.simulate_report import _sim_name

    figure = SimpleNamespace(id="R")
    both = SimpleNamespace(
        figure=figure, fitted_parameters=["simulate.acceptance_spread"], static_rows_of_run=("A", "B")
    )
    assert _sim_name(both) == "R (fit: acceptance spread, static row of the run)"
    rows = SimpleNamespace(figure=figure, fitted_parameters=[], static_rows_of_run=("A",))
    assert _sim_name(rows) == "R (fit: static row of the run)"
    held = SimpleNamespace(figure=figure, fitted_parameters=[], static_rows_of_run=())
    assert _sim_name(held) == "R"
