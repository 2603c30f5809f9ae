"""The shipped catalogs, user files by path, and HuggingFace config.json translation."""

from __future__ import annotations

import json

import pytest

from planner.errors import BadInputError
from planner.specs.catalog import catalog_names, load_hardware, load_model
from tests.conftest import REPO, llama_8b_config


def test_catalogs_hold_the_promised_entries():
    assert {"a2", "cm384"} <= set(catalog_names("hardware"))
    assert {"deepseek-v3", "deepseek-r1", "kimi-k2", "qwen3-235b-a22b", "deepseek-v2-lite"} <= set(
        catalog_names("models")
    )


@pytest.mark.parametrize(
    ("name", "billions", "layers", "dense", "experts", "top_k", "shared"),
    [
        ("deepseek-v3", 671, 61, 3, 256, 8, 1),
        ("kimi-k2", 1026, 61, 1, 384, 8, 1),
        ("qwen3-235b-a22b", 235, 94, 0, 128, 8, 0),
        ("deepseek-v2-lite", 15.7, 27, 1, 64, 6, 2),
    ],
)
def test_models_match_their_configs(name, billions, layers, dense, experts, top_k, shared):
    m = load_model(name)
    assert m.num_layers == layers and m.num_dense_layers == dense
    assert m.moe is not None
    assert (m.moe.routed_experts, m.moe.experts_per_token, m.moe.shared_experts) == (
        experts,
        top_k,
        shared,
    )
    # main model parameters within 2% (MTP layer and norms aside)
    assert m.total_params() / 1e9 == pytest.approx(billions, rel=0.03)


def test_deepseek_kv_cache_per_token():
    m = load_model("deepseek-v3")
    # (512 + 64) x 61 layers x 2 bytes = 68.6 KiB (DeepSeek-V3 config.json); the MTP layer adds one more
    assert m.kv_elements_per_token_per_layer() * m.num_layers * 2 / 1024 == pytest.approx(68.6, abs=0.05)
    assert m.attention.kind == "mla" and m.mtp_layers == 1


def test_qwen_is_gqa():
    m = load_model("qwen3-235b-a22b")
    assert m.attention.kind == "gqa" and m.attention.num_kv_heads == 4
    assert m.kv_elements_per_token_per_layer() == 2 * 4 * 128


def test_hardware_two_level_and_flat():
    a2, cm = load_hardware("a2"), load_hardware("cm384")
    assert a2.devices_per_card == 1 and a2.group_sizes(32) == [8, 32]
    assert cm.devices_per_card == 2 and cm.group_sizes(288) == [2, 16, 288]
    for hw in (a2, cm):
        for f in (
            hw.efficiency.matmul,
            hw.efficiency.hbm_bandwidth,
            hw.efficiency.link_bandwidth,
            hw.efficiency.attention_compute,
        ):
            assert 0 < f.value <= 1 and f.source


@pytest.mark.parametrize("example", ["h800-node.yaml", "a3-node.yaml"])
def test_a_user_can_describe_other_machines_in_yaml(example):
    hw = load_hardware(str(REPO / "docs" / "examples" / example))
    assert hw.levels[-1].devices_per_group is None


def test_hf_config_by_path(tmp_path):
    cfg = json.loads((REPO / "models" / "deepseek-v3.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    assert m.hidden_size == 7168 and m.moe is not None and m.moe.n_group == 8


def test_dense_hf_config(tmp_path):
    cfg = llama_8b_config(8192)
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    assert m.moe is None and m.num_dense_layers == 32 and m.attention.head_dim == 128


@pytest.mark.parametrize(
    ("scaling", "context"),
    [
        # vLLM's _get_and_verify_max_len: YaRN spans original_max_position_embeddings x factor
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
        ({"type": "yarn", "factor": 2, "original_max_position_embeddings": 4096}, 8192),
        ({"rope_type": "linear", "factor": 2.0}, 16384),  # other scalings stretch max_position_embeddings
        ({"rope_type": "dynamic", "factor": 4}, 32768),
        ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 8192),  # left alone
        ({"rope_type": "longrope", "factor": 4.0}, 8192),
        ({"rope_type": "default"}, 8192),
        ({"rope_type": "yarn"}, 8192),  # no factor: nothing to stretch by
    ],
)
@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
def test_rope_scaling_sets_the_context_as_vllm_derives_it(tmp_path, key, scaling, context):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**llama_8b_config(8192), key: scaling}))
    assert load_model(str(path)).max_context_tokens == context


def test_the_yarn_entry_is_qwen3_235b_with_its_model_cards_context():
    base, yarn = load_model("qwen3-235b-a22b"), load_model("qwen3-235b-a22b-yarn")
    assert (base.max_context_tokens, yarn.max_context_tokens) == (40960, 131072)
    assert yarn.model_dump(exclude={"name", "max_context_tokens"}) == base.model_dump(
        exclude={"name", "max_context_tokens"}
    )


