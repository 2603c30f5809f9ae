"""`--emit vllm-ascend DIR`: per instance, the parallel settings a vllm-ascend launch takes.

For every phase of a plan it writes `<phase>_instance.json` (data/tensor parallel sizes, expert
parallel, `additional_config` with the expert map path, the per-module layouts moeplan assumed,
and a `vllm serve` command line to start from) and `<phase>_expert_map.json` (the format
vllm-ascend's `expert_map_path` reads, per its EPLB documentation). The expert map is moeplan's
placement for the measured loads (`--loads`) or, without them, for the default skew model's
loads. A README.txt says how to use the files. Every file is written atomically by the caller-supplied writer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from planner.costmodel.imbalance import DEFAULT_SKEW_SIGMA, lognormal_popularity
from planner.placement import optimize_placement, vllm_ascend_json
from planner.placement.optimize import FAST_SEARCH
from planner.specs.model import ModelSpec
from planner.specs.plan import DecodePlan, PhasePlan, Plan, PrefillPlan

HF_NAMES = {
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite",
}


def default_loads(model: ModelSpec) -> np.ndarray:
    """Per-layer loads of the default skew model: [MoE layers, routed experts]."""
    assert model.moe is not None
    pop = lognormal_popularity(model.moe.routed_experts, DEFAULT_SKEW_SIGMA)
    return np.repeat(pop[None, :] * 1e6, model.num_moe_layers, axis=0)


def _instance_doc(plan: Plan, phase_name: str, phase: PhasePlan, map_file: str | None) -> dict:
    att = phase.attention
    args: dict = {
        "tensor_parallel_size": att.tp,
        "data_parallel_size": att.dp,
        "enable_expert_parallel": phase.moe is not None and phase.moe.ep > 1,
        "gpu_memory_utilization": plan.hbm_utilization,  # the HBM fraction the plan was sized for
    }
    extra: dict = {}
    if map_file:
        extra["expert_map_path"] = map_file
    if phase.lm_head is not None and phase.lm_head.tp > 1:
        extra["lmhead_tensor_parallel_size"] = phase.lm_head.tp
    if att.is_hybrid and att.post_layout.tp > 1:
        extra["oproj_tensor_parallel_size"] = att.post_layout.tp
    if extra:
        args["additional_config"] = extra
    model_id = HF_NAMES.get(plan.model, plan.model)
    cmd = [
        f"vllm serve {model_id}",
        f"--tensor-parallel-size {att.tp}",
        f"--data-parallel-size {att.dp}",
        f"--gpu-memory-utilization {plan.hbm_utilization:g}",
    ]
    if args["enable_expert_parallel"]:
        cmd.append("--enable-expert-parallel")
    if extra:
        cmd.append(f"--additional-config '{json.dumps(extra, sort_keys=True)}'")
    if isinstance(phase, DecodePlan):
        cmd.append(f"--max-num-seqs {phase.concurrency_per_device * att.tp}")
        if phase.mtp_tokens:
            cmd.append(
                "--speculative-config '"
                + json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": phase.mtp_tokens})
                + "'"
            )
    elif isinstance(phase, PrefillPlan):
        cmd.append(f"--max-num-batched-tokens {phase.batch_tokens // att.dp}")
    section = plan.colocated if phase_name == "colocated" else None
    if section is not None:
        # one server runs both phases; a DP rank's budget per step is its decode batch plus, with
        # chunked prefill, its share of the chunk (vLLM: max_num_batched_tokens per iteration)
        decode_tokens = section.concurrency_per_device * att.tp * (1 + section.mtp_tokens)
        if section.chunk_tokens is not None:
            budget = -(-section.chunk_tokens // att.dp) + decode_tokens
            cmd += ["--enable-chunked-prefill", f"--max-num-batched-tokens {budget}"]
        else:
            cmd.append(f"--max-num-batched-tokens {max(decode_tokens, section.prefill_batch_tokens // att.dp)}")
    return {
        "instance": phase_name,
        "instances": phase.instances,
        "devices_per_instance": phase.devices,
        "vllm": args,
        "moeplan_layouts": phase.model_dump(mode="json", exclude_none=True),
        "command": " ".join(cmd),
    }


def emit_vllm_ascend(
    plan: Plan,
    model: ModelSpec,
    out_dir: Path,
    write: Callable[[Path, str], None],
    loads: np.ndarray | None = None,
) -> list[Path]:
    """Write the instance settings and expert maps of `plan` into out_dir; returns the files."""
    written = []
    # a colocated plan is one kind of instance serving both phases: one file, its decode view
    phases = (
        [("colocated", plan.decode_phase)]
        if plan.is_colocated
        else [("decode", plan.decode_phase), ("prefill", plan.prefill_phase)]
    )
    for name, phase in phases:
        if phase is None:
            continue
        map_file = None
        if model.moe is not None and phase.moe is not None:
            layer_loads = loads if loads is not None else default_loads(model)
            result = optimize_placement(layer_loads, phase.moe.ep, phase.moe.slots_per_device, settings=FAST_SEARCH)
            map_file = f"{name}_expert_map.json"
            path = out_dir / map_file
            write(path, vllm_ascend_json(result.placement))
            written.append(path)
        path = out_dir / f"{name}_instance.json"
        write(path, json.dumps(_instance_doc(plan, name, phase, map_file), indent=2) + "\n")
        written.append(path)
    readme = out_dir / "README.txt"
    write(
        readme,
        "Start each instance with the 'command' of its <phase>_instance.json (one vLLM-Ascend server "
        "per instance, 'instances' of them), with the expert map next to it; 'moeplan_layouts' lists "
        "the per-module layouts moeplan assumed, some of which your vllm-ascend version may not expose.\n",
    )
    written.append(readme)
    return written
