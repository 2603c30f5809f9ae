"""`moeplan calibrate` and `moeplan fidelity --json` end to end: output, the written file, bad rows."""

from __future__ import annotations

import json
import shutil

import pytest

from planner.specs.catalog import load_hardware
from tests.conftest import PLANS, REPO, engines_embedding, run_cli

EXAMPLE = REPO / "docs" / "examples" / "calibration"


def test_fidelity_json_has_every_row_with_loo():
    r = run_cli("fidelity", "--json", "--no-simulated")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["rows"]
    keys = {"name", "metric", "published", "predicted", "error", "loo_predicted", "loo_error", "fitted_to"}
    keys |= {"out_of_sample"}
    assert rows and all(keys <= set(row) for row in rows)
    assert {"A2-D70", "A2-P", "CM-D"} <= {row["name"] for row in rows}


def test_calibrate_example_writes_a_loadable_machine(tmp_path):
    out = tmp_path / "my-a2.yaml"
    r = run_cli(
        "calibrate",
        str(EXAMPLE / "measurements.csv"),
        "--hardware",
        "a2",
        "--out",
        str(out),
        "--factors",
        "efficiency.matmul,efficiency.hbm_bandwidth,efficiency.link_bandwidth",
    )
    assert r.exit_code == 0, r.output
    assert "residual" in r.output and "interval" in r.output
    hw = load_hardware(str(out))
    assert hw.name == "my-a2"
    assert hw.efficiency.matmul.source.startswith("calibrated from measurements.csv, 4 rows")
    assert hw.efficiency.matmul.range is not None
    assert hw.efficiency.attention_compute.source == load_hardware("a2").efficiency.attention_compute.source
    r = run_cli("plan", "--hardware", str(out), "--phase", "decode", "--max-cards", "16", "--time-limit", "5")
    assert r.exit_code == 0, r.output
    r = run_cli("evaluate", "a2-d90", "--hardware", str(out), "--json", "-")
    assert r.exit_code == 0, r.output
    scored = json.loads(r.output)
    assert scored["hardware"] == str(out)
    # the calibrated machine reproduces the measured A2-D70 within a few percent, so A2-D90 moves little
    assert scored["predicted"]["decode"]["tokens_per_s_per_card"] == pytest.approx(808, rel=0.05)


@pytest.mark.parametrize(
    ("csv_text", "message"),
    [
        ("plan,metric\na2-d70.yaml,decode.tpot_ms\n", "missing column(s) 'value'"),
        ("plan,metric,value\nnope.yaml,decode.tpot_ms,99\n", "line 2: plan 'nope.yaml' does not load"),
        ("plan,metric,value\na2-p.yaml,decode.tpot_ms,99\n", "line 2: plan 'a2-p.yaml' has no metric 'decode.tpot_ms'"),
        ("plan,metric,value\na2-d70.yaml,decode.tpot_ms,-3\n", "line 2: value -3 must be a positive"),
        ("plan,metric,value\na2-d70.yaml,decode.tpot_ms,fast\n", "line 2: value 'fast' is not a number"),
    ],
)
def test_bad_rows_exit_2_and_write_nothing(tmp_path, csv_text, message):
    for name in ("a2-d70", "a2-p"):
        shutil.copy(PLANS / f"{name}.yaml", tmp_path / f"{name}.yaml")
    csv_path = tmp_path / "m.csv"
    csv_path.write_text(csv_text)
    out = tmp_path / "out.yaml"
    r = run_cli("calibrate", str(csv_path), "--hardware", "a2", "--out", str(out))
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output
    assert not out.exists()


def test_every_bad_row_gets_its_own_line(tmp_path):
    shutil.copy(PLANS / "a2-d70.yaml", tmp_path / "a2-d70.yaml")
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("plan,metric,value\na2-d70.yaml,decode.tpot_ms,-1\nx.yaml,decode.tpot_ms,3\n")
    r = run_cli("calibrate", str(csv_path), "--hardware", "a2", "--out", str(tmp_path / "o.yaml"))
    assert r.exit_code == 2
    assert "line 2" in r.output and "line 3" in r.output


