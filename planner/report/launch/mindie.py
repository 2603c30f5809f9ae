"""`--emit mindie DIR`: MindIE Service config.json files and `mindieservice_daemon` processes.

MindIE is configured by files. Per instance a service `config.json` (mode 0640; every field
MindIE-LLM's config_manager requires, with the shipped defaults of src/server/conf/config.json
where the plan says nothing): ServerConfig, BackendConfig with ModelDeployConfig.ModelConfig
(worldSize = devices per node, dp/tp/moe_ep/moe_tp, `models.deepseekv2`: ep_level 1 AllGather /
2 AllToAll, eplb level 1 + expert_map_file, or num_dangling_shared_experts with the shared-expert
dies inside moe_ep, and the llm options that atb_llm merges from there: parallel_options
lm_head_local_tp / dense_mlp_local_tp, stream_options.micro_batch with ccl.enable_mc2 off) and
ScheduleConfig. A multi-node instance gets a ranktable template (RANK_TABLE_FILE) to complete with
the NPUs' device IPs; a disaggregated plan gets MindIE Motor's complete ms_coordinator.json.
Rules and sources: planner/engines/data/mindie_rules.yaml (checked on every export) and
planner/engines/data/mindie.yaml.
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
from planner.specs.plan import PhasePlan, Plan, sequences_on

ENGINE = "mindie"
MULTI_NODE_PORT = 1120  # BackendConfig.multiNodesInferPort default (config_info.h), + instance
FILE_MODE = 0o640  # config_manager refuses wider (param_checker.cpp:38-41); Motor too (Configure.cpp:57)
COORDINATOR_PORTS = {"predict_port": 0, "manage_port": 1, "alarm_port": 2, "external_port": 3, "status_port": 4}


def device_ip(node: int, device: int) -> str:
    """The placeholder for an NPU's device (RoCE) IP in a ranktable template."""
    return f"NODE{node}_DEVICE{device}_IP"


def _deepseek_options(model: ModelSpec, phase: PhasePlan, map_path: Path | None, micro: int) -> dict:
    """models.deepseekv2: atb_llm reads it and merges the keys that exist under `llm` into `llm`
    (configuration_utils.py merge_models_config): parallel_options, stream_options, ccl, ep_level."""
    att = phase.attention
    ds: dict = {}
    if phase.moe is not None and model.moe is not None:
        ds["ep_level"] = 2 if phase.moe.comm == "alltoall" else 1
        if phase.shared_expert.placement == "dedicated":
            # the first num_dangling_shared_experts EP ranks hold the shared expert
            # (flash_causal_deepseekv2.py:367-370); no load balancing with them (mindie_llm0514)
            ds["num_dangling_shared_experts"] = phase.shared_expert.devices
            ds["eplb"] = {"level": 0, "expert_map_file": ""}
        elif map_path is not None:
            ds["eplb"] = {"level": 1, "expert_map_file": str(map_path)}
    parallel = {}
    head = phase.lm_head_layout.tp
    if head not in (att.tp, phase.devices):
        parallel["lm_head_local_tp"] = head  # with DP_PARTITION_UP_ENABLE=1 (mapping.py:300-309)
    if model.num_dense_layers and phase.dense_layout.tp != att.tp:
        parallel["dense_mlp_local_tp"] = phase.dense_layout.tp
    if parallel:
        ds["parallel_options"] = parallel
    if micro > 1:
        # router.py:649-655: micro_batch excludes ccl.enable_mc2
        ds["stream_options"] = {"micro_batch": True}
        ds["ccl"] = {"enable_mc2": False}
    return ds


def _model_config(plan: Plan, model: ModelSpec, slot: Slot, phase: PhasePlan, ds: dict, mtp: int) -> dict:
    att = phase.attention
    cfg: dict = {
        "modelInstanceType": "Standard",
        "modelName": plan.model,
        "modelWeightPath": model_path(plan),
        # devices of one node: npuDeviceIds[i] must have worldSize entries (backend_config.cpp:160-165);
        # a multi-node instance's world size comes from its ranktable (UpdateMultiNodesInfer)
        "worldSize": len(slot.nodes[0][1]),
        "cpuMemSize": 5,
        "npuMemSize": kv_cache_gib(plan, slot.role),
        "backendType": "atb",
        "trustRemoteCode": False,
        "dp": att.dp,
        "tp": att.tp,
    }
    if phase.moe is not None and model.moe is not None:
        # moe_ep x moe_tp is the world size (mapping.py:401-408): dedicated shared-expert dies are EP ranks
        cfg["moe_ep"] = phase.moe.ep + phase.shared_expert.devices
        cfg["moe_tp"] = 1
    if mtp:
        cfg["plugin_params"] = json.dumps({"plugin_type": "mtp", "num_speculative_tokens": mtp})
    if ds:
        cfg["models"] = {"deepseekv2": ds}
    return cfg


