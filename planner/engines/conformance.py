"""The engines' own load-time rules, checked on every export before anything is written.

What each engine's code refuses at start-up, as data where the engine cannot be installed here
(MindIE: `data/mindie_rules.yaml`, read from MindIE-LLM's config_manager and atb_llm, and
MindIE Motor's coordinator) and as the few rules read from the other engines' source:

- SGLang 0.5.23: `--chunked-prefill-size` is divided by the attention-DP size
  (arg_groups/parallel_hook.py:326-331) and the result must be a multiple of the page size
  (arg_groups/validation_hook.py:243-246), which is 128 on an NPU unless `--page-size` says
  otherwise (hardware_backend/npu/utils.py:96-101); `--enable-dp-attention` is deprecated for
  `--attn-dp-size` (server_args.py:416-424, removal after 2026-12-31); the TP size is a multiple of
  the attention-DP size (parallel_hook.py:325); PD on Ascend reads `ASCEND_MF_STORE_URL`
  (disaggregation/ascend/transfer_engine.py:44, managers/disagg_service.py:93).
- vLLM-Ascend v0.25.1rc1: the environment its DeepSeek tutorials export on every node and
  `--compilation-config {"cudagraph_mode": "FULL_DECODE_ONLY"}` where they serve decode
  (recorded in data/vllm_ascend.yaml `recommended_env`), and the expert map's slot count agreeing
  with `num_redundant_experts` (ops/fused_moe/fused_moe.py "EPLB local expert capacity mismatch").

`export_problems(engine, files, processes, modes)` returns every rule an export breaks (empty: none).
The exports call it before they write; the test suite calls it on every emitted folder and on
broken copies of them; the conformance harness runs the same exports through the real vLLM and
SGLang code, and through these rules for MindIE.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"
SGLANG_NPU_PAGE_SIZE = 128  # hardware_backend/npu/utils.py:96-101 (page_size None -> 128 on NPU)
PLACEHOLDER = re.compile(r"NODE(\d+)_ADDR")


@functools.cache
def mindie_rules() -> dict[str, Any]:
    """MindIE's rules as read from its source (data/mindie_rules.yaml)."""
    from planner.specs.files import load_yaml

    return load_yaml((DATA_DIR / "mindie_rules.yaml").read_text(encoding="utf-8"))


def with_addresses(text: str) -> str:
    """Node placeholders replaced by documentation addresses (RFC 5737), as a launcher would."""
    return PLACEHOLDER.sub(lambda m: f"192.0.2.{int(m.group(1)) + 1}", text)


# ---- generic field checks -------------------------------------------------------------------------


