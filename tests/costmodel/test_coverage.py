"""A plan outside the loads its machine's measured figures were taken at says so: the ranges come
from validation/'s rows (figures the model misses check nothing), and every row the model meets
lies inside its own machine's range."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.costmodel.coverage import checked_models, coverage_notes, measured_loads, model_coverage_notes, phase_load
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs
from planner.specs.catalog import catalog_names, load_model, load_plan
from planner.specs.validation import figure_phase, usable_figures


def test_a_prefill_below_every_measured_load_is_named_an_extrapolation():
    plan, _ = load_plan("a3-vllm-ascend-kimi-k2-thinking-tp16-p")
    assert phase_load(plan, "prefill") == 64
    loads = measured_loads("a3", "prefill")
    # the Kimi row itself is a known miss: it checks nothing, so the range starts above it
    assert loads and loads[0] > 64
    notes = [n for n in evaluate_plan(plan, specs=load_plan_specs(plan)).notes if n.startswith("extrapolation")]
    assert len(notes) == 1
    assert "64 prompt tokens per device, below every measured prefill figure on a3" in notes[0]
    assert f"{loads[0]:,.0f} to {loads[-1]:,.0f} per device" in notes[0]


@pytest.mark.parametrize("name", ["a3-sglang-r1-w8a8-d32", "a2-d70", "a2-p"])
def test_a_plan_at_a_measured_load_gets_no_note(name):
    plan, _ = load_plan(name)
    notes = evaluate_plan(plan, specs=load_plan_specs(plan)).notes
    assert not [n for n in notes if n.startswith("extrapolation")]


def test_the_ranges_are_the_rows_loads():
    # vllm-ascend's Qwen3-235B BF16 decode (a holdout the model meets, 8 a die) counts; the Kimi prefill
    # (a known miss, 64 tokens a die) does not; SGLang's R1 W8A8 prefill (28,000 tokens on 16 dies) does
    assert 8 in measured_loads("a3", "decode")
    assert 64 not in measured_loads("a3", "prefill") and 1750 in measured_loads("a3", "prefill")
    assert measured_loads("no-such-machine", "decode") == ()
    for fig in usable_figures(compare="static"):
        if fig.row.hardware == "a3" and figure_phase(fig) == "decode" and not fig.known_miss:
            plan, _ = load_plan(fig.plan)
            assert phase_load(plan, "decode") in measured_loads("a3", "decode"), fig.id


def test_decode_above_the_heaviest_measured_load_and_other_machines():
    plan, _ = load_plan("a3-sglang-r1-w8a8-d32")
    heaviest = max(measured_loads("a3", "decode"))
    heavier = plan.model_copy(
        update={"decode": plan.decode.model_copy(update={"concurrency_per_device": int(10 * heaviest)})}
    )
    (note,) = coverage_notes(heavier, "a3", ("decode",))
    assert "above every measured decode figure on a3" in note
    # a machine file of the user's own (no measured rows) gets no note here
    assert coverage_notes(heavier, "my-machine", ("decode", "prefill")) == []


def test_a_model_no_measured_figure_checks_says_so_and_names_its_unchecked_layers():
    # Qwen3.5-397B: no row of validation/ is of it, and its Gated DeltaNet layers are in no checked model
    plan, _ = load_plan("kept-aside/plans/a3-vllm-ascend-qwen35-397b-w8a8-tp16-8k-c7.yaml")
    notes = [n for n in evaluate_plan(plan, specs=load_plan_specs(plan)).notes if n.startswith("unchecked model")]
    assert len(notes) == 1
    assert "no measured figure of qwen3.5-397b-a17b" in notes[0]
    assert "linear attention layers (45 of its 60) are in no checked model" in notes[0]
    # its GQA layers are checked (Qwen3-235B's rows), so they are not named
    assert "GQA" not in notes[0]


def test_a_model_whose_only_figure_is_a_known_miss_is_unchecked_and_checked_models_get_no_note():
    models, kinds = checked_models()
    # Kimi-K2: its one usable figure (the Kimi-K2-Thinking c1 prefill) is a known miss, which checks nothing
    assert "kimi-k2" not in models and "deepseek-r1" in models
    assert "linear" not in kinds and {"mla", "gqa", "dsa", "csa", "hca"} <= kinds
    (note,) = model_coverage_notes(load_model("kimi-k2"))
    assert "no measured figure of kimi-k2" in note and "in no checked model" not in note  # MLA is checked
    assert model_coverage_notes(load_model("deepseek-r1")) == []
    for fig in usable_figures():
        if not fig.known_miss:
            assert model_coverage_notes(load_model(fig.row.model)) == [], fig.id


def test_docs_name_the_unchecked_catalog_models():
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "fidelity.md").read_text().split())
    listed = re.search(r"\(today ([^)]*)\) prints an `unchecked model:` note", text)
    assert listed is not None
    named = set(re.split(r", | and ", listed.group(1)))
    models, _ = checked_models()
    assert named == set(catalog_names("models")) - models


def test_a_config_folder_of_a_checked_model_is_that_model(tmp_path):
    folder = tmp_path / "DeepSeek-V3"
    folder.mkdir()
    (folder / "config.json").write_text(
        (Path(__file__).resolve().parents[2] / "models" / "deepseek-v3.json").read_text()
    )
    spec = load_model(str(folder))
    assert spec.name != "deepseek-v3" and model_coverage_notes(spec) == []
    # one field changed makes it another model, and unchecked
    other = spec.model_copy(update={"num_layers": spec.num_layers - 1})
    assert model_coverage_notes(other)[0].startswith(
        f"unchecked model: the cost model meets no measured figure of {spec.name}"
    )