def test_catalog_contexts_stay_their_configs_max_position_embeddings():
    """Every catalog config whose YaRN product equals its max_position_embeddings keeps that context."""
    for name in catalog_names("models"):
        cfg = json.loads((REPO / "models" / f"{name}.json").read_text())
        cfg = cfg.get("text_config", cfg)
        if name != "qwen3-235b-a22b-yarn":
            assert load_model(name).max_context_tokens == cfg["max_position_embeddings"], name


def test_unknown_names_list_the_known_ones():
    with pytest.raises(BadInputError, match="known names: .*a2.*cm384"):
        load_hardware("a9")
    with pytest.raises(BadInputError, match="deepseek-v3"):
        load_model("deepseek-v9")


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "hw.yaml"
    bad.write_text("name: x\nlevels: [\n  - a: 1\n")
    with pytest.raises(BadInputError, match=r"hw.yaml.*line \d+"):
        load_hardware(str(bad))


def test_invalid_hardware_field_is_named(tmp_path):
    text = (REPO / "hardware" / "a2.yaml").read_text().replace("devices_per_node: 8", "devices_per_node: -8")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(BadInputError, match=r"devices_per_node \(line \d+\)"):
        load_hardware(str(path))


def test_the_fast_yaml_loader_reads_every_shipped_file_as_the_pure_python_one_does():
    import yaml

    from planner.specs.files import load_yaml

    files = [p for d in ("hardware", "plans", "models") for p in (REPO / d).glob("*.yaml")]
    files += list((REPO / "planner" / "engines" / "data").glob("*.yaml"))
    assert len(files) > 20
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert load_yaml(text) == yaml.safe_load(text), path


@pytest.mark.parametrize(
    "text",
    ["a: [1, 2\nb: 3\n", "a: 1\n  b: 2\n", "key: 'open\n", "a: !!python/object:os.system x\n", "\tx: 1\n", "- [\n"],
)
def test_the_fast_yaml_loader_fails_as_the_pure_python_one_does(text):
    import yaml

    from planner.specs.files import load_yaml

    with pytest.raises(yaml.YAMLError) as pure:
        yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as fast:
        load_yaml(text)
    assert str(fast.value) == str(pure.value)
    assert type(fast.value) is type(pure.value)


@pytest.mark.parametrize(
    ("kind", "given", "hint"),
    [
        ("hardware", "A2", "did you mean 'a2' (catalog names are lower case)?"),
        ("model", "DeepSeek-V3", "did you mean 'deepseek-v3' (catalog names are lower case)?"),
        ("model", "deepseek-ai/DeepSeek-V3", "did you mean the catalog model 'deepseek-v3'?"),
        ("model", "moonshotai/Kimi-K2-Instruct", "did you mean the catalog model 'kimi-k2'?"),
        ("model", "deepseek-v33", "did you mean 'deepseek-v3'?"),
        ("model", "A2", "'A2' is a machine: did you mean --hardware a2?"),
        ("hardware", "kimi-k2", "'kimi-k2' is a model: did you mean --model kimi-k2?"),
    ],
)
def test_a_near_miss_of_a_catalog_name_gets_a_did_you_mean(kind, given, hint):
    from planner.specs.catalog import load_hardware, load_model

    load = load_hardware if kind == "hardware" else load_model
    with pytest.raises(BadInputError) as exc:
        load(given)
    assert hint in str(exc.value)


def test_a_config_json_that_does_not_validate_is_answered_in_its_own_field_names(tmp_path):
    from planner.specs.catalog import load_model

    gqa = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000,
           "num_key_value_heads": 5, "intermediate_size": 11008}  # fmt: skip
    (tmp_path / "a.json").write_text(json.dumps(gqa))
    with pytest.raises(BadInputError) as exc:
        load_model(str(tmp_path / "a.json"))
    text = str(exc.value)
    assert "(no model_type: read by its fields alone)" in text
    assert "num_attention_heads to be a multiple of num_key_value_heads" in text and "num_kv_heads" not in text
    moe = {**gqa, "num_key_value_heads": 8, "num_experts": 8, "num_experts_per_tok": 2}
    del moe["intermediate_size"]
    (tmp_path / "b.json").write_text(json.dumps(moe))
    with pytest.raises(BadInputError, match="moe_intermediate_size: missing from config.json"):
        load_model(str(tmp_path / "b.json"))


def test_a_plan_past_qwen3s_context_evaluates_on_the_yarn_entry(tmp_path):
    from typer.testing import CliRunner

    from planner.cli.app import app

    text = (REPO / "plans" / "a3-vllm-cp-qwen3-p-32k.yaml").read_text()
    text = text.replace("input_tokens: 32768", "input_tokens: 65536")
    path = tmp_path / "q64.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["evaluate", str(path)])
    assert result.exit_code == 2 and "exceeds the model's context of 40960 tokens" in " ".join(result.output.split())
    path.write_text(text.replace("model: qwen3-235b-a22b\n", "model: qwen3-235b-a22b-yarn\n"))
    assert CliRunner().invoke(app, ["evaluate", str(path)]).exit_code == 0
