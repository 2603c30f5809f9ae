"""The launch exports, parsed the way each engine parses them.

Every argv is parsed by an argparse built from the engine's own flag list (planner/engines/data,
written from the release's argument parser); every JSON the engine would load is loaded and its
keys checked against the keys the release reads; expert maps are checked against the redundant
expert count passed with them; and the processes of launch.json must cover every device of the
plan exactly once. Plans an engine cannot run must be refused, naming the field.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from planner.costmodel.evaluate import evaluate_plan
from planner.engines.profiles import ENGINES, CommandSpec, load_profile
from planner.errors import BadInputError
from planner.report.launch import emit
from planner.search.plan_search import run_search
from planner.search.request import PlanRequest
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.plan import Plan
from tests.conftest import PLANS, without_embedding

TYPES = {"str": str, "int": int, "float": float, "json": json.loads}


def parser_for(spec: CommandSpec) -> argparse.ArgumentParser:
    """An argparse that accepts exactly the flags the engine's data file lists."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for i in range(spec.positionals):
        p.add_argument(f"positional{i}")
    for name, flag in spec.flags.items():
        if flag.value == "none":
            p.add_argument(name, action="store_true")
        elif flag.value == "list":
            p.add_argument(name, nargs="+")
        elif flag.value == "append_list":
            p.add_argument(name, nargs="+", action="append")
        else:
            p.add_argument(name, type=TYPES[flag.value], choices=flag.choices)
    return p


def parse(spec: CommandSpec, argv: list[str]) -> argparse.Namespace:
    n = len(spec.launcher)
    assert argv[:n] == spec.launcher, argv[:n]
    args, extra = parser_for(spec).parse_known_args(argv[n:])
    assert not extra, f"flags the engine does not accept: {extra}"
    return args


def scored(plan: Plan) -> Plan:
    """The plan with its `predicted` block (as `moeplan plan` writes it)."""
    return plan.model_copy(update={"predicted": evaluate_plan(plan).model_dump(mode="json")})


def searched(**kw) -> Plan:
    return run_search(PlanRequest(**kw)).plans[0]


def plan_from(doc: dict) -> Plan:
    return scored(Plan.model_validate(doc))


def runnable_by(engine: str, plan: Plan) -> Plan:
    """A colocated test plan as `engine` runs it: vLLM puts decodes and prompt tokens in every step, so its
    colocated plans are chunked (4,096-token chunks); SGLang and MindIE take the whole forwards as written."""
    if engine != "vllm-ascend" or plan.colocated is None or plan.colocated.chunk_tokens is not None:
        return plan
    doc = plan.model_dump(mode="json", exclude_none=True)
    doc.pop("predicted", None)
    doc["colocated"]["chunk_tokens"] = 4096
    doc["colocated"].pop("prefill_batch_tokens")  # with chunked prefill a forward is one chunk
    return plan_from(doc)


COMMON = {
    "schema_version": 2,
    "model": "deepseek-v3",
    "quantization": "a8w8c16",
    "workload": {"input_tokens": 2048, "output_tokens": 2048, "mtp_acceptance": 0.7},
}


