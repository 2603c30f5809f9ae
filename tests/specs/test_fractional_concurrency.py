"""Fewer sequences than devices in an attention TP group: a plan may state a concurrency per device
below one (one sequence on a TP16 group is 1/16 = 0.0625), as long as every TP group holds a whole
number of sequences; evaluate, the bindings, the launch files and the simulator count whole sequences."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs, plan_cost_context, plan_with_prediction
from planner.engines.plan_view import decode_slots
from planner.errors import BadInputError
from planner.ranking.binding import decode_binding
from planner.report.launch import emit
from planner.specs.files import validate_model
from planner.specs.plan import SLO, Plan, check_whole_sequences, fits_micro_batches, sequences_on
from tests.conftest import run_cli


def _plan_dict(concurrency: float, tp: int = 16, micro_batches: int = 1) -> dict:
    return {
        "schema_version": 2,
        "model": "deepseek-v3",
        "hardware": "a3",
        "quantization": "a8w8c16",
        "workload": {"input_tokens": 1024, "output_tokens": 1024},
        "decode": {
            "devices": 16,
            "attention": {"dp": 16 // tp, "tp": tp},
            "dense_ffn": {"dp": 16 // tp, "tp": tp},
            "lm_head": {"dp": 16 // tp, "tp": tp},
            "moe": {"ep": 16, "slots_per_device": 16, "comm": "alltoall"},
            "concurrency_per_device": concurrency,
            "micro_batches": micro_batches,
        },
    }


def _plan(concurrency: float, **kw) -> Plan:
    return validate_model(Plan, _plan_dict(concurrency, **kw), "plan.yaml", "plan")


@pytest.mark.parametrize(("given", "seqs_per_group"), [(0.0625, 1), (0.125, 2), (0.5, 8), (1.5, 24), (3, 48)])
def test_whole_sequences_per_tp_group_validate(given, seqs_per_group):
    plan = _plan(given)
    assert plan.decode.concurrency_per_device == given
    assert sequences_on(plan.decode.concurrency_per_device, 16) == seqs_per_group
    assert decode_slots(plan) == seqs_per_group  # one instance of one TP16 group


def test_an_integral_float_is_the_integer():
    plan = _plan(2.0)
    assert plan.decode.concurrency_per_device == 2 and isinstance(plan.decode.concurrency_per_device, int)


@pytest.mark.parametrize(("given", "tp", "seqs"), [(0.1, 16, "1.6"), (0.5, 1, "0.5"), (0.3, 4, "1.2")])
def test_a_fraction_of_a_sequence_is_refused_naming_the_step(given, tp, seqs):
    with pytest.raises(BadInputError) as err:
        _plan(given, tp=tp)
    text = str(err.value)
    assert "concurrency_per_device" in text and f"puts {seqs} sequences" in text
    assert f"1/{tp}" in text


def test_zero_and_negative_are_refused():
    for bad in (0, -0.0625):
        with pytest.raises(BadInputError, match="concurrency_per_device"):
            _plan(bad)


def test_micro_batches_need_a_sequence_per_device():
    assert fits_micro_batches(1, 0.0625) and fits_micro_batches(2, 2) and not fits_micro_batches(2, 1.5)
    with pytest.raises(BadInputError, match="micro_batches cannot exceed"):
        _plan(0.5, micro_batches=2)
    check_whole_sequences("x", 0.25, 4)  # one sequence on TP4: no error


def test_the_step_grows_with_sequences_below_one_per_device():
    plan = _plan(0.0625)
    specs = load_plan_specs(plan)
    ctx = plan_cost_context(plan, specs)
    step = decode_step(ctx, plan.decode, np.array([1, 2, 4, 8, 16]) / 16).step_s
    assert np.all(np.diff(step) > 0)
    pred = evaluate_plan(plan, specs=specs)
    assert pred.decode.sequences_per_instance == 1
    assert pred.decode.tpot_ms == pytest.approx(float(step[0]) * 1e3, rel=1e-3)


def test_binding_steps_one_sequence_per_tp_group():
    plan = _plan(0.125).model_copy(update={"slo": SLO(tpot_ms=1000)})
    specs = load_plan_specs(plan)
    plan = plan_with_prediction(plan, evaluate_plan(plan, specs=specs))
    binding = decode_binding(plan_cost_context(plan, specs), plan.decode, 1000.0)
    assert binding.constraint == "none"
    assert binding.figures["next_tpot_ms"] > plan.predicted["decode"]["tpot_ms"]
    assert "0.1875 sequences per device" in binding.message  # 3 sequences on the TP16 group


def test_launch_files_hold_whole_sequences(tmp_path):
    plan = _plan(0.5)
    specs = load_plan_specs(plan)
    plan = plan_with_prediction(plan, evaluate_plan(plan, specs=specs))
    emit("vllm-ascend", plan, specs.model, specs.hw, tmp_path / "v")
    argv = json.loads((tmp_path / "v" / "launch.json").read_text())["processes"][0]["argv"]
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    emit("sglang", plan, specs.model, specs.hw, tmp_path / "s")
    argv = json.loads((tmp_path / "s" / "launch.json").read_text())["processes"][0]["argv"]
    assert argv[argv.index("--max-running-requests") + 1] == "8"


def test_cli_evaluates_and_refuses(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(_plan_dict(0.0625)))
    result = run_cli("evaluate", str(good), "--json", "-")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["decode"]["concurrency_per_device"] == 0.0625
    assert data["predicted"]["decode"]["sequences_per_instance"] == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_plan_dict(0.1)))
    result = run_cli("evaluate", str(bad))
    assert result.exit_code == 2
    assert "concurrency_per_device = 0.1" in result.output and "Traceback" not in result.output
