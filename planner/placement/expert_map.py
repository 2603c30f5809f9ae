"""Writing and reading expert maps.

vllm-ascend reads a static expert placement from the JSON file named by `expert_map_path` in its
`additional_config`::

    {"moe_layer_count": 58,
     "layer_list": [{"layer_id": 0, "device_count": 32,
       "device_list": [{"device_id": 0, "device_expert": [0, 1, 2, 3, 4, 5, 6, 7, 200]},
                       ...]},
                    ...]}

Every `device_expert` list has the same length (slots per device); an expert's local slot is its
position in the list. `to_vllm_ascend` writes exactly these keys; `read_expert_map` reads such a
file back into a `Placement`, naming the first problem it finds.

moeplan's own JSON (`moeplan_document`, `--format json`) is a superset: the same two keys plus
`format`, `replica_counts` and the per-layer figures (imbalance of moeplan's placement, of the EPLB
baselines and the lower bounds; nodes reached per token when there are several nodes), so it can
be read back the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from planner.errors import BadInputError
from planner.placement.model import Placement, validate_ids
from planner.specs.files import read_text

MOEPLAN_FORMAT = "moeplan-expert-placement/1"
_VLLM_KEYS = {"moe_layer_count", "layer_list"}


def to_vllm_ascend(placement: Placement) -> dict[str, Any]:
    """The placement as vllm-ascend's expert-map mapping."""
    return {
        "moe_layer_count": placement.layers,
        "layer_list": [
            {
                "layer_id": layer,
                "device_count": placement.devices,
                "device_list": [
                    {"device_id": device, "device_expert": experts}
                    for device, experts in enumerate(placement.layer_lists(layer))
                ],
            }
            for layer in range(placement.layers)
        ],
    }


def vllm_ascend_json(placement: Placement) -> str:
    """vllm-ascend expert-map JSON text (one device per line, so diffs stay readable)."""
    return _dump(to_vllm_ascend(placement))


def moeplan_document(placement: Placement, figures: dict[str, Any]) -> dict[str, Any]:
    """moeplan's JSON: the vllm-ascend keys, replica counts, and `figures` (per-layer lists and
    settings computed by the caller)."""
    doc: dict[str, Any] = {"format": MOEPLAN_FORMAT}
    doc.update(to_vllm_ascend(placement))
    doc["num_experts"] = placement.num_experts
    doc["slots_per_device"] = placement.slots_per_device
    doc["replica_counts"] = placement.replica_counts.tolist()
    doc.update(figures)
    return doc


def moeplan_json(placement: Placement, figures: dict[str, Any]) -> str:
    """moeplan's JSON text."""
    return _dump(moeplan_document(placement, figures))


def _dump(doc: dict[str, Any]) -> str:
    """JSON text with lists of numbers on one line each (one device per line)."""
    return _format(doc, 0) + "\n"