def colocated_plan(
    hardware: str, devices: int, instances: int, model: str = "deepseek-v3", experts: int = 256, mtp: int = 1
) -> Plan:
    """A whole-forward colocated plan SGLang and MindIE run (vLLM-Ascend runs its chunked form, `runnable_by`):
    everything data-parallel, one micro-batch, a prompt a DP rank at least."""
    layouts = {
        "attention": {"dp": devices, "tp": 1},
        "dense_ffn": {"dp": devices, "tp": 1},
        "lm_head": {"dp": devices, "tp": 1},
    }
    slots = -(-experts // devices) + 1
    return plan_from(
        {
            **COMMON,
            "model": model,
            "hardware": hardware,
            "colocated": {
                "devices": devices,
                "instances": instances,
                **layouts,
                "moe": {"ep": devices, "slots_per_device": slots, "comm": "alltoall"},
                "concurrency_per_device": 16,
                "mtp_tokens": mtp,
                # at least a 2K prompt a DP rank: MindIE prefills a prompt whole on its rank
                "prefill_batch_tokens": max(16384, devices * 2048),
                "prefill_micro_batches": 1,
            },
        }
    )


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    """The plans of the acceptance list: default, per-engine searches, a2/cm384 disaggregated,
    colocated and multi-node ones."""
    # the default search without decode micro-batches (MindIE and vllm-ascend run one)
    out = {"default": searched(decode_micro_batches=(1,))}
    for engine in ENGINES:
        out[f"a2-{engine}"] = searched(engine=engine)
        out[f"cm384-{engine}"] = searched(hardware="cm384", max_cards=64, colocated=False, engine=engine)
    out["a2-colocated"] = colocated_plan("a2", 32, 2)
    out["cm384-colocated"] = colocated_plan("cm384", 32, 2)
    return out


# ---- every device exactly once ----------------------------------------------------------------


def check_devices(plan: Plan, doc: dict, devices_per_node: int) -> None:
    seen: set[tuple[int, int]] = set()
    per_instance: dict[tuple[str, int], int] = {}
    for p in doc["processes"]:
        if p["role"] == "router":
            assert p["devices"] == []
            continue
        assert p["env"]["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(map(str, p["devices"])) or "MIES" in str(p["env"])
        for d in p["devices"]:
            assert 0 <= d < devices_per_node
            assert (p["node"], d) not in seen, f"device {d} of node {p['node']} in two processes"
            seen.add((p["node"], d))
        key = (p["role"], p["instance"])
        per_instance[key] = per_instance.get(key, 0) + len(p["devices"])
    assert len(seen) == plan.total_devices
    sections = {"colocated": plan.colocated} if plan.is_colocated else {"decode": plan.decode, "prefill": plan.prefill}
    for role, sec in sections.items():
        if sec is None:
            continue
        for i in range(sec.instances):
            assert per_instance[(role, i)] == sec.devices


def export(engine: str, plan: Plan, tmp_path: Path) -> tuple[Path, dict]:
    out = tmp_path / engine
    emit(engine, plan, load_model(plan.model), load_hardware(plan.hardware), out)
    doc = json.loads((out / "launch.json").read_text())
    assert doc["engine"] == engine and doc["engine_version"] == load_profile(engine).release
    assert json.loads((out / doc["plan"]).read_text())["model"] == plan.model
    assert (out / "README.md").read_text().startswith("#")
    check_devices(plan, doc, load_hardware(plan.hardware).devices_per_node)
    return out, doc


# ---- vLLM-Ascend --------------------------------------------------------------------------------


def check_vllm(plan: Plan, out: Path, doc: dict) -> None:
    profile = load_profile("vllm-ascend")
    model = load_model(plan.model)
    keys = profile.config_keys
    experts = model.moe.routed_experts
    for p in doc["processes"]:
        if p["role"] == "router":
            parse(profile.router, p["argv"])
            continue
        a = parse(profile.server, p["argv"])
        assert "--enable-dbo" not in p["argv"] and "--ubatch-size" not in p["argv"]  # switched off on Ascend
        assert a.quantization == ("ascend" if plan.quantization == "a8w8c16" else None)
        assert a.max_model_len == plan.workload.input_tokens + plan.workload.output_tokens
        assert 0 < a.gpu_memory_utilization < 1
        extra = a.additional_config or {}
        shared_keys = {"enable_shared_expert_dp", "multistream_overlap_shared_expert"}
        assert set(extra) <= {"eplb_config", "finegrained_tp_config"} | shared_keys
        assert shared_keys <= set(keys["additional_config"]["top"])
        phase = plan.colocated if plan.is_colocated else getattr(plan, p["role"])
        replicated = phase.shared_expert.placement == "replicated" and bool(model.moe.shared_experts)
        assert extra.get("enable_shared_expert_dp", False) is (
            replicated and a.tensor_parallel_size > 1 and phase.moe.ep > 1
        )
        # the decode's overlap of a whole shared expert with dispatch/combine, on its own stream
        overlap = load_hardware(plan.hardware).overlap.decode_shared_expert_with_dispatch
        stream = replicated and overlap and p["role"] != "prefill"
        assert extra.get("multistream_overlap_shared_expert", False) is stream
        eplb = extra.get("eplb_config")
        if eplb:
            assert set(eplb) <= set(keys["additional_config"]["eplb_config"])
            path = Path(eplb["expert_map_path"])
            assert path.is_absolute() and path.parent == out.resolve() and path.suffix == ".json"
            m = json.loads(path.read_text())
            assert m["moe_layer_count"] == model.num_moe_layers == len(m["layer_list"])
            slots = {len(d["device_expert"]) for layer in m["layer_list"] for d in layer["device_list"]}
            assert len(slots) == 1
            devices = m["layer_list"][0]["device_count"]
            # vllm-ascend v0.24+: EPLB local expert capacity mismatch unless these agree
            assert eplb["num_redundant_experts"] == devices * slots.pop() - experts
            assert devices == a.data_parallel_size * a.tensor_parallel_size
        for key in extra.get("finegrained_tp_config", {}):
            assert key in keys["additional_config"]["finegrained_tp_config"]
            assert a.data_parallel_size % extra["finegrained_tp_config"][key] == 0
        kv = a.kv_transfer_config
        if plan.decode is not None and plan.prefill is not None:
            assert set(kv) <= set(keys["kv_transfer_config"])
            assert kv["kv_role"] == {"prefill": "kv_producer", "decode": "kv_consumer"}[p["role"]]
            assert kv["kv_connector"] == "MooncakeConnectorV1"
        else:
            assert kv is None
        if p["role"] != "prefill":
            sec = plan.colocated if plan.is_colocated else plan.decode
            mtp = sec.mtp_tokens
            assert (a.speculative_config or {}).get("num_speculative_tokens", 0) == mtp
        elif plan.decode is not None and plan.decode.mtp_tokens:
            assert a.speculative_config["method"] == "mtp"  # prefill carries the decode's MTP module
        if a.headless:
            assert a.data_parallel_start_rank > 0 and a.data_parallel_address.startswith("NODE")


# ---- SGLang -----------------------------------------------------------------------------------


def check_sglang(plan: Plan, out: Path, doc: dict) -> None:
    profile = load_profile("sglang")
    model = load_model(plan.model)
    for p in doc["processes"]:
        if p["role"] == "router":
            r = parse(profile.router, p["argv"])
            assert r.pd_disaggregation and r.prefill and r.decode
            continue
        a = parse(profile.server, p["argv"])
        assert a.device == "npu" and a.attention_backend == "ascend"
        assert a.quantization == ("modelslim" if plan.quantization == "a8w8c16" else None)
        assert 0 < a.mem_fraction_static < 1
        if a.init_expert_location:
            m = json.loads(Path(a.init_expert_location).read_text())
            assert set(m) == {"physical_to_logical_map"}
            rows = m["physical_to_logical_map"]
            assert len(rows) == model.num_layers
            assert {len(r) for r in rows} == {model.moe.routed_experts + a.ep_num_redundant_experts}
            assert a.ep_size * (len(rows[0]) // a.ep_size) == len(rows[0])
            assert all(0 <= e < model.moe.routed_experts for r in rows for e in r)
        if a.enable_two_batch_overlap:
            assert a.moe_a2a_backend == "deepep"
        # whole prefill forwards over attention-DP ranks run SGLang's prefill delayer (docs/simulate.md)
        co = plan.colocated
        assert a.enable_prefill_delayer == (co is not None and co.chunk_tokens is None and co.attention.dp > 1)
        # chunked prefill rides along the decode steps only in SGLang's mixed batches (without the flag its chunks
        # run one after another ahead of the decodes), whose decodes drop the MTP draft: chunked plans at MTP 0
        assert a.enable_mixed_chunk == (co is not None and co.chunk_tokens is not None)
        if a.enable_mixed_chunk:
            assert co.mtp_tokens == 0
        pd = plan.decode is not None and plan.prefill is not None
        assert (a.disaggregation_mode == p["role"]) if pd else a.disaggregation_mode is None
        if pd:
            assert a.disaggregation_transfer_backend == "ascend"


# ---- MindIE -----------------------------------------------------------------------------------


def _keys(doc: dict, allowed: dict, prefix: str = "") -> None:
    for k, v in doc.items():
        path = f"{prefix}{k}"
        group = allowed.get(prefix.rstrip(".") or "top") or allowed.get(prefix.rstrip(".").split(".")[-1])
        if group is not None:
            assert k in group, f"{path} is not a key MindIE reads"
        if isinstance(v, dict):
            _keys(v, allowed, f"{path}.")


def check_mindie(plan: Plan, out: Path, doc: dict) -> None:
    profile = load_profile("mindie")
    model = load_model(plan.model)
    hw = load_hardware(plan.hardware)
    allowed = profile.config_keys["config_json"]
    for p in doc["processes"]:
        if p["role"] == "router":
            assert p["argv"] == profile.router.launcher
            continue
        assert p["argv"] == profile.launcher
        cfg = json.loads(Path(p["env"]["MIES_CONFIG_JSON_PATH"]).read_text())
        _keys(cfg, allowed)
        mc = cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]
        assert cfg["BackendConfig"]["npuDeviceIds"] == [p["devices"]]
        ds = mc.get("models", {}).get("deepseekv2", {})
        for k in ds:
            assert k in allowed["models.deepseekv2"]
        if "num_dangling_shared_experts" in ds:
            assert hw.name in profile.capabilities.dedicated_shared_hardware
            assert ds["eplb"]["level"] == 0
        if ds.get("eplb", {}).get("level") == 1:
            m = json.loads(Path(ds["eplb"]["expert_map_file"]).read_text())
            assert m["layer_list"][0]["device_count"] == mc["moe_ep"]
            assert m["moe_layer_count"] == model.num_moe_layers
        # atb_llm Mapping: dp x tp and moe_ep x moe_tp are both the world size (shared-expert dies are EP ranks)
        assert mc["dp"] * mc["tp"] == mc["moe_ep"] * mc["moe_tp"]
        # ScheduleConfig's limits are each DP rank's (a scheduler per rank, MindIE-LLM v3.0.0 scheduler.cpp): the
        # plan's sequences and prefill batch over its DP ranks, a whole prompt at least
        sched = cfg["BackendConfig"]["ScheduleConfig"]
        section = {"prefill": plan.prefill, "decode": plan.decode, "colocated": plan.colocated}[p["role"]]
        att, n_in = section.attention, plan.workload.input_tokens
        if p["role"] != "prefill":
            assert sched["maxBatchSize"] == round(section.concurrency_per_device * att.tp)
        if p["role"] != "decode":
            batch = section.batch_tokens if p["role"] == "prefill" else section.prefill_batch_tokens
            assert sched["maxPrefillTokens"] == max(math.ceil(batch / att.dp), n_in)


CHECKS = {"vllm-ascend": check_vllm, "sglang": check_sglang, "mindie": check_mindie}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ["a2", "cm384"])
def test_engine_searched_plan_exports_and_parses(plans, tmp_path, engine, name):
    plan = plans[f"{name}-{engine}"]
    out, doc = export(engine, plan, tmp_path)
    CHECKS[engine](plan, out, doc)
    spans: dict[tuple[str, int], set[int]] = {}
    for p in doc["processes"]:
        spans.setdefault((p["role"], p["instance"]), set()).add(p["node"])
    assert max(len(nodes) for nodes in spans.values()) > 1  # multi-node instances: one process per node


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ["a2-colocated", "cm384-colocated"])
def test_colocated_plan_is_one_server_per_instance(plans, tmp_path, engine, name):
    plan = runnable_by(engine, plans[name])
    out, doc = export(engine, plan, tmp_path)
    CHECKS[engine](plan, out, doc)
    assert {p["role"] for p in doc["processes"]} == {"colocated"}
    heads = {(p["instance"]) for p in doc["processes"]}
    assert heads == set(range(plan.colocated.instances))


