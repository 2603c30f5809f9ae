"""The input embedding has a layout of its own: by default over the attention's TP group, as every engine
moeplan launches lays it out, not with the LM head. Checked against the HBM savings vllm-ascend's
fine-grained TP guide publishes for DeepSeek-R1 W8A8 on an A2 DP32 decode instance."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.memory import decode_hbm
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import DecodePlan, ParallelLayout, embedding_layout
from planner.specs.quantization import get_quantization
from planner.specs.workload import Workload
from tests.conftest import PLANS, run_cli

GIB = 1024.0**3
DP32 = ParallelLayout(dp=32, tp=1)
TP8 = ParallelLayout(dp=4, tp=8)


def _decode(**layouts) -> DecodePlan:
    """The guide's instance: DeepSeek-R1 W8A8 decode on 32 A2 cards, DP32 + EP32, 24 sequences a card."""
    return DecodePlan.model_validate(
        {
            "devices": 32,
            "attention": {"dp": 32, "tp": 1},
            "moe": {"ep": 32, "slots_per_device": 8, "comm": "alltoall"},
            "concurrency_per_device": 24,
            "mtp_tokens": 1,
            **{k: v.model_dump() for k, v in layouts.items()},
        }
    )


def _ctx(tied: bool = False) -> CostContext:
    model = load_model("deepseek-r1")
    if tied:
        model = model.model_copy(update={"tie_word_embeddings": True})
    workload = Workload(input_tokens=3500, output_tokens=1500, mtp_acceptance=0.7)
    return CostContext(model, load_hardware("a2"), get_quantization("a8w8c16"), workload)


def _weights_gib(phase: DecodePlan, tied: bool = False) -> dict[str, float]:
    parts = decode_hbm(_ctx(tied), phase).breakdown_bytes
    return {k: float(np.asarray(v).ravel()[0]) / GIB for k, v in parts.items() if k.endswith("_weights")}


def _saved_gib(key: str, **layouts) -> float:
    return _weights_gib(_decode())[key] - _weights_gib(_decode(**layouts))[key]


def test_the_fine_grained_tp_guides_memory_savings_are_reproduced():
    # vllm-ascend docs/source/user_guide/feature_guide/Fine_grained_TP.md at 182b75ea84, "Experimental
    # Results": LM head TP8 saves 1.51 GB, embedding TP8 1.51 GB, dense FFN TP8 0.9 GB a card (read as GiB:
    # 7/8 of the BF16 vocabulary table, 129,280 x 7,168, is 1.51 GiB)
    assert _saved_gib("embedding_lm_head_weights", lm_head=TP8) == pytest.approx(1.51, rel=0.01)
    assert _saved_gib("embedding_lm_head_weights", embedding=TP8) == pytest.approx(1.51, rel=0.01)
    # 7/8 of the three dense layers' INT8 FFN weights is 0.97 GiB; the guide's 0.9 is 7% below
    assert _saved_gib("dense_ffn_weights", dense_ffn=TP8) == pytest.approx(0.9, rel=0.08)


def test_an_lm_head_split_leaves_the_embedding_whole_unless_the_plan_splits_it():
    ctx = _ctx()
    head_only = _decode(lm_head=TP8)
    assert embedding_layout(head_only, tied=False) == DP32
    both = _decode(lm_head=TP8, embedding=TP8)
    assert embedding_layout(both, tied=False) == TP8
    # the embedding's lookup: no all-reduce over a DP layout, one over a TP8 group
    lookup = decode_step(ctx, head_only).breakdown_s["lm_head"][0]
    assert decode_step(ctx, both).breakdown_s["lm_head"][0] > lookup
    split_tables = _weights_gib(both)["embedding_lm_head_weights"]
    assert _weights_gib(head_only)["embedding_lm_head_weights"] - split_tables == pytest.approx(1.51, rel=0.01)


def test_a_tied_model_keeps_one_table_in_the_lm_heads_layout():
    head_only = _decode(lm_head=TP8)
    assert embedding_layout(head_only, tied=True) == TP8
    untied = _weights_gib(_decode())["embedding_lm_head_weights"]
    # one BF16 table split eight ways, where the untied model holds two whole ones
    assert _weights_gib(head_only, tied=True)["embedding_lm_head_weights"] == pytest.approx(untied / 16, rel=1e-9)


@pytest.mark.parametrize("engine", ["vllm-ascend", "sglang", "mindie"])
def test_an_embedding_split_off_the_attention_is_refused_by_every_engine(tmp_path, engine):
    # a2-d70 carries the report's embedding DP4 x TP8 beside attention DP32, which no engine's launch can say
    r = run_cli("evaluate", str(PLANS / "a2-d70.yaml"), "--emit", engine, str(tmp_path / "out"))
    assert r.exit_code == 2, r.output
    assert "decode.embedding: DP4xTP8 cannot be expressed" in r.output and "over the attention's TP group" in r.output
    assert not (tmp_path / "out").exists()


def test_a_plan_with_an_embedding_that_does_not_tile_the_instance_is_refused(tmp_path):
    text = (PLANS / "a2-d70.yaml").read_text().replace("embedding: {dp: 4, tp: 8}", "embedding: {dp: 4, tp: 4}")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    r = run_cli("evaluate", str(path))
    assert r.exit_code == 2, r.output
    assert "decode.embedding: dp × tp = 4 × 4 = 16 does not tile" in r.output
