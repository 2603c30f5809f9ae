"""A decode attention kernel that gives each (sequence, KV head) one core: the busiest core bounds the layer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import load_plan_specs
from planner.costmodel.kv_split import unsplit_kv_read_s
from planner.errors import BadInputError
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.quantization import get_quantization
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]
MINIMAX_A3_195K = REPO / "kept-aside/plans/a3-vllm-ascend-minimax-m25-tp16-190k-c4.yaml"
MINIMAX_A3_4K = REPO / "kept-aside/plans/a3-vllm-ascend-minimax-m25-tp16-4k-c16.yaml"
QWEN3_A3 = REPO / "plans/a3-vllm-ascend-qwen3-235b-bf16-d16.yaml"


def test_the_busiest_core_takes_its_pairs_at_one_cores_share_of_the_peak():
    a3 = load_hardware("a3")  # 24 cores, 1.6 TB/s
    per_core = 1.6e12 / 24
    got = unsplit_kv_read_s(a3, np.array([0.0, 4.0, 24.0, 25.0, 48.0]), 1.0, 1e9)
    np.testing.assert_allclose(got, np.array([0, 1, 1, 2, 2]) * 1e9 / per_core)
    # two KV heads a rank: twice the pairs
    np.testing.assert_allclose(
        unsplit_kv_read_s(a3, np.array([12.0, 13.0]), 2.0, 1e9), [1e9 / per_core, 2e9 / per_core]
    )


def _attention_s(path: Path, split: bool) -> float:
    plan = load_plan(str(path))[0].model_copy(update={"decode_attention_kv_split": split})
    specs = load_plan_specs(plan, path.parent)
    ctx = CostContext(
        specs.model,
        specs.hw,
        specs.quant,
        plan.workload,
        hbm_utilization=plan.hbm_utilization,
        decode_attention_kv_split=split,
    )
    assert plan.decode is not None
    return float(decode_step(ctx, plan.decode).breakdown_s["attention"][0])


def test_four_long_sequences_on_a_tp16_group_take_one_pair_per_core():
    plan, _ = load_plan(str(MINIMAX_A3_195K))
    assert plan.decode_attention_kv_split is False  # CANN 8.5.1 (the file says why)
    model = load_model("minimax-m2.5")
    ctx = CostContext(model, load_hardware("a3"), get_quantization("bf16"), plan.workload)
    # one (sequence, KV head) pair's K and V of one layer, at the mean context, bf16
    pair_bytes = ctx.mean_decode_context_tokens * 2 * model.attention.head_dim * 2
    one_core_s = model.num_layers * pair_bytes / (1.6e12 / 24)
    split, unsplit = _attention_s(MINIMAX_A3_195K, True), _attention_s(MINIMAX_A3_195K, False)
    assert unsplit >= one_core_s
    assert unsplit <= split + one_core_s  # the bound replaces the KV read; the projections are unchanged
    assert unsplit > 1.5 * split  # 4 of 24 cores busy: far slower than the roofline at any fitted rate


@pytest.mark.parametrize("path", [MINIMAX_A3_4K, QWEN3_A3], ids=["minimax-4k-16-pairs", "qwen3-32-pairs"])
def test_many_pairs_or_short_contexts_leave_the_roofline_in_charge(path):
    # 16 pairs at 4K, or 32 pairs a die at 3.5K: the busiest core's pairs take less than the whole KV at the
    # fitted KV-read rate, so the kernel's decomposition does not show
    assert _attention_s(path, False) == _attention_s(path, True)


def test_a_model_without_gqa_layers_is_refused_by_name():
    with pytest.raises(
        BadInputError, match="decode_attention_kv_split: false: model .deepseek-v3. has no GQA attention layer"
    ):
        CostContext(
            load_model("deepseek-v3"),
            load_hardware("a2"),
            get_quantization("a8w8c16"),
            load_plan("a2-d70")[0].workload,
            decode_attention_kv_split=False,
        )


def test_hardware_without_a_core_count_is_refused_by_name():
    with pytest.raises(BadInputError, match="gives no ai_cores_per_device"):
        CostContext(
            load_model("minimax-m2.5"),
            load_hardware("h200"),
            get_quantization("bf16"),
            load_plan(str(MINIMAX_A3_4K))[0].workload,
            decode_attention_kv_split=False,
        )


def test_evaluate_refuses_the_field_on_an_mla_plan_with_exit_2(tmp_path):
    text = (REPO / "plans/a2-d70.yaml").read_text()
    plan = tmp_path / "mla.yaml"
    plan.write_text(text + "\ndecode_attention_kv_split: false\n")
    result = run_cli("evaluate", str(plan))
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "decode_attention_kv_split: false: model 'deepseek-v3' has no GQA attention layer" in text
    assert "drop the field" in text
    assert "Traceback" not in result.output


def test_plan_searches_with_the_unsplit_kernel_and_exports_the_choice(tmp_path):
    common = [
        "plan",
        "--model",
        "minimax-m2.5",
        "--hardware",
        "a3",
        "--quantization",
        "bf16",
        "--phase",
        "decode",
        "--decode-devices",
        "16",
        "--max-cards",
        "8",
        "--input-tokens",
        "190000",
        "--output-tokens",
        "1000",
        "--tpot-ms",
        "1000",
        "--engine",
        "none",
        "--top",
        "1",
        "--time-limit",
        "600",
    ]
    out_split, out_unsplit = tmp_path / "split.json", tmp_path / "unsplit.json"
    r1 = run_cli(*common, "--json", str(out_split))
    r2 = run_cli(*common, "--no-decode-attention-kv-split", "--json", str(out_unsplit))
    assert r1.exit_code == 0, r1.output
    assert r2.exit_code == 0, r2.output
    split = json.loads(out_split.read_text())["plans"][0]
    unsplit = json.loads(out_unsplit.read_text())["plans"][0]
    assert split.get("decode_attention_kv_split", True) is True
    assert unsplit["decode_attention_kv_split"] is False
    assert "one core per (sequence, KV head), no KV split" in r2.output
    assert "no KV split" not in r1.output
    # every candidate is at least as slow without the split, so the proven best is no better
    best = {k: p["predicted"]["decode"]["tokens_per_s_per_card"] for k, p in (("split", split), ("unsplit", unsplit))}
    assert best["unsplit"] <= best["split"]
    # the exported plan evaluates to what the search printed for it
    again = run_cli("evaluate", str(out_unsplit), "--json", "-")
    assert again.exit_code == 0, again.output
    step = json.loads(again.output)["predicted"]["decode"]["tpot_ms"]
    assert step == pytest.approx(unsplit["predicted"]["decode"]["tpot_ms"], rel=1e-9)


def test_whatif_rescores_a_plan_under_the_other_kernel(tmp_path):
    out = tmp_path / "whatif.json"
    result = run_cli("whatif", str(MINIMAX_A3_195K), "--decode-attention-kv-split", "--json", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    base, rescored = doc["base"]["plan"], doc["rescored"]["plan"]
    assert base["decode_attention_kv_split"] is False and rescored["decode_attention_kv_split"] is True
    assert doc["new"]["plan"]["decode_attention_kv_split"] is True
    # the same deployment, its KV read back at the roofline: well below the one-core step
    assert rescored["predicted"]["decode"]["tpot_ms"] < 0.7 * base["predicted"]["decode"]["tpot_ms"]


def test_emitting_an_unsplit_plan_for_todays_release_warns_that_its_kernel_splits(tmp_path):
    result = run_cli("evaluate", str(MINIMAX_A3_195K), "--emit", "vllm-ascend", str(tmp_path / "v"))
    assert result.exit_code == 0, result.output
    assert "whose images carry CANN 9.0" in " ".join(result.output.split())
    # the same plan costed with the split: no such warning
    tmp = tmp_path / "split.yaml"
    tmp.write_text(
        MINIMAX_A3_4K.read_text().replace("decode_attention_kv_split: false", "decode_attention_kv_split: true")
    )
    again = run_cli("evaluate", str(tmp), "--emit", "vllm-ascend", str(tmp_path / "x"))
    assert again.exit_code == 0, again.output
    assert "CANN 9.0" not in again.output


@pytest.mark.parametrize("split", [True, False])
def test_what_binds_is_judged_with_the_requests_kernel(split):
    from planner.ranking.binding import request_bindings
    from planner.search.request import PlanRequest
    from planner.specs.plan import SLO

    plan, _ = load_plan(str(MINIMAX_A3_195K))
    slo = SLO(tpot_ms=110.0, ttft_ms=None)
    req = PlanRequest(
        model="minimax-m2.5",
        hardware="a3",
        quantization="bf16",
        workload=plan.workload,
        slo=slo,
        max_cards=8,
        phase="decode",
        hbm_utilization=plan.hbm_utilization,
        decode_attention_kv_split=split,
    )
    plan = plan.model_copy(update={"slo": slo, "decode_attention_kv_split": split})
    own_tpot = _attention_s(MINIMAX_A3_195K, split)  # (the attention alone: a floor of the step)
    decode = request_bindings(plan, req)[0]
    # one more sequence on the TP16 group: its step costed with the request's kernel, not the default one
    next_tpot_ms = decode.figures["next_tpot_ms"]
    assert next_tpot_ms > own_tpot * 1e3
    assert (next_tpot_ms > 100.0) is (not split)


@pytest.mark.parametrize(
    "args, says",
    [
        ((), "model 'deepseek-v3' has no GQA attention layer"),
        (("--model", "minimax-m2.5", "--hardware", "h200", "--quantization", "bf16"), "hardware 'h200' gives no"),
    ],
    ids=["mla-model", "no-core-count"],
)
def test_the_flag_is_refused_in_its_own_words(args, says):
    result = run_cli("plan", *args, "--no-decode-attention-kv-split")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "--no-decode-attention-kv-split:" in text and says in text and "drop the flag" in text