def test_default_plan_exports_where_it_runs_and_is_refused_with_the_field_elsewhere(plans, tmp_path):
    # the free search's winner may use what no engine runs (decode micro-batches on Ascend, the
    # report's hybrid prefill attention): each engine either exports it whole or names every field
    plan = plans["default"]
    checks = {"vllm-ascend": check_vllm, "sglang": check_sglang, "mindie": check_mindie}
    for engine in ENGINES:
        model, hw = load_model(plan.model), load_hardware(plan.hardware)
        try:
            emit(engine, plan, model, hw, tmp_path / engine)
        except BadInputError as exc:
            text = str(exc)
            assert "cannot run this plan" in text
            assert any(f"{section}." in text for section in ("decode", "prefill", "colocated"))
            assert not (tmp_path / engine).exists()
            continue
        doc = json.loads((tmp_path / engine / "launch.json").read_text())
        checks[engine](plan, tmp_path / engine, doc)


def test_dedicated_shared_experts_only_on_mindie_cm384(tmp_path):
    plan, _ = load_plan(str(PLANS / "cm-d.yaml"))
    plan = scored(without_embedding(plan))  # MindIE lays the embedding over the attention
    for engine in ("vllm-ascend", "sglang"):
        with pytest.raises(BadInputError, match="decode.shared_expert"):
            emit(engine, plan, load_model(plan.model), load_hardware(plan.hardware), tmp_path / engine)
    out, doc = export("mindie", plan, tmp_path)
    check_mindie(plan, out, doc)
    cfg = json.loads((out / "decode0_config.json").read_text())
    ds = cfg["BackendConfig"]["ModelDeployConfig"]["ModelConfig"][0]["models"]["deepseekv2"]
    assert ds["num_dangling_shared_experts"] == 32