def test_evaluate_json_carries_bands():
    r = run_cli("evaluate", "a2-d70", "--json", "-")
    assert r.exit_code == 0, r.output
    u = json.loads(r.output)["predicted"]["uncertainty"]
    for figure in ("tokens_per_s_per_card", "tpot_ms"):
        b = u["bands"]["decode"][figure]
        assert b["low"] < b["mid"] < b["high"]
    assert "efficiency.matmul" in u["factors"]


def test_plan_robust_ranks_by_the_low_end_and_meets_the_slo_at_the_slow_end(tmp_path):
    out = tmp_path / "plans.json"
    args = ("plan", "--phase", "decode", "--max-cards", "32", "--time-limit", "10", "--top", "3")
    r = run_cli(*args, "--robust", "--json", str(out))
    assert r.exit_code == 0, r.output
    assert "the 90% band, every factor" in r.output and "--robust" in r.output
    plans = json.loads(out.read_text())["plans"]
    lows = [p["predicted"]["uncertainty"]["bands"]["decode"]["tokens_per_s_per_card"]["low"] for p in plans]
    assert lows == sorted(lows, reverse=True)
    from planner.costmodel.uncertainty import band_widening

    err = band_widening("a2")  # the band's last widening: the model's measured error, not a corner the search holds
    for p in plans:
        assert p["predicted"]["uncertainty"]["bands"]["decode"]["tpot_ms"]["high"] / (1 + err) <= 100.0 + 0.05
    r = run_cli(*args)
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    assert "rank 1's lead over rank 2" in text or "rank 1 and rank 2 are tied" in text


def test_a_missing_output_folder_is_refused_before_fitting(tmp_path):
    r = run_cli(
        "calibrate", str(EXAMPLE / "measurements.csv"), "--hardware", "a2", "--out", str(tmp_path / "no" / "x.yaml")
    )
    assert r.exit_code == 2
    assert "--out: folder" in r.output and "residual" not in r.output


def test_a_byte_order_mark_is_accepted(tmp_path):
    shutil.copy(PLANS / "a2-d70.yaml", tmp_path / "a2-d70.yaml")
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("\ufeffplan,metric,value\na2-d70.yaml,decode.tpot_ms,99.6\n", encoding="utf-8")
    out = tmp_path / "o.yaml"
    args = ("--hardware", "a2", "--out", str(out), "--factors", "efficiency.hbm_bandwidth")
    r = run_cli("calibrate", str(csv_path), *args)
    assert r.exit_code == 0, r.output
    assert load_hardware(str(out)).efficiency.hbm_bandwidth.fitted_on == "m.csv"


