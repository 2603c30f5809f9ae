"""`--emit vllm-ascend DIR`: `vllm serve` processes for vLLM-Ascend (read at v0.25.1rc1).

Per instance and per node it spans, one `vllm serve` (data-parallel ranks of the node; nodes after
the first run `--headless` with `--data-parallel-start-rank`), and for a disaggregated plan the
release's proxy (examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py) in front
of the Mooncake connector (MooncakeConnectorV1, kv_producer on prefill, kv_consumer on decode).
Settings and where they were read: planner/engines/data/vllm_ascend.yaml and docs/engines.md.
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
    context_tokens,
    draft_model_path,
    memory_fraction,
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

ENGINE = "vllm-ascend"
DP_RPC_PORT_BASE = 13389
KV_PORT_BASE = 36000  # >= 36000 clears AscendDirectTransport's ports on 16-NPU nodes (PD tutorial)
KV_PORT_STRIDE = 100  # each instance takes kv_port .. kv_port + NPUs per node


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _has_shared_expert(model: ModelSpec) -> bool:
    return model.moe is not None and model.moe.shared_experts > 0


def shared_expert_dp(phase: PhasePlan, model: ModelSpec) -> bool:
    """Whether the launch must set enable_shared_expert_dp: the plan replicates the shared expert while
    vLLM's attention TP group would split it (TP > 1 with expert parallelism; the option replicates its
    weights and runs each device's share of the tokens, vllm_ascend/ascend_config.py at v0.25.1rc1)."""
    expert_parallel = phase.moe is not None and phase.moe.ep > 1
    replicated = phase.shared_expert.placement == "replicated"
    return _has_shared_expert(model) and expert_parallel and phase.attention.tp > 1 and replicated


def shared_expert_stream(role: str, phase: PhasePlan, model: ModelSpec, hw: HardwareSpec) -> bool:
    """Whether the launch must set multistream_overlap_shared_expert: the plan's decode steps run a whole
    shared expert concurrently with dispatch/combine (the machine's overlap.decode_shared_expert_with_dispatch,
    planner.costmodel.modules.moe_cost), which vllm-ascend does on a second stream with this option, at
    attention TP 1 or with enable_shared_expert_dp (docs/source/tutorials/models/DeepSeek-V3.1.md at
    v0.25.1rc1; its PD decode nodes set it). Prefill steps are costed without the overlap."""
    return (
        role != "prefill"
        and _has_shared_expert(model)
        and phase.shared_expert.placement == "replicated"
        and hw.overlap.decode_shared_expert_with_dispatch
    )


def _additional_config(
    role: str,
    phase: PhasePlan,
    map_path: Path | None,
    redundant: int,
    model: ModelSpec,
    hw: HardwareSpec,
) -> dict:
    att = phase.attention
    extra: dict = {}
    if shared_expert_dp(phase, model):
        extra["enable_shared_expert_dp"] = True
    if shared_expert_stream(role, phase, model, hw):
        extra["multistream_overlap_shared_expert"] = True
    if map_path is not None:
        extra["eplb_config"] = {"expert_map_path": str(map_path), "num_redundant_experts": redundant}
    fine: dict = {}
    head = phase.lm_head_layout
    if head.tp != att.tp:
        fine["lmhead_tensor_parallel_size"] = head.tp
    if model.num_dense_layers > 0 and phase.dense_layout.tp != att.tp:
        fine["mlp_tensor_parallel_size"] = phase.dense_layout.tp
    if fine:
        extra["finegrained_tp_config"] = fine
    return extra


