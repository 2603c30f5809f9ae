"""Engine profiles: the data files load, every entry names its source, and the checks name fields."""

from __future__ import annotations

import pytest

from planner.candidates.space import SpaceLimits, size_options
from planner.engines.profiles import ENGINES, combo_ok, engine_name, load_profile, plan_problems
from planner.errors import BadInputError
from planner.specs.catalog import load_hardware, load_model, load_plan
from tests.conftest import PLANS


@pytest.mark.parametrize("engine", ENGINES)
def test_profile_loads_with_a_source_for_every_flag(engine):
    p = load_profile(engine)
    assert p.release and p.read_from
    for spec in (p.server, p.router):
        for name, flag in spec.flags.items():
            assert name.startswith("--") and flag.source.strip()


def test_engine_names_are_checked():
    assert engine_name("VLLM_Ascend") == "vllm-ascend"
    with pytest.raises(BadInputError, match="vllm-ascend, sglang, mindie"):
        engine_name("trt-llm")


def _problems(name: str, engine: str) -> list[str]:
    plan, _ = load_plan(str(PLANS / name))
    model = load_model(plan.model)
    return plan_problems(plan, load_hardware(plan.hardware), engine, model.moe.routed_experts, True)


def test_published_plans_against_the_engines():
    # A2-D70: DP32 attention with dense FFN / LM head DP4xTP8 (finegrained TP over DP ranks)
    assert _problems("a2-d70.yaml", "vllm-ascend") == []
    assert any(p.startswith("decode.lm_head") for p in _problems("a2-d70.yaml", "sglang"))
    # CM-D: 32 dedicated shared-expert dies; only MindIE runs external shared experts, on CM384
    assert any(p.startswith("decode.shared_expert") for p in _problems("cm-d.yaml", "vllm-ascend"))
    assert not any("shared_expert" in p for p in _problems("cm-d.yaml", "mindie"))
    # A2-P: the report's hybrid attention (pre DP, core TP16, post DP8xTP2) has no setting anywhere
    for engine in ENGINES:
        assert any(p.startswith("prefill.attention") for p in _problems("a2-p.yaml", engine))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_engine_search_space_holds_only_what_the_engine_runs(engine, phase):
    model, hw = load_model("deepseek-v3"), load_hardware("a2")
    free = size_options(model, hw, 32, phase, SpaceLimits(max_devices=64))
    opts = size_options(model, hw, 32, phase, SpaceLimits(max_devices=64, engine=engine))
    profile = load_profile(engine)
    assert all(not a.is_hybrid for a in opts.attention)
    # no engine runs dedicated shared-expert devices on a2; vLLM-Ascend splits it over the attention TP
    splits = {"replicated", "split"} if engine == "vllm-ascend" else {"replicated"}
    assert {o.shared.placement for o in opts.moe} == splits
    assert opts.moe[0].shared.placement == "replicated"
    for m, o in enumerate(opts.moe):
        if o.shared.placement == "split":  # only with the plain attention layouts of its TP
            paired = [att.tp for a, att in enumerate(opts.attention) if opts.combo_ok[a, :, m, :].any()]
            assert paired and set(paired) == {o.shared.tp}
    assert set(opts.prefill_micro_batches) == set(profile.capabilities.prefill_micro_batches)
    assert opts.combo_ok is not None and opts.combo_ok.any()
    for a, att in enumerate(opts.attention):
        for f, dense in enumerate(opts.dense_ffn):
            for h, head in enumerate(opts.lm_head):
                assert opts.combo_ok[a, f, 0, h] == combo_ok(profile, hw, 32, att, dense, head)
    assert opts.count <= free.count
