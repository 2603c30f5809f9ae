"""GLM-5.2's IndexShare: layers that reuse an earlier layer's top-k, and MTP drafts that reuse the first's.

The schedule is hicann/cann-recipes-infer's (models/glm_5_2/models/configuration_glm.py at 8679185): layer
i runs its indexer iff max(i - 2, 0) % 4 == 0, so 21 of 78 layers (0, 1, 2, 6, 10, ..., 74). The catalog's
glm-5.2 is GLM-5.1's config.json with that schedule (models/_sources.yaml). The HBM figure is the same
repository's GLM-5.2 offload guide: without offload, 64K inputs fit a global batch of 64 on 32 dies.
"""

from __future__ import annotations

import json

import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs
from planner.costmodel.imbalance import SkewImbalance
from planner.errors import BadInputError
from planner.specs.catalog import catalog_dir, load_model, load_plan
from planner.specs.model import attended_entries, indexed_entries
from tests.conftest import REPO

PLAN = "a3-cann-glm52-d32-c2-64k"


def _glm(name: str) -> dict:
    return json.loads((REPO / "models" / f"{name}.json").read_text())


def test_glm52_is_glm51_with_the_recipe_schedule():
    g51, g52 = _glm("glm-5.1"), _glm("glm-5.2")
    extra = {"indexer_types", "index_share_for_mtp_iteration"}
    assert {k: v for k, v in g52.items() if k not in extra} == g51
    full = [i for i, t in enumerate(g52["indexer_types"]) if t == "full"]
    assert full == [0, 1, 2, *range(6, 78, 4)] and len(full) == 21
    m = load_model("glm-5.2")
    assert m.attention.indexer is not None and m.attention.indexer.mtp_reuses_top_k
    kinds = [m.layer_kind(i) for i in range(m.num_layers)]
    assert kinds.count("dsa") == 21 and kinds.count("dsa_shared") == 57
    assert m.layer_kind(m.num_layers) == "dsa"  # the MTP layer runs its own indexer


def test_shared_layers_drop_the_indexer_weights_keys_and_scoring_but_keep_the_sparse_attention():
    g51, g52 = load_model("glm-5.1"), load_model("glm-5.2")
    idx = g51.attention.indexer
    assert idx is not None
    indexer_params = g51.attention_params_per_layer("dsa")["indexer"]
    assert "indexer" not in g52.attention_params_per_layer("dsa_shared")
    assert g51.main_params() - g52.main_params() == 57 * indexer_params
    # the cache: 57 layers without the 128-wide indexer key (BF16)
    g51_bytes = g51.kv_cache_bytes(65536.0, 2.0, include_mtp=False)[0]
    g52_bytes = g52.kv_cache_bytes(65536.0, 2.0, include_mtp=False)[0]
    assert g51_bytes - g52_bytes == pytest.approx(57 * idx.head_dim * 2.0 * 65536)
    # top-k entries attended as DSA, none scored
    assert attended_entries(g52, "dsa_shared", 1, 65536) == idx.top_k
    assert indexed_entries(g52, "dsa_shared", 1, 65536) == 0.0


def _step_parts_ms(model: str) -> dict[str, float]:
    plan, _ = load_plan(PLAN)
    specs = load_plan_specs(plan, catalog_dir("plans"))
    assert plan.decode is not None
    ctx = CostContext(load_model(model), specs.hw, specs.quant, plan.workload)
    step = decode_step(ctx, plan.decode)
    return {k: float(v[0]) * 1e3 for k, v in step.breakdown_s.items()}


def test_indexshare_makes_the_step_cheaper_in_attention_mtp_and_launches_only():
    g51, g52 = _step_parts_ms("glm-5.1"), _step_parts_ms("glm-5.2")
    for part in ("attention", "mtp", "launch_overhead"):
        assert g52[part] < g51[part], part
    # the MoE, dense FFN and LM head are untouched by the indexer schedule
    for part in ("moe", "moe_comm", "dense_ffn", "lm_head"):
        assert g52[part] == pytest.approx(g51[part], rel=1e-12), part


def test_mtp_drafts_after_the_first_reuse_its_top_k(tmp_path):
    cfg = _glm("glm-5.2")
    cfg["index_share_for_mtp_iteration"] = False
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    own = load_model(str(path))
    plan, _ = load_plan(PLAN)
    specs = load_plan_specs(plan, catalog_dir("plans"))
    assert plan.decode is not None
    parts = {}
    for name, m in (("shared", load_model("glm-5.2")), ("own", own)):
        ctx = CostContext(m, specs.hw, specs.quant, plan.workload)
        parts[name] = {k: float(v[0]) for k, v in decode_step(ctx, plan.decode).breakdown_s.items()}
    assert parts["shared"]["mtp"] < parts["own"]["mtp"]
    assert parts["shared"]["attention"] == pytest.approx(parts["own"]["attention"], rel=1e-12)


def test_hbm_holds_the_guides_64_sequences_at_64k_on_32_dies_and_not_more():
    plan, _ = load_plan(PLAN)
    pred = evaluate_plan(plan, catalog_dir("plans"), SkewImbalance(0.0))
    assert pred.decode is not None
    assert pred.decode.max_concurrency_per_device == 2


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"indexer_types": ["shared"] + ["full"] * 77}, "indexer_types"),
        ({"indexer_types": ["full"] * 77}, "indexer_types"),
        ({"indexer_types": ["full", "sparse"] + ["full"] * 76}, "indexer_types"),
    ],
)
def test_bad_indexer_schedules_are_refused_by_name(tmp_path, change, named):
    cfg = _glm("glm-5.2")
    cfg.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(BadInputError, match=named):
        load_model(str(path))


def test_a_schedule_rule_without_the_schedule_is_refused(tmp_path):
    cfg = _glm("glm-5.1")
    cfg["index_topk_freq"] = 4
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(BadInputError, match="index_topk_freq"):
        load_model(str(path))
