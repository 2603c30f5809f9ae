"""`--emit sglang DIR`: `python -m sglang.launch_server` processes for SGLang on Ascend NPUs.

Per instance and per node it spans, one server (`--nnodes/--node-rank/--dist-init-addr` across
nodes) with `--device npu --attention-backend ascend`, DP attention, the EP group and its expert
placement (`--ep-num-redundant-experts`, `--init-expert-location` with a `physical_to_logical_map`
of [model layers][EP x slots]), NEXTN MTP, and for a disaggregated plan
`--disaggregation-mode prefill|decode --disaggregation-transfer-backend ascend` behind
`sglang_router.launch_router --pd-disaggregation`. Flags and sources: planner/engines/data/sglang.yaml.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from planner.engines.plan_view import plan_view
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

ENGINE = "sglang"
DIST_PORT_BASE = 5000
MF_STORE_PORT = (
    24666  # SGLang's own multi-node PD tests: tcp://<first prefill node>:24666 (test_npu_multi_node_utils.py)
)
PAGE_SIZE = 128  # NPU default page size (hardware_backend/npu/utils.py:96-101)
BOOTSTRAP_PORT_BASE = 8998
ENGINE_INFO_PORT_BASE = 6789
# what SGLang's static pool (weights + KV pool) leaves out: activations and communication buffers
OUTSIDE_STATIC_POOL = ("activations", "prefill_activations", "comm_buffers")


def expert_location_json(placement, model: ModelSpec) -> str:
    """SGLang's --init-expert-location file: physical slot -> logical expert for every model layer.

    SGLang sizes the map by the model's hidden layers (DeepSeek: num_hidden_layers, dense layers
    included: ModelConfigForExpertLocation); the dense layers get the trivial map, the MoE layers
    moeplan's placement. Physical slot p is slot p % slots of EP rank p // slots."""
    assert model.moe is not None
    flat = placement.device_experts.reshape(placement.layers, -1)
    slots = flat.shape[1]
    trivial = [int(p % model.moe.routed_experts) for p in range(slots)]
    rows = [trivial] * model.num_dense_layers + [[int(e) for e in row] for row in flat]
    return json.dumps({"physical_to_logical_map": rows}, separators=(",", ":")) + "\n"


def build(
    plan: Plan, model: ModelSpec, hw: HardwareSpec, final_dir: Path, loads: np.ndarray | None
) -> tuple[Export, int]:
    """The SGLang export of `plan` (files, processes); refuses what SGLang cannot run."""
    profile = check_runnable(plan, model, hw, ENGINE)
    view = plan_view(plan)
    slots = allocate(view, hw)
    by_role = dict(sections(view))
    files: dict[str, str] = {}
    location: dict[str, tuple[Path, int]] = {}
    for role, phase in by_role.items():
        if model.moe is not None and phase.moe is not None and phase.moe.ep > 1:
            placement = placement_for(model, phase, loads)
            files[f"{role}_expert_location.json"] = expert_location_json(placement, model)
            location[role] = (final_dir / f"{role}_expert_location.json", placement.redundant_slots)
    pd = view.decode is not None and view.prefill is not None
    store = {}
    if pd:
        # the Ascend transfer engine's config store (disaggregation/ascend/transfer_engine.py:44; created by
        # node rank 0, managers/disagg_service.py:93): one address for every prefill and decode node
        head = next(s for s in slots if s.role == "prefill").head_node
        store = {"ASCEND_MF_STORE_URL": f"tcp://{node_addr(head)}:{MF_STORE_PORT}"}
    processes: list[Process] = []
    for k, slot in enumerate(slots):
        phase = by_role[slot.role]
        common = _server_flags(plan, model, slot, phase, view, location.get(slot.role), pd)
        # several instances may share a node: their own engine-info bootstrap port (ServerArgs help)
        common += ["--engine-info-bootstrap-port", str(ENGINE_INFO_PORT_BASE + k)]
        common += [
            "--mem-fraction-static",
            str(memory_fraction(plan, slot.role, OUTSIDE_STATIC_POOL, profile, "--mem-fraction-static")),
        ]
        for i, (node, devices) in enumerate(slot.nodes):
            argv = ["python", "-m", "sglang.launch_server", *common]
            if len(slot.nodes) > 1:
                argv += [
                    "--nnodes",
                    str(len(slot.nodes)),
                    "--node-rank",
                    str(i),
                    "--dist-init-addr",
                    f"{node_addr(slot.head_node)}:{DIST_PORT_BASE + k}",
                ]
            env = {"ASCEND_RT_VISIBLE_DEVICES": visible_devices(devices), **store}
            processes.append(Process(slot.role, slot.instance, node, list(devices), argv, env))
    if pd:
        processes.append(_router(slots))
    nodes = nodes_used(slots)
    readme = readme_common("SGLang", profile, nodes, processes) + _README
    return Export(profile, files, processes, readme), nodes


