"""Reading expert loads: tokens routed to each logical expert of each MoE layer.

Loads are [layers, experts] counts (or any non-negative measure proportional to them, e.g.
averaged per step), or several time windows of them, [windows, layers, experts]. Accepted files
(the format is chosen by the suffix; any other suffix is sniffed as JSON or CSV):

CSV (`.csv`, `.txt`): one row per MoE layer, one value per expert, comma separated. Blank lines
and lines starting with `#` are ignored. An optional header row (a first row whose first cell is
not a number) may name index columns first: `layer` (the row's layer number, which must run
0, 1, 2, ... in order) and/or `window` before it. With a `window` column the file holds several
windows: rows carry their window number (0, 1, ...), the rows of one window are consecutive and
in layer order, and every window has the same number of layers. Example with two windows of
two layers of four experts::

    window,layer,e0,e1,e2,e3
    0,0,10,3,0,7
    0,1,4,4,9,1
    1,0,12,2,1,6
    1,1,3,5,8,2

JSON (`.json`): nested lists, [layers][experts] or [windows][layers][experts], either at the top
level or under a "loads" key: {"loads": [[...], ...]}.

NumPy (`.npy`): a 2-D or 3-D numeric array with the same meaning (no pickled objects).

Every value must be a finite number >= 0 and every row must have one value per expert. A layer
whose loads are all zero carries no information about balance; it is treated as uniform (every
expert load 1) and reported in `ExpertLoads.uniform_layers`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import BadInputError
from planner.specs.files import MAX_INPUT_FILE_BYTES, read_text

MAX_EXPERTS = 65536
MAX_LAYERS = 10000
MAX_WINDOWS = 1000
_INDEX_COLUMNS = ("window", "layer")


@dataclass(frozen=True)
class ExpertLoads:
    """Loads of one or more windows: `windows` has shape [windows, layers, experts]."""

    windows: np.ndarray
    source: str
    uniform_layers: list[tuple[int, int]] = field(default_factory=list)  # (window, layer)
    windowed: bool = False  # the file had a window dimension (even if only one window)

    @property
    def num_windows(self) -> int:
        return int(self.windows.shape[0])

    @property
    def layers(self) -> int:
        return int(self.windows.shape[1])

    @property
    def experts(self) -> int:
        return int(self.windows.shape[2])

    def window(self, index: int) -> np.ndarray:
        """Loads of one window, [layers, experts]."""
        return self.windows[index]


def read_loads(path: Path | str) -> np.ndarray:
    """Read and check a loads file: [layers, experts], or [windows, layers, experts] when it holds
    several windows. All-zero layers come back uniform (ones)."""
    loads = read_expert_loads(path)
    return np.array(loads.windows[0] if loads.num_windows == 1 and not loads.windowed else loads.windows)


def read_expert_loads(path: Path | str) -> ExpertLoads:
    """Read and check a loads file (CSV, JSON or .npy; see the module docstring)."""
    path = Path(path)
    name = path.name
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return from_array(_read_npy(path), name)
    text = read_text(path, "loads")
    if not text.strip():
        raise BadInputError(f"loads file '{name}' is empty; it needs one row per MoE layer with one load per expert.")
    if suffix == ".json" or (suffix not in (".csv", ".txt") and text.lstrip()[:1] in "[{"):
        return _from_json_text(text, name)
    return _from_csv_text(text, name)


def from_array(data: Any, source: str = "loads") -> ExpertLoads:
    """Check an array-like of shape [layers, experts] or [windows, layers, experts]."""
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError):
        raise BadInputError(f"{source}: the loads are not a rectangular array of numbers.") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)):
        raise BadInputError(
            f"{source}: the loads must be numbers in nested lists [layers][experts] or "
            f"[windows][layers][experts]; got {arr.dtype} values."
        )
    if np.iscomplexobj(arr):
        raise BadInputError(f"{source}: the loads must be real numbers, not complex ones.")
    if arr.ndim not in (2, 3):
        raise BadInputError(
            f"{source}: the loads have {arr.ndim} dimension(s) (shape {list(arr.shape)}); expected "
            f"2 ([layers, experts]) or 3 ([windows, layers, experts])."
        )
    if arr.size == 0:
        raise BadInputError(
            f"{source}: the loads are empty (shape {list(arr.shape)}); give at least one layer "
            f"with one load per expert."
        )
    windows = arr.astype(np.float64).reshape((-1,) + arr.shape[-2:])
    _check_sizes(windows.shape, source)
    windowed = arr.ndim == 3
    bad = ~np.isfinite(windows)
    if bad.any():
        w, layer, expert = (int(v) for v in np.argwhere(bad)[0])
        raise BadInputError(
            f"{source}: {_where(arr.ndim, w, layer)} expert {expert} is "
            f"{_describe(windows[w, layer, expert])}; every load must be a finite number >= 0."
        )
    negative = windows < 0
    if negative.any():
        w, layer, expert = (int(v) for v in np.argwhere(negative)[0])
        raise BadInputError(
            f"{source}: {_where(arr.ndim, w, layer)} expert {expert} is "
            f"{windows[w, layer, expert]:g}; loads are token counts and must be >= 0."
        )
    return _with_uniform_zero_layers(windows, source, windowed)


def check_experts(loads: ExpertLoads, experts: int, model_name: str) -> None:
    """BadInputError unless the loads have one column per routed expert of the model."""
    if loads.experts != experts:
        raise BadInputError(
            f"{loads.source} has {loads.experts} experts per layer but --model {model_name} has "
            f"{experts} routed experts; give loads with {experts} values per layer or the "
            f"matching --model."
        )


# ---- helpers ----------------------------------------------------------------------------------


def _where(ndim: int, window: int, layer: int) -> str:
    return f"window {window} layer {layer}" if ndim == 3 else f"layer {layer}"


def _describe(value: float) -> str:
    return "NaN" if math.isnan(value) else ("infinite" if math.isinf(value) else f"{value:g}")


def _check_sizes(shape: tuple[int, ...], source: str) -> None:
    windows, layers, experts = shape
    if experts > MAX_EXPERTS:
        raise BadInputError(f"{source}: {experts} experts per layer; at most {MAX_EXPERTS}.")
    if layers > MAX_LAYERS:
        raise BadInputError(f"{source}: {layers} layers; at most {MAX_LAYERS}.")
    if windows > MAX_WINDOWS:
        raise BadInputError(f"{source}: {windows} windows; at most {MAX_WINDOWS}.")


def _with_uniform_zero_layers(windows: np.ndarray, source: str, windowed: bool) -> ExpertLoads:
    zero = windows.sum(axis=2) <= 0
    uniform = [(int(w), int(layer)) for w, layer in np.argwhere(zero)]
    if uniform:
        windows = windows.copy()
        windows[zero] = 1.0
    windows.setflags(write=False)
    return ExpertLoads(windows=windows, source=source, uniform_layers=uniform, windowed=windowed)


def _read_npy(path: Path) -> np.ndarray:
    name = path.name
    if not path.is_file():
        raise BadInputError(f"loads file '{path}' does not exist.")
    size = path.stat().st_size
    if size > MAX_INPUT_FILE_BYTES:
        raise BadInputError(
            f"loads file '{name}' is {size} bytes; files over {MAX_INPUT_FILE_BYTES} bytes are refused."
        )
    if size == 0:
        raise BadInputError(f"loads file '{name}' is empty; save a 2-D or 3-D array with numpy.save.")
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BadInputError(
            f"loads file '{name}' is not a readable .npy array ({reason}); save one with "
            f"numpy.save, or use CSV or JSON."
        ) from None
    if not isinstance(arr, np.ndarray):  # an .npz archive
        raise BadInputError(f"loads file '{name}' holds several arrays; save a single array.")
    return arr


def _from_json_text(text: str, name: str) -> ExpertLoads:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"loads file '{name}' is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except RecursionError:
        raise BadInputError(f"loads file '{name}' is nested too deeply.") from None
    where = name
    if isinstance(data, dict):
        if "loads" not in data:
            keys = ", ".join(sorted(str(k) for k in data)) or "none"
            raise BadInputError(
                f"loads file '{name}' is a JSON object without a \"loads\" key (keys: {keys}); "
                f'put the nested lists under "loads" or at the top level.'
            )
        data = data["loads"]
        where = f'{name} "loads"'
    _check_nested(data, where)
    return from_array(data, name)


def _check_nested(data: Any, where: str) -> None:
    """Name the first ragged row, wrong type or bad value of nested JSON lists."""
    if not isinstance(data, list) or not data:
        kind = "an empty list" if isinstance(data, list) else f"a {type(data).__name__}"
        raise BadInputError(f"{where} must be a non-empty list of layers (each a list of loads); it is {kind}.")
    depth = 3 if isinstance(data[0], list) and data[0] and isinstance(data[0][0], list) else 2

    def check_layer(row: Any, label: str, expected: int | None) -> int:
        if not isinstance(row, list):
            raise BadInputError(f"{where}{label} must be a list of loads; it is a {type(row).__name__}.")
        for n, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise BadInputError(f"{where}{label}[{n}] is {json.dumps(value)[:40]}; every load must be a number.")
        if expected is not None and len(row) != expected:
            raise BadInputError(
                f"{where}{label} has {len(row)} values; expected {expected} (one per expert, as in the first layer)."
            )
        if not row:
            raise BadInputError(f"{where}{label} is empty; give one load per expert.")
        return len(row)

    experts: int | None = None
    if depth == 2:
        for i, row in enumerate(data):
            experts = check_layer(row, f"[{i}]", experts)
        return
    layers: int | None = None
    for w, window in enumerate(data):
        if not isinstance(window, list) or not window:
            raise BadInputError(f"{where}[{w}] must be a non-empty list of layers.")
        if layers is not None and len(window) != layers:
            raise BadInputError(f"{where}[{w}] has {len(window)} layers; expected {layers} (as in window 0).")
        layers = len(window)
        for i, row in enumerate(window):
            experts = check_layer(row, f"[{w}][{i}]", experts)


def _from_csv_text(text: str, name: str) -> ExpertLoads:
    rows: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        rows.append((number, [cell.strip() for cell in stripped.split(",")]))
    if not rows:
        raise BadInputError(
            f"loads file '{name}' has no data rows; it needs one row per MoE layer with one load per expert."
        )
    index_columns: list[str] = []
    first_line, first = rows[0]
    if not _is_number(first[0]):
        header = [cell.lower() for cell in first]
        for index_name in _INDEX_COLUMNS:
            if header[len(index_columns) :][:1] == [index_name]:
                index_columns.append(index_name)
        rows = rows[1:]
        if not rows:
            raise BadInputError(f"loads file '{name}' has a header but no data rows.")
    n_index = len(index_columns)
    expected: int | None = None
    values: list[list[float]] = []
    index_values: list[list[int]] = []
    for line_no, cells in rows:
        for column, cell in enumerate(cells, start=1):
            if not _is_number(cell):
                shown = cell if cell else "(empty)"
                raise BadInputError(
                    f"{name} line {line_no}, column {column}: '{shown[:40]}' is not a number; "
                    f"every cell after the header must be a number."
                )
        numbers = [float(cell) for cell in cells]
        data = numbers[n_index:]
        if expected is None:
            expected = len(data)
        if len(data) != expected:
            raise BadInputError(
                f"{name} line {line_no} has {len(data)} values; expected {expected} (one per "
                f"expert, as in the first data row)."
            )
        if not data:
            raise BadInputError(f"{name} line {line_no} has no loads after its index columns.")
        for column, value in enumerate(data, start=n_index + 1):
            if not math.isfinite(value):
                raise BadInputError(
                    f"{name} line {line_no}, column {column} is {_describe(value)}; every load "
                    f"must be a finite number >= 0."
                )
            if value < 0:
                raise BadInputError(
                    f"{name} line {line_no}, column {column} is {value:g}; loads are token counts and must be >= 0."
                )
        for position, value in enumerate(numbers[:n_index]):
            if value != int(value) or value < 0:
                raise BadInputError(
                    f"{name} line {line_no}: {index_columns[position]} '{cells[position]}' must be a whole number >= 0."
                )
        values.append(data)
        index_values.append([int(v) for v in numbers[:n_index]])
    arr = np.asarray(values, dtype=np.float64)
    lines = [line_no for line_no, _ in rows]
    if "window" not in index_columns:
        if "layer" in index_columns:
            _check_sequence([v[0] for v in index_values], lines, name, "layer")
        return from_array(arr, name)
    window_of = [v[0] for v in index_values]
    blocks: list[list[int]] = []
    for n, w in enumerate(window_of):
        if not blocks or window_of[blocks[-1][0]] != w:
            if w != len(blocks):
                raise BadInputError(
                    f"{name} line {lines[n]}: window {w} where window {len(blocks)} was expected; "
                    f"windows run 0, 1, 2, ... and the rows of one window are consecutive."
                )
            blocks.append([])
        blocks[-1].append(n)
    layers = len(blocks[0])
    for w, block in enumerate(blocks):
        if len(block) != layers:
            raise BadInputError(f"{name}: window {w} has {len(block)} layers; expected {layers} (as window 0).")
        if "layer" in index_columns:
            _check_sequence([index_values[n][1] for n in block], [lines[n] for n in block], name, "layer")
    return from_array(arr.reshape(len(blocks), layers, -1), name)


def _check_sequence(found: list[int], lines: list[int], name: str, what: str) -> None:
    for n, value in enumerate(found):
        if value != n:
            raise BadInputError(
                f"{name} line {lines[n]}: {what} {value} where {what} {n} was expected; rows "
                f"must be in {what} order 0, 1, 2, ..."
            )


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return bool(cell)
