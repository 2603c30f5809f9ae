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
    for row in static:
        assert row["role"] == "kept aside" and row["out_of_sample"] and row["fitted_to"] == []
        assert row["loo_error"] == row["error"]  # no refit without a row that was never fitted on
    for row in simulated:
        assert row["fitted_to"] == [] and row["predicted"] > 0
    # the Kimi-K2 run's figures (a graph mode the model does not cost) are reported with their reason
    kimi = [f for f in out["not_compared"] if "Kimi" in f["name"]]
    assert len(kimi) == 3 and all("PIECEWISE" in f["why"] or "decode step" in f["why"] for f in kimi)
    machines = {r["hardware"] for r in static} | {"h200" for r in simulated if "H200" in r["name"]}
    assert {"a2", "h200"} <= machines
