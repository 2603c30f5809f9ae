"""Engines run on the devices their releases name: a plan on another machine is one no engine runs.

Every profile lists its devices (prefixes of a machine's device_name) with where they were read; the
Ascend engines' profiles run nothing on the NVIDIA machines of the catalog (kept for validation), so a
plan there says no engine runs it, `--engine X` there is refused (exit 2, naming the machine and the
fix) and `--emit X` writes nothing.
"""

from __future__ import annotations

import pytest

from planner.engines.profiles import ENGINES, engine_refusal, load_profile, machine_refusal, plan_problems
from planner.specs.catalog import load_hardware, load_model, load_plan
from tests.conftest import PLANS, run_cli

NVIDIA = ("h100", "h200", "h800")
ASCEND = ("a2", "a3", "cm384")


@pytest.mark.parametrize("engine", ENGINES)
def test_every_profile_names_its_devices_and_where_they_were_read(engine):
    cap = load_profile(engine).capabilities
    assert cap.devices and all(d.startswith("Ascend ") for d in cap.devices)
    assert cap.devices_source.strip()


@pytest.mark.parametrize("engine", ENGINES)
def test_ascend_engines_run_on_the_ascend_machines_and_not_on_gpus(engine):
    profile = load_profile(engine)
    for name in ASCEND:
        assert machine_refusal(profile, load_hardware(name)) is None
    for name in NVIDIA:
        hw = load_hardware(name)
        why = machine_refusal(profile, hw)
        assert why is not None and hw.device_name in why and profile.label in why


def test_the_950_parts_follow_what_each_release_names():
    for name in ("atlas950", "atlas350"):
        hw = load_hardware(name)
        assert machine_refusal(load_profile("vllm-ascend"), hw) is None  # A5 in check_ascend_device_type
        assert machine_refusal(load_profile("sglang"), hw) is None  # MXFP4 experts for Ascend A5
        assert machine_refusal(load_profile("mindie"), hw) is not None  # its hardware list stops at A3


def test_engine_refusal_names_the_quantization_the_profile_writes():
    hw = load_hardware("atlas950")
    why = engine_refusal("sglang", [hw], "fp8")
    assert why is not None and "'fp8'" in why and "a8w8c16" in why
    assert engine_refusal("sglang", [hw], "bf16") is None


def test_a_gpu_plan_is_one_no_engine_runs():
    plan, _ = load_plan(str(PLANS / "inferencex-h200-tp8-c8.yaml"))
    model = load_model(plan.model)
    hw = load_hardware(plan.hardware)
    for engine in ENGINES:
        problems = plan_problems(plan, hw, engine, model.moe.routed_experts, True)
        assert problems[0].startswith("hardware: ") and "NVIDIA H200" in problems[0]


def test_engine_on_a_gpu_machine_is_refused_with_exit_2(tmp_path):
    out = tmp_path / "launch"
    r = run_cli(
        "plan", "--hardware", "h200", "--model", "deepseek-r1", "--max-cards", "16", "--emit", "mindie", str(out)
    )
    assert r.exit_code == 2
    assert "--engine mindie" in r.output and "NVIDIA H200 SXM" in r.output and "--engine none" in r.output
    assert not out.exists()
    r = run_cli("plan", "--hardware", "h100", "--model", "deepseek-r1", "--max-cards", "16", "--engine", "sglang")
    assert r.exit_code == 2 and "NVIDIA H100 SXM" in r.output


def test_engine_that_writes_no_launch_in_this_format_is_refused_with_exit_2():
    r = run_cli(
        "plan", "--hardware", "atlas950", "--model", "deepseek-v4-flash", "--max-cards", "16", "--engine", "sglang"
    )
    assert r.exit_code == 2
    assert "'fp8'" in r.output and "--quantization" in r.output


def test_auto_on_a_gpu_machine_lists_the_free_plans_with_each_engine_s_reason():
    r = run_cli("plan", "--hardware", "h200", "--model", "deepseek-r1", "--max-cards", "16", "--top", "1")
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    for engine in ENGINES:
        assert f"{engine}: {load_profile(engine).label} runs on" in flat
    assert "beyond the engines" not in flat  # every plan listed is beyond them; the lines say why
    assert "runs on: none of" in flat and "the list is the free search's" in flat


def test_a_pinned_size_no_engine_runs_is_infeasible_under_auto_and_names_the_pin():
    # before: --decode-devices 33 listed 33-device decode instances no engine runs, "runs on" empty, a
    # "beyond the engines" line beside them and exit 0
    for budget in ("64", "48"):  # at 48 it named a budget (49 cards) at which no engine runs the pin either
        r = run_cli("plan", "--decode-devices", "33", "--max-cards", budget, "--top", "1")
        assert r.exit_code == 1, r.output
        flat = " ".join(r.output.split())
        assert "no serving engine runs --decode-devices 33" in flat, flat
        assert "33 devices over 8-device nodes needs whole nodes" in flat and "--max-cards" not in flat
    r = run_cli("plan", "--decode-devices", "33", "--max-cards", "64", "--top", "1", "--engine", "sglang")
    assert r.exit_code == 1 and "--decode-devices 33" in r.output and "whole nodes" in r.output
    r = run_cli("plan", "--decode-devices", "33", "--max-cards", "64", "--top", "1", "--engine", "none")
    assert r.exit_code == 0, r.output
