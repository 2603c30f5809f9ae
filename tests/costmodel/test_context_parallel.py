"""Context-parallel prefill: each prompt split over the attention ranks, which gather each other's KV
entries before every attention layer; a prompt alone on an instance with and without it; what moeplan
refuses of it by name."""

from __future__ import annotations

import pytest

from planner.costmodel.comm import allgather_s
from planner.costmodel.context import CostContext
from planner.costmodel.prefill import (
    context_parallel_exchange_s,
    kv_transfer_s,
    prefill_forward,
    prompt_alone_s,
)
from planner.engines.profiles import plan_problems
from planner.errors import BadInputError
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.plan import AttentionLayout, MoELayout, ParallelLayout, PrefillPlan, check_context_parallel
from planner.specs.quantization import get_quantization
from planner.specs.workload import Workload

PROMPT = 32768


def _prefill(dp: int, tp: int, batch_tokens: int, context_parallel: bool) -> PrefillPlan:
    n = dp * tp
    return PrefillPlan(
        devices=n,
        attention=AttentionLayout(dp=dp, tp=tp),
        dense_ffn=ParallelLayout(dp=dp, tp=tp),
        moe=MoELayout(ep=n, slots_per_device=-(-256 // n)),
        lm_head=ParallelLayout(dp=dp, tp=tp),
        batch_tokens=batch_tokens,
        context_parallel=context_parallel,
    )


def _ctx(model: str = "deepseek-r1", hardware: str = "a3") -> CostContext:
    w = Workload(input_tokens=PROMPT, output_tokens=1024)
    return CostContext(load_model(model), load_hardware(hardware), get_quantization("a8w8c16"), w)


def test_the_exchange_is_an_allgather_of_the_latent_per_layer():
    """R1's MLA keeps 576 16-bit entries a token a layer on every device of a rank; two ranks of TP8 each
    contribute an eighth of their half of the batch to an AllGather over their 16 devices, 61 times."""
    ctx = _ctx()
    got = float(context_parallel_exchange_s(ctx, _prefill(2, 8, PROMPT, True), PROMPT))
    shard = PROMPT / 2 * 576 * 2 / 8
    assert got == pytest.approx(61 * float(allgather_s(ctx.hw, 16, shard)), rel=1e-9)
    assert float(context_parallel_exchange_s(ctx, _prefill(2, 8, PROMPT, False), PROMPT)) == 0.0


def test_the_exchange_grows_with_the_batch_and_the_span():
    ctx = _ctx()
    one = context_parallel_exchange_s(ctx, _prefill(2, 8, PROMPT, True), [PROMPT, 4 * PROMPT])
    assert one[1] > 3 * one[0]
    # 4 ranks of TP8 span two 16-die A3 nodes: a device receives more, partly over the slower level
    four = float(context_parallel_exchange_s(ctx, _prefill(4, 8, PROMPT, True), PROMPT))
    assert four > one[0]


def test_a_prompt_alone_gains_from_context_parallelism_where_attention_dominates():
    """Without it the prompt's rank computes the attention while the other rank idles; split over both, the
    attention halves and the experts' compute stays: the gain grows with the prompt (attention is
    quadratic), and never reaches half."""
    ratios = []
    for prompt in (8192, 32768, 131072):
        w = Workload(input_tokens=prompt, output_tokens=1024)
        ctx = CostContext(load_model("deepseek-r1"), load_hardware("a3"), get_quantization("a8w8c16"), w)
        whole = prompt_alone_s(ctx, _prefill(2, 8, 2 * prompt, False))
        split = prompt_alone_s(ctx, _prefill(2, 8, 2 * prompt, True))
        ratios.append(split / whole)
    assert 0.5 < ratios[2] < ratios[1] < ratios[0] < 1.0


def test_a_prompt_alone_on_one_rank_is_its_forward():
    ctx = _ctx()
    phase = _prefill(1, 16, PROMPT, False)
    alone = prompt_alone_s(ctx, phase)
    assert alone == pytest.approx(float(prefill_forward(ctx, phase).forward_s[0]) + kv_transfer_s(ctx), rel=1e-12)


def test_a_prompt_alone_spans_its_rank_forwards():
    """A 32K prompt over an 8K budget a rank takes 4 forwards of 8K, each attending like the whole prompt."""
    ctx = _ctx()
    phase = _prefill(2, 8, 16384, False)
    even = prefill_forward(ctx, phase, [16384, 8192])
    rest = float(even.forward_s[0] - even.breakdown_s["moe"][0] + even.breakdown_s["moe"][1])
    assert prompt_alone_s(ctx, phase) == pytest.approx(4 * rest + kv_transfer_s(ctx), rel=1e-12)


def test_context_parallelism_needs_ranks():
    with pytest.raises(ValueError, match="attention.dp is 1"):
        _prefill(1, 16, PROMPT, True)


@pytest.mark.parametrize("model", ["qwen3.5-397b-a17b", "deepseek-v4-flash"])
def test_layers_moeplan_cannot_split_are_refused_by_name(model):
    with pytest.raises(BadInputError, match=r"prefill.context_parallel: model .* attention layers"):
        check_context_parallel(load_model(model))
    check_context_parallel(load_model("deepseek-v3.2"))
    check_context_parallel(load_model("qwen3-235b-a22b"))


@pytest.mark.parametrize(
    ("engine", "reason"),
    [("vllm-ascend", "v0.23.0 was the last release"), ("sglang", "Prefill CP on HIP/NPU/MUSA is deprecated")],
)
def test_exports_refuse_it_with_the_engine_reason(engine, reason):
    plan, _ = load_plan("a3-vllm-cp-r1-p-32k-pcp2")
    problems = plan_problems(plan, load_hardware("a3"), engine, 256, True)
    assert any(p.startswith("prefill.context_parallel:") and reason in p for p in problems), problems


def test_the_guide_s_context_parallel_ratios_are_held_out_and_the_long_ones_land():
    """vllm-ascend's Context Parallel guide (8ed87dfa84): R1's TTFT with PCP2 over without, 0.85 / 0.70 / 0.63 at
    32K / 64K / 128K, and Qwen3-235B's 0.59 / 0.68 / 0.67 at 32K / 64K / 120K (past 32K with YaRN,
    qwen3-235b-a22b-yarn). Held out (no factor is fitted on them); 64K and longer within their 15% tolerance, R1's
    gain growing with the prompt as measured. (32K R1 and Qwen3-235B miss by more than 15%, in opposite
    directions: docs/fidelity.md.)"""
    from planner.costmodel.reference import evaluate_row
    from planner.costmodel.store_fit import all_figures

    rows = {f.id: f for f, _ in all_figures() if f.id.startswith("vllm-ascend-CP") and "PCP2" in f.id}
    assert sorted(rows) == [
        "vllm-ascend-CP Qwen3-235B PCP2 120K",
        "vllm-ascend-CP Qwen3-235B PCP2 32K",
        "vllm-ascend-CP Qwen3-235B PCP2 64K",
        "vllm-ascend-CP R1 PCP2 128K",
        "vllm-ascend-CP R1 PCP2 32K",
        "vllm-ascend-CP R1 PCP2 64K",
    ]
    assert all(f.role == "holdout" and f.metric == "prefill.prompt_alone_ms" for f in rows.values())
    got = {k: evaluate_row(f).predicted for k, f in rows.items()}
    for row_id in (
        "vllm-ascend-CP R1 PCP2 64K",
        "vllm-ascend-CP R1 PCP2 128K",
        "vllm-ascend-CP Qwen3-235B PCP2 64K",
        "vllm-ascend-CP Qwen3-235B PCP2 120K",
    ):
        assert got[row_id] == pytest.approx(rows[row_id].published, rel=rows[row_id].figure.tolerance)
    r1 = [got[f"vllm-ascend-CP R1 PCP2 {length}"] for length in ("32K", "64K", "128K")]
    assert 0.5 < r1[2] < r1[1] < r1[0] < 1.0


def test_one_128k_prompt_alone_on_an_a3_node_lands_held_out():
    """vllm-ascend's single-node long-sequence tutorial: Qwen3-235B W8A8 with YaRN, TP8 x PCP2 on 16 A3 dies, one
    131,072-token prompt alone: TTFT 17.36 s. Held out, an absolute time at a known concurrency: within 15%."""
    from planner.costmodel.reference import evaluate_row
    from planner.costmodel.store_fit import all_figures

    (row,) = [f for f, _ in all_figures() if f.id == "vllm-ascend-longseq Qwen3-235B YaRN PCP2 128K"]
    assert row.role == "holdout" and row.published == 17360.0
    assert evaluate_row(row).predicted == pytest.approx(17360.0, rel=0.15)
