"""`moeplan fidelity --rows`: measured runs kept aside from validation/, judged under the shipped model with
nothing fitted on them (what the issue's "runs kept aside from the repository will be checked too" asks)."""

from __future__ import annotations

import json

import pytest

from planner.costmodel.evaluate import evaluate_plan
from planner.costmodel.fitting import metric_value
from planner.costmodel.reference import condition_imbalance
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.validation import figures_at
from tests.conftest import PLANS, run_cli
from tests.conftest import kept_aside_figure as _figure
from tests.conftest import kept_aside_row as _row
from tests.conftest import write_kept_aside as _write


def _json(path, *more: str) -> dict:
    r = run_cli("fidelity", "--rows", str(path), "--json", *more)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _shipped(figure_path, figure_id: str) -> float:
    """The figure's own metric as the shipped model gives it (the catalog's factors, the row's expert
    condition), not a ratio."""
    fig = next(f for f, _ in figures_at(figure_path) if f.id == figure_id)
    plan, _ = load_plan(fig.plan)
    return metric_value(evaluate_plan(plan, plan_base_dir(fig.plan), condition_imbalance(fig)), fig.metric)


def test_a_kept_aside_row_is_predicted_by_the_shipped_model_and_nothing_is_fitted_on_it(tmp_path):
    (tmp_path / "mine.yaml").write_text((PLANS / "a2-d70.yaml").read_text())
    path = _write(tmp_path, [_row("my decode", "mine.yaml", [_figure("decode.tpot_ms", 90.0, id="my TPOT")])])
    doc = _json(path)
    (row,) = doc["rows"]
    expected = _shipped(path, "my TPOT")
    assert row["name"] == "my TPOT" and row["hardware"] == "a2"
    assert row["predicted"] == pytest.approx(expected, rel=1e-6)
    assert row["error"] == pytest.approx(expected / 90.0 - 1.0, abs=1e-5)
    # out-of-sample by construction: no refit, no factor fitted on it, its leave-one-out column the error itself
    assert row["fitted_to"] == [] and row["out_of_sample"] is True and row["role"] == "kept aside"
    assert row["loo_predicted"] == row["predicted"]
    low, high = row["band"]
    assert low < row["predicted"] < high
    assert row["in_band"] == (low <= 90.0 <= high)
    assert doc["kept_aside"] == str(path)


def test_the_same_row_in_the_store_gets_the_same_prediction(tmp_path):
    """A store row copied out is predicted as `moeplan fidelity` predicts it (the shipped fit's own figure)."""
    from planner.costmodel.store_fit import stored_outcome

    outcome = stored_outcome()
    if outcome is None or not outcome.current:
        pytest.skip("the shipped fit outcome is out of date (benchmarks/calibrate_factors.py refreshes it)")
    path = _write(tmp_path, [_row("copy", "a2-d70", [_figure("decode.tpot_ms", 99.6, id="copied TPOT")])])
    (row,) = _json(path)["rows"]
    assert row["predicted"] == pytest.approx(outcome.predicted["A2-D70 TPOT"], rel=1e-3)


def test_a_ratio_is_judged_within_the_kept_aside_rows(tmp_path):
    rows = [
        _row("base", "a2-d70", [_figure("decode.tpot_ms", 100.0, id="base TPOT")]),
        _row("other", "a2-d90", [_figure("decode.tpot_ms", 0.9, id="ratio", ratio_to="base TPOT")]),
    ]
    path = _write(tmp_path, rows)
    by_name = {r["name"]: r for r in _json(path)["rows"]}
    quotient = _shipped(path, "ratio") / _shipped(path, "base TPOT")
    assert by_name["ratio"]["predicted"] == pytest.approx(quotient, rel=1e-4)
    assert by_name["ratio"]["ratio_to"] == "base TPOT"


def test_excluded_and_store_ids_are_named_not_passed_off(tmp_path):
    rows = [
        _row("A2-D70", "a2-d70", [_figure("decode.tpot_ms", 99.6, id="A2-D70 TPOT")]),
        _row("left out", "a2-d70", [_figure("decode.tpot_ms", 50.0)], excluded="the batch is not stated"),
    ]
    doc = _json(_write(tmp_path, rows))
    (row,) = doc["rows"]
    # an id the shipped store holds may have been fitted on: not claimed out-of-sample
    assert row["out_of_sample"] is False and "validation/" in row["fitted_to"][0]
    assert [(n["name"], n["why"]) for n in doc["not_compared"]] == [("left out", "excluded: the batch is not stated")]
    text = run_cli("fidelity", "--rows", str(_write(tmp_path, rows)))
    assert text.exit_code == 0
    assert "may not be out-of-sample" in text.output and "not compared: left out" in text.output