def _type_ok(kind: str, value: Any) -> bool:
    if kind in ("string", "ip"):
        return isinstance(value, str)
    if kind in ("int32_t", "uint32_t"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return False


def _ip_ok(value: str, zero_ok: bool) -> bool:
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return False
    return zero_ok or not ip.is_unspecified


def _field_problems(where: str, section: dict, spec: dict, zero_ip_ok: bool = False) -> list[str]:
    out = []
    for name, rule in spec["fields"].items():
        path = f"{where}.{name}"
        if name not in section:
            if rule.get("compulsory"):
                out.append(f"{path}: missing compulsory field ({spec['source']})")
            continue
        value = section[name]
        kind = rule["type"]
        if not _type_ok(kind, value):
            out.append(f"{path}: {value!r} is not {kind} ({spec['source']})")
            continue
        if kind == "ip" and not _ip_ok(value, zero_ip_ok):
            out.append(f"{path}: {value!r} is not a usable IP address ({spec['source']})")
        if kind == "uint32_t" and not 0 <= value <= 2**32 - 1 or kind == "int32_t" and not -(2**31) <= value < 2**31:
            out.append(f"{path}: {value} is out of {kind} range ({spec['source']})")
        low_high = rule.get("range")
        if low_high is not None and not low_high[0] <= value <= low_high[1]:
            out.append(f"{path}: {value} is outside [{low_high[0]}, {low_high[1]}] ({spec['source']})")
        if "choices" in rule and value not in rule["choices"]:
            out.append(f"{path}: {value!r} is not one of {rule['choices']} ({spec['source']})")
        if "pattern" in rule and not re.fullmatch(rule["pattern"], value):
            out.append(f"{path}: {value!r} does not match {rule['pattern']} ({spec['source']})")
    return out


# ---- MindIE --------------------------------------------------------------------------------------


def mindie_config_problems(cfg: dict, name: str = "config.json") -> list[str]:
    """What MindIE-LLM's config_manager refuses in one service config.json (data/mindie_rules.yaml)."""
    specs = mindie_rules()["config_json"]["sections"]
    out: list[str] = []
    server = cfg.get("ServerConfig")
    backend = cfg.get("BackendConfig")
    if not isinstance(server, dict) or not isinstance(backend, dict):
        return [f"{name}: ServerConfig and BackendConfig are compulsory objects (base_config.cpp CheckSystemConfig)"]
    zero = server.get("allowAllZeroIpListening") is True
    out += _field_problems(f"{name}: ServerConfig", server, specs["ServerConfig"], zero)
    out += _field_problems(f"{name}: BackendConfig", backend, specs["BackendConfig"])
    deploy = backend.get("ModelDeployConfig", {})
    schedule = backend.get("ScheduleConfig", {})
    if isinstance(deploy, dict):
        out += _field_problems(f"{name}: ModelDeployConfig", deploy, specs["BackendConfig.ModelDeployConfig"])
        for i, model in enumerate(deploy.get("ModelConfig", []) if isinstance(deploy.get("ModelConfig"), list) else []):
            spec = specs["BackendConfig.ModelDeployConfig.ModelConfig[]"]
            out += _field_problems(f"{name}: ModelConfig[{i}]", model, spec)
    if isinstance(schedule, dict):
        out += _field_problems(f"{name}: ScheduleConfig", schedule, specs["BackendConfig.ScheduleConfig"])
    if out:
        return out
    return out + _mindie_cross_problems(name, server, backend, deploy, schedule)


def _mindie_cross_problems(name: str, server: dict, backend: dict, deploy: dict, schedule: dict) -> list[str]:
    out = []
    ids = backend["npuDeviceIds"]
    models = deploy["ModelConfig"]
    if len(ids) != backend["modelInstanceNumber"]:
        out.append(
            f"{name}: npuDeviceIds has {len(ids)} sets for modelInstanceNumber {backend['modelInstanceNumber']} "
            "(backend_config.cpp:156-159)"
        )
    world = models[0]["worldSize"] if models else 0
    for group in ids:
        if len(group) != world or len(set(group)) != len(group):
            out.append(
                f"{name}: npuDeviceIds {group} must be {world} distinct devices, the worldSize "
                "(backend_config.cpp:160-165, 210-215)"
            )
    if schedule["templateType"] == "Standard" and len(models) != 1:
        out.append(f"{name}: a Standard template takes exactly one ModelConfig (model_deploy_config.cpp:48-51)")
    if schedule["templateType"] != "Mix" and schedule["maxPrefillTokens"] < deploy["maxInputTokenLen"]:
        out.append(
            f"{name}: maxPrefillTokens {schedule['maxPrefillTokens']} < maxInputTokenLen "
            f"{deploy['maxInputTokenLen']} (config_manager_impl.cpp:324-327)"
        )
    if not 1 <= schedule["maxPrefillBatchSize"] <= schedule["maxBatchSize"]:
        out.append(f"{name}: maxPrefillBatchSize must be in [1, maxBatchSize] (schedule_config.cpp:284-286)")
    if schedule["maxPreemptCount"] > schedule["maxBatchSize"]:
        out.append(f"{name}: maxPreemptCount exceeds maxBatchSize (schedule_config.cpp:272-277)")
    if server["port"] == backend.get("multiNodesInferPort", 1120):
        out.append(f"{name}: port equals multiNodesInferPort (config_manager_impl.cpp:308-311)")
    for model in models:
        if model["npuMemSize"] == 0 or model["npuMemSize"] <= -2:
            out.append(f"{name}: npuMemSize must be in (0, 2^32) or -1 (model_deploy_config.cpp:458-464)")
        if "plugin_params" in model:
            try:
                json.loads(model["plugin_params"])
            except ValueError:
                out.append(f"{name}: plugin_params is not JSON text (model_deploy_config.cpp:118-140)")
    return out


def mindie_mapping_problems(name: str, model: dict, nodes: int, env: dict[str, str]) -> list[str]:
    """What atb_llm's Mapping and FlashDeepseekv2 refuse for one instance (`nodes`: its node count)."""
    src = mindie_rules()["mapping"]
    local = model["worldSize"]
    world = local * nodes
    dp, tp = model.get("dp", 1), model.get("tp", world)
    out = []
    if dp * tp != world:
        out.append(f"{name}: dp x tp = {dp} x {tp} is not the world size {world} ({src['world_equals_dp_x_tp']})")
    if tp > local and tp != world:
        out.append(f"{name}: attention tp {tp} exceeds a node ({local}) ({src['attention_tp_local']})")
    if "moe_ep" in model and model["moe_ep"] * model.get("moe_tp", 1) != world:
        out.append(
            f"{name}: moe_ep x moe_tp = {model['moe_ep']} x {model.get('moe_tp', 1)} is not the world size {world} "
            f"({src['world_equals_moe_ep_x_moe_tp']})"
        )
    ds = model.get("models", {}).get("deepseekv2", {})
    parallel = ds.get("parallel_options", {})
    head = parallel.get("lm_head_local_tp", -1)
    if head != -1 and not 1 <= head <= 16:
        out.append(f"{name}: lm_head_local_tp {head} outside [1, 16] ({src['lm_head_local_tp_range']})")
    if head > 1:
        if head > local:
            out.append(f"{name}: lm_head_local_tp {head} exceeds a node ({src['lm_head_local_tp_within_node']})")
        if tp > 1:
            out.append(
                f"{name}: lm_head_local_tp with attention tp {tp} > 1 ({src['lm_head_local_tp_needs_attention_tp_1']})"
            )
        if env.get("DP_PARTITION_UP_ENABLE") != "1":
            why = src["lm_head_local_tp_needs_dp_partition_up"]
            out.append(f"{name}: lm_head_local_tp needs DP_PARTITION_UP_ENABLE=1 ({why})")
    dense = parallel.get("dense_mlp_local_tp", -1)
    if dense > 1:
        if dense > local and dense != world:
            out.append(f"{name}: dense_mlp_local_tp {dense} exceeds a node ({src['dense_tp_within_node']})")
        if world % dense:
            out.append(f"{name}: dense_mlp_local_tp {dense} does not divide {world} ({src['dense_tp_divides_world']})")
        if tp > 1 and tp >= dense:
            out.append(
                f"{name}: dense_mlp_local_tp {dense} <= attention tp {tp} ({src['dense_tp_above_attention_tp']})"
            )
    stream = ds.get("stream_options", {})
    if stream.get("micro_batch") and ds.get("ccl", {}).get("enable_mc2", True):
        out.append(f"{name}: stream_options.micro_batch needs ccl.enable_mc2 false ({src['micro_batch_without_mc2']})")
    dangling = ds.get("num_dangling_shared_experts", 0)
    if dangling and ds.get("eplb", {}).get("level", 0) != 0:
        out.append(f"{name}: external shared experts run without load balancing (eplb.level 0; mindie_llm0514)")
    return out


def ranktable_problems(name: str, table: dict, world: int, local: int) -> list[str]:
    """What ranktable_config.cpp refuses in a multi-node instance's ranktable."""
    r = mindie_rules()["ranktable"]
    servers = table.get("server_list", [])
    out = []
    count = int(table.get("server_count", "0"))
    if not r["servers"][0] <= count <= r["servers"][1] or count != len(servers):
        out.append(f"{name}: server_count {count} must equal server_list and lie in {r['servers']} ({r['source']})")
    ranks = []
    for server in servers:
        devices = server.get("device", [])
        if len(devices) != local or not r["devices_per_server"][0] <= len(devices) <= r["devices_per_server"][1]:
            out.append(f"{name}: {len(devices)} devices on a server; every server needs {local} ({r['source']})")
        if not server.get("container_ip"):
            out.append(f"{name}: a server without container_ip ({r['source']})")
        for d in devices:
            if not r["device_id"][0] <= int(d["device_id"]) <= r["device_id"][1]:
                out.append(f"{name}: device_id {d['device_id']} outside {r['device_id']} ({r['source']})")
            ranks.append(int(d["rank_id"]))
    if sorted(ranks) != list(range(world)) or world - 1 > r["rank_id"][1]:
        out.append(
            f"{name}: rank_id must number the {world} devices from 0 (at most {r['rank_id'][1]}) ({r['source']})"
        )
    return out


def coordinator_problems(cfg: dict, name: str = "ms_coordinator.json") -> list[str]:
    """What MindIE Motor's coordinator refuses in ms_coordinator.json."""
    r = mindie_rules()["ms_coordinator_json"]
    out = []
    for section, keys in r["required"].items():
        block = cfg if section == "top" else cfg.get(section)
        if not isinstance(block, dict):
            out.append(f"{name}: missing section {section} ({r['source']})")
            continue
        out += [f"{name}: {section}.{k} missing ({r['source']})" for k in keys if k not in block]
    if out:
        return out
    for dotted, (low, high) in r["string_ranges"].items():
        section, key = dotted.split(".")
        value = cfg[section].get(key)
        if value is None and section == "digs_scheduler_config" and cfg[section]["algorithm_type"] != "load_balance":
            continue
        try:
            ok = isinstance(value, str) and low <= float(value) <= high
        except ValueError:
            ok = False
        if not ok:
            out.append(f"{name}: {dotted} {value!r} must be a string number in [{low}, {high}] ({r['source']})")
    sched = cfg["digs_scheduler_config"]
    if sched["deploy_mode"] == "pd_separate":
        for key, want in r["pd_separate"].items():
            if sched[key] != want:
                out.append(f"{name}: pd_separate takes {key} {want!r} ({r['source']})")
    if sched["algorithm_type"] == "load_balance":
        out += [f"{name}: load_balance needs {k} ({r['source']})" for k in r["load_balance_keys"] if k not in sched]
        if sched.get("load_cost_values") not in r["load_cost_values"]:
            out.append(f"{name}: load_cost_values must be one of {r['load_cost_values']} ({r['source']})")
    http = cfg["http_config"]
    zero = http["allow_all_zero_ip_listening"] is True
    for key in ("predict_ip", "manage_ip"):
        if not _ip_ok(http[key], zero):
            out.append(f"{name}: http_config.{key} {http[key]!r} is not a usable IP address ({r['source']})")
    return out


def _mindie_problems(files: dict[str, str], processes: list[dict], modes: dict[str, int]) -> list[str]:
    rules = mindie_rules()
    out = []
    by_instance: dict[tuple[str, int], list[dict]] = {}
    for p in processes:
        if p["role"] == "router":
            rel = Path(p["env"][rules["ms_coordinator_json"]["env"]]).name
            out += _mode_problems(rel, modes, rules["ms_coordinator_json"]["file_mode_max"])
            out += coordinator_problems(json.loads(with_addresses(files[rel])), rel)
            continue
        by_instance.setdefault((p["role"], p["instance"]), []).append(p)
    for procs in by_instance.values():
        env = procs[0]["env"]
        rel = Path(env[rules["config_json"]["env"]]).name
        name = f"{rel}"
        out += _mode_problems(rel, modes, rules["config_json"]["file_mode_max"])
        cfg = json.loads(with_addresses(files[rel]))
        problems = mindie_config_problems(cfg, name)
        out += problems
        if problems:
            continue
        model = cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
        nodes = len(procs)
        multi = cfg["BackendConfig"]["multiNodesInferEnabled"]
        if (nodes > 1) != multi:
            out.append(f"{name}: multiNodesInferEnabled must say whether the instance spans nodes ({nodes})")
        for p in procs:
            out += mindie_mapping_problems(f"{name} (node {p['node']})", model, nodes, p["env"])
            if nodes > 1:
                for var in (rules["ranktable"]["env"], rules["ranktable"]["container_ip_env"]):
                    if var not in p["env"]:
                        out.append(f"{name}: a multi-node process needs {var} ({rules['ranktable']['source']})")
        if nodes > 1 and rules["ranktable"]["env"] in env:
            table_rel = Path(env[rules["ranktable"]["env"]]).name
            out += _mode_problems(table_rel, modes, rules["config_json"]["file_mode_max"])
            table = json.loads(with_addresses(files[table_rel]))
            out += ranktable_problems(table_rel, table, model["worldSize"] * nodes, model["worldSize"])
    return out


def _mode_problems(rel: str, modes: dict[str, int], most_octal: str) -> list[str]:
    most = int(most_octal, 8)
    mode = modes.get(rel, 0o644)
    if mode & ~most:
        return [f"{rel}: mode {oct(mode)} is wider than {oct(most)} (MindIE refuses to read it)"]
    return []


# ---- SGLang ------------------------------------------------------------------------------------


def _flags(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[word] = nxt if nxt is not None and not nxt.startswith("--") else None
    return out


def _sglang_problems(processes: list[dict]) -> list[str]:
    out = []
    pd = any(p["role"] == "prefill" for p in processes) and any(p["role"] == "decode" for p in processes)
    stores = set()
    for p in processes:
        if p["role"] == "router":
            continue
        where = f"{p['role']}{p['instance']} node {p['node']}"
        f = _flags(p["argv"])
        if "--enable-dp-attention" in f:
            out.append(f"{where}: --enable-dp-attention is deprecated for --attn-dp-size (server_args.py:416-424)")
        attn = int(f.get("--attn-dp-size") or 1)
        tp = int(f.get("--tp-size") or 1)
        if tp % attn:
            out.append(f"{where}: --tp-size {tp} is not a multiple of --attn-dp-size {attn} (parallel_hook.py:325)")
        chunk = int(f.get("--chunked-prefill-size") or -1)
        page = int(f.get("--page-size") or SGLANG_NPU_PAGE_SIZE)
        if chunk > 0 and f.get("--disaggregation-mode") != "decode":
            per_rank = chunk // attn if attn > 1 else chunk
            if per_rank <= 0 or per_rank % page:
                out.append(
                    f"{where}: --chunked-prefill-size {chunk} / attention DP {attn} = {per_rank} is not a positive "
                    f"multiple of the page size {page} (parallel_hook.py:326-331, validation_hook.py:243-246)"
                )
        if pd:
            url = p["env"].get("ASCEND_MF_STORE_URL")
            if not url:
                out.append(
                    f"{where}: PD on Ascend needs ASCEND_MF_STORE_URL (disaggregation/ascend/transfer_engine.py:44)"
                )
            stores.add(url)
    if len(stores) > 1:
        out.append(f"ASCEND_MF_STORE_URL differs between processes: {sorted(map(str, stores))}")
    return out


# ---- vLLM-Ascend ---------------------------------------------------------------------------------


def _vllm_problems(files: dict[str, str], processes: list[dict]) -> list[str]:
    from planner.engines.profiles import load_profile

    profile = load_profile("vllm-ascend")
    recommended = profile.recommended_env or {}
    out = []
    for p in processes:
        if p["role"] == "router":
            continue
        where = f"{p['role']}{p['instance']} node {p['node']}"
        for var, value in recommended.get(p["role"], {}).items():
            if p["env"].get(var) != str(value):
                out.append(f"{where}: {var}={value} (the release's tutorials export it) is not set")
        f = _flags(p["argv"])
        graph = profile.compilation_config or {}
        want = graph.get(p["role"])
        graph_text = f.get("--compilation-config")
        got = json.loads(graph_text) if graph_text else None
        if want is not None and got != want:
            out.append(f"{where}: --compilation-config {json.dumps(want)} (the release's DeepSeek tutorial) is not set")
        extra_text = f.get("--additional-config")
        extra = json.loads(extra_text) if extra_text else {}
        eplb = extra.get("eplb_config", {})
        if eplb.get("expert_map_path"):
            out += _vllm_map_problems(where, files, eplb)
        tp = int(f.get("--tensor-parallel-size") or 1)
        if extra.get("enable_shared_expert_dp") and (tp < 2 or "--enable-expert-parallel" not in p["argv"]):
            out.append(
                f"{where}: enable_shared_expert_dp is ignored without --enable-expert-parallel and "
                "--tensor-parallel-size > 1 (vllm_ascend/ascend_config.py): the shared expert would not run as planned"
            )
    return out


def _vllm_map_problems(where: str, files: dict[str, str], eplb: dict) -> list[str]:
    rel = Path(eplb["expert_map_path"]).name
    doc = json.loads(files[rel])
    slots = {len(d["device_expert"]) for layer in doc["layer_list"] for d in layer["device_list"]}
    experts = {e for layer in doc["layer_list"] for d in layer["device_list"] for e in d["device_expert"]}
    devices = doc["layer_list"][0]["device_count"]
    if len(slots) != 1:
        return [f"{where}: {rel}: devices hold different slot counts {sorted(slots)}"]
    redundant = devices * slots.pop() - len(experts)
    if redundant != eplb.get("num_redundant_experts", 0):
        return [
            f"{where}: num_redundant_experts {eplb.get('num_redundant_experts', 0)} but {rel} has {redundant} "
            "(ops/fused_moe/fused_moe.py: EPLB local expert capacity mismatch)"
        ]
    return []


def export_problems(engine: str, files: dict[str, str], processes: list[dict], modes: dict[str, int]) -> list[str]:
    """Every load-time rule of `engine` that an export (files by relative path, launch.json's
    processes, file modes) breaks; empty when the engine's code would accept it."""
    if engine == "mindie":
        return _mindie_problems(files, processes, modes)
    if engine == "sglang":
        return _sglang_problems(processes)
    return _vllm_problems(files, processes)