def _server_flags(plan: Plan, model: ModelSpec, slot: Slot, phase: PhasePlan, view, location, pd: bool) -> list[str]:
    att = phase.attention
    n = phase.devices
    argv = [
        "--model-path",
        model_path(plan),
        "--served-model-name",
        plan.model,
        "--trust-remote-code",
        "--host",
        "0.0.0.0",
        "--port",
        str(slot.port),
        "--device",
        "npu",
        "--attention-backend",
        "ascend",
        "--context-length",
        str(context_tokens(plan)),
        "--tp-size",
        str(n),
    ]
    if plan.quantization == "a8w8c16":
        argv += ["--quantization", "modelslim"]
    if att.dp > 1:
        # attention DP inside the TP group (`--dp-size N --enable-dp-attention` is deprecated: server_args.py)
        argv += ["--attn-dp-size", str(att.dp)]
    if phase.lm_head_layout.tp == att.tp and att.tp != n:
        argv.append("--enable-dp-lm-head")
    if model.num_dense_layers and phase.dense_layout.tp == 1 and n > 1:
        argv += ["--moe-dense-tp-size", "1"]
    if phase.moe is not None and model.moe is not None:
        argv += ["--ep-size", str(phase.moe.ep)]
        if phase.moe.comm == "alltoall":
            argv += ["--moe-a2a-backend", "deepep", "--deepep-mode", "auto"]
        else:
            argv += ["--moe-a2a-backend", "none"]
        if location is not None:
            path, redundant = location
            argv += ["--ep-num-redundant-experts", str(redundant), "--init-expert-location", str(path)]
    mtp = view.colocated.mtp_tokens if view.colocated is not None else (view.decode.mtp_tokens if view.decode else 0)
    if mtp:
        # prefill instances run the same draft as decode (the draft needs the prefill's hidden states);
        # an EAGLE-3 head runs unquantised, as moeplan costs it (--speculative-draft-model-quantization
        # unquant, SGLang's Ascend best-practice Qwen3-235B runs)
        draft = draft_model_path(plan)
        if draft is not None:
            argv += [
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                draft,
                "--speculative-draft-model-quantization",
                "unquant",
            ]
        else:
            argv += ["--speculative-algorithm", "NEXTN"]
        argv += [
            "--speculative-num-steps",
            str(mtp),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(mtp + 1),
        ]
    argv += _batch_flags(plan, slot.role, phase, view)
    if pd:
        argv += ["--disaggregation-mode", slot.role, "--disaggregation-transfer-backend", "ascend"]
        if slot.role == "prefill":
            argv += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT_BASE + slot.instance)]
    return argv


