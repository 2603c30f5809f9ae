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
    # A2-D70: DP32 attention with dense FFN / LM head DP4xTP8 (finegrained TP over DP ranks); the report's
    # embedding DP4xTP8 is the one thing vllm-ascend cannot say (its embedding TP needs the recompute scheduler)
    assert [p.split(":")[0] for p in _problems("a2-d70.yaml", "vllm-ascend")] == ["decode.embedding"]
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


def test_mindie_refuses_a_prefill_batch_whose_rank_shares_are_below_a_prompt():
    """MindIE without SplitFuse prefills a prompt whole on its attention DP rank (its loader refuses
    maxPrefillTokens below maxInputTokenLen, its scheduler takes a waiting prompt whole): a plan whose DP
    ranks' shares of the batch hold less than a prompt, costed as the prompt's forwards on its rank, is not
    what it runs; the engines that chunk prompts run it."""
    from planner.specs.plan import AttentionLayout

    plan, _ = load_plan("a2-p")
    hw = load_hardware(plan.hardware)
    model = load_model(plan.model)
    experts, dense = model.moe.routed_experts, model.num_dense_layers > 0
    prompt = plan.workload.input_tokens
    dp = plan.prefill.attention.dp * plan.prefill.attention.tp  # every device its own DP rank
    wide = plan.prefill.model_copy(update={"attention": AttentionLayout(dp=dp, tp=1)})
    for batch, spans in ((dp * prompt, False), (dp * prompt // 2, True)):
        p = plan.model_copy(update={"prefill": wide.model_copy(update={"batch_tokens": batch})})
        found = [m for m in plan_problems(p, hw, "mindie", experts, dense) if m.startswith("prefill.batch_tokens")]
        assert bool(found) == spans, found
        if spans:
            assert "prefills a prompt whole on its attention DP rank" in found[0]
            assert f"set prefill.batch_tokens to {dp * prompt} or more" in found[0]
        for other in ("vllm-ascend", "sglang"):
            assert not any(m.startswith("prefill.batch_tokens") for m in plan_problems(p, hw, other, experts, dense))


def test_mindies_search_keeps_to_batches_whose_rank_shares_hold_a_prompt():
    # 16K prompts on 48 A2 cards: SGLang meets a 2 s TTFT with prompts over several forwards
    # on its rank; MindIE prefills them whole, so its search finds no plan and names the TTFT it reaches
    import json

    from tests.conftest import run_cli

    args = ("plan", "--input-tokens", "16384", "--output-tokens", "1024", "--top", "1", "--json", "-")
    sglang = run_cli(*args, "--engine", "sglang")
    assert sglang.exit_code == 0, sglang.output
    notes = json.loads(sglang.output)["plans"][0]["predicted"]["notes"]
    assert any(n.startswith("prefill ranks") and "spans 3 forwards" in n for n in notes)
    refused = run_cli(*args[:-2], "--engine", "mindie")
    assert refused.exit_code == 1 and "TTFT: the lowest TTFT reachable" in refused.output
    r = run_cli(*args, "--engine", "mindie", "--ttft-ms", "3000")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)["plans"][0]
    share = plan["prefill"]["batch_tokens"] / plan["prefill"]["attention"]["dp"]
    assert share >= 16384 and not any(n.startswith("prefill ranks") for n in plan["predicted"]["notes"])
