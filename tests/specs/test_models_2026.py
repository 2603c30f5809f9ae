"""The 2026 models from their unchanged config.json: parameters, cache per token, refusals.

Published parameter counts are in models/_sources.yaml with their sources (each model's Hugging
Face model card; the DeepSeek-V4 model card; Kimi-K3's model page). Cache sizes are checked
against hand computations written out here, BF16 entries (2 bytes), FP32 linear-attention
states, main layers only.
"""

from __future__ import annotations

import json

import pytest

from planner.errors import BadInputError
from planner.specs.catalog import load_model, model_source
from tests.conftest import REPO, run_cli

CONFIGS = REPO.parent.parent / "shared" / "reference" / "hf-configs"
NEW_MODELS = {
    "deepseek-v3.2": "deepseek-ai--DeepSeek-V3.2",
    "deepseek-v4-pro": "deepseek-ai--DeepSeek-V4-Pro",
    "deepseek-v4-flash": "sgl-project--DeepSeek-V4-Flash-FP8",
    "kimi-k2.5": "moonshotai--Kimi-K2.5",
    "kimi-k3": "moonshotai--Kimi-K3",
    "glm-5.1": "zai-org--GLM-5.1",
    "qwen3.5-397b-a17b": "Qwen--Qwen3.5-397B-A17B",
    "minimax-m2.5": "nvidia--MiniMax-M2.5-NVFP4",
}


