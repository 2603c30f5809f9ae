"""Options several commands share, turned into planner objects."""

from __future__ import annotations

from pathlib import Path

from planner.costmodel.imbalance import ImbalanceModel, LoadsImbalance, SkewImbalance
from planner.errors import BadInputError
from planner.specs.model import ModelSpec


def imbalance_from_options(
    loads: Path | None, skew_sigma: float | None, model: ModelSpec
) -> ImbalanceModel | None:
    """The imbalance model the flags ask for (None: the default skew model)."""
    if loads is not None and skew_sigma is not None:
        raise BadInputError("--loads and --skew-sigma exclude each other; give one.")
    if loads is not None:
        from planner.placement.loads import read_loads

        trace = read_loads(loads)
        per_layer = trace[-1] if trace.ndim == 3 else trace
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
