"""A benchmark result file with a figure that is not a positive finite number, or a request count that is not
a whole number, is refused naming the field (it used to be fitted: a -99 ms TPOT pushed the calibrated factors
to 1.0 and wrote the file; a NaN ended in scipy's "Residuals are not finite")."""

from __future__ import annotations

import json

import pytest

from planner.errors import BadInputError
from planner.specs.bench_results import read_bench_result

HEADER = "Performance Parameters,Stage,Average,Min,Max,Median,P75,P90,P99,N"


def _aisbench(tmp_path, ttft: str = "450.0 ms", tpot: str = "60.0 ms", n: str = "16", common: object = None):
    path = tmp_path / "gsm8k.csv"
    rows = [
        HEADER,
        f"TTFT,total,{ttft},400 ms,500 ms,450 ms,460 ms,480 ms,495 ms,{n}",
        f"TPOT,total,{tpot},55 ms,65 ms,60 ms,61 ms,63 ms,64 ms,{n}",
    ]
    path.write_text("\n".join(rows) + "\n")
    if common is not None:
        path.with_suffix(".json").write_text(json.dumps(common))
    return path


def test_a_well_formed_aisbench_file_reads_with_its_common_metrics(tmp_path):
    common = {"Max Concurrency": {"total": 64}, "Output Token Throughput": {"total": "1234.5 token/s"}}
    got = read_bench_result(_aisbench(tmp_path, common=common))
    assert (got.completed, got.mean_ttft_ms, got.mean_tpot_ms) == (16, 450.0, 60.0)
    assert got.max_concurrency == 64 and got.output_tokens_per_s == pytest.approx(1234.5)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"ttft": "nan ms"}, "the TTFT row's Average is 'nan ms', not a positive number in ms"),
        ({"tpot": "-99 ms"}, "the TPOT row's Average is '-99 ms', not a positive number in ms"),
        ({"tpot": "inf ms"}, "the TPOT row's Average is 'inf ms'"),
        ({"tpot": "fast"}, "the TPOT row's Average is 'fast'"),
        ({"n": "many"}, "the TTFT row's N is 'many', not a whole number of completed requests"),
        ({"n": "2.5"}, "the TTFT row's N is '2.5'"),
        ({"common": {"Max Concurrency": 2304}}, "'Max Concurrency' is 2304, not AISBench's {\"total\": ...} object"),
        ({"common": {"Max Concurrency": {"total": 0.5}}}, "'Max Concurrency' is 0.5, not a whole number"),
        ({"common": {"Output Token Throughput": {"total": "nan token/s"}}}, "'Output Token Throughput' is 'nan"),
        ({"common": [1, 2]}, "not AISBench's common metrics"),
    ],
)
def test_aisbench_figures_that_are_not_positive_numbers_are_refused_by_name(tmp_path, kwargs, needle):
    with pytest.raises(BadInputError) as err:
        read_bench_result(_aisbench(tmp_path, **kwargs))
    assert needle in str(err.value)


def test_a_vllm_result_with_a_fraction_of_a_request_is_refused(tmp_path):
    path = tmp_path / "v.json"
    doc = {"completed": 0.5, "mean_ttft_ms": 500.0, "mean_tpot_ms": 99.0, "max_concurrency": 64}
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInputError, match="'completed' is 0.5, not a whole number of requests"):
        read_bench_result(path)
    path.write_text(json.dumps({**doc, "completed": 16, "max_concurrency": 2.5}))
    with pytest.raises(BadInputError, match="'max_concurrency' is 2.5, not a whole number"):
        read_bench_result(path)
