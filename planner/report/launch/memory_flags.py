"""A launch's own memory flag read back as moeplan's `hbm_utilization`: the inverse of what --emit writes.

moeplan's `hbm_utilization` is the share of a device's HBM the whole plan may fill, its runtime
reserve included. SGLang's --mem-fraction-static names a narrower share: its static pool, the weights
and the KV cache; activations, graph buffers and the communication buffers (DeepEP's) live in the rest
of the device (`ServerArgs.mem_fraction_static`, docs/engines.md). `--emit sglang` turns a plan's
`hbm_utilization` into that flag (`common.memory_fraction_of`); `hbm_utilization_for` turns a flag that
some launch already carries back into `hbm_utilization`, so `moeplan evaluate` judges the HBM that
launch gives, not a transcription that takes one share for the other (--mem-fraction-static 0.85 is
about 0.89 of an H200 in moeplan's terms: 5.5 GiB of reserve, activations and DeepEP buffers sit
outside it).

vLLM's and vllm-ascend's --gpu-memory-utilization are refused here: the share they hold is not settled.
--emit writes them without the runtime reserve, but the vLLM-Ascend AFD-plugin runs, whose batches were
set to what fits at 0.93, agree with reading 0.93 as moeplan's own share (tests/costmodel/test_afd.py) and
not with the reserve outside it (2-5 sequences a device more than they ran); their plans keep the flag as
`hbm_utilization`, which is what --hbm-utilization gives.

The parts outside SGLang's share (activations, communication buffers, reserve) do not depend on
`hbm_utilization`, so one evaluation of the plan gives them and the inverse is exact: evaluating the
plan at the returned value and emitting it writes the flag back (to the thousandth --emit rounds to).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.errors import BadInputError
from planner.report.launch.common import device_hbm_bytes, outside_engine_bytes
from planner.report.launch.sglang import OUTSIDE_STATIC_POOL
from planner.specs.plan import Plan

OPTION = "--launch-memory-fraction"
GIB = 2**30

# engine name -> (its flag, the parts of moeplan's HBM breakdown outside the flag's share, the reserve aside)
ENGINE_MEMORY_FLAGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sglang": ("--mem-fraction-static", OUTSIDE_STATIC_POOL),
}
# engines whose memory flag is refused by name (which share it holds is not settled: the module docstring)
UNSETTLED = {
    "vllm": "vLLM's --gpu-memory-utilization",
    "vllm-ascend": "vllm-ascend's --gpu-memory-utilization",
}
ROLES = ("colocated", "prefill", "decode")


@dataclass(frozen=True)
class LaunchMemory:
    """An engine and the value of its memory flag in some launch (--launch-memory-fraction sglang=0.85)."""

    engine: str
    fraction: float

    @property
    def flag(self) -> str:
        return ENGINE_MEMORY_FLAGS[self.engine][0]


def parse_launch_memory(text: str) -> LaunchMemory:
    """ENGINE=FRACTION, or a BadInputError naming the option and the accepted forms."""
    engines = ", ".join(ENGINE_MEMORY_FLAGS)
    engine, sep, value = text.partition("=")
    engine = engine.strip().lower()
    if engine in UNSETTLED:
        raise BadInputError(
            f"{OPTION}: {UNSETTLED[engine]} is read as moeplan's own share: give it as --hbm-utilization "
            f"{value.strip() or 'F'} (the vLLM-Ascend AFD-plugin runs agree with that reading; docs/model.md)."
        )
    if not sep or engine not in ENGINE_MEMORY_FLAGS:
        raise BadInputError(
            f"{OPTION}: give ENGINE=FRACTION with ENGINE one of {engines} (e.g. sglang=0.85 for a launch with "
            f"--mem-fraction-static 0.85); got {text!r}. MindIE sizes its KV cache in blocks, not by a fraction: "
            "use --hbm-utilization for it."
        )
    try:
        fraction = float(value)
    except ValueError:
        raise BadInputError(
            f"{OPTION}: {value!r} is not a number; give a fraction in (0, 1], e.g. {engine}=0.85."
        ) from None
    if not (math.isfinite(fraction) and 0.0 < fraction <= 1.0):
        raise BadInputError(f"{OPTION}: the fraction must be in (0, 1], e.g. {engine}=0.85; got {value}.")
    return LaunchMemory(engine, fraction)


def _blocks(scored: Plan) -> dict[str, dict[str, Any]]:
    if scored.afd is not None:
        raise BadInputError(
            f"{OPTION}: an attention-FFN disaggregated plan has a memory flag per side, which one option cannot "
            "give; set hbm_utilization in the plan or use --hbm-utilization."
        )
    pred = scored.predicted or {}
    # a colocated plan's decode and prefill blocks are parts of its one instance, which --emit sizes
    # by the colocated block
    roles = ("colocated",) if pred.get("colocated") else ROLES
    blocks = {role: pred[role] for role in roles if pred.get(role)}
    if not blocks:
        raise BadInputError(f"{OPTION}: the plan was not scored (no HBM figures); evaluate it first.")
    return blocks


def hbm_utilization_for(scored: Plan, launch: LaunchMemory) -> tuple[float, str]:
    """The `hbm_utilization` at which --emit would write `launch`'s flag for `scored` (a plan with its
    `predicted` block), and a line saying how it was derived.

    A plan with prefill and decode instances takes the smaller of the two roles' values: no role is
    given more HBM than the flag gives its launch.
    """
    _, exclude = ENGINE_MEMORY_FLAGS[launch.engine]
    per_role: dict[str, tuple[float, float, float]] = {}
    for role, block in _blocks(scored).items():
        whole = device_hbm_bytes(block)
        outside = outside_engine_bytes(block, exclude)
        per_role[role] = ((launch.fraction * whole + outside) / whole, outside, whole)
    role = min(per_role, key=lambda r: per_role[r][0])
    utilization, outside, whole = per_role[role]
    parts = "runtime reserve" + "".join(f", {p.replace('_', ' ')}" for p in exclude)
    if utilization > 1.0:
        raise BadInputError(
            f"{OPTION} {launch.engine}={launch.fraction:g}: {launch.flag} {launch.fraction:g} of "
            f"{whole / GIB:.1f} GiB plus the {outside / GIB:.1f} GiB the {role} devices need outside it ({parts}) "
            f"is more than the device holds ({utilization:.3f} of it); give a smaller fraction."
        )
    where = "" if len(per_role) == 1 else f" (the {role} role's, the smaller)"
    note = (
        f"hbm_utilization {utilization:.4f}{where}: {launch.engine}'s {launch.flag} {launch.fraction:g} of "
        f"{whole / GIB:.1f} GiB plus {outside / GIB:.2f} GiB it leaves outside ({parts})"
    )
    return utilization, note
