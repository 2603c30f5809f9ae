"""The store's `compare: simulated` figures are judged by simulating their runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.simulate.validation import row_routing, simulate_figures
from planner.specs.validation import usable_figures

HERE = Path(__file__).resolve().parent

STORE = """
source:
  title: "test fixture: not a published source"
  url: "https://example.invalid/fixture"
  read: "2026-12-01"
  reliability: claim
rows:
  - id: fixture run
    plan: {plan}
    engine: "SGLang (fixture), router --mini-lb"
    measures: "a closed loop on the small test deployment"
    traffic: {{mode: closed, concurrency: 40, input_tokens: 1024, output_tokens: 64, range_ratio: 1, prompts: 120}}
    figures:
      - id: fixture TTFT
        metric: mean_ttft_ms
        value: 1000
        unit: ms
        per: request
        tolerance: 0.2
        compare: simulated
      - id: fixture throughput per card
        metric: output_throughput
        value: 100
        unit: tokens/s per card
        per: card
        tolerance: 0.2
        compare: simulated
      - id: fixture throughput
        metric: output_throughput
        value: 4000
        unit: tokens/s per deployment
        per: deployment
        tolerance: 0.2
        compare: simulated
  - id: decode-only run
    plan: a2-d70
    measures: "a decode-only plan"
    traffic: {{mode: closed, concurrency: 8, prompts: 16}}
    figures:
      - id: decode-only TTFT
        metric: mean_ttft_ms
        value: 1000
        unit: ms
        per: request
        tolerance: 0.2
        compare: simulated
"""


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    (folder / "fixture.yaml").write_text(STORE.format(plan=str(HERE / "small-pd.yaml")))
    return {r.figure.id: r for r in simulate_figures(usable_figures(folder, compare="simulated"))}


def test_a_run_is_simulated_once_per_row_with_the_rows_traffic(judged):
    ttft = judged["fixture TTFT"]
    assert len(ttft.per_seed) == 3 and ttft.predicted == pytest.approx(sum(ttft.per_seed) / 3)
    assert "concurrency 40, 120 prompts, 1024+64 (sglang random, range ratio 1)" in ttft.traffic
    assert ttft.error == pytest.approx(ttft.predicted / 1000 - 1)


def test_a_per_card_figure_is_divided_by_the_deployments_cards(judged):
    # small-pd: 32 decode + 16 prefill A2 cards; the same runs give both figures
    per_card, whole = judged["fixture throughput per card"], judged["fixture throughput"]
    assert per_card.predicted * 48 == pytest.approx(whole.predicted)
    assert whole.predicted > 0


def test_a_ttft_on_a_plan_without_prefill_is_not_simulated(judged):
    r = judged["decode-only TTFT"]
    assert r.predicted is None and r.within_tolerance is None
    assert "no prefill instances" in r.reason


def test_sglangs_mini_lb_router_picks_instances_at_random():
    assert row_routing("SGLang main, router --mini-lb").instances == "random"
    assert row_routing("SGLang main").instances == "least-loaded"
    assert row_routing("vLLM-based").dp_ranks == "least-loaded"


def test_the_shipped_simulated_figures_are_all_judged():
    figures = usable_figures(compare="simulated")
    assert len(figures) >= 36  # SGLang's Ascend best-practice runs: TTFT, TPOT, throughput per run
    plans = {f.plan for f in figures}
    assert "a3-sglang-v32-w8a8-pd32-64k-deploy" in plans


def test_simulated_known_misses_really_miss_and_reach_the_plans():
    """A simulated figure marked known_miss is outside its tolerance when simulated (else it must lose
    its mark), and plans on its machine say so for the phase it judges (TTFT: the prefill)."""
    from planner.costmodel.evaluate import known_miss_notes

    marked = [f for f in usable_figures(compare="simulated") if f.known_miss]
    assert marked, "no simulated figure is marked known_miss"
    for judged in simulate_figures(marked):
        assert judged.within_tolerance is False, f"{judged.figure.id} is within tolerance now: drop its known_miss"
    a3_ttft = [f for f in marked if f.row.hardware == "a3" and "ttft" in f.metric]
    assert a3_ttft
    (note,) = known_miss_notes("a3", ("prefill",))
    for why in {f.known_miss for f in a3_ttft}:
        ids = [f.id for f in a3_ttft if f.known_miss == why]
        named = ", ".join(ids) if len(ids) <= 3 else f"{', '.join(ids[:3])} and {len(ids) - 3} more"
        assert f"{named} (" in note
    assert not known_miss_notes("a3", ("system",))  # a run's throughput judges no one phase