def _tp4_decode(shared: dict) -> Plan:
    """A DeepSeek-V3 A2 PD plan whose decode runs attention DP8xTP4 with the given shared expert."""
    flat = {"dp": 32, "tp": 1}
    tp4 = {"dp": 8, "tp": 4}
    moe = {"ep": 32, "slots_per_device": 8, "comm": "alltoall"}
    return plan_from(
        {
            **COMMON,
            "hardware": "a2",
            "prefill": {
                "devices": 32,
                "attention": flat,
                "dense_ffn": flat,
                "lm_head": flat,
                "moe": moe,
                "batch_tokens": 16384,
            },
            "decode": {
                "devices": 32,
                "attention": tp4,
                "dense_ffn": tp4,
                "lm_head": tp4,
                "moe": moe,
                "shared_expert": shared,
                "concurrency_per_device": 16,
            },
        }
    )


def test_vllm_ascend_replicates_the_shared_expert_only_where_the_plan_does(tmp_path):
    """With attention TP > 1 and expert parallelism vLLM splits the shared expert over the TP group;
    a plan that replicates it gets enable_shared_expert_dp, a split one keeps the default, and the
    other engines refuse the split naming the field."""
    for shared, flag in (({"placement": "replicated"}, True), ({"placement": "split", "tp": 4}, False)):
        plan = _tp4_decode(shared)
        (tmp_path / shared["placement"]).mkdir()
        out, doc = export("vllm-ascend", plan, tmp_path / shared["placement"])
        check_vllm(plan, out, doc)
        decode = parse(load_profile("vllm-ascend").server, argv_of(doc["processes"], "decode"))
        prefill = parse(load_profile("vllm-ascend").server, argv_of(doc["processes"], "prefill"))
        assert (decode.additional_config or {}).get("enable_shared_expert_dp", False) is flag
        assert "enable_shared_expert_dp" not in (prefill.additional_config or {})  # TP1: nothing to split
    plan = _tp4_decode({"placement": "split", "tp": 4})
    for engine in ("sglang", "mindie"):
        with pytest.raises(BadInputError, match=r"decode\.shared_expert: placement 'split'"):
            emit(engine, plan, load_model(plan.model), load_hardware(plan.hardware), tmp_path / engine)


