"""A request trace: one request per line of a CSV file (with a header) or of a JSONL file.

Each request gives when it arrives and its input and output tokens. Accepted names:
- arrival: `arrival_s` (seconds from the start), `arrival_ms`, or `timestamp` (milliseconds, the
  unit of the Mooncake traces, github kvcache-ai/Mooncake FAST25-release/traces);
- input: `input_tokens`, `input_length` or `prompt_len`;
- output: `output_tokens`, `output_length` or `output_len`.
Other columns are ignored. Requests are sent in arrival order; a bad line is named with the fix.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import BadInputError
from planner.specs.workload import MAX_TOKENS

TIME_FIELDS = {"arrival_s": 1.0, "arrival_ms": 1e-3, "timestamp": 1e-3}
INPUT_FIELDS = ("input_tokens", "input_length", "prompt_len")
OUTPUT_FIELDS = ("output_tokens", "output_length", "output_len")
MAX_TRACE_REQUESTS = 10_000_000


def _pick(row: dict[str, Any], names: tuple[str, ...], where: str, what: str) -> Any:
    for name in names:
        if name in row and row[name] not in (None, ""):
            return row[name]
    raise BadInputError(f"{where}: no {what} column; name it one of {', '.join(names)}.")


def _number(value: Any, where: str, field: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise BadInputError(f"{where}: {field} = {value!r} is not a number; give a number.") from None
    if not math.isfinite(x):
        raise BadInputError(f"{where}: {field} = {value!r} is not finite; give a finite number.")
    return x


def _tokens(value: Any, where: str, field: str) -> int:
    x = _number(value, where, field)
    if x != math.floor(x) or not 1 <= x <= MAX_TOKENS:
        raise BadInputError(f"{where}: {field} = {value!r}; give a whole number of tokens from 1 to {MAX_TOKENS:,}.")
    return int(x)


def _rows(path: Path) -> list[tuple[str, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInputError(f"--trace: file '{path}' does not exist; give a CSV or JSONL trace.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"--trace: cannot read '{path}' ({exc}); give a UTF-8 CSV or JSONL file.") from None
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise BadInputError(f"--trace: '{path}' is empty; give one request per line.")
    if lines[0][1].lstrip().startswith("{"):
        out = []
        for number, line in lines:
            where = f"--trace {path} line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadInputError(f"{where}: not JSON ({exc.msg}); give one JSON object per line.") from None
            if not isinstance(row, dict):
                raise BadInputError(f"{where}: a JSON object per line is expected.")
            out.append((where, row))
        return out
    reader = csv.DictReader([line for _, line in lines])
    return [(f"--trace {path} line {lines[i + 1][0]}", dict(r)) for i, r in enumerate(reader)]


def load_trace(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival seconds, input tokens, output tokens) of a trace, in arrival order."""
    rows = _rows(path)
    if not rows:
        raise BadInputError(f"--trace: '{path}' has a header but no requests; give one request per line under it.")
    if len(rows) > MAX_TRACE_REQUESTS:
        raise BadInputError(f"--trace: {len(rows):,} requests; at most {MAX_TRACE_REQUESTS:,} are simulated.")
    arrival = np.empty(len(rows))
    inp = np.empty(len(rows), dtype=np.int64)
    out = np.empty(len(rows), dtype=np.int64)
    for k, (where, row) in enumerate(rows):
        unit_field = next((f for f in TIME_FIELDS if f in row and row[f] not in (None, "")), None)
        if unit_field is None:
            raise BadInputError(f"{where}: no arrival time; name the column one of {', '.join(TIME_FIELDS)}.")
        t = _number(row[unit_field], where, unit_field) * TIME_FIELDS[unit_field]
        if t < 0:
            raise BadInputError(f"{where}: {unit_field} = {row[unit_field]} is negative; times count from 0.")
        arrival[k] = t
        inp[k] = _tokens(_pick(row, INPUT_FIELDS, where, "input length"), where, "input tokens")
        out[k] = _tokens(_pick(row, OUTPUT_FIELDS, where, "output length"), where, "output tokens")
    order = np.argsort(arrival, kind="stable")
    return arrival[order], inp[order], out[order]
