"""The factor fitter, leave-one-out fidelity and calibration from measurements.

Measurements generated from known factors must be recovered, and the recovered machine must
predict plans that were not among the measurements within 2%.
"""

from __future__ import annotations

import pytest

from planner.costmodel.calibration import calibrate, read_measurements
from planner.costmodel.fidelity import _plan_and_specs
from planner.costmodel.fitting import (
    Observation,
    factor_names,
    factor_value,
    fit_factors,
    with_factors,
)
from planner.specs.catalog import catalog_dir, load_hardware

TRUTH = {
    "efficiency.matmul": 0.62,
    "efficiency.attention_compute": 0.50,
    "efficiency.hbm_bandwidth": 0.60,
    "efficiency.link_bandwidth": 0.58,
    "fixed_costs.matrix_op": 7.0e-6,
}
ROWS = [
    ("a2-d70", "decode.tpot_ms"),
    ("a2-d70", "decode.breakdown_ms.attention"),
    ("a2-d70", "decode.breakdown_ms.moe"),
    ("a2-d70", "decode.breakdown_ms.moe_comm"),
    ("a2-d70", "decode.breakdown_ms.launch_overhead"),
    ("a2-p", "prefill.tokens_per_s_per_card"),
    ("a2-p", "prefill.breakdown_ms.moe"),
    ("a2-d-30ms", "decode.tpot_ms"),
    ("a2-d-30ms", "decode.breakdown_ms.attention"),
]
HELD_OUT = [
    ("a2-d90", "decode.tokens_per_s_per_card"),
    ("a2-p-mb", "prefill.tokens_per_s_per_card"),
]


def _obs(name: str, metric: str, value: float) -> Observation:
    plan, specs = _plan_and_specs(name)
    return Observation(f"{name} {metric}", plan, specs, metric, value, base_dir=catalog_dir("plans"))


def _truth_hw():
    return with_factors(load_hardware("a2"), TRUTH)


def test_factor_names_cover_every_factor_section():
    names = factor_names(load_hardware("a2"))
    assert "efficiency.matmul" in names and "fixed_costs.collective" in names
    assert "overlap.prefill_micro_batch_efficiency" in names


def test_known_factors_are_recovered():
    a2, truth = load_hardware("a2"), _truth_hw()
    obs = [_obs(n, m, _obs(n, m, 1.0).predict(truth)) for n, m in ROWS]
    fit = fit_factors(obs, a2, list(TRUTH))
    for name, value in TRUTH.items():
        assert fit.values[name] == pytest.approx(value, rel=0.02), name
        lo, hi = fit.intervals[name]
        assert lo <= fit.values[name] <= hi
    assert not fit.undetermined
    assert max(abs(r) for r in fit.residuals) < 1e-4


def test_a_factor_no_row_sees_is_reported_undetermined():
    a2 = load_hardware("a2")
    obs = [_obs("a2-d70", "decode.tpot_ms", 99.6), _obs("a2-d-30ms", "decode.tpot_ms", 30.0)]
    fit = fit_factors(obs, a2, ["efficiency.hbm_bandwidth", "overlap.prefill_micro_batch_efficiency"])
    assert "overlap.prefill_micro_batch_efficiency" in fit.undetermined
    assert "sensitive" in fit.undetermined["overlap.prefill_micro_batch_efficiency"]


def test_two_rows_of_one_plan_do_not_determine_two_factors():
    a2 = load_hardware("a2")
    obs = [_obs("a2-d70", "decode.tpot_ms", 99.6), _obs("a2-d70", "decode.tokens_per_s_per_card", 723.0)]
    fit = fit_factors(obs, a2, ["efficiency.hbm_bandwidth", "efficiency.link_bandwidth"])
    assert set(fit.undetermined) == {"efficiency.hbm_bandwidth", "efficiency.link_bandwidth"}
    assert "combination" in fit.undetermined["efficiency.hbm_bandwidth"]


def test_calibrate_from_csv_recovers_and_predicts_plans_not_measured(tmp_path):
    truth = _truth_hw()
    lines = ["plan,metric,value"]
    for name, metric in ROWS:
        (tmp_path / f"{name}.yaml").write_text((catalog_dir("plans") / f"{name}.yaml").read_text())
        lines.append(f"{name}.yaml,{metric},{_obs(name, metric, 1.0).predict(truth):.6g}")
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    a2 = load_hardware("a2")
    result = calibrate(read_measurements(csv_path, a2), a2, list(TRUTH), new_name="my-a2")
    for name, value in TRUTH.items():
        assert factor_value(result.hw, name) == pytest.approx(value, rel=0.02), name
        spec = result.hw.efficiency.matmul
        assert spec.source == f"calibrated from m.csv, {len(ROWS)} rows"
    for name, metric in HELD_OUT:
        want = _obs(name, metric, 1.0).predict(truth)
        got = _obs(name, metric, 1.0).predict(result.hw)
        assert got == pytest.approx(want, rel=0.02), name


def test_leave_out_keeps_an_undeterminable_factor_at_its_start():
    from planner.costmodel.fitting import leave_out

    a2 = load_hardware("a2")
    obs = [_obs("a2-d70", "decode.tpot_ms", 99.6), _obs("a2-p", "prefill.tokens_per_s_per_card", 1622.0)]
    out = leave_out(obs, a2, ["efficiency.matmul", "efficiency.hbm_bandwidth"])
    # leaving a2-p out: only a decode row is left, and decode barely sees matmul
    assert "efficiency.matmul" in out[1].undetermined
    assert out[1].values["efficiency.matmul"] == pytest.approx(factor_value(a2, "efficiency.matmul"))
