"""`--hbm-utilization`: plans leave the engine's share of HBM free, everywhere HBM is judged."""

from __future__ import annotations

import json

import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.evaluate import evaluate_plan, load_plan_specs
from planner.costmodel.memory import max_decode_concurrency
from planner.search.plan_search import run_search
from planner.search.request import PlanRequest
from planner.specs.catalog import catalog_dir, load_plan
from tests.conftest import run_cli

GIB = 1024.0**3


def _blocks(plan):
    pred = plan.predicted or {}
    if pred.get("colocated"):
        return [pred["colocated"]]
    return [pred[k] for k in ("decode", "prefill") if pred.get(k)]


@pytest.mark.parametrize("utilization", [0.9, 0.8])
def test_every_ranked_plan_leaves_the_reserved_share_free(utilization):
    outcome = run_search(PlanRequest(top=5, hbm_utilization=utilization))
    hbm = outcome.hw.hbm_bytes
    for plan in outcome.plans:
        assert plan.hbm_utilization == utilization
        for block in _blocks(plan):
            assert block["fits_hbm"]
            assert block["hbm_capacity_bytes"] == int(hbm * utilization)
            # before: plans packed HBM to 0.0-0.1 GiB free
            assert block["hbm_free_bytes"] >= (1 - utilization) * hbm - 1
            assert block["hbm_bytes_per_device"] <= utilization * hbm


def test_a_lower_utilization_never_gives_a_better_plan():
    best = [run_search(PlanRequest(top=1, hbm_utilization=u)).plans[0] for u in (1.0, 0.9, 0.8)]
    heads = [p.predicted["system"]["output_tokens_per_s_per_card"] for p in best]  # type: ignore[index]
    assert heads[0] >= heads[1] >= heads[2]


def test_evaluate_of_an_exported_plan_reproduces_its_figures(tmp_path):
    out = tmp_path / "plans.json"
    r = run_cli("plan", "--top", "1", "--hbm-utilization", "0.85", "--json", str(out))
    assert r.exit_code == 0, r.output
    plan = json.loads(out.read_text())["plans"][0]
    assert plan["hbm_utilization"] == 0.85
    single = tmp_path / "one.json"
    single.write_text(json.dumps(plan))
    again = run_cli("evaluate", str(single), "--json", "-")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["predicted"] == plan["predicted"]


def test_max_concurrency_shrinks_with_the_utilization():
    plan, _ = load_plan("a2-d70")
    specs = load_plan_specs(plan, catalog_dir("plans"))
    assert plan.decode is not None
    most = [
        max_decode_concurrency(
            CostContext(specs.model, specs.hw, specs.quant, plan.workload, hbm_utilization=u), plan.decode
        )
        for u in (1.0, 0.9, 0.8)
    ]
    assert most[0] > most[1] > most[2]
    # the report's 72 sequences per card still fit with 10% of HBM kept free
    assert most[1] >= 72


def test_evaluate_flag_overrides_the_plan_and_judges_fit():
    tight = run_cli("evaluate", "a2-d70", "--hbm-utilization", "0.7", "--json", "-")
    assert tight.exit_code == 0
    pred = json.loads(tight.output)["predicted"]["decode"]
    assert pred["hbm_utilization"] == 0.7 and not pred["fits_hbm"]
    plan, _ = load_plan("a2-d70")
    default = evaluate_plan(plan, catalog_dir("plans"))
    assert default.decode is not None and default.decode.fits_hbm and default.decode.hbm_utilization == 0.9


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2", "nan"])
@pytest.mark.parametrize("command", ["plan", "evaluate", "sweep"])
def test_out_of_range_is_one_line_naming_the_flag(command, value):
    args = [command] + (["a2-d70"] if command == "evaluate" else []) + ["--hbm-utilization", value]
    r = run_cli(*args)
    assert r.exit_code == 2
    assert "--hbm-utilization" in r.output
    assert "Traceback" not in r.output
