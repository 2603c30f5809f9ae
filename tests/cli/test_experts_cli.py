"""`moeplan experts` end to end: tables, the written map, and clean errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from planner.placement.expert_map import read_expert_map
from planner.placement.synthetic import generate_loads
from tests.conftest import run_cli

BASE = ["experts", "--devices", "32", "--slots-per-device", "9"]


def assert_clean_error(r, message: str) -> None:
    assert r.exit_code == 2, r.output
    assert message in r.output, r.output
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_synthetic_run_prints_the_comparison_and_writes_the_map(tmp_path):
    out = tmp_path / "map.json"
    r = run_cli(*BASE, "--synthetic", "zipf:1.1", "--layers", "6", "--out", str(out))
    assert r.exit_code == 0, r.output
    for text in (
        "moeplan",
        "EPLB greedy (global)",
        "lower bound",
        "Replicas per logical expert",
        "time:",
        "wrote",
    ):
        assert text in r.output
    placement = read_expert_map(out, num_experts=256)
    assert placement.layers == 6 and placement.devices == 32 and placement.slots_per_device == 9
    assert (placement.replica_counts >= 1).all()
    doc = json.loads(out.read_text())
    assert set(doc) == {"moe_layer_count", "layer_list"}


def test_loads_file_with_model_nodes_and_json_format(tmp_path):
    loads = generate_loads("lognormal:1.0", 4, 256, seed=2)
    src = tmp_path / "loads.npy"
    np.save(src, loads)
    out = tmp_path / "placement.json"
    r = run_cli(
        *BASE,
        "--loads",
        str(src),
        "--nodes",
        "4",
        "--model",
        "deepseek-v3",
        "--format",
        "json",
        "--out",
        str(out),
    )
    assert r.exit_code == 0, r.output
    assert "EPLB hierarchical" in r.output and "Nodes reached per token" in r.output
    doc = json.loads(out.read_text())
    assert doc["format"].startswith("moeplan-expert-placement")
    for key in ("moeplan", "eplb_global_greedy", "eplb_hierarchical", "lower_bound"):
        assert len(doc["imbalance"][key]) == 4
    assert set(doc["nodes_per_token"]) >= {"ours", "hierarchical"}
    mine = np.array(doc["imbalance"]["moeplan"])
    assert (mine <= np.array(doc["imbalance"]["eplb_global_greedy"]) + 1e-9).all()
    assert read_expert_map(out).layers == 4


def test_windows_show_next_window_scores():
    r = run_cli(*BASE, "--synthetic", "lognormal:1.0", "--layers", "3", "--windows", "2")
    assert r.exit_code == 0, r.output
    assert "scored on t and on t+1" in r.output


def test_map_to_stdout_keeps_stdout_clean():
    r = run_cli(*BASE, "--synthetic", "zipf:1.1", "--layers", "2", "--out", "-")
    assert r.exit_code == 0
    start = r.stdout.index("{")
    doc = json.loads(r.stdout[start:])
    assert doc["moe_layer_count"] == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1,2,nan\n", "is NaN"),
        ("1,2,-3\n", "must be >= 0"),
        ("1,2,3\n1,2\n", "has 2 values; expected 3"),
        ("", "is empty"),
    ],
)
def test_bad_loads_files_exit_2_without_traceback(tmp_path, content, message):
    path = tmp_path / "loads.csv"
    path.write_text(content)
    r = run_cli("experts", "--devices", "2", "--slots-per-device", "2", "--loads", str(path))
    assert_clean_error(r, message)


def test_binary_junk_exits_2(tmp_path):
    path = tmp_path / "loads.npy"
    path.write_bytes(bytes(range(256)) * 8)
    assert_clean_error(run_cli(*BASE, "--loads", str(path)), "not a readable .npy")
    path = tmp_path / "loads.csv"
    path.write_bytes(bytes(range(256)) * 8)
    assert_clean_error(run_cli(*BASE, "--loads", str(path)), "not UTF-8")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--synthetic", "zipf:1.1", "--slots-per-device", "7"], "cannot hold 256 experts"),
        (["--synthetic", "zipf:1.1", "--nodes", "5"], "must be >= 1 and divide --devices"),
        (["--synthetic", "pareto:2"], "not a trace spec"),
        (
            ["--synthetic", "zipf:1.1", "--model", "deepseek-v3", "--experts", "128"],
            "has 128 experts per layer but --model deepseek-v3 has 256",
        ),
        (["--synthetic", "zipf:1.1", "--model", "no-such-model"], "unknown model"),
        ([], "give exactly one of --loads FILE or --synthetic SPEC"),
    ],
)
def test_bad_flags_exit_2_with_the_fix(args, message):
    cmd = ["experts", "--devices", "32", "--slots-per-device", "9", *args]
    if "--slots-per-device" in args:
        cmd = ["experts", "--devices", "32", *args]
    assert_clean_error(run_cli(*cmd), message)


def test_synthetic_only_flags_are_refused_with_a_loads_file(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("1,2,3,4\n")
    r = run_cli(
        "experts",
        "--devices",
        "2",
        "--slots-per-device",
        "2",
        "--loads",
        str(path),
        "--layers",
        "3",
    )
    assert_clean_error(r, "--layers only apply to --synthetic")


def test_out_of_range_flag_values_exit_2():
    r = run_cli("experts", "--devices", "0", "--slots-per-device", "9", "--synthetic", "zipf:1")
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_unwritable_out_leaves_no_file(tmp_path):
    out = tmp_path / "missing-dir" / "map.json"
    r = run_cli(*BASE, "--synthetic", "zipf:1.1", "--layers", "2", "--out", str(out))
    assert_clean_error(r, "does not exist")
    assert not out.exists()


def test_model_mismatch_with_loads_file(tmp_path):
    path = tmp_path / "l.json"
    path.write_text(json.dumps([[1] * 64] * 2))
    r = run_cli(*BASE, "--loads", str(path), "--model", "deepseek-v3")
    assert_clean_error(r, "has 64 experts per layer but --model deepseek-v3 has 256")


def test_subprocess_bad_loads_has_no_traceback(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("1,2,inf\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner",
            "experts",
            "--devices",
            "2",
            "--slots-per-device",
            "2",
            "--loads",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "is infinite" in out.stderr