def build(
    plan: Plan, model: ModelSpec, hw: HardwareSpec, final_dir: Path, loads: np.ndarray | None
) -> tuple[Export, int]:
    """The vLLM-Ascend export of `plan` (files, processes); refuses what the release cannot run."""
    if plan.afd is not None:
        from planner.report.launch.afd_plugin import build_afd

        return build_afd(plan, model, hw, final_dir, loads)
    profile = check_runnable(plan, model, hw, ENGINE)
    view = plan_view(plan)
    slots = allocate(view, hw)
    files: dict[str, str] = {}
    processes: list[Process] = []
    decode_mtp = view.decode.mtp_tokens if view.decode is not None else 0
    pd = view.decode is not None and view.prefill is not None
    by_role = dict(sections(view))
    extra_by_role: dict[str, dict] = {}
    for role, phase in by_role.items():
        map_path = None
        redundant = 0
        if model.moe is not None and phase.moe is not None and phase.moe.ep > 1:
            placement = placement_for(model, phase, loads)
            files[f"{role}_expert_map.json"] = vllm_ascend_json(placement)
            map_path = final_dir / f"{role}_expert_map.json"
            redundant = placement.redundant_slots
        extra_by_role[role] = _additional_config(role, phase, map_path, redundant, model, hw)
    for k, slot in enumerate(slots):
        phase = by_role[slot.role]
        att = phase.attention
        common = [
            model_path(plan),
            "--host",
            "0.0.0.0",
            "--port",
            str(slot.port),
            "--served-model-name",
            plan.model,
            "--trust-remote-code",
            "--tensor-parallel-size",
            str(att.tp),
            "--data-parallel-size",
            str(att.dp),
            "--max-model-len",
            str(context_tokens(plan)),
            "--gpu-memory-utilization",
            str(memory_fraction(plan, slot.role, (), profile, "--gpu-memory-utilization")),
        ]
        if phase.moe is not None and phase.moe.ep > 1:
            common.append("--enable-expert-parallel")
        if plan.quantization == "a8w8c16":
            common += ["--quantization", "ascend"]
        common += _batch_flags(plan, slot.role, phase)
        mtp = _mtp_tokens(slot.role, view, decode_mtp)
        if mtp:
            draft = draft_model_path(plan)
            spec: dict[str, object] = {"method": "mtp", "num_speculative_tokens": mtp}
            if draft is not None:  # an EAGLE-3 head (vLLM SpeculativeConfig method 'eagle3', its weights' path)
                spec = {"method": "eagle3", "model": draft, "num_speculative_tokens": mtp}
            common += ["--speculative-config", _json(spec)]
        if pd:
            common += ["--kv-transfer-config", _json(_kv_config(slot, k, view))]
        if extra_by_role[slot.role]:
            common += ["--additional-config", _json(extra_by_role[slot.role])]
        graph = (profile.compilation_config or {}).get(slot.role)
        if graph is not None:
            common += ["--compilation-config", _json(graph)]  # FULL_DECODE_ONLY graphs, as the tutorials serve decode
        elif slot.role == "prefill":
            common.append("--enforce-eager")  # the PD tutorial's prefill nodes run eagerly
        rank = 0
        for i, (node, devices) in enumerate(slot.nodes):
            argv = ["vllm", "serve", *common]
            if att.dp > 1:
                # its own DP RPC port: several instances may share a node
                argv += ["--data-parallel-rpc-port", str(DP_RPC_PORT_BASE + k)]
            if len(slot.nodes) > 1:
                argv += [
                    "--data-parallel-size-local",
                    str(len(devices) // att.tp),
                    "--data-parallel-address",
                    node_addr(slot.head_node),
                ]
                if i:
                    argv += ["--data-parallel-start-rank", str(rank), "--headless"]
            rank += len(devices) // att.tp
            env = {
                **(profile.recommended_env or {}).get(slot.role, {}),
                "ASCEND_RT_VISIBLE_DEVICES": visible_devices(devices),
            }
            processes.append(Process(slot.role, slot.instance, node, list(devices), argv, env))
    if pd:
        processes.append(_proxy(slots))
    nodes = nodes_used(slots)
    readme = readme_common("vLLM-Ascend", profile, nodes, processes) + _README
    return Export(profile, files, processes, readme), nodes


def _mtp_tokens(role: str, view, decode_mtp: int) -> int:
    if role == "colocated":
        return view.colocated.mtp_tokens
    if role == "decode":
        return decode_mtp
    # a prefill node serving MTP decode nodes runs the same speculative method with one draft
    # token (v0.25.1rc1 PD tutorial: "num_speculative_tokens on P nodes should be 1")
    return 1 if decode_mtp else 0


def _batch_flags(plan: Plan, role: str, phase: PhasePlan) -> list[str]:
    """--max-num-seqs / --max-num-batched-tokens per DP rank (vLLM's scheduler is per DP rank)."""
    view = plan_view(plan)
    att = phase.attention
    if role == "prefill":
        assert view.prefill is not None
        tokens = math.ceil(view.prefill.batch_tokens / att.dp)
        seqs = max(1, math.ceil(tokens / plan.workload.input_tokens))
    elif role == "decode":
        assert view.decode is not None
        seqs = sequences_on(view.decode.concurrency_per_device, att.tp)
        tokens = seqs * (1 + view.decode.mtp_tokens)
    else:
        assert view.colocated is not None
        c = view.colocated
        seqs = sequences_on(c.concurrency_per_device, att.tp)
        # chunked prefill (whole prefill forwards are refused for vLLM: plan_problems): each step carries the
        # rank's decodes plus its share of one prompt chunk (vLLM schedules running decodes first, then fills
        # max_num_batched_tokens with prompt chunks)
        assert c.chunk_tokens is not None
        tokens = seqs * (1 + c.mtp_tokens) + math.ceil(c.chunk_tokens / att.dp)
    return ["--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(tokens)]


def _kv_config(slot: Slot, k: int, view) -> dict:
    p, d = view.prefill, view.decode
    return {
        "kv_connector": "MooncakeConnectorV1",
        "kv_role": "kv_producer" if slot.role == "prefill" else "kv_consumer",
        "kv_port": str(KV_PORT_BASE + KV_PORT_STRIDE * k),
        "engine_id": f"{slot.role}{slot.instance}",
        "kv_connector_extra_config": {
            "prefill": {"dp_size": p.attention.dp, "tp_size": p.attention.tp},
            "decode": {"dp_size": d.attention.dp, "tp_size": d.attention.tp},
        },
    }


def _proxy(slots: list[Slot]) -> Process:
    argv = ["python", "load_balance_proxy_server_example.py", "--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    for role, hosts_flag, ports_flag in (
        ("prefill", "--prefiller-hosts", "--prefiller-ports"),
        ("decode", "--decoder-hosts", "--decoder-ports"),
    ):
        chosen = [s for s in slots if s.role == role]
        argv += [hosts_flag, *(node_addr(s.head_node) for s in chosen)]
        argv += [ports_flag, *(str(s.port) for s in chosen)]
    first = next(s for s in slots if s.role == "prefill")
    return Process("router", 0, first.head_node, [], argv, {})


_README = """
## vLLM-Ascend specifics

- Servers: `vllm serve` of vLLM-Ascend v0.25.1rc1 (vLLM v0.25.1). An instance spanning several nodes runs one
  process per node: the first node serves the API, the others run `--headless` with their
  `--data-parallel-start-rank`; all use `--data-parallel-address NODEi_ADDR` of the first node.
- Environment: each process's `env` carries what the release's tutorials export on every node (DeepSeek-R1 tutorial
  for colocated instances, the Mooncake PD tutorial for prefill and decode: `OMP_*`, `HCCL_BUFFSIZE`,
  `PYTORCH_NPU_ALLOC_CONF`, `TASK_QUEUE_ENABLE`, `HCCL_OP_EXPANSION_MODE`, ...). Also export `HCCL_IF_IP`,
  `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` and `HCCL_SOCKET_IFNAME` for your network; they depend on the machine,
  not on the plan.
- Graphs: colocated and decode servers pass `--compilation-config {"cudagraph_mode":"FULL_DECODE_ONLY"}` as the
  tutorials do; prefill servers run `--enforce-eager` as the PD tutorial's do.
- Weights: `--quantization ascend` loads ModelSlim W8A8 weights (e.g. `vllm-ascend/DeepSeek-R1-W8A8`); replace
  the model path in argv with your local copy.
- Shared expert: with attention TP > 1 and expert parallelism vLLM splits it over the TP group; a plan that
  replicates it sets `enable_shared_expert_dp` in `--additional-config` (which turns FlashComm1 on at this
  release), a plan with `shared_expert: {placement: split}` leaves the default. Decode and colocated servers of
  a plan whose decode overlaps a whole shared expert with dispatch/combine set `multistream_overlap_shared_expert`
  (as the release's PD tutorial's decode nodes do).
- Expert maps: `*_expert_map.json`, referenced by absolute path from `--additional-config`
  (`eplb_config.expert_map_path`, with the matching `num_redundant_experts`). If you move this folder,
  re-export or edit those paths. The static map runs on the V1 model runner.
- Disaggregated plans: the router is vLLM-Ascend's
  `examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py` (copy it here); Mooncake must be
  installed on every node (see the release's PD tutorial).
- Colocated plans: one server per instance; put any HTTP load balancer in front of several instances. vLLM's
  scheduler puts the running decodes and prompt chunks in every step, so only chunked colocated plans export for
  vLLM-Ascend: `--max-num-batched-tokens` is a DP rank's decode tokens plus its share of one chunk.
"""
