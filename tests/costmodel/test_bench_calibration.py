"""`moeplan calibrate --bench`: benchmark clients' result files back into the machine's factors.

The result files are written the way each client writes them (benchmarks/bench_files.py, read
from vllm/benchmarks/serve.py 0.25.1, sglang/benchmark/serving.py 0.5.23 and AISBench 3.1's
calculators) from simulated per-request records of a known machine; the fit must predict plans
it never saw within 3% (benchmarks/calibrate_bench_recovery.py prints the figures).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from planner.costmodel.calibration import acceptance_from_tokens_per_step, read_bench
from planner.costmodel.decode import emitted_tokens_per_step
from planner.errors import BadInputError
from planner.specs.bench_results import AISBENCH, SGLANG, VLLM, read_bench_result
from planner.specs.catalog import load_hardware

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
pytestmark = pytest.mark.skipif(
    not (BENCH / "bench_files.py").is_file(), reason="benchmarks/ is in the source tree only"
)


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (its dataclasses resolve their annotations through it)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def files():
    return _load("bench_files")


@pytest.fixture(scope="module")
def recovery():
    return _load("calibrate_bench_recovery")


def run_of(files, tokens_per_step: float = 1.7, concurrency: int = 2048):
    return files.simulated_run("deepseek-v3", 2048, 1024, concurrency, 450.0, 60.0, tokens_per_step, 16, spread=0.05)


def test_each_clients_file_reads_back_its_means(files, tmp_path):
    run = run_of(files)
    files.write_vllm(tmp_path / "v.json", run)
    files.write_sglang(tmp_path / "s.jsonl", run)
    ais = files.write_aisbench(tmp_path / "ais", run)
    for path, client in ((tmp_path / "v.json", VLLM), (tmp_path / "s.jsonl", SGLANG), (ais, AISBENCH)):
        got = read_bench_result(path)
        assert got.client == client and got.completed == 16
        assert got.mean_ttft_ms == pytest.approx(450.0, rel=1e-4)
        assert got.mean_tpot_ms == pytest.approx(60.0, rel=1e-4)
        assert got.max_concurrency == 2048
        assert got.mean_input_tokens == pytest.approx(2048) and got.mean_output_tokens == pytest.approx(1024)
    assert read_bench_result(tmp_path / "v.json").tokens_per_step == pytest.approx(1.7, rel=0.01)
    assert read_bench_result(tmp_path / "s.jsonl").tokens_per_step == pytest.approx(1.7)
    # AISBench's JSON beside the CSV is accepted too (the CSV is read)
    assert read_bench_result(ais.with_suffix(".json")).mean_tpot_ms == pytest.approx(60.0, rel=1e-4)


def test_sglang_reads_the_latest_line_of_its_appended_file(files, tmp_path):
    path = tmp_path / "s.jsonl"
    files.write_sglang(path, run_of(files))
    later = files.simulated_run("deepseek-v3", 2048, 1024, 2048, 500.0, 70.0, 1.0, 8)
    files.write_sglang(path, later)
    got = read_bench_result(path)
    assert got.mean_tpot_ms == pytest.approx(70.0) and got.tokens_per_step is None


def test_acceptance_from_tokens_per_step_inverts_the_cost_models_formula():
    for k, a in ((1, 0.7), (2, 0.85), (3, 0.6)):
        assert acceptance_from_tokens_per_step(emitted_tokens_per_step(k, a), k) == pytest.approx(a, abs=1e-9)


def test_a_file_no_client_wrote_is_refused_naming_the_formats(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(BadInputError, match="vllm bench serve.*SGLang bench_serving.*AISBench"):
        read_bench_result(path)
    path.write_text(json.dumps({"mean_tpot_ms": 50.0, "mean_ttft_ms": 0, "completed": 3}))
    with pytest.raises(BadInputError, match="'mean_ttft_ms' is 0"):
        read_bench_result(path)


def test_a_run_of_another_workload_is_refused_naming_the_mismatch(files, recovery, tmp_path):
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(recovery.FIT["pd-c8-mtp0"]))  # 8 per device x 32 = 256 in flight
    result = tmp_path / "r.json"
    files.write_vllm(result, run_of(files, 1.0, concurrency=64))
    with pytest.raises(BadInputError, match="concurrency is 64, the plan's 256"):
        read_bench([f"{plan}={result}"], load_hardware("a2"))
    with pytest.raises(BadInputError, match="give PLAN=RESULT"):
        read_bench([str(plan)], load_hardware("a2"))


def test_measured_acceptance_replaces_the_plans(files, recovery, tmp_path):
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps(recovery.FIT["pd-c64-mtp1"]))
    result = tmp_path / "r.jsonl"
    files.write_sglang(result, files.simulated_run("deepseek-v3", 2048, 1024, 2048, 450.0, 60.0, 1.9, 4))
    rows = read_bench([f"{plan}={result}"], load_hardware("a2")).observations
    assert {o.metric for o in rows} == {"decode.tpot_ms"}  # a closed loop: its TTFT is queueing, not fitted
    timed = tmp_path / "timed.jsonl"
    files.write_sglang(timed, files.simulated_run("deepseek-v3", 2048, 1024, 2048, 450.0, 60.0, 1.9, 4, rate_per_s=8.0))
    rows = read_bench([f"{plan}={timed}"], load_hardware("a2")).observations
    assert {o.metric for o in rows} == {"decode.tpot_ms", "prefill.ttft_ms"}
    assert all(o.plan.workload.mtp_acceptance == pytest.approx(0.9) for o in rows)


def test_calibrate_bench_predicts_plans_it_did_not_see_within_3_percent(recovery):
    lines: list[str] = []
    errors = recovery.recover(noise=0.01, log=lines.append)
    assert len(errors) == 9
    assert max(abs(e) for e in errors.values()) < 0.03, errors
    # docs/calibration.md records this run (calibrate_bench_recovery.py --write-docs); fit times vary
    docs = recovery.DOCS.read_text()
    block = docs[docs.index(recovery.BEGIN) : docs.index(recovery.END)]
    timed = re.compile(r"fitted in [\d.]+ s")
    recorded = {timed.sub("fitted in - s", line) for line in block.splitlines()}
    missing = [line for line in lines if timed.sub("fitted in - s", line) not in recorded]
    assert not missing, f"docs/calibration.md is stale (rerun the script with --write-docs): {missing}"
