"""`moeplan plan`, `moeplan schema` and `--emit` from the command line."""

from __future__ import annotations

import json

from planner.placement import read_expert_map
from tests.conftest import PLANS, run_cli


def test_default_plan_prints_ranked_plans_and_status():
    r = run_cli("plan", "--top", "3")
    assert r.exit_code == 0, r.output
    assert "OPTIMAL: proven best under the cost model" in r.output
    assert "Best plan (rank 1) in detail" in r.output


def test_json_export_round_trips_through_evaluate(tmp_path):
    out = tmp_path / "plans.json"
    r = run_cli("plan", "--top", "2", "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["status"] == "OPTIMAL" and len(doc["plans"]) == 2
    for i, plan in enumerate(doc["plans"]):
        assert plan["rank"] == i + 1
        single = tmp_path / f"plan{i}.json"
        single.write_text(json.dumps(plan))
        again = run_cli("evaluate", str(single), "--json")
        assert again.exit_code == 0, again.output
        assert json.loads(again.output)["predicted"] == plan["predicted"]


def test_json_to_stdout_is_only_json():
    r = run_cli("plan", "--top", "1", "--json", "-")
    assert r.exit_code == 0
    assert json.loads(r.output)["plans"][0]["rank"] == 1


def test_committed_schema_matches_the_code():
    r = run_cli("schema")
    assert r.exit_code == 0
    assert json.loads(r.output) == json.loads((PLANS / "plan.schema.json").read_text())


def test_emit_vllm_ascend_writes_instances_and_expert_maps(tmp_path):
    r = run_cli("plan", "--top", "1", "--no-colocated", "--emit", "vllm-ascend", str(tmp_path))
    assert r.exit_code == 0, r.output
    decode = json.loads((tmp_path / "decode_instance.json").read_text())
    assert decode["vllm"]["enable_expert_parallel"] is True
    assert decode["vllm"]["additional_config"]["expert_map_path"] == "decode_expert_map.json"
    assert "vllm serve deepseek-ai/DeepSeek-V3" in decode["command"]
    raw = json.loads((tmp_path / "decode_expert_map.json").read_text())
    lengths = {len(d["device_expert"]) for layer in raw["layer_list"] for d in layer["device_list"]}
    assert len(lengths) == 1
    placement = read_expert_map(tmp_path / "decode_expert_map.json", 256)
    assert placement.device_experts.shape[0] == 58
    assert (tmp_path / "README.txt").exists()


def test_infeasible_exits_1_with_the_binding_constraint():
    r = run_cli("plan", "--tpot-ms", "3")
    assert r.exit_code == 1
    assert "TPOT: the lowest TPOT reachable" in r.output


def test_bad_flags_exit_2():
    for args in (
        ("--max-cards", "-5"),
        ("--phase", "sideways"),
        ("--input-tokens", "0"),
        ("--mtp-acceptance", "1.5"),
        ("--mtp", "0,x"),
        ("--hardware", "a9"),
        ("--decode-devices", "1004028"),
        ("--rate", "nan"),
    ):
        r = run_cli("plan", *args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output


def test_emit_of_a_colocated_plan_writes_one_instance_kind(tmp_path):
    # at 32 cards the best plan under a 200 ms ITL limit is colocated
    r = run_cli(
        "plan", "--top", "1", "--max-itl-ms", "200", "--max-cards", "32", "--no-decode-microbatch",
        "--emit", "vllm-ascend", str(tmp_path),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["README.txt", "colocated_expert_map.json", "colocated_instance.json"]
    doc = json.loads((tmp_path / "colocated_instance.json").read_text())
    layout = doc["moeplan_layouts"]
    assert doc["instances"] * doc["devices_per_instance"] == 32  # before: decode + prefill files implied twice that
    assert "--enable-chunked-prefill" in doc["command"] and "--max-num-batched-tokens" in doc["command"]
    assert f"--max-num-seqs {layout['concurrency_per_device'] * layout['attention']['tp']}" in doc["command"]