def _catalog_copy_is_unchanged(name: str) -> bool:
    path = CONFIGS / f"{NEW_MODELS[name]}.config.json"
    if not path.exists():  # the shared reference folder is not part of the repository
        return True
    return json.loads(path.read_text()) == json.loads((REPO / "models" / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(NEW_MODELS))
def test_params_within_3_percent_of_published(name):
    m = load_model(name)
    pub = model_source(name)
    assert _catalog_copy_is_unchanged(name)
    assert m.main_params() / 1e9 == pytest.approx(pub["published_params_total_b"], rel=0.03)
    # publishers differ on counting the embedding and LM head as active: the published figure must
    # fall within 3% of the band the two conventions span
    low, high = m.active_params(lm_head=False) / 1e9, m.active_params(embedding=True) / 1e9
    assert low * 0.97 <= pub["published_params_active_b"] <= high * 1.03, (low, high)


def _kv_hand(name: str, n: int) -> float:
    """Cache bytes per token of one sequence of n tokens, main layers, written out by hand."""
    bf16, fp32 = 2, 4
    if name == "deepseek-v3.2":  # 61 MLA layers: latent 512 + RoPE key 64, plus the indexer key 128
        return 61 * (512 + 64 + 128) * bf16
    if name == "glm-5.1":  # 78 MLA layers with the DSA indexer key
        return 78 * (512 + 64 + 128) * bf16
    if name == "kimi-k2.5":  # 61 MLA layers
        return 61 * (512 + 64) * bf16
    if name == "minimax-m2.5":  # 62 GQA layers, 8 KV heads of 128, K and V
        return 62 * 2 * 8 * 128 * bf16
    if name == "qwen3.5-397b-a17b":
        full = 15 * 2 * 2 * 256 * bf16  # 15 GQA layers, 2 KV heads of 256
        state = 64 * 128 * 128 * fp32  # 64 value heads, 128 x 128 state each
        conv = (2 * 16 * 128 + 64 * 128) * 3 * bf16  # q, k, v channels x (kernel 4 - 1)
        return full + 45 * (state + conv) / n
    if name == "kimi-k3":
        full = 24 * (512 + 64) * bf16  # 24 MLA layers
        state = 96 * 128 * 128 * fp32  # 96 KDA heads, 128 x 128 state each
        conv = 3 * 96 * 128 * 3 * bf16
        return full + 69 * (state + conv) / n
    # DeepSeek-V4: per layer a window of 128 entries of 512; CSA (ratio 4) one entry of 512 plus an
    # indexer key of 128 per 4 tokens and a pending block of 2 x 4 tokens (entry and score);
    # HCA (ratio 128) one entry of 512 per 128 tokens and a pending block of 128 tokens
    csa, hca, swa = {"deepseek-v4-pro": (30, 31, 0), "deepseek-v4-flash": (21, 20, 2)}[name]
    window = (csa + hca + swa) * 128 * 512 * bf16
    growing = csa * (512 + 128) * bf16 / 4 + hca * 512 * bf16 / 128
    pending = csa * 8 * 2 * 512 * bf16 + hca * 128 * 2 * 512 * bf16
    return growing + (window + pending) / n


@pytest.mark.parametrize("n", [4096, 131072, 1048576])
@pytest.mark.parametrize("name", sorted(NEW_MODELS))
def test_kv_bytes_per_token_match_hand_computation(name, n):
    m = load_model(name)
    assert m.kv_bytes_per_token(n, include_mtp=False) == pytest.approx(_kv_hand(name, n), rel=1e-9)


@pytest.mark.parametrize(
    ("name", "flops_share", "kv_share"),
    # DeepSeek-V4 model card: at 1M tokens V4-Pro needs 27% of V3.2's single-token FLOPs and 10% of
    # its KV cache; V4-Flash 10% and 7%
    [("deepseek-v4-pro", 0.27, 0.10), ("deepseek-v4-flash", 0.10, 0.07)],
)
def test_deepseek_v4_model_card_claims_at_1m(name, flops_share, kv_share):
    n = 1 << 20
    v4, v32 = load_model(name), load_model("deepseek-v3.2")
    assert v4.flops_per_token(n) / v32.flops_per_token(n) == pytest.approx(flops_share, rel=0.30)
    kv = v4.kv_bytes_per_token(n, include_mtp=False) / v32.kv_bytes_per_token(n, include_mtp=False)
    assert kv == pytest.approx(kv_share, rel=0.30)


def test_layer_kinds_read_from_the_configs():
    assert load_model("deepseek-v3.2").attention_groups() == [("dsa", 1, 61)]
    assert sorted(load_model("deepseek-v4-pro").attention_groups()) == [("csa", 4, 30), ("hca", 128, 31)]
    assert sorted(load_model("deepseek-v4-flash").attention_groups()) == [
        ("csa", 4, 21),
        ("hca", 128, 20),
        ("swa", 0, 2),
    ]
    qwen = load_model("qwen3.5-397b-a17b")
    assert sorted(qwen.attention_groups()) == [("gqa", 1, 15), ("linear", 1, 45)]
    assert qwen.layer_kind(3) == "gqa" and qwen.layer_kind(0) == "linear"
    k3 = load_model("kimi-k3")
    assert sorted(k3.attention_groups()) == [("linear", 1, 69), ("mla", 1, 24)]
    assert k3.layer_kind(92) == "mla" and k3.layer_kind(3) == "mla" and k3.layer_kind(0) == "linear"
    assert k3.moe is not None and (k3.moe.routed_experts, k3.moe.experts_per_token, k3.moe.shared_experts) == (
        896,
        16,
        2,
    )
    assert k3.moe.latent_size == 3584
    v4 = load_model("deepseek-v4-pro")
    assert v4.moe is not None and v4.moe.hash_layers == 3 and v4.num_dense_layers == 0
    assert load_model("minimax-m2.5").moe.shared_experts == 0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "bits"),
    [("deepseek-v4-pro", 4.25), ("kimi-k2.5", 4.5), ("kimi-k3", 4.25), ("minimax-m2.5", 4.5), ("glm-5.1", None)],
)
def test_expert_weight_format_from_quantization_config(name, bits):
    assert load_model(name).expert_weight_bits == bits


@pytest.mark.parametrize("name", sorted(NEW_MODELS))
def test_a_user_path_reads_as_the_catalog_entry(tmp_path, name):
    path = tmp_path / "config.json"
    path.write_text((REPO / "models" / f"{name}.json").read_text())
    by_path, by_name = load_model(str(path)), load_model(name)
    assert by_path.model_dump(exclude={"name"}) == by_name.model_dump(exclude={"name"})


