"""The engines' load-time rules (planner/engines/conformance.py) on real exports and broken copies.

Every export is checked before it is written; here each rule is shown to hold on the exports of
small plans (A2 and CloudMatrix384, colocated and disaggregated, multi-node, MTP, redundant and
dedicated shared experts) and to catch the copy that breaks it, the way the engine's code would
refuse it (the rule's source is in the message). The same exports go through the real vLLM and
SGLang code in benchmarks/engine_conformance/ (opt-in).
"""

from __future__ import annotations

import copy
import json

import pytest

from planner.engines.conformance import coordinator_problems, export_problems, mindie_config_problems, with_addresses
from planner.report.launch import prepare
from planner.specs.catalog import catalog_dir, load_hardware, load_model, load_plan
from tests.conftest import without_embedding
from tests.report.test_launch import argv_of, plan_from, scored


def _phase(devices: int, redundant: int) -> dict:
    flat = {"dp": devices, "tp": 1}
    moe = {"ep": devices, "slots_per_device": (256 + redundant) // devices, "comm": "alltoall"}
    return {"devices": devices, "instances": 1, "attention": flat, "dense_ffn": flat, "lm_head": flat, "moe": moe}


COMMON = {
    "schema_version": 2,
    "model": "deepseek-v3",
    "quantization": "a8w8c16",
    "workload": {"input_tokens": 2048, "output_tokens": 2048, "mtp_acceptance": 0.7},
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict:
    """(files, processes, modes) of each engine's export of a multi-node A2 PD plan with MTP and
    redundant experts, and MindIE's of the report's CM384 decode (dedicated shared-expert dies)."""
    pd = plan_from(
        {
            **COMMON,
            "hardware": "a2",
            "prefill": {**_phase(32, 0), "batch_tokens": 65536},  # a 2K prompt a DP rank (MindIE takes one whole)
            "decode": {**_phase(32, 32), "concurrency_per_device": 64, "mtp_tokens": 1},
        }
    )
    cmd, _ = load_plan(str(catalog_dir("plans") / "cm-d.yaml"))
    cmd = without_embedding(cmd)  # MindIE lays the embedding over the attention (the report's: unstated)
    out = {}
    root = tmp_path_factory.mktemp("exports")
    for engine in ("vllm-ascend", "sglang", "mindie"):
        prepared = prepare(engine, pd, load_model(pd.model), load_hardware("a2"), root / engine)
        doc = json.loads(prepared.files["launch.json"])
        out[engine] = (prepared.files, doc["processes"], prepared.modes)
    cmd = scored(cmd)
    prepared = prepare("mindie", cmd, load_model(cmd.model), load_hardware("cm384"), root / "cm-d")
    out["mindie-cm-d"] = (prepared.files, json.loads(prepared.files["launch.json"])["processes"], prepared.modes)
    return out


def broken(exports: dict, engine: str):
    files, processes, modes = exports[engine]
    return dict(files), copy.deepcopy(processes), dict(modes)


def test_every_export_meets_its_engines_rules(exports):
    for engine, (files, processes, modes) in exports.items():
        assert export_problems(engine.split("-cm-d")[0], files, processes, modes) == [], engine


# ---- MindIE ----------------------------------------------------------------------------------------


def _config(files: dict) -> tuple[str, dict]:
    name = "decode0_config.json"
    return name, json.loads(with_addresses(files[name]))


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("ServerConfig", "maxLinkNum"),
        ("ServerConfig", "distDPServerEnabled"),
        ("ServerConfig", "e2eTimeout"),
        ("BackendConfig", "interNodeTLSEnabled"),
        ("BackendConfig", "multiNodesInferEnabled"),
        ("BackendConfig.ScheduleConfig", "prefillTimeMsPerReq"),
        ("BackendConfig.ScheduleConfig", "decodePolicyType"),
    ],
)
def test_mindie_refuses_a_config_without_a_compulsory_field(exports, section, field):
    files, _, _ = broken(exports, "mindie")
    name, cfg = _config(files)
    block = cfg
    for key in section.split("."):
        block = block[key]
    del block[field]
    problems = mindie_config_problems(cfg, name)
    assert any(f"{field}: missing compulsory field" in p for p in problems), problems


