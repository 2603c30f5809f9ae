"""`moeplan experts` scores a placement on loads it was not made from (fit on the first windows)."""

from __future__ import annotations

import json

import numpy as np

from planner.placement import from_array, generate_loads, parse_trace_spec
from planner.placement.study import run_study, study_figures
from tests.conftest import run_cli


def _loads(windows: int):
    arr = generate_loads(parse_trace_spec("lognormal:0.6"), 6, 64, windows, 16384, 3, 8)
    return from_array(arr, "synthetic")


def test_one_window_has_nothing_held_out():
    assert run_study(_loads(1), 8, 9).held_out is None


def test_held_out_windows_are_scored_and_drift_costs_balance():
    study = run_study(_loads(4), 8, 9)
    h = study.held_out
    assert h is not None and (h.fit_windows, h.total_windows) == (2, 4)
    # made from windows 0-1: nearly perfect there, worse on windows 2-3 it never saw
    assert np.mean(h.fitted.ours) < 1.02
    assert np.mean(h.held_out.ours) > np.mean(h.fitted.ours) + 0.01
    figures = study_figures(study)["held_out"]
    assert figures["moeplan_held_out_mean"] > figures["moeplan_fitted_mean"]


def test_cli_reports_fitted_and_held_out(tmp_path):
    out = tmp_path / "map.json"
    r = run_cli(
        "experts", "--devices", "8", "--slots-per-device", "9", "--synthetic", "lognormal:0.6",
        "--experts", "64", "--layers", "4", "--windows", "3", "--out", str(out), "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "Held out" in r.output
    held = json.loads(out.read_text())["held_out"]
    assert held["fit_windows"] == 2 and held["total_windows"] == 3
    single = run_cli(
        "experts", "--devices", "8", "--slots-per-device", "9", "--synthetic", "lognormal:0.6", "--experts", "64"
    )
    assert single.exit_code == 0 and "one window only" in single.output
