"""`--emit mindie DIR`: MindIE Service config.json files and `mindieservice_daemon` processes.

MindIE is configured by files: per instance a server `config.json` (ServerConfig, BackendConfig
with ModelDeployConfig.ModelConfig: worldSize, dp/tp/moe_ep/moe_tp, `models.deepseekv2` with
ep_level (1 AllGather, 2 AllToAll), eplb (level 1 + expert_map_file) or num_dangling_shared_experts
(external shared experts, CloudMatrix384 only), parallel_options.lm_head_local_tp /
dense_mlp_local_tp; ScheduleConfig), the expert table (the same JSON as vLLM-Ascend's map, read by
MindIE-LLM's parse_ep_file), for micro-batched prefill a model-side `llm` fragment
(stream_options.micro_batch), and for a disaggregated plan MindIE Motor's ms_coordinator.json.
Keys and sources: planner/engines/data/mindie.yaml.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from planner.engines.plan_view import plan_view
from planner.placement import vllm_ascend_json
from planner.report.launch.common import (
    ROUTER_PORT,
    Export,
    Process,
    Slot,
    allocate,
    check_runnable,
    compact_json,
    context_tokens,
    kv_cache_gib,
    model_path,
    node_addr,
    nodes_used,
    placement_for,
    readme_common,
    sections,
    visible_devices,
)
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import PhasePlan, Plan

ENGINE = "mindie"
MULTI_NODE_PORT = 1120


def _model_config(plan: Plan, model: ModelSpec, slot: Slot, phase: PhasePlan, map_path: Path | None, view) -> dict:
    att = phase.attention
    ds: dict = {}
    if phase.moe is not None and model.moe is not None:
        ds["ep_level"] = 2 if phase.moe.comm == "alltoall" else 1
        if phase.shared_expert.placement == "dedicated":
            ds["num_dangling_shared_experts"] = phase.shared_expert.devices
            ds["eplb"] = {"level": 0, "expert_map_file": ""}
        elif map_path is not None:
            ds["eplb"] = {"level": 1, "expert_map_file": str(map_path)}
    parallel = {}
    if phase.lm_head_layout.tp != att.tp:
        parallel["lm_head_local_tp"] = phase.lm_head_layout.tp
    if model.num_dense_layers and phase.dense_layout.tp != att.tp:
        parallel["dense_mlp_local_tp"] = phase.dense_layout.tp
    if parallel:
        ds["parallel_options"] = parallel
    cfg: dict = {
        "modelInstanceType": "Standard",
        "modelName": plan.model,
        "modelWeightPath": model_path(plan),
        "worldSize": len(slot.nodes[0][1]),
        "cpuMemSize": 5,
        "npuMemSize": kv_cache_gib(plan, slot.role),
        "backendType": "atb",
        "trustRemoteCode": False,
        "dp": att.dp,
        "tp": att.tp,
    }
    if phase.moe is not None and model.moe is not None:
        cfg["moe_ep"] = phase.moe.ep
        cfg["moe_tp"] = 1
    mtp = view.colocated.mtp_tokens if view.colocated is not None else (view.decode.mtp_tokens if view.decode else 0)
    if mtp:
        cfg["plugin_params"] = json.dumps({"plugin_type": "mtp", "num_speculative_tokens": mtp})
    if ds:
        cfg["models"] = {"deepseekv2": ds}
    return cfg


def _schedule(plan: Plan, slot: Slot, phase: PhasePlan, view) -> dict:
    n = phase.devices
    if slot.role == "prefill":
        tokens = view.prefill.batch_tokens
        batch = max(1, math.ceil(tokens / plan.workload.input_tokens))
        prefill_batch = batch
    elif slot.role == "decode":
        batch = view.decode.concurrency_per_device * n
        tokens = plan.workload.input_tokens
        prefill_batch = 1
    else:
        c = view.colocated
        batch = c.concurrency_per_device * n
        tokens = c.prefill_batch_tokens
        prefill_batch = max(1, math.ceil(tokens / plan.workload.input_tokens))
    return {
        "templateType": "Standard",
        "templateName": "Standard_LLM",
        "cacheBlockSize": 128,
        "maxPrefillBatchSize": prefill_batch,
        "maxPrefillTokens": tokens,
        "maxBatchSize": batch,
        "maxIterTimes": plan.workload.output_tokens,
        "maxPreemptCount": 0,
        "supportSelectBatch": False,
        "maxQueueDelayMicroseconds": 5000,
    }


def build(
    plan: Plan, model: ModelSpec, hw: HardwareSpec, final_dir: Path, loads: np.ndarray | None
) -> tuple[Export, int]:
    """The MindIE export of `plan` (files, processes); refuses what MindIE cannot run."""
    profile = check_runnable(plan, model, hw, ENGINE)
    view = plan_view(plan)
    slots = allocate(view, hw)
    by_role = dict(sections(view))
    pd = view.decode is not None and view.prefill is not None
    files: dict[str, str] = {}
    maps: dict[str, Path] = {}
    for role, phase in by_role.items():
        if (
            model.moe is not None
            and phase.moe is not None
            and phase.moe.ep > 1
            and phase.shared_expert.placement == "replicated"
        ):
            files[f"{role}_expert_map.json"] = vllm_ascend_json(placement_for(model, phase, loads))
            maps[role] = final_dir / f"{role}_expert_map.json"
        micro = 1
        if view.colocated is not None:
            micro = view.colocated.micro_batches
        elif role == "prefill" and view.prefill is not None:
            micro = view.prefill.micro_batches
        if micro > 1:
            fragment = {"llm": {"stream_options": {"micro_batch": True}, "ccl": {"enable_mc2": False}}}
            files[f"{role}_llm_config.json"] = json.dumps(fragment, indent=2) + "\n"
    processes: list[Process] = []
    for k, slot in enumerate(slots):
        phase = by_role[slot.role]
        name = f"{slot.role}{slot.instance}_config.json"
        config = {
            "Version": "1.0.0",
            "ServerConfig": {
                "ipAddress": node_addr(slot.head_node),
                "port": slot.port,
                "managementPort": slot.port + 1,
                "inferMode": "dmi" if pd else "standard",
            },
            "BackendConfig": {
                "backendName": "mindieservice_llm_engine",
                "modelInstanceNumber": 1,
                "npuDeviceIds": [list(slot.nodes[0][1])],
                "tokenizerProcessNumber": 8,
                "multiNodesInferEnabled": len(slot.nodes) > 1,
                "multiNodesInferPort": MULTI_NODE_PORT + k,
                "ModelDeployConfig": {
                    "maxSeqLen": context_tokens(plan),
                    "maxInputTokenLen": plan.workload.input_tokens,
                    "truncation": False,
                    "ModelConfig": [_model_config(plan, model, slot, phase, maps.get(slot.role), view)],
                },
                "ScheduleConfig": _schedule(plan, slot, phase, view),
            },
        }
        files[name] = compact_json(config) + "\n"
        for node, devices in slot.nodes:
            env = {
                "MIES_CONFIG_JSON_PATH": str(final_dir / name),
                "ASCEND_RT_VISIBLE_DEVICES": visible_devices(devices),
            }
            if len(slot.nodes) > 1:
                # multi-node inference: the ranktable, and this node's address for MindIE's gRPC
                env["RANKTABLEFILE"] = str(final_dir / f"ranktable_{slot.role}{slot.instance}.json")
                env["MIES_CONTAINER_IP"] = node_addr(node)
            processes.append(Process(slot.role, slot.instance, node, list(devices), ["mindieservice_daemon"], env))
    if pd:
        coordinator = {
            "http_config": {
                "predict_ip": node_addr(0),
                "predict_port": str(ROUTER_PORT),
                "manage_ip": node_addr(0),
                "manage_port": str(ROUTER_PORT + 1),
            },
            "digs_scheduler_config": {
                "deploy_mode": "pd_separate",
                "scheduler_type": "digs_scheduler",
                "algorithm_type": "load_balance",
            },
        }
        files["ms_coordinator.json"] = json.dumps(coordinator, indent=2) + "\n"
        env = {"MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH": str(final_dir / "ms_coordinator.json")}
        processes.append(Process("router", 0, 0, [], ["ms_coordinator"], env))
    nodes = nodes_used(slots)
    readme = readme_common("MindIE", profile, nodes, processes) + _README
    return Export(profile, files, processes, readme), nodes


_README = """
## MindIE specifics

