"""The plan search end to end: the report's designs are found or beaten; plans validate."""

from __future__ import annotations

import pytest

from planner.costmodel.evaluate import evaluate_plan
from planner.costmodel.prediction import Prediction
from planner.errors import InfeasibleError
from planner.search.plan_search import TableCache, run_search
from planner.search.request import PlanRequest
from planner.search.settings import SolverSettings
from planner.search.validate import plan_problems
from planner.specs.catalog import catalog_dir, load_plan
from planner.specs.plan import SLO, Workload
from tests.conftest import PROOF

REPORT = Workload(input_tokens=2048, output_tokens=2048, mtp_acceptance=0.7)


def _report_score(name: str) -> float:
    plan, _ = load_plan(name)
    pred = evaluate_plan(plan, catalog_dir("plans"))
    assert pred.decode is not None
    return pred.decode.tokens_per_s_per_card


def test_a2_decode_search_finds_the_experts_design_or_better():
    request = PlanRequest(
        phase="decode", decode_devices=32, workload=REPORT, slo=SLO(tpot_ms=100), top=1, settings=PROOF
    )
    outcome = run_search(request)
    best = outcome.plans[0]
    assert outcome.optimal
    assert best.predicted["decode"]["tokens_per_s_per_card"] >= _report_score("a2-d70")
    assert best.predicted["decode"]["tpot_ms"] <= 100


def test_cm384_decode_search_with_the_reports_144_cards_finds_it_or_better():
    outcome = run_search(
        PlanRequest(
            hardware="cm384",
            model="deepseek-r1",
            phase="decode",
            decode_devices=288,
            max_cards=144,
            workload=REPORT,
            slo=SLO(tpot_ms=50),
            top=1,
        )
    )
    best = outcome.plans[0]
    assert best.predicted["decode"]["tokens_per_s_per_card"] >= _report_score("cm-d")
    assert best.predicted["decode"]["tpot_ms"] <= 50


def test_every_returned_plan_validates_without_the_solver():
    outcome = run_search(PlanRequest(top=5))
    assert len(outcome.plans) == 5
    for plan in outcome.plans:
        assert not plan_problems(plan, Prediction.model_validate(plan.predicted))
        assert plan.total_devices <= 48
    scores = [p.predicted["system"]["output_tokens_per_s_per_card"] for p in outcome.plans]
    assert scores[0] == max(scores)


def test_validator_catches_a_broken_plan():
    plan, _ = load_plan("a2-d70")
    tight = plan.model_copy(update={"slo": SLO(tpot_ms=50)})
    problems = plan_problems(tight, evaluate_plan(tight, catalog_dir("plans")))
    assert any("TPOT" in p for p in problems)


def test_colocated_plans_are_ranked_alongside_and_can_be_left_out():
    both = run_search(PlanRequest(top=5))
    everything = both.plans + [a.plan for a in both.alternatives if a.plan is not None]
    assert any(p.is_colocated for p in everything) and any(not p.is_colocated for p in everything)
    for plan in everything:
        if plan.is_colocated:
            c = plan.predicted["colocated"]
            assert c["tpot_ms"] <= 100 and c["ttft_ms"] <= 2000 and c["fits_hbm"]
            # one section, one layout: no decode/prefill sections that could disagree
            assert plan.decode is None and plan.prefill is None
            assert plan.decode_phase.attention == plan.prefill_phase.attention == plan.colocated.attention
    only = run_search(PlanRequest(top=3, colocated=False))
    assert not any(p.is_colocated for p in only.plans)


def test_rate_objective_uses_the_fewest_cards():
    outcome = run_search(PlanRequest(rate_per_s=2.0, max_cards=200, top=1))
    best = outcome.plans[0]
    system = best.predicted["system"]
    assert system["requests_per_s"] >= 2.0
    # one card fewer cannot serve the rate: the next smaller budget is infeasible or uses as many
    cards = system["cards"]
    try:
        smaller = run_search(PlanRequest(rate_per_s=2.0, max_cards=cards - 1, top=1))
        assert smaller.plans[0].predicted["system"]["cards"] >= cards
    except InfeasibleError:
        pass


def test_infeasible_tpot_names_the_lowest_reachable():
    with pytest.raises(
        InfeasibleError,
        match=r"TPOT: the lowest TPOT reachable for deepseek-v3 on a2 .* is \d+\.\d ms",
    ):
        run_search(PlanRequest(slo=SLO(tpot_ms=3, ttft_ms=2000)))


def test_budget_below_the_weights_names_the_cards_needed():
    with pytest.raises(InfeasibleError, match=r"card budget: the smallest deployment of deepseek-v3 on a2 .* needs 16"):
        run_search(PlanRequest(max_cards=8))


def test_same_answer_whatever_the_worker_count():
    from planner.report.plan_report import plans_document

    docs = []
    for workers in (1, 8):
        req = PlanRequest(top=3, settings=SolverSettings(workers=workers))
        outcome = run_search(req)
        docs.append(plans_document(outcome.plans, outcome.status))
    assert docs[0] == docs[1]


def test_table_cache_is_reused_across_slo_changes():
    cache = TableCache()
    run_search(PlanRequest(slo=SLO(tpot_ms=100, ttft_ms=2000), top=1), cache=cache)
    misses = cache.misses
    run_search(PlanRequest(slo=SLO(tpot_ms=60, ttft_ms=3000), top=1), cache=cache)
    assert cache.misses == misses and cache.hits >= misses


def test_models_without_mtp_and_gqa_models_plan_too():
    qwen = run_search(PlanRequest(model="qwen3-235b-a22b", max_cards=32, top=1))
    assert qwen.plans[0].decode_phase.mtp_tokens == 0
    kimi = run_search(PlanRequest(model="kimi-k2", max_cards=96, top=1, slo=SLO(tpot_ms=150, ttft_ms=4000)))
    assert kimi.plans[0].decode_phase.moe is not None


def test_the_time_limit_bounds_the_solves_not_the_cost_tables(monkeypatch):
    """--time-limit is CP-SAT's: however long the cost tables took (here an hour, on a clock the progress
    callback moves), the solves get the whole limit, not what is left of it."""
    from types import SimpleNamespace

    import planner.search.plan_search as plan_search_module
    from planner.search import cpsat_model

    now = [0.0]
    clock = SimpleNamespace(perf_counter=lambda: now[0])  # these two modules' clock only, not the process's
    monkeypatch.setattr(plan_search_module, "time", clock)
    monkeypatch.setattr(cpsat_model, "time", clock)
    given: list[float | None] = []
    make_solver = SolverSettings.make_solver

    def recording(self, remaining_s=None):
        given.append(remaining_s)
        return make_solver(self, remaining_s)

    monkeypatch.setattr(SolverSettings, "make_solver", recording)

    def progress(message, fraction):
        if not message.startswith("CP-SAT"):
            now[0] += 3600.0  # every table step "takes" an hour

    request = PlanRequest(
        max_cards=16, top=1, workload=Workload(input_tokens=1024, output_tokens=512),
        settings=SolverSettings(time_limit_s=30, workers=1),
    )  # fmt: skip
    outcome = run_search(request, progress=progress)
    assert now[0] >= 3600.0  # the tables' steps did advance the clock
    assert given and all(r == pytest.approx(30.0) for r in given)
    assert outcome.optimal
