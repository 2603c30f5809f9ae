"""Decode micro-batch overlap (two-batch overlap): its gain, its costs, the plan field and the search."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from planner.candidates.phase_candidates import decode_candidates, decode_micro_batch_factor
from planner.candidates.space import MoEOption, SizeOptions
from planner.candidates.tables import decode_tables, to_integer_tables
from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import load_plan_specs
from planner.search.plan_search import run_search
from planner.search.request import PlanRequest
from planner.specs.catalog import catalog_dir, load_plan
from planner.specs.plan import SLO, DecodePlan


def _ctx(name: str):
    plan, _ = load_plan(name)
    specs = load_plan_specs(plan, catalog_dir("plans"))
    return plan, CostContext(specs.model, specs.hw, specs.quant, plan.workload)


def test_plan_field_takes_one_or_two():
    plan, _ = load_plan("sglang-h100-d")
    assert plan.decode is not None and plan.decode.micro_batches == 2
    data = plan.decode.model_dump()
    for bad in (0, 3):
        with pytest.raises(ValidationError):
            DecodePlan(**{**data, "micro_batches": bad})
    with pytest.raises(ValidationError):
        DecodePlan(**{**data, "micro_batches": 2, "concurrency_per_device": 1})


def test_overlap_pays_at_large_batches_and_costs_at_small_ones():
    plan, ctx = _ctx("sglang-h100-d")
    assert plan.decode is not None
    two = plan.decode
    one = two.model_copy(update={"micro_batches": 1})
    b = np.array([8.0, 256.0])
    s1, s2 = decode_step(ctx, one, b), decode_step(ctx, two, b)
    # SGLang: -27% at 32 tokens per device, +25.5% at 256 (LMSYS blog 2025-05-05): same signs
    assert s2.tokens_per_s_per_device[0] < s1.tokens_per_s_per_device[0]
    assert s2.tokens_per_s_per_device[1] > 1.1 * s1.tokens_per_s_per_device[1]
    assert np.all(s2.breakdown_s["micro_batch_overlap"] < 0)
    # the real costs: launches paid twice, weights read twice
    assert s2.breakdown_s["launch_overhead"][0] == pytest.approx(2 * s1.breakdown_s["launch_overhead"][0])
    assert s2.breakdown_s["moe"][0] > s1.breakdown_s["moe"][0]


def test_hidden_part_is_bounded_by_the_communication():
    plan, ctx = _ctx("sglang-h100-d")
    assert plan.decode is not None
    s = decode_step(ctx, plan.decode)
    comm = s.breakdown_s["attention_comm"] + s.breakdown_s["dense_ffn_comm"] + s.breakdown_s["moe_comm"]
    assert -s.breakdown_s["micro_batch_overlap"][0] <= comm[0]


def test_search_tables_agree_with_the_evaluation():
    plan, ctx = _ctx("sglang-h100-d")
    d = plan.decode
    assert d is not None and d.moe is not None
    opts = SizeOptions(
        devices=d.devices,
        attention=[d.attention],
        dense_ffn=[d.dense_layout],
        moe=[MoEOption(d.moe, d.shared_expert)],
        lm_head=[d.lm_head_layout],
    )
    xs = np.array([d.concurrency_per_device])
    t = decode_tables(ctx, opts, [0], xs, 2)
    ints = to_integer_tables(t, ctx.hw.hbm_bytes)
    factor = decode_micro_batch_factor(ctx.model.num_layers, ctx.hw.overlap.decode_micro_batch_efficiency.value)
    (cand,) = decode_candidates(t, ints, None, 1, overlap_factor=factor)
    assert cand.micro_batches == 2
    step_us = decode_step(ctx, d).step_s[0] * 1e6
    # integers round up: never shorter than the float step, and within a few microseconds per module
    assert step_us <= cand.time_us <= step_us + 20


def test_engine_without_overlap_gets_no_micro_batched_plan():
    base = PlanRequest(
        hardware="cm384",
        model="deepseek-r1",
        phase="decode",
        decode_devices=288,
        max_cards=144,
        slo=SLO(tpot_ms=50),
        top=3,
        colocated=False,
    )
    with_overlap = run_search(base)
    without = run_search(PlanRequest(**{**base.__dict__, "decode_micro_batches": (1,)}))
    assert all(p.decode is not None and p.decode.micro_batches == 1 for p in without.plans)
    best_with = with_overlap.plans[0].predicted["decode"]["tokens_per_s_per_card"]
    best_without = without.plans[0].predicted["decode"]["tokens_per_s_per_card"]
    assert best_with >= best_without


def test_colocated_section_carries_decode_micro_batches():
    from planner.costmodel.evaluate import evaluate_plan
    from planner.specs.files import validate_model
    from planner.specs.plan import Plan

    section = {
        "devices": 24,
        "instances": 1,
        "attention": {"dp": 24, "tp": 1},
        "dense_ffn": {"dp": 12, "tp": 2},
        "moe": {"ep": 24, "slots_per_device": 11, "comm": "allgather"},
        "lm_head": {"dp": 12, "tp": 2},
        "concurrency_per_device": 40,
        "mtp_tokens": 1,
        "prefill_batch_tokens": 65536,
    }
    head = {"model": "deepseek-v3", "hardware": "a2", "workload": {"input_tokens": 2048, "output_tokens": 2048}}
    one = validate_model(Plan, dict(head, schema_version=2, colocated=section), "p.yaml", "plan")
    two = validate_model(
        Plan, dict(head, schema_version=2, colocated=dict(section, decode_micro_batches=2)), "p.yaml", "plan"
    )
    assert one.decode_phase.micro_batches == 1 and two.decode_phase.micro_batches == 2
    d1 = evaluate_plan(one).decode
    d2 = evaluate_plan(two).decode
    assert d1 is not None and d2 is not None
    assert "micro_batch_overlap" in d2.breakdown_ms and "micro_batch_overlap" not in d1.breakdown_ms
    with pytest.raises(Exception, match="decode_micro_batches"):
        validate_model(
            Plan,
            dict(head, schema_version=2, colocated=dict(section, decode_micro_batches=2, concurrency_per_device=1)),
            "p.yaml",
            "plan",
        )


def test_cli_flag_switches_the_capability_off():
    import json

    from tests.conftest import run_cli

    base = ("plan", "--phase", "decode", "--decode-devices", "32", "--top", "3", "--engine", "none", "--json", "-")
    on, off = run_cli(*base), run_cli(*base, "--no-decode-microbatch")
    assert on.exit_code == 0 and off.exit_code == 0, (on.output, off.output)
    mbs_on = {p["decode"].get("micro_batches", 1) for p in json.loads(on.output)["plans"]}
    mbs_off = {p["decode"].get("micro_batches", 1) for p in json.loads(off.output)["plans"]}
    assert mbs_off == {1}
    assert 2 in mbs_on  # on A2 at TPOT 100 ms the overlap pays (88 sequences per card, see README)


def test_engine_profiles_declare_decode_micro_batches():
    from planner.engines.profiles import decode_micro_batches, load_profile, plan_problems
    from planner.specs.catalog import load_hardware

    assert decode_micro_batches(load_profile("sglang")) == (1, 2)
    assert decode_micro_batches(load_profile("vllm-ascend")) == (1,)
    plan, _ = load_plan("cm-d")
    assert plan.decode is not None
    two = plan.model_copy(update={"decode": plan.decode.model_copy(update={"micro_batches": 2})})
    hw = load_hardware(plan.hardware)
    problems = plan_problems(two, hw, "vllm-ascend", 256, True)
    assert any("decode.micro_batches" in p for p in problems)
    assert not any("decode.micro_batches" in p for p in plan_problems(plan, hw, "vllm-ascend", 256, True))