def argv_of(processes: list[dict], role: str) -> list[str]:
    """The argv of the first process of `role` in launch.json's processes."""
    return next(p["argv"] for p in processes if p["role"] == role)


def test_hybrid_prefill_attention_is_refused_by_every_engine(tmp_path):
    plan, _ = load_plan(str(PLANS / "a2-p.yaml"))
    plan = scored(plan)
    for engine in ENGINES:
        with pytest.raises(BadInputError, match="prefill.attention"):
            emit(engine, plan, load_model(plan.model), load_hardware(plan.hardware), tmp_path / engine)


def test_each_engine_exports_the_colocated_schedules_it_runs_and_refuses_the_others_by_name(plans, tmp_path):
    """vLLM puts decodes and prompt tokens in every step (no prefill forward of its own); SGLang runs whole
    forwards by default and a chunk along each decode step only with --enable-mixed-chunk, whose decodes drop
    the MTP draft; MindIE without SplitFuse runs whole forwards only."""
    whole = plans["a2-colocated"]  # whole forwards, MTP 1
    chunked_mtp = runnable_by("vllm-ascend", whole)
    chunked = runnable_by("vllm-ascend", colocated_plan("a2", 32, 2, mtp=0))
    model, hw = load_model(whole.model), load_hardware(whole.hardware)
    refused = {
        ("vllm-ascend", "whole"): r"colocated\.chunk_tokens: vLLM-Ascend v0\.25\.1rc1 runs vLLM V1's scheduler",
        ("sglang", "chunked_mtp"): r"colocated\.mtp_tokens: SGLang 0\.5\.23's mixed steps",
        ("mindie", "chunked_mtp"): r"colocated\.chunk_tokens: chunked prefill",
        ("mindie", "chunked"): r"colocated\.chunk_tokens: chunked prefill",
    }
    for engine in ENGINES:
        for name, plan in (("whole", whole), ("chunked_mtp", chunked_mtp), ("chunked", chunked)):
            folder = tmp_path / f"{engine}-{name}"
            if (engine, name) in refused:
                with pytest.raises(BadInputError, match=refused[(engine, name)]):
                    emit(engine, plan, model, hw, folder)
                assert not folder.exists()
                continue
            emit(engine, plan, model, hw, folder)
            doc = json.loads((folder / "launch.json").read_text())
            CHECKS[engine](plan, folder, doc)
            argv = [a for p in doc["processes"] for a in p["argv"]]
            if engine == "sglang":
                assert ("--enable-mixed-chunk" in argv) == (name == "chunked")


