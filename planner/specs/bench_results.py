"""Benchmark clients' result files, read as the clients write them.

`read_bench_result(path)` recognises the file and returns its `BenchResult` (means in ms, the
run's configuration). The fields are the clients' own, read from their source:

- `vllm bench serve --save-result` (vllm/benchmarks/serve.py, vLLM 0.25.1): one JSON object with
  `completed`, `max_concurrency`, `request_rate`, `total_input_tokens`, `total_output_tokens`,
  `output_throughput`, `mean_ttft_ms`, `mean_tpot_ms` (and median/std/pNN, `input_lens`,
  `output_lens`, `ttfts`, `itls`, ...), and with speculative decoding `spec_decode_acceptance_length`
  (1 + accepted drafts per draft step) and `spec_decode_acceptance_rate` (percent);
- SGLang `python -m sglang.benchmark.serving --output-file F` (sglang/benchmark/serving.py, 0.5.23):
  one JSON line appended per run with `backend`, `max_concurrency`, `random_input_len`,
  `random_output_len`, `completed`, `total_input_tokens`, `total_output_tokens`,
  `output_throughput`, `mean_ttft_ms`, `mean_tpot_ms`, ..., `accept_length` (mean tokens per step,
  None without speculative decoding); the last line is the latest run;
- AISBench `--mode perf` (ais_bench/benchmark/calculators/base_perf_metric_calculator.py, 3.1):
  `performances/<model>/<dataset>.csv` with a header `Performance Parameters,Stage,Average,Min,Max,
  Median,P75,P90,P99,N` and one row per metric (`TTFT`, `TPOT`, `ITL`, `E2EL`, `InputTokens`,
  `OutputTokens`, `OutputTokenThroughput`), times as `"123.4 ms"`; beside it `<dataset>.json` with
  the common metrics (`{"Max Concurrency": {"total": 64}, "Output Token Throughput":
  {"total": "1234.5 token/s"}, ...}`), read when present.

A file that is none of these, or lacks a field the calibration needs, is refused naming the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import BadInputError

VLLM = "vllm bench serve"
SGLANG = "SGLang bench_serving"
AISBENCH = "AISBench"


@dataclass(frozen=True)
class BenchResult:
    """What one benchmark run measured (means over its completed requests)."""

    client: str
    path: Path
    completed: int
    mean_ttft_ms: float
    mean_tpot_ms: float
    max_concurrency: int | None
    mean_input_tokens: float | None
    mean_output_tokens: float | None
    output_tokens_per_s: float | None
    tokens_per_step: float | None  # speculative decoding: mean tokens emitted per decode step
    request_rate_per_s: float | None = None  # the run's arrival rate; None: a closed loop (no rate limit)


def _number(doc: dict[str, Any], key: str, where: str) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise BadInputError(f"{where}: '{key}' is {value!r}, not a positive number; is this a finished run?")
    return float(value)


def _optional(doc: dict[str, Any], key: str, where: str, infinite_is_none: bool = False) -> float | None:
    """A field a run may leave out (absent or null: None); present, it must be a positive number.
    `infinite_is_none`: infinity (written inf or Infinity) means the field's "none" (a closed loop's rate)."""
    value = doc.get(key)
    if value is None:
        return None
    if infinite_is_none and (value in ("inf", "Infinity") or (isinstance(value, float) and math.isinf(value))):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise BadInputError(
            f"{where}: '{key}' is {value!r}, not a positive number; fix the file or give the client's own result file."
        )
    return float(value)


def _whole(value: float, key: str, where: str) -> int:
    """A count of requests: a whole positive number."""
    if value != int(value):
        raise BadInputError(f"{where}: '{key}' is {value!r}, not a whole number of requests; is this a finished run?")
    return int(value)


def _mean(total: float | None, count: int) -> float | None:
    return total / count if total is not None and count else None


# the two JSON clients: their name, how their file is made, and their tokens-per-step field
_JSON_CLIENTS = {
    VLLM: ("vllm bench serve --save-result", "spec_decode_acceptance_length"),
    SGLANG: ("SGLang bench_serving --output-file, last line", "accept_length"),
}


def _from_json(client: str, doc: dict[str, Any], path: Path) -> BenchResult:
    how, per_step = _JSON_CLIENTS[client]
    where = f"{path} ({how})"
    completed = _whole(_number(doc, "completed", where), "completed", where)
    concurrency = _optional(doc, "max_concurrency", where)
    if concurrency is not None:
        concurrency = _whole(concurrency, "max_concurrency", where)
    return BenchResult(
        client=client,
        path=path,
        completed=completed,
        mean_ttft_ms=_number(doc, "mean_ttft_ms", where),
        mean_tpot_ms=_number(doc, "mean_tpot_ms", where),
        max_concurrency=None if concurrency is None else int(concurrency),
        mean_input_tokens=_mean(_optional(doc, "total_input_tokens", where), completed),
        mean_output_tokens=_mean(_optional(doc, "total_output_tokens", where), completed),
        output_tokens_per_s=_optional(doc, "output_throughput", where),
        tokens_per_step=_optional(doc, per_step, where),
        request_rate_per_s=_optional(doc, "request_rate", where, infinite_is_none=True),  # inf: a closed loop
    )


def _with_unit(text: str, unit: str, where: str, field: str) -> float:
    """A positive finite figure written with its unit ("123.4 ms"); `field` names it in the error."""
    raw = text.strip()
    if unit.strip() and raw.endswith(unit.strip()):
        raw = raw[: -len(unit.strip())].strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        in_unit = f" in {unit.strip()}" if unit.strip() else ""
        raise BadInputError(
            f"{where}: {field} is {text!r}, not a positive number{in_unit}; fix the file or give the file "
            "AISBench wrote."
        )
    return value


def _from_aisbench(text: str, path: Path) -> BenchResult:
    where = f"{path} (AISBench performances CSV)"
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0]
    table = {row[0]: dict(zip(header, row, strict=False)) for row in rows[1:] if row}
    for metric in ("TTFT", "TPOT"):
        if metric not in table or not table[metric].get("Average"):
            raise BadInputError(f"{where}: no {metric} row with an Average; run AISBench with --mode perf.")
    n = table["TTFT"].get("N") or "0"
    try:
        completed = float(n)
    except ValueError:
        completed = math.nan
    if not math.isfinite(completed) or completed <= 0 or completed != int(completed):
        raise BadInputError(f"{where}: the TTFT row's N is {n!r}, not a whole number of completed requests.")

    def average(metric: str, unit: str) -> float | None:
        if metric not in table or not table[metric].get("Average"):
            return None
        return _with_unit(table[metric]["Average"], unit, where, f"the {metric} row's Average")

    common: dict[str, Any] = {}
    beside = path.with_suffix(".json")
    if beside.is_file():
        try:
            common = json.loads(beside.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            common = {}

    if not isinstance(common, dict):
        raise BadInputError(f"{beside}: not AISBench's common metrics (a JSON object of metrics); move it aside.")

    def total(metric: str, unit: str) -> float | None:
        entry = common.get(metric)
        if entry is None:
            return None
        if not isinstance(entry, dict):
            raise BadInputError(
                f"{beside}: '{metric}' is {entry!r}, not AISBench's {{\"total\": ...}} object; fix the file or move it "
                "aside (the CSV alone is read)."
            )
        value = entry.get("total", entry.get("stable"))
        if value is None:
            return None
        text = str(value) if not isinstance(value, bool) else "not a number"
        return _with_unit(text, unit, f"{beside}", f"'{metric}'")

    concurrency = total("Max Concurrency", "")
    if concurrency is not None:
        concurrency = _whole(concurrency, "Max Concurrency", f"{beside}")
    return BenchResult(
        client=AISBENCH,
        path=path,
        completed=int(completed),
        mean_ttft_ms=_with_unit(table["TTFT"]["Average"], " ms", where, "the TTFT row's Average"),
        mean_tpot_ms=_with_unit(table["TPOT"]["Average"], " ms", where, "the TPOT row's Average"),
        max_concurrency=int(concurrency) if concurrency else None,
        mean_input_tokens=average("InputTokens", ""),
        mean_output_tokens=average("OutputTokens", ""),
        output_tokens_per_s=total("Output Token Throughput", " token/s"),
        tokens_per_step=None,
    )


def read_bench_result(path: Path) -> BenchResult:
    """The run recorded in `path`, whichever of the three clients wrote it."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise BadInputError(f"--bench: result file '{path}' cannot be read ({exc.strerror}); check the path.") from None
    stripped = text.strip()
    if stripped.startswith("Performance Parameters"):
        return _from_aisbench(stripped, path)
    lines = [line for line in stripped.splitlines() if line.strip()]
    try:
        doc = json.loads(stripped) if stripped.startswith("{") and not _is_jsonl(lines) else json.loads(lines[-1])
    except (ValueError, IndexError):
        doc = None
    if isinstance(doc, dict) and "mean_tpot_ms" in doc:
        return _from_json(SGLANG if "random_input_len" in doc or "accept_length" in doc else VLLM, doc, path)
    if isinstance(doc, dict) and "Benchmark Duration" in doc and path.with_suffix(".csv").is_file():
        return read_bench_result(path.with_suffix(".csv"))
    raise BadInputError(
        f"--bench: '{path}' is not a result file of vllm bench serve (--save-result JSON), SGLang bench_serving "
        "(--output-file JSON lines) or AISBench (performances/<model>/<dataset>.csv); give the file the client wrote."
    )


def _is_jsonl(lines: list[str]) -> bool:
    if len(lines) < 2:
        return False
    try:
        return all(isinstance(json.loads(line), dict) for line in lines)
    except ValueError:
        return False