def _schedule(plan: Plan, slot: Slot, phase: PhasePlan, view) -> dict:
    """ScheduleConfig: its batch and token limits are each attention DP rank's, not the instance's. MindIE-LLM
    runs a scheduler per DP rank, each reading the same ScheduleConfig, none dividing by dp (v3.0.0,
    8b4871ad: src/engine/llm_engine.h EnginePerDP, src/scheduler/scheduler.cpp Scheduler::Schedule builds
    each rank's SchedulingBudget from maxPrefillTokens and maxPrefillBatchSize or maxBatchSize), so the
    plan's sequences and prefill batch are written over its DP ranks."""
    att = phase.attention
    input_tokens = plan.workload.input_tokens
    if slot.role == "prefill":
        tokens = math.ceil(view.prefill.batch_tokens / att.dp)
        batch = max(1, math.ceil(tokens / input_tokens))
        prefill_batch = batch
    elif slot.role == "decode":
        batch = sequences_on(view.decode.concurrency_per_device, att.tp)
        tokens = input_tokens
        prefill_batch = 1
    else:
        c = view.colocated
        batch = sequences_on(c.concurrency_per_device, att.tp)
        tokens = math.ceil(c.prefill_batch_tokens / att.dp)
        prefill_batch = max(1, math.ceil(tokens / input_tokens))
    return {
        "templateType": "Standard",
        "templateName": "Standard_LLM",
        "cacheBlockSize": 128,
        "maxPrefillBatchSize": min(prefill_batch, batch),
        # a whole prompt must fit one prefill (config_manager_impl.cpp:324-327): without SplitFuse MindIE never
        # splits a prompt over forwards, so a rank's share below a prompt is raised to one
        "maxPrefillTokens": max(tokens, input_tokens),
        "prefillTimeMsPerReq": 150,  # the shipped defaults (src/server/conf/config.json)
        "prefillPolicyType": 0,
        "decodeTimeMsPerReq": 50,
        "decodePolicyType": 0,
        "maxBatchSize": batch,
        "maxIterTimes": plan.workload.output_tokens,
        "maxPreemptCount": 0,
        "supportSelectBatch": False,
        "maxQueueDelayMicroseconds": 5000,
    }


def _server(slot: Slot, pd: bool) -> dict:
    address = node_addr(slot.head_node)
    server = {
        "ipAddress": address,
        "managementIpAddress": address,
        "port": slot.port,
        "managementPort": slot.port + 1,
        "metricsPort": slot.port + 2,
        "allowAllZeroIpListening": False,
        "maxLinkNum": 1000,
        # TLS needs certificates moeplan cannot make: off here, the README says how to turn it on
        "httpsEnabled": False,
        "inferMode": "dmi" if pd else "standard",
        "interCommTLSEnabled": False,
        "tokenTimeout": 600,
        "e2eTimeout": 600,
        "distDPServerEnabled": False,
    }
    if pd:
        server["interCommPort"] = slot.port + 3  # instances sharing a node need their own
    return server


def ranktable(slot: Slot, hw: HardwareSpec) -> str:
    """A ranktable template for a multi-node instance: its nodes (container_ip = the node's
    address, as MIES_CONTAINER_IP), devices and ranks; device IPs are placeholders."""
    rank = 0
    servers = []
    for node, devices in slot.nodes:
        listed = []
        for d in devices:
            listed.append({"device_id": str(d), "device_ip": device_ip(node, d), "rank_id": str(rank)})
            rank += 1
        servers.append({"server_id": node_addr(node), "container_ip": node_addr(node), "device": listed})
    doc = {"version": "1.0", "status": "completed", "server_count": str(len(slot.nodes)), "server_list": servers}
    return compact_json(doc) + "\n"