def test_emit_refuses_to_overwrite_without_force(plans, tmp_path):
    plan = runnable_by("vllm-ascend", plans["a2-colocated"])
    model, hw = load_model(plan.model), load_hardware(plan.hardware)
    out = tmp_path / "v"
    emit("vllm-ascend", plan, model, hw, out)
    (out / "marker").write_text("old")
    with pytest.raises(BadInputError, match="--force"):
        emit("vllm-ascend", plan, model, hw, out)
    emit("vllm-ascend", plan, model, hw, out, force=True)
    assert not (out / "marker").exists() and (out / "launch.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["v"]  # no temporary folder left behind


def test_sub_node_instances_share_nodes_without_overlap(tmp_path):
    whole = colocated_plan("a2", 4, 6, "deepseek-v2-lite", 64, 0)  # six 4-device instances: two per node
    for engine in ENGINES:
        plan = runnable_by(engine, whole)
        _, doc = export(engine, plan, tmp_path)
        assert {p["node"] for p in doc["processes"]} == {0, 1, 2}
        owner: dict[tuple[int, str], int] = {}  # (node, port) -> instance
        for p in doc["processes"]:
            ports = [v for f, v in zip(p["argv"], p["argv"][1:], strict=False) if f.endswith("-port")]
            if engine == "mindie":
                cfg = json.loads(Path(p["env"]["MIES_CONFIG_JSON_PATH"]).read_text())
                server, backend = cfg["ServerConfig"], cfg["BackendConfig"]
                ports = [server["port"], server["managementPort"], backend["multiNodesInferPort"]]
            assert ports
            for port in map(str, ports):
                assert owner.setdefault((p["node"], port), p["instance"]) == p["instance"], (engine, port)
