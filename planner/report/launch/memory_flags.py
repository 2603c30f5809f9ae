"""A launch's own memory flag read back as moeplan's `hbm_utilization`: the inverse of what --emit writes.

moeplan's `hbm_utilization` is the share of a device's HBM the whole plan may fill, its runtime
reserve included. An engine's flag names a narrower share, and `--emit` turns a plan's
`hbm_utilization` into it (`common.memory_fraction_of`); `hbm_utilization_for` turns a flag that some
launch already carries back into `hbm_utilization`, so `moeplan evaluate` judges the HBM that launch
gives, not a transcription that takes one share for the other.

- SGLang's --mem-fraction-static holds its static pool, the weights and the KV cache; activations,
  graph buffers and the communication buffers (DeepEP's) live in the rest of the device
  (`ServerArgs.mem_fraction_static`, docs/engines.md): 0.85 is about 0.89 of an H200 in moeplan's terms.
- vllm-ascend's --gpu-memory-utilization (vLLM's CacheConfig.gpu_memory_utilization), as read in
  vllm_ascend/worker/worker.py at v0.25.1rc1 (9bf964cb4b87), the release --emit writes for:
  `_init_device` takes a MemorySnapshot right after `torch.npu.set_device` and before
  `_init_worker_distributed_environment` (l.441-488); `determine_available_memory` gives the KV cache
  `requested_memory - (weights + profiled activation peak + non-torch growth since the snapshot)`
  (l.548-581), so the HCCL buffers and operator workspaces sit inside the share, while what the device
  held at the snapshot (the ACL runtime context) and the graphs captured after the KV cache is allocated
  (`compile_or_warm_up_model`, l.708) sit outside it: moeplan's runtime reserve, nothing else. The same
  code runs from v0.15.0rc1 on (vllm-ascend PR #6625, 2026-02-25, "Use upstream mem_utils for
  profiling"); releases before it counted every non-torch byte on the device, the runtime's too, inside
  the share (v0.14.0rc1's `determine_available_memory`), which is moeplan's own share: --hbm-utilization.
- vLLM on GPUs is refused by name: moeplan writes no vLLM launch for a GPU to mirror, and vLLM v0.25.1
  splits the device differently again (its snapshot follows NCCL's set-up, vllm/v1/worker/gpu_worker.py,
  and the share holds an estimate of the CUDA graphs).

The parts outside an engine's share (activations, communication buffers, reserve) do not depend on
`hbm_utilization`, so one evaluation of the plan gives them and the inverse is exact: evaluating the
plan at the returned value and emitting it writes the flag back (to the thousandth --emit rounds to).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.errors import BadInputError
from planner.report.launch.common import afd_side_block, device_hbm_bytes, outside_engine_bytes
from planner.report.launch.sglang import OUTSIDE_STATIC_POOL
from planner.specs.plan import Plan

OPTION = "--launch-memory-fraction"
GIB = 2**30

# engine name -> (its flag, the parts of moeplan's HBM breakdown outside the flag's share, the reserve aside)
ENGINE_MEMORY_FLAGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "sglang": ("--mem-fraction-static", OUTSIDE_STATIC_POOL),
    "vllm-ascend": ("--gpu-memory-utilization", ()),
}
# engines whose memory flag is refused by name, and why (the module docstring)
REFUSED = {
    "vllm": "vLLM's --gpu-memory-utilization on a GPU is not read here (moeplan writes no GPU launch of vLLM to "
    "mirror; its share holds the CUDA graphs' estimate and leaves NCCL's buffers out)",
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
    if engine in REFUSED:
        raise BadInputError(
            f"{OPTION}: {REFUSED[engine]}; give the share of the device the plan may fill as --hbm-utilization "
            f"(e.g. {value.strip() or '0.9'}, which takes the flag for moeplan's own share, runtime reserve "
            "included; docs/model.md)."
        )
    if not sep or engine not in ENGINE_MEMORY_FLAGS:
        raise BadInputError(
            f"{OPTION}: give ENGINE=FRACTION with ENGINE one of {engines} (e.g. sglang=0.85 for a launch with "
            f"--mem-fraction-static 0.85, vllm-ascend=0.9 for one with --gpu-memory-utilization 0.9 on vllm-ascend "
            f"v0.15.0rc1 or later); got {text!r}. MindIE sizes its KV cache in blocks, not by a fraction: use "
            "--hbm-utilization for it."
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


def _blocks(scored: Plan, exclude: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The plan's HBM figures by the part one launch flag sizes ("decode role", "attention side", ...)."""
    if scored.afd is not None:
        if exclude:
            # the parts outside the flag differ by side (activations, buffers): one flag gives two shares
            raise BadInputError(
                f"{OPTION}: an attention-FFN disaggregated plan has a memory flag per side for this engine, which "
                "one option cannot give; set hbm_utilization in the plan or use --hbm-utilization."
            )
        # only the runtime reserve lies outside (vllm-ascend): one flag on both sides, as the afd-plugin launches
        return {f"{side} side": afd_side_block(scored, side) for side in ("attention", "ffn")}
    pred = scored.predicted or {}
    # a colocated plan's decode and prefill blocks are parts of its one instance, which --emit sizes
    # by the colocated block
    roles = ("colocated",) if pred.get("colocated") else ROLES
    blocks = {f"{role} role": pred[role] for role in roles if pred.get(role)}
    if not blocks:
        raise BadInputError(f"{OPTION}: the plan was not scored (no HBM figures); evaluate it first.")
    return blocks


def hbm_utilization_for(scored: Plan, launch: LaunchMemory) -> tuple[float, str]:
    """The `hbm_utilization` at which --emit would write `launch`'s flag for `scored` (a plan with its
    `predicted` block), and a line saying how it was derived.

    A plan with prefill and decode instances (or an AFD plan's two sides) takes the smaller of the two
    values: no role is given more HBM than the flag gives its launch.
    """
    _, exclude = ENGINE_MEMORY_FLAGS[launch.engine]
    per_part: dict[str, tuple[float, float, float]] = {}
    for part, block in _blocks(scored, exclude).items():
        whole = device_hbm_bytes(block)
        outside = outside_engine_bytes(block, exclude)
        per_part[part] = ((launch.fraction * whole + outside) / whole, outside, whole)
    name = min(per_part, key=lambda p: per_part[p][0])
    utilization, outside, whole = per_part[name]
    parts = "runtime reserve" + "".join(f", {p.replace('_', ' ')}" for p in exclude)
    if utilization > 1.0:
        raise BadInputError(
            f"{OPTION} {launch.engine}={launch.fraction:g}: {launch.flag} {launch.fraction:g} of "
            f"{whole / GIB:.1f} GiB plus the {outside / GIB:.1f} GiB the {name}'s devices need outside it "
            f"({parts}) is more than the device holds ({utilization:.3f} of it); give a smaller fraction."
        )
    where = "" if len(per_part) == 1 else f" (the {name}'s, the smaller)"
    note = (
        f"hbm_utilization {utilization:.4f}{where}: {launch.engine}'s {launch.flag} {launch.fraction:g} of "
        f"{whole / GIB:.1f} GiB plus {outside / GIB:.2f} GiB it leaves outside ({parts})"
    )
    return utilization, note
