"""AFD candidates: the vectorised search finds what scoring every configuration one by one finds, and
every candidate evaluates to its own figures."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from planner.candidates.afd_candidates import AfdLimits, afd_candidates
from planner.candidates.space import SpaceLimits, attention_options, moe_options, parallel_options
from planner.candidates.tables import FRACTIONAL_BELOW, whole_sequences
from planner.costmodel.afd import afd_decode_step, afd_hbm
from planner.costmodel.context import CostContext
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import AfdPlan
from planner.specs.quantization import get_quantization
from planner.specs.workload import Workload


@pytest.fixture(scope="module")
def ctx() -> CostContext:
    return CostContext(
        load_model("deepseek-v2-lite"),
        load_hardware("a2"),
        get_quantization("a8w8c16"),
        Workload(input_tokens=2048, output_tokens=512),
    )


def _brute_force(ctx: CostContext, a: int, f: int, limits: AfdLimits) -> float:
    """Best output tokens/s per device of (a, f), every configuration scored by the cost model itself."""
    m, hw = ctx.model, ctx.hw
    best = 0.0
    space = SpaceLimits(max_devices=limits.max_devices)
    # every whole B, and below FRACTIONAL_BELOW every whole number of sequences per TP group of a power of two
    fractions = [j / tp for tp in (2, 4, 8, 16) for j in range(1, FRACTIONAL_BELOW * tp) if j % tp]
    b = np.union1d(np.arange(1, 600, dtype=float), fractions)
    for mb, k, dense_on, shared_on in itertools.product(
        limits.micro_batches, limits.mtp_tokens, limits.dense_sides, limits.shared_sides
    ):
        dense_devices = a if dense_on == "attention" else f
        for att, head, o, dense in itertools.product(
            attention_options(m, hw, a, "decode"),
            parallel_options(hw, a, None),
            moe_options(m, f, space),
            parallel_options(hw, dense_devices, m.dense_intermediate_size),
        ):
            if shared_on == "attention" and (o.shared.placement == "dedicated" or not m.moe.shared_experts):
                continue  # no shared expert to move
            if dense_on == "attention" and not m.num_dense_layers:
                continue  # no dense FFN to move
            section = AfdPlan(
                attention_devices=a,
                ffn_devices=f,
                micro_batches=mb,
                attention=att,
                lm_head=head,
                dense_ffn=dense,
                dense_ffn_on=dense_on,
                moe=o.moe,
                shared_expert=o.shared,
                shared_expert_on=shared_on,
                concurrency_per_device=mb,
                mtp_tokens=k,
            )
            bs = b[(b >= mb) & whole_sequences(b, att.tp)]
            step = afd_decode_step(ctx, section, bs)
            att_use, ffn_use = afd_hbm(ctx, section, bs)
            ok = att_use.fits & ffn_use.fits
            if limits.tpot_s is not None:
                ok &= step.tpot_s <= limits.tpot_s
            if limits.max_itl_s is not None:
                ok &= step.step_s <= limits.max_itl_s
            if ok.any():
                best = max(best, float(np.max(np.where(ok, step.tokens_per_s_per_device, 0.0))))
    return best


@pytest.mark.parametrize(
    ("a", "f", "extra"),
    [
        (8, 4, {"micro_batches": (2,), "dense_sides": ("ffn",), "shared_sides": ("ffn",)}),
        (4, 2, {"micro_batches": (1, 3), "dense_sides": ("attention",), "shared_sides": ("attention", "ffn")}),
    ],
)
def test_the_search_finds_what_scoring_every_configuration_finds(ctx, a, f, extra):
    limits = AfdLimits(max_devices=a + f, tpot_s=0.05, max_itl_s=0.15, keep=1, **extra)
    found = [
        c
        for c in afd_candidates(ctx, SpaceLimits(max_devices=a + f), limits)
        if c.section.attention_devices == a and c.section.ffn_devices == f
    ]
    assert found, "no candidate of the size"
    assert found[0].tokens_per_s_per_device == pytest.approx(_brute_force(ctx, a, f, limits), rel=1e-9)


def test_a_long_context_lands_between_whole_concurrencies_and_the_search_still_finds_the_best():
    """Qwen3-235B at 39K of context on 8 + 8 A2 dies, TPOT 50 ms: the best runs 13 sequences on each
    TP4 attention group (3.25 a die), between the whole values 3 and 4 a die."""
    long_ctx = CostContext(
        load_model("qwen3-235b-a22b"),
        load_hardware("a2"),
        get_quantization("a8w8c16"),
        Workload(input_tokens=39_000, output_tokens=1000),
    )
    limits = AfdLimits(max_devices=16, tpot_s=0.05, max_itl_s=0.3, keep=1)
    found = [c for c in afd_candidates(long_ctx, SpaceLimits(max_devices=16), limits) if c.section.ffn_devices == 8]
    best = found[0].section
    assert (best.concurrency_per_device, best.attention.tp) == (3.25, 4)
    assert whole_sequences(np.array([best.concurrency_per_device]), best.attention.tp)[0]
    assert found[0].tokens_per_s_per_device == pytest.approx(_brute_force(long_ctx, 8, 8, limits), rel=1e-9)


def test_every_candidate_evaluates_to_its_own_figures(ctx):
    limits = AfdLimits(max_devices=24, tpot_s=0.06, max_itl_s=0.2)
    cands = afd_candidates(ctx, SpaceLimits(max_devices=24), limits)
    assert len(cands) > 5
    for c in cands:
        step = afd_decode_step(ctx, c.section)
        att, ffn = afd_hbm(ctx, c.section)
        assert float(step.step_s[0]) == pytest.approx(c.step_s, rel=1e-12)
        assert float(att.total_bytes[0]) == pytest.approx(c.attention_hbm_bytes, rel=1e-12)
        assert float(ffn.total_bytes[0]) == pytest.approx(c.ffn_hbm_bytes, rel=1e-12)
        assert c.tpot_s <= 0.06 and c.step_s <= 0.2 and bool(att.fits[0]) and bool(ffn.fits[0])
        assert c.section.attention_devices % c.section.ffn_devices == 0


def test_an_engine_restricts_the_space_to_what_it_runs():
    model, hw = load_model("deepseek-v3.2"), load_hardware("a3")
    ctx = CostContext(model, hw, get_quantization("a8w8c16"), Workload(input_tokens=4096, output_tokens=1024))
    limits = AfdLimits(max_devices=96, tpot_s=0.1, max_itl_s=0.3, mtp_tokens=(0, 1), engine="vllm-ascend")
    cands = afd_candidates(ctx, SpaceLimits(max_devices=96), limits)
    assert cands
    for c in cands:
        s = c.section
        assert s.micro_batches in (1, 2) and s.mtp_tokens == 0
        assert s.dense_ffn_on == "ffn" and s.shared_expert_on == "ffn" and s.shared_expert.placement == "replicated"
    # SGLang's NPU AFD runs Qwen3-MoE only; MindIE none
    assert (
        afd_candidates(
            ctx, SpaceLimits(max_devices=96), AfdLimits(max_devices=96, tpot_s=0.1, max_itl_s=None, engine="sglang")
        )
        == []
    )
    assert (
        afd_candidates(
            ctx, SpaceLimits(max_devices=96), AfdLimits(max_devices=96, tpot_s=0.1, max_itl_s=None, engine="mindie")
        )
        == []
    )