def chunk_size(tokens: int, attn_dp: int) -> int:
    """SGLang's --chunked-prefill-size for `tokens` per forward of the instance: it divides the flag by
    the attention-DP size (arg_groups/parallel_hook.py:326-331) and needs a multiple of the page size per
    rank (validation_hook.py:243-246), so each rank's share is rounded down to whole pages (one at least)."""
    per_rank = max(PAGE_SIZE, tokens // attn_dp // PAGE_SIZE * PAGE_SIZE)
    return per_rank * attn_dp


def _batch_flags(plan: Plan, role: str, phase: PhasePlan, view) -> list[str]:
    n = phase.devices
    dp = phase.attention.dp
    if role == "prefill":
        tokens = chunk_size(view.prefill.batch_tokens, dp)
        running = max(1, math.ceil(tokens / plan.workload.input_tokens))
        out = ["--chunked-prefill-size", str(tokens), "--max-prefill-tokens", str(tokens)]
        if view.prefill.micro_batches > 1:
            out.append("--enable-two-batch-overlap")
    elif role == "decode":
        running = sequences_on(view.decode.concurrency_per_device, n)
        out = []
        if plan.decode is not None and plan.decode.micro_batches > 1:  # decode two-batch overlap
            out.append("--enable-two-batch-overlap")
    else:
        c = view.colocated
        running = sequences_on(c.concurrency_per_device, n)
        # chunked prefill: one chunk of chunk_tokens rides along each decode step, SGLang's mixed batch (without
        # --enable-mixed-chunk it runs the chunks one after another ahead of the decodes); else whole forwards
        tokens = chunk_size(c.chunk_tokens if c.chunk_tokens is not None else c.prefill_batch_tokens, dp)
        out = ["--chunked-prefill-size", str(tokens), "--max-prefill-tokens", str(tokens)]
        if c.chunk_tokens is not None:
            out.append("--enable-mixed-chunk")
        if c.whole_forwards_over_dp_ranks:
            # each DP rank prefills its own prompts: without the delayer a freed seat's prompt prefills on its rank
            # alone while the others idle, far below the plan's prediction (docs/simulate.md)
            out.append("--enable-prefill-delayer")
        decode_two = plan.colocated is not None and plan.colocated.decode_micro_batches > 1
        if c.micro_batches > 1 or decode_two:
            out.append("--enable-two-batch-overlap")
    return ["--max-running-requests", str(running), *out]


def _router(slots: list[Slot]) -> Process:
    argv = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for s in slots:
        url = f"http://{node_addr(s.head_node)}:{s.port}"
        if s.role == "prefill":
            argv += ["--prefill", url, str(BOOTSTRAP_PORT_BASE + s.instance)]
        else:
            argv += ["--decode", url]
    argv += ["--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    first = next(s for s in slots if s.role == "prefill")
    return Process("router", 0, first.head_node, [], argv, {})


_README = """
## SGLang specifics

- Servers: `python -m sglang.launch_server` on Ascend NPUs (`--device npu --attention-backend ascend`); SGLang's
  `--tp-size` is the instance's devices (dies; on CloudMatrix384 two per 910C card), `--attn-dp-size` the attention
  DP inside it. `--chunked-prefill-size` is the instance's tokens per forward: SGLang divides it by the attention
  DP size, and each rank's share is a whole number of 128-token NPU pages (rounded down from the plan's).
- Disaggregated plans export `ASCEND_MF_STORE_URL` (the Ascend transfer engine's config store, on the first
  prefill node, port 24666) on every server node; the prefill/decode transfer also needs `memfabric_hybrid`.
- Weights: `--quantization modelslim` loads ModelSlim W8A8 weights; replace the model path with your copy.
- Expert placement: `*_expert_location.json` (`physical_to_logical_map`, one row per model layer, dense layers
  trivially mapped), referenced by absolute path with the matching `--ep-num-redundant-experts`.
- Disaggregated plans: the router is `sglang_router` (`pip install sglang-router`); prefill instances expose
  their bootstrap port to it.
- Colocated plans: one server per instance; put any HTTP load balancer in front of several instances. With
  attention DP and whole prefill forwards the server runs `--enable-prefill-delayer`: SGLang schedules each DP
  rank on its own, and without the delayer a prompt prefills on its rank alone while the others idle; the
  plan's prediction costs forwards spread over the ranks, which the delayer brings about by gathering
  prompts until every rank has one (simulated, it serves at or above the prediction:
  `moeplan simulate PLAN --colocated-prefill per-rank --prefill-delayer sglang-0.5.23`; docs/simulate.md).
  With chunked prefill the server runs `--enable-mixed-chunk`, so each decode step carries a prompt chunk as the
  plan costs (without it SGLang runs a prompt's chunks one after another while the decodes wait); SGLang's mixed
  steps drop the MTP draft, so moeplan exports chunked plans for SGLang only without MTP.
"""