def coordinator(router_node: int) -> str:
    """MindIE Motor's ms_coordinator.json: every section Configure.cpp reads, the shipped defaults
    (mindie_motor/src/config/ms_coordinator.json) but for the addresses, ports and TLS (off)."""
    address = node_addr(router_node)
    http = {"allow_all_zero_ip_listening": False, "predict_ip": address, "manage_ip": address}
    http.update({key: str(ROUTER_PORT + k) for key, k in COORDINATOR_PORTS.items()})
    http.update(
        {
            "server_thread_num": 10,
            "client_thread_num": 10,
            "http_timeout_seconds": 600,
            "keep_alive_seconds": 180,
            "server_name": "MindIE-MS",
            "user_agent": "Coordinator/1.0",
        }
    )
    tls = {
        f"{name}_enable": False
        for name in (
            "controller_server_tls",
            "request_server_tls",
            "mindie_client_tls",
            "mindie_mangment_tls",
            "external_tls",
            "status_tls",
            "etcd_server_tls",
            "alarm_client_tls",
        )
    }
    doc = {
        "http_config": http,
        "request_limit": {"single_node_max_requests": 1000, "max_requests": 10000, "body_limit": 1},
        "metrics_config": {"enable": False, "trigger_size": 100},
        "prometheus_metrics_config": {"reuse_time": 3},
        "exception_config": {
            "max_retry": 5,
            "schedule_timeout": 600,
            "first_token_timeout": 600,
            "infer_timeout": 600,
            "tokenizer_timeout": 300,
        },
        "log_info": {
            "log_level": "INFO",
            "to_file": True,
            "to_stdout": True,
            "run_log_path": "./logs/ms_coordinator_run_log.txt",
            "operation_log_path": "./logs/ms_coordinator_operation_log.txt",
            "max_log_str_size": 4096,
            "max_log_file_size": 20,
            "max_log_file_num": 10,
        },
        "digs_scheduler_config": {
            "deploy_mode": "pd_separate",
            "scheduler_type": "digs_scheduler",
            "algorithm_type": "load_balance",
            "cache_size": "100",
            "slots_thresh": "0.05",
            "block_thresh": "0.05",
            "max_schedule_count": "10000",
            "reordering_type": "1",
            "max_res_num": "5000",
            "res_limit_rate": "1.1",
            "select_type": "2",
            "load_cost_values": "1, 0",
            "load_cost_coefficient": "0, 0.22, 1024, 24, 6, 0, 1, 0, 1",
        },
        "string_token_rate": 4.02,
        "tls_config": tls,
        "backup_config": {"database_server_dns": "", "database_server_port": 2379, "function_enable": False},
    }
    return json.dumps(doc, indent=2) + "\n"


