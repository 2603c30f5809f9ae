"""Options several commands share, turned into planner objects."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.costmodel.imbalance import ImbalanceModel, LoadsImbalance, SkewImbalance
from planner.errors import BadInputError
from planner.specs.model import ModelSpec


def imbalance_from_options(loads: Path | None, skew_sigma: float | None, model: ModelSpec) -> ImbalanceModel | None:
    """The imbalance model the flags ask for (None: the default, the engine imbalance model)."""
    if loads is not None and skew_sigma is not None:
        raise BadInputError("--loads and --skew-sigma exclude each other; give one.")
    if loads is not None:
        per_layer = loads_array(loads)
        if model.moe is None:
            raise BadInputError(f"--loads: model '{model.name}' has no experts.")
        if per_layer.shape[1] != model.moe.routed_experts:
            raise BadInputError(
                f"--loads: '{loads}' has {per_layer.shape[1]} experts per layer; model "
                f"'{model.name}' has {model.moe.routed_experts}."
            )
        return LoadsImbalance(per_layer, label=str(loads))
    if skew_sigma is not None:
        return SkewImbalance(skew_sigma)
    return None


def parse_int_list(text: str, flag: str, lo: int, hi: int) -> list[int]:
    """'0,1,2' -> [0, 1, 2], each within [lo, hi]; errors name the flag."""
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            raise BadInputError(f"{flag}: '{part}' is not an integer; give a list like 0,1,2.") from None
        if not lo <= v <= hi:
            raise BadInputError(f"{flag}: {v} is outside [{lo}, {hi}].")
        values.append(v)
    if not values:
        raise BadInputError(f"{flag}: give at least one value.")
    return sorted(set(values))


def loads_array(path: Path):
    """Per-layer loads [layers, experts] from a loads file (the last window of several)."""
    from planner.placement.loads import read_loads

    trace = read_loads(path)
    return trace[-1] if trace.ndim == 3 else trace


# ---- option types shared by `plan` and `sweep` ---------------------------------------------------
PhaseOpt = Annotated[str, typer.Option(help="both, decode or prefill.")]
DecodeDevicesOpt = Annotated[int | None, typer.Option("--decode-devices", help="Pin the decode instance size.")]
PrefillDevicesOpt = Annotated[int | None, typer.Option("--prefill-devices", help="Pin the prefill instance size.")]
LoadsOpt = Annotated[Path | None, typer.Option("--loads", help="Expert loads: imbalance from the placement for them.")]
SkewSigmaOpt = Annotated[
    float | None,
    typer.Option(
        "--skew-sigma",
        min=0.0,
        max=5.0,
        help="Oracle skew model with this log-normal sigma (default: engine imbalance with drift).",
    ),
]
MaxRedundantOpt = Annotated[
    int | None,
    typer.Option(
        "--max-redundant-experts", help="Cap redundant expert copies per instance (0: every expert exactly once)."
    ),
]
ColocatedOpt = Annotated[
    bool,
    typer.Option(
        "--colocated/--no-colocated",
        help="Also consider colocated instances (prefill and decode on the same devices; TPOT is then an "
        "average over prefill stalls).",
    ),
]
DecodeMicrobatchOpt = Annotated[
    bool,
    typer.Option(
        "--decode-microbatch/--no-decode-microbatch",
        help="Also consider two decode micro-batches overlapping compute with MoE dispatch/combine "
        "(off: the engine cannot, e.g. no two-batch overlap).",
    ),
]
WorkersOpt = Annotated[
    int, typer.Option("--workers", min=1, max=64, help="CP-SAT worker threads (results do not depend on it).")
]
