"""AFD as an engine capability: which engines run an AFD plan, each refusal naming its field; the
afd-plugin's launch files; SGLang's undocumented launch refused by name."""

from __future__ import annotations

import json

from planner.engines.profiles import load_profile, plan_problems
from planner.specs.catalog import load_hardware, load_model, load_plan
from tests.conftest import run_cli


def _problems(plan, engine: str, model_name: str | None = None) -> list[str]:
    model = load_model(model_name or plan.model)
    hw = load_hardware(plan.hardware)
    return plan_problems(plan, hw, engine, model.moe.routed_experts, model.num_dense_layers > 0, model.architectures)


def test_the_afd_plugin_runs_the_recipes_plans_and_the_others_say_why_not():
    plan, _ = load_plan("afd-plugin-64a16f-16k")
    assert _problems(plan, "vllm-ascend") == []
    mindie = _problems(plan, "mindie")
    assert mindie[0].startswith("afd: ") and "has no attention-FFN disaggregation" in mindie[0]
    sglang = _problems(plan, "sglang")
    assert any(p.startswith("afd:") and "Qwen3MoeForCausalLM" in p for p in sglang)


def test_what_the_afd_plugin_cannot_run_is_named():
    plan, _ = load_plan("afd-plugin-64a16f-16k")
    three = plan.model_copy(update={"afd": plan.afd.model_copy(update={"micro_batches": 3})})
    assert any(p.startswith("afd.micro_batches: 3") for p in _problems(three, "vllm-ascend"))
    uneven = plan.model_copy(
        update={
            "afd": plan.afd.model_copy(
                update={
                    "attention_devices": 60,
                    "attention": plan.afd.attention.model_copy(update={"dp": 60}),
                    "lm_head": plan.afd.lm_head.model_copy(update={"dp": 60}),
                }
            )
        }
    )
    assert any("not a multiple of ffn_devices" in p for p in _problems(uneven, "vllm-ascend"))
    moved = plan.model_copy(update={"afd": plan.afd.model_copy(update={"shared_expert_on": "attention"})})
    assert any(p.startswith("afd.shared_expert_on") for p in _problems(moved, "vllm-ascend"))
    mtp = plan.model_copy(update={"afd": plan.afd.model_copy(update={"mtp_tokens": 1})})
    assert any(p.startswith("afd.mtp_tokens") for p in _problems(mtp, "vllm-ascend"))
    a2 = plan.model_copy(update={"hardware": "a2"})
    assert any("not on a2" in p for p in _problems(a2, "vllm-ascend"))


def test_capabilities_name_their_sources():
    afd = load_profile("vllm-ascend").capabilities.afd
    assert afd is not None and afd.micro_batches == [1, 2] and "afd-plugin" in afd.via and afd.launch_documented
    sg = load_profile("sglang").capabilities.afd
    assert sg is not None and sg.architectures == ["Qwen3MoeForCausalLM"] and "36258" in sg.via
    assert not sg.launch_documented
    assert load_profile("mindie").capabilities.afd is None


def test_emit_writes_the_afd_plugin_servers_of_the_recipe(tmp_path):
    out = tmp_path / "afd"
    r = run_cli("evaluate", "afd-plugin-64a16f-16k", "--emit", "vllm-ascend", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "launch.json").read_text())
    procs = doc["processes"]
    ffn = [p for p in procs if p["role"] == "afd-ffn"]
    att = [p for p in procs if p["role"] == "afd-attention"]
    # one FFN node and four attention nodes, every device once
    assert len(ffn) == 1 and len(att) == 4
    assert sorted((p["node"], d) for p in procs for d in p["devices"]) == [(n, d) for n in range(5) for d in range(16)]
    config = json.loads(ffn[0]["argv"][ffn[0]["argv"].index("--additional-config") + 1])["afd"]
    assert config == {
        "role": "ffn",
        "connector": "CAMP2pAFDConnector",
        "host": "NODE0_ADDR",
        "port": 29666,
        "num_attention_ranks": 64,
        "num_ffn_ranks": 16,
    }
    # the recipe's FFN batch: attention ranks x attention batch / FFN ranks = 64 x 28 / 16 = 112
    argv = ffn[0]["argv"]
    assert argv[argv.index("--max-num-seqs") + 1] == "112"
    assert "--enable-dbo" in argv and argv[argv.index("--ubatch-size") + 1] == "2"
    a0 = att[0]["argv"]
    assert a0[a0.index("--max-num-seqs") + 1] == "28" and "--headless" not in a0
    assert all("--headless" in p["argv"] for p in att[1:])
    assert all(p["env"]["VLLM_PLUGINS"] == "ascend,afd" for p in procs)


def test_emit_refuses_what_has_no_documented_launch(tmp_path):
    # prefill instances feeding AFD decode: no Ascend launch documented by the afd-plugin
    r = run_cli("evaluate", "afd-a3-example", "--emit", "vllm-ascend", str(tmp_path / "x"))
    assert r.exit_code == 2 and "documents the launch of AFD decode instances only" in r.output
    assert not (tmp_path / "x").exists()
    # SGLang cannot run a DeepSeek AFD plan: refused naming the fields
    r = run_cli("evaluate", "afd-plugin-64a16f-16k", "--emit", "sglang", str(tmp_path / "y"))
    assert r.exit_code == 2 and "afd:" in r.output and "afd.micro_batches" in r.output


def test_sglang_runs_a_qwen3_afd_plan_but_has_no_launch_to_write(tmp_path):
    import yaml

    plan = {
        "schema_version": 2,
        "model": "qwen3-235b-a22b",
        "hardware": "a3",
        "workload": {"input_tokens": 2048, "output_tokens": 1024},
        "afd": {
            "attention_devices": 48,
            "ffn_devices": 16,
            "micro_batches": 3,
            "attention": {"dp": 48, "tp": 1},
            "moe": {"ep": 16, "slots_per_device": 8, "comm": "alltoall"},
            "concurrency_per_device": 48,
        },
    }
    path = tmp_path / "qwen-afd.yaml"
    path.write_text(yaml.safe_dump(plan))
    loaded, _ = load_plan(str(path))
    assert _problems(loaded, "sglang") == []
    assert any(p.startswith("afd: vllm-ascend AFD") for p in _problems(loaded, "vllm-ascend"))
    r = run_cli("evaluate", str(path), "--emit", "sglang", str(tmp_path / "out"))
    assert r.exit_code == 2 and "documents no launch" in r.output
