"""The store of measured deployments (validation/, docs/validation.md): every file loads, every usable
figure names a plan that loads and a figure the plan predicts, and the store ships in the wheel."""

from __future__ import annotations

import tomllib

import pytest

from planner.costmodel.evaluate import evaluate_plan
from planner.costmodel.fitting import metric_value
from planner.errors import BadInputError
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.validation import all_figures, load_file, load_store, store_files, usable_figures, validation_dir
from tests.conftest import REPO

# the keys `vllm bench serve --save-result` writes (vllm/benchmarks/serve.py), which simulated figures use
BENCH_KEYS = {
    f"{stat}_{fig}_ms"
    for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99")
    for fig in ("ttft", "tpot", "itl", "e2el")
} | {"output_throughput", "request_throughput", "total_token_throughput"}


def test_the_store_ships_in_the_wheel():
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = doc["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert include["validation"] == "planner/_catalog/validation"
    assert validation_dir().is_dir() and store_files()


def test_every_file_loads_and_ids_are_unique():
    ids = [f.id for f, _ in all_figures()]
    assert len(ids) == len(set(ids))
    assert len(load_store()) == len(store_files())


def test_excluded_figures_say_why_and_usable_rows_have_plans():
    for fig, why in all_figures():
        if why:
            assert len(why) > 20, fig.id
        else:
            assert fig.row.plan, fig.id


@pytest.mark.parametrize("fig", usable_figures(), ids=lambda f: f.id)
def test_usable_figures_resolve(fig):
    plan, _ = load_plan(fig.plan)
    if fig.row.model:
        assert plan.model == fig.row.model, f"{fig.id}: the row says {fig.row.model}, the plan {plan.model}"
    if fig.row.hardware:
        assert plan.hardware == fig.row.hardware
    if fig.compare == "static":
        prediction = evaluate_plan(plan, plan_base_dir(fig.plan))
        assert metric_value(prediction, fig.metric) > 0
    else:
        assert fig.metric in BENCH_KEYS, f"{fig.id}: simulated figures use vllm bench serve's keys"
    if fig.figure.tokens is not None:
        assert fig.figure.per in ("die", "card", "node", "gpu", "deployment")


def test_a_bad_file_is_one_message_naming_the_field(tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_text(
        "source: {title: t, url: u, read: '2026-01-01', reliability: sometimes}\n"
        "rows: [{id: r, plan: a2-d70, measures: m, traffic: {mode: steady}, figures: "
        "[{metric: decode.tpot_ms, value: 1, unit: ms, per: request, tolerance: 0.1}]}]\n"
    )
    with pytest.raises(BadInputError, match="reliability"):
        load_file(bad)


def test_a_closed_loop_states_its_concurrency(tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_text(
        "source: {title: t, url: u, read: '2026-01-01', reliability: claim}\n"
        "rows: [{id: r, plan: a2-d70, measures: m, traffic: {mode: closed}, figures: "
        "[{metric: decode.tpot_ms, value: 1, unit: ms, per: request, tolerance: 0.1}]}]\n"
    )
    with pytest.raises(BadInputError, match="concurrency"):
        load_file(bad)


def test_duplicate_ids_across_files_are_refused(tmp_path):
    text = (
        "source: {title: t, url: u, read: '2026-01-01', reliability: claim}\n"
        "rows: [{id: same, plan: a2-d70, measures: m, traffic: {mode: steady}, figures: "
        "[{metric: decode.tpot_ms, value: 1, unit: ms, per: request, tolerance: 0.1}]}]\n"
    )
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / "b.yaml").write_text(text)
    with pytest.raises(BadInputError, match="unique"):
        load_store(tmp_path)


def test_plans_given_as_paths_resolve_from_the_store(tmp_path):
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "mine.yaml").write_text((REPO / "plans" / "a2-d70.yaml").read_text())
    (tmp_path / "a.yaml").write_text(
        "source: {title: t, url: u, read: '2026-01-01', reliability: claim}\n"
        "rows: [{id: mine, plan: plans/mine.yaml, measures: m, traffic: {mode: steady}, figures: "
        "[{metric: decode.tpot_ms, value: 99.6, unit: ms, per: request, tolerance: 0.1}]}]\n"
    )
    (fig,) = usable_figures(tmp_path)
    plan, _ = load_plan(fig.plan)
    assert plan.decode is not None and plan.decode.concurrency_per_device == 72