def _format(value: Any, depth: int) -> str:
    value = _plain(value) if isinstance(value, (np.generic, np.ndarray)) else value
    pad, inner = " " * depth, " " * (depth + 1)
    if isinstance(value, dict):
        if all(_flat(v) for v in value.values()):
            return json.dumps(value, default=_plain)
        items = [f"{inner}{json.dumps(str(k))}: {_format(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, (list, tuple)):
        if _flat(value):
            return json.dumps(value, default=_plain)
        items = [inner + _format(v, depth + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value)


def _flat(value: Any) -> bool:
    """A scalar, or a list of scalars."""
    if isinstance(value, np.ndarray):
        return value.ndim <= 1
    if isinstance(value, (list, tuple)):
        return all(not isinstance(v, (dict, list, tuple, np.ndarray)) for v in value)
    return not isinstance(value, dict)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def read_expert_map(path: Path | str, num_experts: int | None = None) -> Placement:
    """Read a vllm-ascend expert map (or moeplan's JSON) into a Placement.

    `num_experts` defaults to the largest expert id + 1 (moeplan's JSON records it).
    """
    path = Path(path)
    text = read_text(path, "expert map")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"expert map '{path.name}' is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except RecursionError:
        raise BadInputError(f"expert map '{path.name}' is nested too deeply.") from None
    return placement_from_mapping(data, path.name, num_experts)


def placement_from_mapping(data: Any, source: str, num_experts: int | None = None) -> Placement:
    """Validate an expert-map mapping and turn it into a Placement."""
    if not isinstance(data, dict):
        raise BadInputError(f"{source}: an expert map is a JSON object with moe_layer_count and layer_list.")
    missing = sorted(_VLLM_KEYS - set(data))
    if missing:
        raise BadInputError(f"{source}: missing key(s) {', '.join(missing)}.")
    if data.get("format", MOEPLAN_FORMAT) != MOEPLAN_FORMAT:
        raise BadInputError(f"{source}: unknown format '{data['format']}'.")
    if num_experts is None and isinstance(data.get("num_experts"), int):
        num_experts = data["num_experts"]
    layer_count = _int(data["moe_layer_count"], f"{source}: moe_layer_count", 1)
    layer_list = data["layer_list"]
    if not isinstance(layer_list, list):
        raise BadInputError(f"{source}: layer_list must be a list of layers.")
    if len(layer_list) != layer_count:
        raise BadInputError(f"{source}: moe_layer_count is {layer_count} but layer_list has {len(layer_list)} entries.")
    by_id: dict[int, list[list[int]]] = {}
    devices: int | None = None
    slots: int | None = None
    for n, layer in enumerate(layer_list):
        where = f"{source}: layer_list[{n}]"
        if not isinstance(layer, dict):
            raise BadInputError(f"{where} must be an object with layer_id, device_count, device_list.")
        for key in ("layer_id", "device_count", "device_list"):
            if key not in layer:
                raise BadInputError(f"{where} lacks {key}.")
        layer_id = _int(layer["layer_id"], f"{where}.layer_id", 0)
        if layer_id >= layer_count:
            raise BadInputError(f"{where}.layer_id is {layer_id}; layer ids run 0..{layer_count - 1}.")
        if layer_id in by_id:
            raise BadInputError(f"{where}.layer_id {layer_id} appears twice.")
        count = _int(layer["device_count"], f"{where}.device_count", 1)
        device_list = layer["device_list"]
        if not isinstance(device_list, list) or len(device_list) != count:
            got = len(device_list) if isinstance(device_list, list) else "no"
            raise BadInputError(f"{where}: device_count is {count} but device_list has {got} entries.")
        if devices is None:
            devices = count
        elif count != devices:
            raise BadInputError(
                f"{where}.device_count is {count}; every layer must have the same device count ({devices})."
            )
        grid: list[list[int] | None] = [None] * count
        for k, device in enumerate(device_list):
            dwhere = f"{where}.device_list[{k}]"
            if not isinstance(device, dict) or "device_id" not in device or ("device_expert" not in device):
                raise BadInputError(f"{dwhere} must be an object with device_id and device_expert.")
            device_id = _int(device["device_id"], f"{dwhere}.device_id", 0)
            if device_id >= count:
                raise BadInputError(f"{dwhere}.device_id is {device_id}; device ids run 0..{count - 1}.")
            if grid[device_id] is not None:
                raise BadInputError(f"{dwhere}.device_id {device_id} appears twice in the layer.")
            experts = device["device_expert"]
            if not isinstance(experts, list) or not experts:
                raise BadInputError(f"{dwhere}.device_expert must be a non-empty list of ids.")
            ids = [_int(e, f"{dwhere}.device_expert", 0) for e in experts]
            if slots is None:
                slots = len(ids)
            elif len(ids) != slots:
                raise BadInputError(
                    f"{dwhere}.device_expert has {len(ids)} entries; every device must have the "
                    f"same number of slots ({slots})."
                )
            grid[device_id] = ids
        by_id[layer_id] = [row for row in grid if row is not None]
    array = np.array([by_id[i] for i in range(layer_count)], dtype=np.int64)
    inferred = int(array.max()) + 1
    experts = inferred if num_experts is None else num_experts
    if inferred > experts:
        raise BadInputError(f"{source}: expert id {inferred - 1} is out of range; the model has {experts} experts.")
    validate_ids(array, experts, source)
    return Placement(array, experts)


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInputError(f"{where} must be a whole number; got {json.dumps(value)[:40]}.")
    if value < minimum:
        raise BadInputError(f"{where} must be >= {minimum}; got {value}.")
    return value
