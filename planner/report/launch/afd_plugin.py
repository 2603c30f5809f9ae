"""`--emit vllm-ascend DIR` for an AFD plan: vLLM's afd-plugin on Ascend (CAMP2pAFDConnector).

Written from the plugin's documented launch (vllm-project/afd-plugin @ 2e4378f:
recipe/npu/CAMP2pAFDConnector/deepseek_v3_2/{afd_attention,afd_ffn}.sh and
docs/npu/CAM_P2P_CONNECTOR_USER_GUIDE.md). Per AFD instance, the FFN devices come first, from a
node boundary (the recipe gives the FFN ranks their own node), then the attention devices; on each
node the instance spans, one `vllm serve` of that side:

- both sides: `--additional-config '{"afd": {"role": ..., "connector": "CAMP2pAFDConnector", "host":
  <first FFN node>, "port": ..., "num_attention_ranks": A, "num_ffn_ranks": F}}'`, DP over the side's
  devices with `--enable-expert-parallel`, `--quantization ascend` for W8A8, FULL_DECODE_ONLY graphs
  captured at the side's batch, and with two micro-batches `--enable-dbo --ubatch-size 2` with the
  recipe's thresholds (2 decode tokens, 12 prefill tokens); `VLLM_PLUGINS=ascend,afd` and the
  recipe's `HCCL_BUFFSIZE` (512 MB attention, 2048 MB FFN);
- the attention side serves the API: per rank `--max-num-seqs` = the plan's sequences per attention
  device; its nodes after the first run `--headless` with their `--data-parallel-start-rank`;
- the FFN side's batch is the attention side's tokens over the FFN devices (the recipe's
  "FFN BS = attention ranks * attention BS / FFN ranks").

Only decode-only AFD plans are emitted: the plugin documents no Ascend launch of prefill instances
feeding AFD instances, nor of AFD instances that prefill too (refused by name). The processes need
vLLM 0.26.0 with vLLM-Ascend 80d8c194f and the plugin installed (its README), not this profile's
vLLM-Ascend release.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from planner.engines.profiles import EngineProfile
from planner.errors import BadInputError
from planner.placement import vllm_ascend_json
from planner.report.launch.common import (
    MAX_INSTANCES_PER_ROLE,
    Export,
    Process,
    afd_side_block,
    check_runnable,
    context_tokens,
    memory_fraction_of,
    model_path,
    node_addr,
    placement_for,
    readme_common,
    visible_devices,
)
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import AttentionLayout, PhasePlan, Plan, sequences_on

CONNECTOR = "CAMP2pAFDConnector"
AFD_PORT_BASE = 29666  # the recipe's AFD_PORT
ATTENTION_PORT_BASE = 40000
FFN_PORT_BASE = 50000
DP_RPC_PORT_BASE = 13377  # the recipe's attention DP_RPC_PORT
DBO_FLAGS = [
    "--enable-dbo",
    "--dbo-decode-token-threshold",
    "2",
    "--dbo-prefill-token-threshold",
    "12",
    "--ubatch-size",
    "2",
]
HCCL_BUFFSIZE = {"attention": "512", "ffn": "2048"}  # MB, the recipe's launchers


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _spans(start: int, count: int, node: int) -> list[tuple[int, tuple[int, ...]]]:
    """(node, devices) pieces of `count` devices laid out from device `start` on nodes of `node` devices."""
    out, left, at = [], count, start
    while left:
        take = min(left, node - at % node)
        out.append((at // node, tuple(range(at % node, at % node + take))))
        left -= take
        at += take
    return out


def build_afd(
    plan: Plan, model: ModelSpec, hw: HardwareSpec, final_dir: Path, loads: np.ndarray | None
) -> tuple[Export, int]:
    """The afd-plugin export of a decode-only AFD plan (see the module docstring)."""
    profile = check_runnable(plan, model, hw, "vllm-ascend")
    section = plan.afd
    assert section is not None and section.moe is not None
    afd = profile.capabilities.afd
    assert afd is not None
    if plan.prefill is not None or section.prefill_batch_tokens is not None:
        raise BadInputError(
            f"--emit vllm-ascend: {afd.via} documents the launch of AFD decode instances only (its Ascend recipe); "
            "prefill instances feeding them, or AFD instances that prefill too, have no documented launch. Export "
            "the AFD decode instances alone (drop the prefill section) or the prefill instances as their own plan."
        )
    if section.instances > MAX_INSTANCES_PER_ROLE:
        raise BadInputError(
            f"afd.instances = {section.instances}: the export supports at most {MAX_INSTANCES_PER_ROLE} AFD instances."
        )
    node = hw.devices_per_node
    a, f = section.attention_devices, section.ffn_devices
    att_batch = sequences_on(section.concurrency_per_device, section.attention.tp)
    ffn_batch = math.ceil(a * section.concurrency_per_device * (1 + section.mtp_tokens) / f)
    files: dict[str, str] = {}
    extra_ffn: dict = {}
    if section.moe.ep * section.moe.slots_per_device > (model.moe.routed_experts if model.moe else 0):
        ffn_side = PhasePlan(devices=f, attention=AttentionLayout(dp=f, tp=1), moe=section.moe)
        placement = placement_for(model, ffn_side, loads)
        files["ffn_expert_map.json"] = vllm_ascend_json(placement)
        extra_ffn["eplb_config"] = {
            "expert_map_path": str(final_dir / "ffn_expert_map.json"),
            "num_redundant_experts": placement.redundant_slots,
        }
    processes: list[Process] = []
    cursor = 0
    for inst in range(section.instances):
        cursor = -(-cursor // node) * node  # every instance from a node boundary
        ffn_spans = _spans(cursor, f, node)
        att_start = -(-(cursor + f) // node) * node  # the attention side on nodes of its own
        att_spans = _spans(att_start, a, node)
        cursor = att_start + a
        afd_host = node_addr(ffn_spans[0][0])
        for side, spans, dp, batch, extra in (
            ("ffn", ffn_spans, f, ffn_batch, extra_ffn),
            ("attention", att_spans, a // section.attention.tp, att_batch, {}),
        ):
            config = {
                **extra,
                "afd": {
                    "role": side,
                    "connector": CONNECTOR,
                    "host": afd_host,
                    "port": AFD_PORT_BASE + inst,
                    "num_attention_ranks": a,
                    "num_ffn_ranks": f,
                },
            }
            fraction = memory_fraction_of(
                afd_side_block(plan, side), f"afd {side} side", (), profile, "--gpu-memory-utilization"
            )
            common = [
                model_path(plan),
                "--host",
                "0.0.0.0",
                "--port",
                str((ATTENTION_PORT_BASE if side == "attention" else FFN_PORT_BASE) + 10 * inst),
                "--served-model-name",
                plan.model,
                "--trust-remote-code",
                "--tensor-parallel-size",
                str(section.attention.tp if side == "attention" else 1),
                "--data-parallel-size",
                str(dp),
                "--enable-expert-parallel",
                "--max-num-seqs",
                str(batch),
                "--max-num-batched-tokens",
                str(batch if side == "ffn" else batch * (1 + section.mtp_tokens)),
                "--max-model-len",
                str(context_tokens(plan)),
                "--gpu-memory-utilization",
                str(fraction),
                "--no-enable-prefix-caching",
                "--compilation-config",
                _json({"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [batch]}),
            ]
            if plan.quantization == "a8w8c16":
                common += ["--quantization", "ascend"]
            if section.micro_batches == 2:
                common += DBO_FLAGS
            common += ["--additional-config", _json(config)]
            rank = 0
            for i, (n, devices) in enumerate(spans):
                argv = ["vllm", "serve", *common]
                if dp > 1:
                    argv += ["--data-parallel-rpc-port", str(DP_RPC_PORT_BASE + 2 * inst + (side == "ffn"))]
                if len(spans) > 1:
                    argv += [
                        "--data-parallel-size-local",
                        str(len(devices)),
                        "--data-parallel-address",
                        node_addr(spans[0][0]),
                    ]
                    if i:
                        argv += ["--data-parallel-start-rank", str(rank), "--headless"]
                rank += len(devices)
                env = {
                    "ASCEND_RT_VISIBLE_DEVICES": visible_devices(devices),
                    "VLLM_PLUGINS": "ascend,afd",
                    "HCCL_BUFFSIZE": HCCL_BUFFSIZE[side],
                }
                processes.append(Process(f"afd-{side}", inst, n, list(devices), argv, env))
    nodes = 1 + max(p.node for p in processes)
    readme = readme_common("vLLM-Ascend + afd-plugin", profile, nodes, processes) + _readme(profile, afd.via)
    return Export(profile, files, processes, readme), nodes


def _readme(profile: EngineProfile, via: str) -> str:
    return f"""
## The afd-plugin (attention-FFN disaggregation)

- Stack: {via}. These processes need vLLM 0.26.0 with vLLM-Ascend commit 80d8c194f and the plugin installed
  (`AFD_BUILD_ASCEND_OPS=1 SOC_VERSION=ascend910_9391 pip install --no-build-isolation --no-deps -e .` in a
  checkout of vllm-project/afd-plugin; its README), not {profile.label} alone.
- Each AFD instance: `afd-ffn` processes on the FFN devices (the experts, the router, the shared expert and the
  dense MLP; no API), `afd-attention` processes on the attention devices (the API on the first one, port 40000 +
  10 x instance). Both sides name the first FFN node as the AFD rendezvous host (`NODEi_ADDR`); start the FFN
  node and the first attention node before the other attention nodes.
- Multi-node HCCL: also export `HCCL_IF_IP`, `GLOO_SOCKET_IFNAME`, `TP_SOCKET_IFNAME` and `HCCL_SOCKET_IFNAME`
  for your network (the recipe's launchers do); the recipe also sets `HCCL_OP_EXPANSION_MODE=AIV` and
  `VLLM_ASCEND_ENABLE_MLAPO=1`.
- Send requests to the attention side only; FFN processes are driven by the connector.
"""