- Servers: `mindieservice_daemon` reads the config.json named by `MIES_CONFIG_JSON_PATH` (one per instance,
  `<role><i>_config.json`). `ModelConfig` holds the instance's dp/tp/moe_ep/moe_tp, `models.deepseekv2` the
  EP implementation (`ep_level` 1 AllGather, 2 AllToAll), the static expert table (`eplb.level` 1,
  `expert_map_file`, absolute path) or the external shared experts (`num_dangling_shared_experts`),
  and the local TP of the LM head / dense MLP (`parallel_options`). `npuMemSize` is the plan's KV cache per device
  in GiB. Replace `modelWeightPath` with your W8A8 weights.
- Multi-node instances: `multiNodesInferEnabled` is set and `RANKTABLEFILE` names `ranktable_<role><i>.json`,
  which you generate for your cluster (it lists the NPUs' device IPs, which moeplan cannot know).
- Micro-batched prefill: merge `<role>_llm_config.json` (`llm.stream_options.micro_batch`, with `ccl.enable_mc2`
  off, which MindIE requires) into the model-side `atb_llm/conf/config.json` used by those instances.
- Disaggregated plans: MindIE Motor. `ms_coordinator.json` holds the coordinator's addresses and `pd_separate`
  scheduling; the `ms_controller` (with the cluster's global ranktable) registers the prefill and decode
  instances, whose configs are in `dmi` mode. The coordinator's start command and config variable follow
  MindIE Motor 2.3.0's docs; check them against your MindIE version.
"""
