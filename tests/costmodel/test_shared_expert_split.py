"""The shared expert split over the attention TP group (vLLM's default with TP > 1 and EP)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from planner.candidates.phase_candidates import decode_candidates
from planner.candidates.space import SpaceLimits, size_options
from planner.candidates.tables import decode_tables, to_integer_tables
from planner.costmodel import comm
from planner.costmodel.context import CostContext
from planner.costmodel.memory import moe_hbm
from planner.costmodel.modules import BF16_BYTES, moe_cost
from planner.errors import BadInputError
from planner.search.oracle import best_phase_ratio
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.plan import MoELayout, SharedExpertLayout, Workload, check_phase
from planner.specs.quantization import get_quantization

ROOT = Path(__file__).resolve().parents[2]
REPLICATED = SharedExpertLayout()
SPLIT16 = SharedExpertLayout(placement="split", tp=16)


@pytest.fixture(scope="module")
def v3_ctx():
    return CostContext(
        load_model("deepseek-v3"),
        load_hardware("a3"),
        get_quantization("a8w8c16"),
        Workload(input_tokens=2048, output_tokens=1024),
    )


def test_a_split_shared_expert_holds_one_tp_th_of_its_weights(v3_ctx):
    moe = MoELayout(ep=16, slots_per_device=16)
    rep, _ = moe_hbm(v3_ctx, 16, moe, REPLICATED, np.array([8.0]))
    split, _ = moe_hbm(v3_ctx, 16, moe, SPLIT16, np.array([8.0]))
    m = v3_ctx.model
    whole = m.moe.shared_experts * m.shared_expert_params() * (m.num_moe_layers + m.mtp_layers)  # INT8: 1 byte
    assert float(rep["shared_expert_weights"][0]) == pytest.approx(whole)
    assert float(split["shared_expert_weights"][0]) == pytest.approx(whole / 16)
    # about 2.2 GiB a die less for DeepSeek-V3 W8A8 at TP16 (the figure the issue note gave)
    saved_gib = (rep["shared_expert_weights"][0] - split["shared_expert_weights"][0]) / 2**30
    assert 2.0 < saved_gib < 2.4
    assert split["routed_expert_weights"][0] == rep["routed_expert_weights"][0]


def test_split_reads_fewer_weights_and_pays_an_all_reduce(v3_ctx):
    moe = MoELayout(ep=16, slots_per_device=16)
    t = np.array([1.0, 4096.0])
    rep = moe_cost(v3_ctx, 16, moe, REPLICATED, t, False)
    split = moe_cost(v3_ctx, 16, moe, SPLIT16, t, False)
    # one token a die: weight reads bound the shared expert, 1/16 of them split
    assert split.shared_s[0] < rep.shared_s[0] / 8
    # 4,096 tokens a die: the same FLOPs a die either way (split runs 16x the tokens on 1/16 of the weights)
    assert split.shared_s[1] == pytest.approx(rep.shared_s[1], rel=0.02)
    # the partial outputs of the group's tokens are all-reduced over the TP group, on top of dispatch/combine
    reduce = comm.allreduce_s(v3_ctx.hw, 16, t * 16 * v3_ctx.model.hidden_size * BF16_BYTES)
    np.testing.assert_allclose(split.comm_s, rep.comm_s + reduce, rtol=1e-12)
    np.testing.assert_allclose(split.compute_s - split.shared_s, rep.compute_s - rep.shared_s, rtol=1e-12)


def test_split_does_not_overlap_dispatch_even_on_an_overlapping_stack(v3_ctx):
    moe = MoELayout(ep=16, slots_per_device=16)
    t = np.array([16.0])
    split = moe_cost(v3_ctx, 16, moe, SPLIT16, t, True)
    assert split.compute_s[0] == pytest.approx(split.router_s[0] + split.experts_s[0] + split.shared_s[0])
    rep = moe_cost(v3_ctx, 16, moe, REPLICATED, t, True)
    assert rep.compute_s[0] == pytest.approx(rep.router_s[0] + rep.experts_s[0])


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"placement": "split"}, "needs tp >= 2"),
        ({"placement": "split", "tp": 8, "devices": 2}, "takes no devices"),
        ({"placement": "replicated", "tp": 4}, "only a split shared expert takes tp"),
    ],
)
def test_the_layout_refuses_what_split_cannot_mean(layout, message):
    with pytest.raises(ValueError, match=message):
        SharedExpertLayout(**layout)


def _kimi_phase(tmp_path: Path, shared: str, attention: str = "{dp: 1, tp: 16}"):
    text = (ROOT / "plans/a3-vllm-ascend-kimi-k2-thinking-tp16-d.yaml").read_text()
    text = text.replace("shared_expert: {placement: split, tp: 16}", f"shared_expert: {shared}")
    text = text.replace("attention: {dp: 1, tp: 16}", f"attention: {attention}")
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


def test_a_split_over_another_tp_than_the_attention_is_refused_naming_the_fix(tmp_path):
    path = _kimi_phase(tmp_path, "{placement: split, tp: 8}")
    plan, _ = load_plan(str(path))
    with pytest.raises(BadInputError, match=r"decode\.shared_expert: split over tp = 8 .*attention TP 16"):
        check_phase("decode", plan.decode, load_model("kimi-k2"), load_hardware("a3"))


def test_a_split_needs_a_model_with_a_shared_expert():
    model = load_model("qwen3-235b-a22b")
    assert model.moe is not None and not model.moe.shared_experts
    from planner.specs.plan import AttentionLayout, PhasePlan

    phase = PhasePlan(
        devices=16,
        attention=AttentionLayout(dp=4, tp=4),
        moe=MoELayout(ep=16, slots_per_device=8),
        shared_expert=SharedExpertLayout(placement="split", tp=4),
    )
    with pytest.raises(BadInputError, match="has no shared expert; use placement: replicated"):
        check_phase("decode", phase, model, load_hardware("a3"))


def test_the_search_offers_a_split_per_attention_tp_and_pairs_it_with_that_tp_only(v3_ctx):
    opts = size_options(v3_ctx.model, v3_ctx.hw, 16, "decode", SpaceLimits(max_devices=64))
    tps = {a.tp for a in opts.attention if a.tp > 1}
    assert {o.shared.tp for o in opts.moe if o.shared.placement == "split"} == tps
    assert opts.combo_ok is not None and opts.combo_split_only
    for m, o in enumerate(opts.moe):
        for a, att in enumerate(opts.attention):
            runs = bool(opts.combo_ok[a, :, m, :].all())
            assert runs == (o.shared.placement != "split" or att.tp == o.shared.tp)
            assert runs == bool(opts.combo_ok[a, :, m, :].any())


def test_a_model_without_a_shared_expert_gets_no_split_and_no_mask():
    model, hw = load_model("qwen3-235b-a22b"), load_hardware("a3")
    opts = size_options(model, hw, 16, "decode", SpaceLimits(max_devices=64))
    assert all(o.shared.placement == "replicated" for o in opts.moe)
    assert opts.combo_ok is None


def test_the_search_never_pairs_a_split_with_another_tp(v3_ctx):
    """Make the split over TP2 nearly free and every attention TP2 layout dear: the best
    combination must still pair the split with TP2 (or take another option), as the exhaustive
    oracle that honours the pairing finds."""
    opts = size_options(v3_ctx.model, v3_ctx.hw, 16, "decode", SpaceLimits(max_devices=64))
    t = decode_tables(v3_ctx, opts, [0], np.arange(1, 33) * 4)
    ints = to_integer_tables(t, v3_ctx.hw.hbm_bytes)
    split2 = [m for m, o in enumerate(opts.moe) if o.shared.placement == "split" and o.shared.tp == 2]
    tp2 = [a for a, att in enumerate(opts.attention) if att.tp == 2]
    assert split2 and tp2
    for m in split2:
        ints.time_us["moe"][m] = 1
        ints.hbm_mib["moe"][m] = 0
    for a in tp2:
        ints.time_us["attention"][a] += 10**6
    best = decode_candidates(t, ints, None, keep=1)
    oracle = best_phase_ratio(t, ints, None)
    assert Fraction(best[0].num, best[0].den) == oracle
    a, _, m, _ = best[0].option_index
    chosen = opts.moe[m].shared
    assert chosen.placement != "split" or opts.attention[a].tp == chosen.tp