def test_emit_bench_then_calibrate_bench_then_plan_on_the_fitted_machine(tmp_path):
    """The closed loop from the CLI: `--emit` writes bench/, a client's result file comes back through
    `calibrate --bench`, and `plan --hardware` re-plans on the fitted machine."""
    import importlib.util
    import sys

    out = tmp_path / "export"
    d70 = engines_embedding(PLANS / "a2-d70.yaml", tmp_path)  # vllm-ascend's embedding: over the attention
    r = run_cli("evaluate", str(d70), "--emit", "vllm-ascend", str(out))
    assert r.exit_code == 0, r.output
    script = (out / "bench" / "vllm_bench_serve.sh").read_text()
    slots = 72 * 32
    assert f"--max-concurrency {slots}" in script and "--random-input-len 2048" in script
    assert "--save-result" in script and "--result-filename vllm_bench_serve.json" in script
    assert "calibrate --bench" in (out / "bench" / "README.md").read_text()
    assert not (out / "bench" / "vllm_bench_serve_rate.sh").exists()  # decode only: no TTFT to measure
    bench = REPO / "benchmarks" / "bench_files.py"
    spec = importlib.util.spec_from_file_location("bench_files", bench)
    files = importlib.util.module_from_spec(spec)
    sys.modules["bench_files"] = files
    spec.loader.exec_module(files)
    run = files.simulated_run("deepseek-v3", 2048, 2048, slots, 1.0, 110.0, 1.7, 8)
    files.write_vllm(out / "bench" / "vllm_bench_serve.json", run)
    fitted = tmp_path / "fitted-a2.yaml"
    r = run_cli(
        "calibrate", "--bench", f"{out / 'plan.json'}={out / 'bench' / 'vllm_bench_serve.json'}",
        "--hardware", "a2", "--out", str(fitted), "--factors", "efficiency.hbm_bandwidth",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "decode.tpot_ms" in r.output and fitted.is_file()
    assert "ttft_ms" not in r.output  # a closed loop's TTFT is not fitted
    r = run_cli("evaluate", str(PLANS / "a2-d70.yaml"), "--hardware", str(fitted), "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["predicted"]["decode"]["tpot_ms"] == pytest.approx(110.0, rel=0.01)


def test_a_full_plan_gets_runs_at_its_predicted_rate_whose_ttft_is_fitted(tmp_path):
    """A plan with prefill and decode: bench/ also runs the workload at the plan's predicted request
    rate, and that run's TTFT is fitted beside the closed loop's TPOT."""
    import importlib.util
    import sys

    out = tmp_path / "export"
    r = run_cli("plan", "--engine", "vllm-ascend", "--structure", "pd", "--emit", "vllm-ascend", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "plan.json").read_text())
    rate = doc["predicted"]["system"]["requests_per_s"]
    timed = (out / "bench" / "vllm_bench_serve_rate.sh").read_text()
    assert f"--request-rate {rate:.4g}" in timed and "--result-filename vllm_bench_serve_rate.json" in timed
    sglang = (out / "bench" / "sglang_bench_serving_rate.sh").read_text()
    assert f"--request-rate {rate:.4g}" in sglang and "--output-file bench/sglang_bench_serving_rate.jsonl" in sglang
    assert "vllm_bench_serve_rate.json" in (out / "bench" / "README.md").read_text()
    spec = importlib.util.spec_from_file_location("bench_files", REPO / "benchmarks" / "bench_files.py")
    files = importlib.util.module_from_spec(spec)
    sys.modules["bench_files"] = files
    spec.loader.exec_module(files)
    slots = int(timed.split("--max-concurrency ")[1].split()[0])
    ttft, tpot = doc["predicted"]["prefill"]["ttft_ms"] * 1.1, doc["predicted"]["decode"]["tpot_ms"] * 1.1
    args = ("deepseek-v3", 2048, 2048, slots, ttft, tpot, 1.0, 8)
    files.write_vllm(out / "bench" / "vllm_bench_serve.json", files.simulated_run(*args))
    files.write_vllm(out / "bench" / "vllm_bench_serve_rate.json", files.simulated_run(*args, rate_per_s=rate))
    r = run_cli(
        "calibrate", "--bench", f"{out / 'plan.json'}={out / 'bench' / 'vllm_bench_serve.json'}",
        "--bench", f"{out / 'plan.json'}={out / 'bench' / 'vllm_bench_serve_rate.json'}",
        "--hardware", "a2", "--out", str(tmp_path / "fitted.yaml"),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.output.count("decode.tpot_ms") >= 2 and "prefill.ttft_ms" in r.output


def test_calibrate_needs_one_csv_or_bench_pairs(tmp_path):
    r = run_cli("calibrate", "--hardware", "a2", "--out", str(tmp_path / "x.yaml"))
    assert r.exit_code == 2 and "--bench PLAN=RESULT" in r.output
    r = run_cli("calibrate", "--bench", "a=b", "m.csv", "--hardware", "a2", "--out", str(tmp_path / "x.yaml"))
    assert r.exit_code == 2 and "'m.csv' is not" in r.output