def _config(name: str) -> dict:
    return json.loads((REPO / "models" / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("name", "change", "named"),
    [
        ("deepseek-v3.2", {"model_type": "deepseek_v9"}, "model_type 'deepseek_v9'"),
        ("deepseek-v3.2", {"attn_logit_softcapping": 30.0}, "attn_logit_softcapping"),
        ("minimax-m2.5", {"sliding_window": 4096}, "sliding_window"),
        ("minimax-m2.5", {"attn_type_list": [0] + [1] * 61}, "attn_type_list"),
        ("minimax-m2.5", {"qk_norm_type": "per_group"}, "qk_norm_type"),
        ("deepseek-v4-pro", {"expert_dtype": "fp2"}, "expert_dtype"),
        ("deepseek-v4-flash", {"hc_dynamic_streams": True}, "hc_dynamic_streams"),
        ("glm-5.1", {"moe_latent_rank": 256}, "moe_latent_rank"),
        ("qwen3.5-397b-a17b", {"layer_types": ["mamba"] * 60}, "layer_types"),
    ],
)
def test_unmodelled_fields_are_refused_by_name(tmp_path, name, change, named):
    cfg = _config(name)
    target = cfg["text_config"] if "text_config" in cfg and name.startswith("qwen") else cfg
    target.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(BadInputError, match=named):
        load_model(str(path))
    r = run_cli("models", "show", str(path))
    assert r.exit_code == 2 and named.split()[0] in r.output


@pytest.mark.parametrize(
    ("change", "across"),
    [({}, True), ({"qk_norm_type": "per_head"}, False), ({"use_qk_norm": False}, False)],
)
def test_minimax_qk_norm_type_sets_norms_across_heads(tmp_path, change, across):
    """qk_norm_type per_layer: the q and k norms span all heads (a TP all-reduce a layer in the cost model)."""
    cfg = _config("minimax-m2.5")
    cfg.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert load_model(str(path)).attention.qk_norm_across_heads is across


def test_qk_norm_across_heads_is_refused_on_mla():
    m = load_model("deepseek-v3")
    with pytest.raises(ValueError, match="qk_norm_across_heads is only for kind: gqa"):
        m.attention.model_validate({**m.attention.model_dump(), "qk_norm_across_heads": True})


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "qwen3.5-397b-a17b"])
def test_models_show_json_for_names_and_paths(tmp_path, name):
    r = run_cli("models", "show", name, "--json", "--context", "131072")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert {"params_total", "params_active", "kv_bytes_per_token"} <= set(doc)
    assert doc["context_tokens"] == 131072 and doc["published"]["published_params_total_b"] > 0
    assert doc["kv_bytes_per_token"] == pytest.approx(_kv_hand(name, 131072))
    path = tmp_path / "config.json"
    path.write_text((REPO / "models" / f"{name}.json").read_text())
    r2 = run_cli("models", "show", str(path), "--json", "--context", "131072")
    assert r2.exit_code == 0, r2.output
    doc2 = json.loads(r2.output)
    assert doc2["kv_bytes_per_token"] == doc["kv_bytes_per_token"] and "published" not in doc2
    # compressed and linear attention: the cache per token shrinks as the context grows
    r3 = run_cli("models", "show", name, "--json", "--context", "4096")
    assert json.loads(r3.output)["kv_bytes_per_token"] > doc["kv_bytes_per_token"]


def test_models_show_rejects_a_bad_context():
    r = run_cli("models", "show", "deepseek-v3", "--json", "--context", "0")
    assert r.exit_code == 2 and "--context" in r.output


def test_models_list_has_the_new_entries_with_sources():
    r = run_cli("models", "list")
    assert r.exit_code == 0, r.output
    for name in NEW_MODELS:
        assert name in r.output
    assert "huggingface.co" in r.output


@pytest.mark.parametrize(("name", "streams"), [("deepseek-v4-flash", 4), ("deepseek-v4-pro", 4), ("deepseek-v3.2", 1)])
def test_hyper_connection_streams_are_read_from_hc_mult(name, streams):
    """DeepSeek-V4's config.json sets hc_mult 4 (manifold-constrained hyper-connections); others keep one."""
    assert load_model(name).residual_streams == streams
    assert ("hc_mult" in _config(name)) == (streams > 1)
