"""The fidelity summary's model count: a context variant of a catalog model is the same model."""

from __future__ import annotations

from planner.report.fidelity_report import _distinct_models


def test_a_yarn_entry_counts_as_its_base_model():
    assert _distinct_models({"qwen3-235b-a22b", "qwen3-235b-a22b-yarn"}) == {"qwen3-235b-a22b"}
    assert _distinct_models({"qwen3-235b-a22b-yarn"}) == {"qwen3-235b-a22b"}


def test_models_of_one_architecture_but_other_weights_stay_apart():
    # DeepSeek-V3 and R1 share a config.json shape, not weights
    assert _distinct_models({"deepseek-v3", "deepseek-r1"}) == {"deepseek-v3", "deepseek-r1"}


def test_a_yarn_name_outside_the_catalog_counts_on_its_own():
    assert _distinct_models({"my-model-yarn", "plans/x.yaml"}) == {"my-model-yarn", "plans/x.yaml"}
