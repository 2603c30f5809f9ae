"""The foundation commands end to end: version, catalogs, evaluate, fidelity; clean errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from planner import __version__
from tests.conftest import PLANS, run_cli


def test_version():
    r = run_cli("--version")
    assert r.exit_code == 0 and __version__ in r.output


def test_python_dash_m_runs_the_same_cli():
    out = subprocess.run([sys.executable, "-m", "planner", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and __version__ in out.stdout


def test_the_app_run_inside_another_program_freezes_none_of_its_objects():
    # moeplan's own process freezes what the imports made (planner.cli.app.main); a test is not that
    import gc

    before = gc.get_freeze_count()
    assert run_cli("evaluate", str(PLANS / "a2-d70.yaml")).exit_code == 0
    assert gc.get_freeze_count() == before


def test_the_process_still_runs_its_exit_handlers(tmp_path):
    # main freezes the objects before shutdown: the disk memo's atexit flush must still write its file
    env = {**os.environ, "MOEPLAN_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(PLANS.parent)}
    out = subprocess.run(
        [sys.executable, "-m", "planner", "evaluate", str(PLANS / "a2-d70.yaml"), "--skew-sigma", "0.7"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.glob("skew-imbalance-*.json"))


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("hardware", "list"), "cm384"),
        (("hardware", "show", "a2"), "910B4"),
        (("hardware", "show", "cm384"), "arXiv 2506.12708"),
        (("models", "list"), "qwen3-235b-a22b"),
        (("models", "show", "deepseek-v3"), "MLA"),
        (("hardware",), "cm384"),  # bare: the list, not a usage error
        (("models",), "qwen3-235b-a22b"),
    ],
)
def test_catalog_commands(args, expect):
    r = run_cli(*args)
    assert r.exit_code == 0, r.output
    assert expect in r.output


def test_evaluate_prints_breakdowns_and_slo():
    r = run_cli("evaluate", str(PLANS / "a2-d70.yaml"))
    assert r.exit_code == 0, r.output
    for text in ("Decode step by module", "Decode HBM", "TPOT", "SLO 100 ms: yes", "per card"):
        assert text in r.output


def test_evaluate_json_has_the_contract_fields():
    r = run_cli("evaluate", "a2-d70", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    d = doc["predicted"]["decode"]
    for field in (
        "step_ms",
        "tpot_ms",
        "tokens_per_s_per_device",
        "tokens_per_s_per_card",
        "hbm_bytes_per_device",
        "fits_hbm",
        "breakdown_ms",
    ):
        assert field in d
    assert doc["decode"]["moe"] == {"ep": 32, "slots_per_device": 8, "comm": "allgather"}


def test_evaluate_round_trip_of_its_own_output(tmp_path):
    first = run_cli("evaluate", "a2-p", "--json", "-")
    path = tmp_path / "scored.json"
    path.write_text(first.output)
    second = run_cli("evaluate", str(path), "--json", "-")
    assert second.exit_code == 0
    assert json.loads(second.output)["predicted"] == json.loads(first.output)["predicted"]


def test_system_block_for_a_plan_with_both_phases(tmp_path):
    import yaml

    d = yaml.safe_load((PLANS / "a2-d70.yaml").read_text())
    p = yaml.safe_load((PLANS / "a2-p.yaml").read_text())
    d["prefill"] = p["prefill"]
    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(d))
    r = run_cli("evaluate", str(path), "--json", "-")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)["predicted"]["system"]
    assert s["cards"] == 48
    assert s["requests_per_s"] == pytest.approx(min(s["prefill_requests_per_s"], s["decode_requests_per_s"]))
    assert s["output_tokens_per_s_per_card"] == pytest.approx(s["output_tokens_per_s"] / 48, rel=1e-3)


def test_fidelity_lists_every_published_row():
    r = run_cli("fidelity", "--markdown", "--no-simulated")
    assert r.exit_code == 0
    for row in ("A2-D70", "A2-D90", "A2-P", "CM-D", "CM-D-max", "A2-P-mb"):
        assert f"| {row} |" in r.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("schema_version: 1\nmodel: deepseek-v3\n", "workload"),
        ("model: [unclosed\n", "is not valid YAML: expected"),
        ('{"model": 1,,}', "not valid"),
        ("- just\n- a list\n", "mapping"),
        ("", "empty"),
    ],
)
def test_bad_plan_files_exit_2_without_traceback(tmp_path, content, message):
    suffix = ".json" if content.startswith("{") else ".yaml"
    path = tmp_path / f"plan{suffix}"
    path.write_text(content)
    r = run_cli("evaluate", str(path))
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_binary_junk_is_refused_cleanly(tmp_path):
    path = tmp_path / "junk.yaml"
    path.write_bytes(b"\xff\xfe\x00\x81garbage")
    r = run_cli("evaluate", str(path))
    assert r.exit_code == 2 and "UTF-8" in r.output


def test_unknown_plan_and_hardware_names():
    r = run_cli("evaluate", "no-such-plan")
    assert r.exit_code == 2 and "known names" in r.output
    r = run_cli("hardware", "show", "a9")
    assert r.exit_code == 2 and "a2" in r.output


def test_subprocess_error_has_no_traceback(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "schema_version: 1\nmodel: deepseek-v3\nhardware: a2\n"
        "workload: {input_tokens: -1, output_tokens: 5}\ndecode: {}\n"
    )
    out = subprocess.run([sys.executable, "-m", "planner", "evaluate", str(path)], capture_output=True, text=True)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "workload.input_tokens" in out.stderr