def test_a_queueing_figure_is_simulated(tmp_path):
    run = _row(
        "closed run",
        "a2-d70",
        [{**_figure("mean_tpot_ms", 100.0, id="run TPOT"), "compare": "simulated"}],
        traffic={"mode": "closed", "concurrency": 64, "prompts": 64, "input_tokens": 256, "output_tokens": 64},
    )
    path = _write(tmp_path, [run])
    doc = _json(path)
    assert doc["rows"] == []
    (sim,) = doc["simulated_rows"]
    assert sim["name"] == "run TPOT" and sim["predicted"] > 0
    # without the simulator it is not judged and not listed as compared
    assert _json(path, "--no-simulated")["not_compared"] == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--rows", "/no/such/rows.yaml"), "--rows: no file or folder"),
        (("--rows", "{path}", "--misses"), "drop --misses"),
        (("--rows", "{path}", "--markdown"), "drop --misses, --hardware, --coverage and --markdown"),
    ],
)
def test_bad_requests_exit_2_with_one_line(tmp_path, args, needle):
    path = _write(tmp_path, [_row("r", "a2-d70", [_figure("decode.tpot_ms", 99.6)])])
    r = run_cli("fidelity", *(a.format(path=path) for a in args))
    assert r.exit_code == 2
    assert needle in r.output and "Traceback" not in r.output


def test_a_malformed_file_names_the_field_and_an_unknown_base(tmp_path):
    bad = _row("r", "a2-d70", [{"metric": "decode.tpot_ms", "value": 99.6, "unit": "ms", "per": "request"}])
    r = run_cli("fidelity", "--rows", str(_write(tmp_path, [bad])))
    assert r.exit_code == 2 and "rows.0.figures.0.tolerance" in r.output
    orphan = _row("r", "a2-d70", [_figure("decode.tpot_ms", 1.0, ratio_to="nowhere")])
    r = run_cli("fidelity", "--rows", str(_write(tmp_path, [orphan], "orphan.yaml")))
    assert r.exit_code == 2 and "ratio to unknown figure 'nowhere'" in r.output


def test_a_folder_of_rows_is_read_as_one_set(tmp_path):
    """A folder holding rows files: every file's figures, ids unique across them; an empty folder exits 2."""
    rows = tmp_path / "rows"
    rows.mkdir()
    _write(rows, [_row("one", "a2-d70", [_figure("decode.tpot_ms", 99.6, id="first TPOT")])], "a.yaml")
    _write(rows, [_row("two", "a2-d90", [_figure("decode.tpot_ms", 99.6, id="second TPOT")])], "b.yaml")
    assert {r["name"] for r in _json(rows)["rows"]} == {"first TPOT", "second TPOT"}
    # (a folder is read once per process, as the store is: the clash goes in a folder of its own)
    clash = tmp_path / "clash"
    clash.mkdir()
    _write(clash, [_row("one", "a2-d70", [_figure("decode.tpot_ms", 99.6, id="first TPOT")])], "a.yaml")
    _write(clash, [_row("three", "a2-d70", [_figure("decode.tpot_ms", 99.6, id="first TPOT")])], "c.yaml")
    r = run_cli("fidelity", "--rows", str(clash))
    assert r.exit_code == 2 and "figure id 'first TPOT' is also used in" in r.output
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_cli("fidelity", "--rows", str(empty))
    assert r.exit_code == 2 and "holds no .yaml file of rows" in r.output


def test_a_row_whose_model_or_machine_is_not_its_plans_or_whose_metric_is_none_exits_2(tmp_path):
    """A kept-aside row is judged on its plan: a row that names another model or machine than the plan's, or a
    metric the plan's prediction does not have, is refused naming the field (it was predicted on the plan and
    printed under the row's model; an unknown metric ended in a KeyError)."""
    other = _row("r", "a2-d70", [_figure("decode.tpot_ms", 99.6)], model="kimi-k2")
    r = run_cli("fidelity", "--no-simulated", "--rows", str(_write(tmp_path, [other])))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "the row's model is 'kimi-k2' but its plan 'a2-d70' is of 'deepseek-v3'" in r.output
    machine = _row("r", "a2-d70", [_figure("decode.tpot_ms", 99.6)], hardware="a3")
    r = run_cli("fidelity", "--no-simulated", "--rows", str(_write(tmp_path, [machine], "machine.yaml")))
    assert r.exit_code == 2 and "the row's hardware is 'a3' but its plan 'a2-d70' is of 'a2'" in r.output
    unknown = _row("r", "a2-d70", [_figure("decode.foo", 723.0)])
    r = run_cli("fidelity", "--no-simulated", "--rows", str(_write(tmp_path, [unknown], "metric.yaml")))
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "metric 'decode.foo' is not a figure moeplan predicts for plan 'a2-d70'" in r.output
    assert "decode.tpot_ms" in r.output  # the figures it has are offered