def _micro(view, role: str) -> int:
    if view.colocated is not None:
        return view.colocated.micro_batches
    if role == "prefill" and view.prefill is not None:
        return view.prefill.micro_batches
    return 1


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
    options: dict[str, dict] = {}
    for role, phase in by_role.items():
        map_path = None
        if (
            model.moe is not None
            and phase.moe is not None
            and phase.moe.ep > 1
            and phase.shared_expert.placement == "replicated"
        ):
            files[f"{role}_expert_map.json"] = vllm_ascend_json(placement_for(model, phase, loads))
            map_path = final_dir / f"{role}_expert_map.json"
        options[role] = _deepseek_options(model, phase, map_path, _micro(view, role))
    mtp_decode = view.decode.mtp_tokens if view.decode is not None else 0
    processes: list[Process] = []
    for k, slot in enumerate(slots):
        phase = by_role[slot.role]
        mtp = view.colocated.mtp_tokens if view.colocated is not None else (mtp_decode if slot.role == "decode" else 0)
        name = f"{slot.role}{slot.instance}_config.json"
        ds = options[slot.role]
        config = {
            "Version": "1.0.0",
            "ServerConfig": _server(slot, pd),
            "BackendConfig": {
                "backendName": "mindieservice_llm_engine",
                "modelInstanceNumber": 1,
                "npuDeviceIds": [list(slot.nodes[0][1])],
                "tokenizerProcessNumber": 8,
                "multiNodesInferEnabled": len(slot.nodes) > 1,
                "multiNodesInferPort": MULTI_NODE_PORT + k,
                "interNodeTLSEnabled": False,
                "ModelDeployConfig": {
                    "maxSeqLen": context_tokens(plan),
                    "maxInputTokenLen": plan.workload.input_tokens,
                    "truncation": False,
                    "ModelConfig": [_model_config(plan, model, slot, phase, ds, mtp)],
                },
                "ScheduleConfig": _schedule(plan, slot, phase, view),
            },
            "LogConfig": {"dynamicLogLevel": "", "dynamicLogLevelValidHours": 2, "dynamicLogLevelValidTime": ""},
        }
        files[name] = compact_json(config) + "\n"
        env_instance: dict[str, str] = {"MIES_CONFIG_JSON_PATH": str(final_dir / name)}
        head = phase.lm_head_layout.tp
        if (
            "lm_head_local_tp" in ds.get("parallel_options", {}) or head == phase.attention.tp
        ) and head != phase.devices:
            # the LM head follows the attention's DP layout (or its local TP) only with DP partition-up
            # (mapping.py:300-309; flash_causal_deepseekv2.py:1080-1085 pairs it with DP_MOVE_UP_ENABLE)
            env_instance.update({"DP_PARTITION_UP_ENABLE": "1", "DP_MOVE_UP_ENABLE": "1"})
        if len(slot.nodes) > 1:
            table = f"ranktable_{slot.role}{slot.instance}.json"
            files[table] = ranktable(slot, hw)
            env_instance["RANK_TABLE_FILE"] = str(final_dir / table)
        for node, devices in slot.nodes:
            env = {**env_instance, "ASCEND_RT_VISIBLE_DEVICES": visible_devices(devices)}
            if len(slot.nodes) > 1:
                env["MIES_CONTAINER_IP"] = node_addr(node)  # this node's entry in the ranktable
            processes.append(Process(slot.role, slot.instance, node, list(devices), ["mindieservice_daemon"], env))
    if pd:
        router_node = 0
        files["ms_coordinator.json"] = coordinator(router_node)
        env = {"MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH": str(final_dir / "ms_coordinator.json")}
        processes.append(Process("router", 0, router_node, [], ["ms_coordinator"], env))
    modes = {rel: FILE_MODE for rel in files if rel.endswith(".json")}
    nodes = nodes_used(slots)
    readme = readme_common("MindIE", profile, nodes, processes) + _README
    return Export(profile, files, processes, readme, modes), nodes


_README = """
## MindIE specifics

- Servers: `mindieservice_daemon` reads the config.json named by `MIES_CONFIG_JSON_PATH` (one per instance,
  `<role><i>_config.json`). Keep the files at mode 0640 and owned by the user that runs MindIE: its config
  loader refuses wider modes. `ModelConfig` holds the instance's dp/tp/moe_ep/moe_tp and `models.deepseekv2`
  the EP implementation (`ep_level` 1 AllGather, 2 AllToAll), the static expert table (`eplb.level` 1,
  `expert_map_file`, absolute path) or the external shared experts (`num_dangling_shared_experts`: the first
  EP ranks hold the shared expert, so `moe_ep` counts them), and the llm options atb_llm merges from there
  (`parallel_options`, `stream_options.micro_batch` with `ccl.enable_mc2` off). `npuMemSize` is the plan's KV
  cache per device in GiB. Replace `modelWeightPath` with your W8A8 weights (a folder of mode 0750 at most).
- LM head laid out like the attention (or with `lm_head_local_tp`): the processes export
  `DP_PARTITION_UP_ENABLE=1` and `DP_MOVE_UP_ENABLE=1`, without which atb_llm runs the LM head over the whole
  instance.
- Multi-node instances: `multiNodesInferEnabled` is set, `RANK_TABLE_FILE` names `ranktable_<role><i>.json` and
  `MIES_CONTAINER_IP` is the node's address. The ranktable lists the instance's nodes, devices and ranks; replace
  each `NODEn_DEVICEd_IP` with that NPU's device IP (`hccn_tool -i d -ip -g` on node n).
- TLS: `httpsEnabled`, `interCommTLSEnabled` and `interNodeTLSEnabled` are off (they need your certificates);
  turn them on with the certificate fields of MindIE's config.json documentation.
- Disaggregated plans: MindIE Motor. `ms_coordinator.json` is complete (every section the coordinator reads, its
  shipped defaults, TLS off): start `ms_coordinator` with `MINDIE_MS_COORDINATOR_CONFIG_FILE_PATH` pointing at it;
  the `ms_controller` (with the cluster's global ranktable) registers the prefill and decode instances, whose
  configs are in `dmi` mode.
"""