def test_mindie_refuses_max_prefill_tokens_below_the_input_length(exports):
    files, _, _ = broken(exports, "mindie")
    name, cfg = _config(files)
    cfg["BackendConfig"]["ScheduleConfig"]["maxPrefillTokens"] = 1024
    assert any("maxPrefillTokens 1024 < maxInputTokenLen 2048" in p for p in mindie_config_problems(cfg, name))


def test_mindie_refuses_a_config_file_readable_by_others(exports):
    files, processes, modes = broken(exports, "mindie")
    modes["decode0_config.json"] = 0o644
    assert any("mode 0o644 is wider than 0o640" in p for p in export_problems("mindie", files, processes, modes))


def test_mindie_multi_node_needs_rank_table_file_not_the_old_name(exports):
    files, processes, modes = broken(exports, "mindie")
    for p in processes:
        if p["role"] == "decode":
            p["env"]["RANKTABLEFILE"] = p["env"].pop("RANK_TABLE_FILE")
    assert any("needs RANK_TABLE_FILE" in p for p in export_problems("mindie", files, processes, modes))


def test_mindie_ranktable_numbers_every_device(exports):
    files, processes, modes = broken(exports, "mindie")
    table = json.loads(files["ranktable_decode0.json"])
    table["server_list"][1]["device"][0]["rank_id"] = "0"
    files["ranktable_decode0.json"] = json.dumps(table)
    assert any("rank_id must number" in p for p in export_problems("mindie", files, processes, modes))


def test_mindie_world_size_is_moe_ep_times_moe_tp_with_the_shared_expert_dies(exports):
    files, processes, modes = broken(exports, "mindie-cm-d")
    cfg = json.loads(files["decode0_config.json"])
    model = cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    assert model["moe_ep"] == 288 and model["models"]["deepseekv2"]["num_dangling_shared_experts"] == 32
    model["moe_ep"] = 256  # the routed-expert dies alone: atb_llm's Mapping refuses the world size
    files["decode0_config.json"] = json.dumps(cfg)
    assert any(
        "moe_ep x moe_tp = 256 x 1 is not the world size 288" in p
        for p in export_problems("mindie", files, processes, modes)
    )


def test_mindie_lm_head_local_tp_needs_dp_partition_up_and_attention_tp_1(exports):
    files, processes, modes = broken(exports, "mindie-cm-d")
    assert all(p["env"].get("DP_PARTITION_UP_ENABLE") == "1" for p in processes if p["role"] == "decode")
    for p in processes:
        p["env"].pop("DP_PARTITION_UP_ENABLE", None)
    assert any("needs DP_PARTITION_UP_ENABLE=1" in p for p in export_problems("mindie", files, processes, modes))
    files, processes, modes = broken(exports, "mindie-cm-d")
    cfg = json.loads(files["decode0_config.json"])
    model = cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
    model["dp"], model["tp"] = 144, 2
    files["decode0_config.json"] = json.dumps(cfg)
    assert any("lm_head_local_tp with attention tp 2" in p for p in export_problems("mindie", files, processes, modes))


def test_mindie_coordinator_is_complete_and_refused_when_a_section_is_missing(exports):
    files, _, _ = broken(exports, "mindie")
    cfg = json.loads(files["ms_coordinator.json"].replace("NODE0_ADDR", "192.0.2.1"))
    assert coordinator_problems(cfg) == []
    del cfg["exception_config"]
    assert any("missing section exception_config" in p for p in coordinator_problems(cfg))
    cfg = json.loads(files["ms_coordinator.json"].replace("NODE0_ADDR", "192.0.2.1"))
    cfg["digs_scheduler_config"]["algorithm_type"] = "cache_affinity"
    assert any("pd_separate takes algorithm_type 'load_balance'" in p for p in coordinator_problems(cfg))


