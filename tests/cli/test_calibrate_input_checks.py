"""`moeplan calibrate` refuses what it cannot fit (exit 2, one line naming the fix) and says so when a
fit leaves a row unreached or a factor at its bound; the file goes to a path, never stdout."""

from __future__ import annotations

import json

import pytest

from planner.errors import BadInputError
from planner.specs.bench_results import read_bench_result
from tests.conftest import PLANS, run_cli

D70 = str(PLANS / "a2-d70.yaml")


def _csv(tmp_path, rows: str):
    path = tmp_path / "m.csv"
    path.write_text("plan,metric,value\n" + rows)
    return path


@pytest.mark.parametrize("metric", ["decode", "decode.breakdown_ms", "decode.meets_tpot_slo", "decode.fits_hbm"])
def test_a_metric_that_is_not_a_figure_is_refused(tmp_path, metric):
    out = tmp_path / "o.yaml"
    r = run_cli("calibrate", str(_csv(tmp_path, f"{D70},{metric},5\n")), "--hardware", "a2", "--out", str(out))
    assert r.exit_code == 2, r.output
    assert f"has no metric '{metric}'" in r.output and "decode.tpot_ms" in r.output
    assert not out.exists()


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "bin.csv"
    path.write_bytes(b"\xff\xfe\x00bin")
    r = run_cli("calibrate", str(path), "--hardware", "a2", "--out", str(tmp_path / "o.yaml"))
    assert r.exit_code == 2 and "not UTF-8" in r.output, r.output


def test_the_machine_file_is_not_written_to_stdout(tmp_path):
    r = run_cli("calibrate", str(_csv(tmp_path, f"{D70},decode.tpot_ms,99.6\n")), "--hardware", "a2", "--out", "-")
    assert r.exit_code == 2 and "--out" in r.output and "stdout" in r.output, r.output


def test_a_row_no_factor_reaches_is_named_and_factors_at_a_bound_say_so(tmp_path):
    out = tmp_path / "o.yaml"
    r = run_cli("calibrate", str(_csv(tmp_path, f"{D70},decode.tpot_ms,1e9\n")), "--hardware", "a2", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "still -100.0% off after the fit" in r.output
    assert "it ran to its bound" in r.output
    assert "kept near the starting one" not in r.output


def _vllm_result(tmp_path, **fields) -> object:
    doc = {"completed": 100, "mean_ttft_ms": 900.0, "mean_tpot_ms": 99.0, "max_concurrency": 2048}
    doc.update(fields)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "field,value", [("max_concurrency", "abc"), ("spec_decode_acceptance_length", "x"), ("max_concurrency", 2.5)]
)
def test_a_result_field_of_the_wrong_kind_is_refused_not_dropped(tmp_path, field, value):
    with pytest.raises(BadInputError, match=field):
        read_bench_result(_vllm_result(tmp_path, **{field: value}))


def test_a_closed_loop_rate_reads_as_none(tmp_path):
    for rate in ("inf", float("inf")):
        assert read_bench_result(_vllm_result(tmp_path, request_rate=rate)).request_rate_per_s is None


def test_an_accepted_length_no_step_of_the_plan_can_emit_is_refused(tmp_path):
    # a2-d70 drafts one MTP token a step: a step emits 1 or 2 tokens
    result = _vllm_result(tmp_path, spec_decode_acceptance_length=5.0, max_concurrency=None)
    r = run_cli("calibrate", "--bench", f"{D70}={result}", "--hardware", "a2", "--out", str(tmp_path / "o.yaml"))
    assert r.exit_code == 2, r.output
    assert "accepted length is 5 tokens per step" in r.output and "emits 1 to 2" in r.output
