"""kept-aside/: measured runs moeplan is checked against and never fitted on (`moeplan fidelity --rows
kept-aside`). The folder must stay readable by the loader, every figure out-of-sample (nothing fitted or
chosen on it by the fit), and the figures the model cannot represent listed with their reason, not dropped."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli

KEPT = Path(__file__).resolve().parents[2] / "kept-aside"


def test_kept_aside_runs_are_predicted_out_of_sample():
    result = run_cli("fidelity", "--rows", str(KEPT), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    static, simulated = out["rows"], out["simulated_rows"]
    assert static and simulated
    chosen = _chosen_on_by_figure()
    for row in static:
        # nothing is fitted on a kept-aside row; a choice made with its figures in view is named, and then
        # the row is not out-of-sample
        assert row["role"] == "kept aside" and row["fitted_to"] == chosen.get(row["name"], [])
        assert row["out_of_sample"] == (not row["fitted_to"])
        assert row["loo_error"] == row["error"]  # no refit without a row that was never fitted on
    for row in simulated:
        assert row["fitted_to"] == chosen.get(row["name"], []) and row["predicted"] > 0
    assert any(chosen.get(row["name"]) for row in simulated)  # the V4-Flash and GLM-5.2 H200 runs
    # the Kimi-K2 run's figures (a graph mode the model does not cost) are reported with their reason
    kimi = [f for f in out["not_compared"] if "Kimi" in f["name"]]
    assert len(kimi) == 3 and all("PIECEWISE" in f["why"] or "decode step" in f["why"] for f in kimi)
    machines = {r["hardware"] for r in static} | {"h200" for r in simulated if "H200" in r["name"]}
    assert {"a2", "h200"} <= machines


def _chosen_on_by_figure() -> dict[str, list[str]]:
    """Each kept-aside figure's `chosen_on`, as fidelity names them ("chosen: ...")."""
    from planner.specs.validation import figures_at

    out = {}
    for fig, _ in figures_at(KEPT):
        if fig.row.chosen_on:
            out[fig.id] = [f"chosen: {c}" for c in fig.row.chosen_on]
    return out