# ---- SGLang ----------------------------------------------------------------------------------------


def test_sglang_chunk_is_whole_pages_per_attention_dp_rank(exports):
    files, processes, modes = broken(exports, "sglang")
    argv = argv_of(processes, "prefill")
    chunk = int(argv[argv.index("--chunked-prefill-size") + 1])
    dp = int(argv[argv.index("--attn-dp-size") + 1])
    assert chunk // dp % 128 == 0 and chunk // dp > 0
    argv[argv.index("--chunked-prefill-size") + 1] = str(chunk + dp * 64)  # half a page more per rank
    assert any(
        "is not a positive multiple of the page size 128" in p
        for p in export_problems("sglang", files, processes, modes)
    )


def test_sglang_attention_dp_uses_the_current_flag(exports):
    files, processes, modes = broken(exports, "sglang")
    assert all("--enable-dp-attention" not in p["argv"] for p in processes)
    argv_of(processes, "decode").append("--enable-dp-attention")
    assert any("deprecated" in p for p in export_problems("sglang", files, processes, modes))


def test_sglang_pd_nodes_share_one_mf_store(exports):
    files, processes, modes = broken(exports, "sglang")
    urls = {p["env"].get("ASCEND_MF_STORE_URL") for p in processes if p["role"] != "router"}
    assert len(urls) == 1 and next(iter(urls)).startswith("tcp://NODE0_ADDR:")
    next(p for p in processes if p["role"] == "decode")["env"].pop("ASCEND_MF_STORE_URL")
    assert any("needs ASCEND_MF_STORE_URL" in p for p in export_problems("sglang", files, processes, modes))


# ---- vLLM-Ascend -----------------------------------------------------------------------------------


def test_vllm_ascend_carries_the_tutorial_environment_and_graph_mode(exports):
    files, processes, modes = broken(exports, "vllm-ascend")
    decode = next(p for p in processes if p["role"] == "decode")
    assert decode["env"]["HCCL_BUFFSIZE"] == "600" and decode["env"]["TASK_QUEUE_ENABLE"] == "1"
    argv = decode["argv"]
    assert json.loads(argv[argv.index("--compilation-config") + 1]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert "--enforce-eager" in argv_of(processes, "prefill")
    decode["env"].pop("PYTORCH_NPU_ALLOC_CONF")
    assert any("PYTORCH_NPU_ALLOC_CONF" in p for p in export_problems("vllm-ascend", files, processes, modes))


def test_vllm_ascend_redundant_count_matches_the_expert_map(exports):
    files, processes, modes = broken(exports, "vllm-ascend")
    argv = argv_of(processes, "decode")
    at = argv.index("--additional-config") + 1
    extra = json.loads(argv[at])
    assert extra["eplb_config"]["num_redundant_experts"] == 32
    extra["eplb_config"]["num_redundant_experts"] = 0
    argv[at] = json.dumps(extra)
    assert any("capacity mismatch" in p for p in export_problems("vllm-ascend", files, processes, modes))


def test_vllm_ascend_flags_a_shared_expert_dp_the_engine_would_ignore(exports):
    """The exports' decode runs attention TP1: enable_shared_expert_dp there would be ignored by the
    engine (it needs expert parallelism and TP > 1), so the shared expert would not run as planned."""
    files, processes, modes = broken(exports, "vllm-ascend")
    argv = argv_of(processes, "decode")
    at = argv.index("--additional-config") + 1
    extra = json.loads(argv[at])
    extra["enable_shared_expert_dp"] = True
    argv[at] = json.dumps(extra)
    assert any(
        "enable_shared_expert_dp is ignored" in p for p in export_problems("vllm-ascend", files, processes, modes)
    )
