"""Per-rank prefill forwards (SGLang with DP attention) and SGLang's prefill delayer in a colocated instance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.evaluate import load_plan_specs
from planner.errors import BadInputError
from planner.simulate.build import Traffic
from planner.simulate.colocated_instance import SGLANG_PREFILL_DELAY_PASSES, ColocatedInstance
from planner.simulate.predictor import prefill_times
from planner.simulate.run import simulate_plan
from planner.simulate.validation import row_colocated_prefill, simulate_figures
from planner.specs.catalog import load_plan
from planner.specs.validation import usable_figures
from tests.conftest import run_cli

HERE = Path(__file__).resolve().parent
WHOLE = str(HERE / "small-colocated-whole.yaml")  # one instance of 24 devices, attention DP24, 1K prompts


@pytest.fixture(scope="module")
def forward_table():
    plan, _ = load_plan(WHOLE)
    specs = load_plan_specs(plan)
    ctx = CostContext(specs.model, specs.hw, specs.quant, plan.workload)
    section = plan.colocated.prefill_section()
    return prefill_times(ctx, section, 1024.0, 1024.0), plan.colocated.attention.dp


def test_a_prompt_on_one_rank_costs_its_ranks_attention_and_everyones_experts(forward_table):
    times, dp = forward_table
    prompt, att = 512.0, 256.0
    spread = times.forward_s(prompt, att)  # the prompt's tokens shared by every rank
    every_rank = times.forward_s(dp * prompt, att)  # every rank with a prompt of its own
    alone = times.rank_forward_s(prompt, prompt, att, dp)
    assert spread < alone < every_rank
    # the experts' compute is all that grows with the ranks that join: the rest is the busiest rank's
    assert times.rank_forward_s(prompt, dp * prompt, att, dp) == pytest.approx(every_rank, rel=1e-9)
    half = times.rank_forward_s(prompt, dp / 2 * prompt, att, dp)
    assert alone < half < every_rank
    # one DP rank, or a forward whose busiest rank holds no more than its even share: the spread forward
    assert times.rank_forward_s(prompt, prompt, att, 1) == pytest.approx(spread, rel=1e-12)
    assert times.rank_forward_s(prompt / dp, prompt, att, dp) == pytest.approx(spread, rel=1e-12)


def _delayer(rank_n, seats: int, passes: int) -> ColocatedInstance:
    inst = object.__new__(ColocatedInstance)  # the decision alone: no simulation around it
    inst.rank_n, inst.seats, inst.delay_passes, inst.delayed_passes = np.asarray(rank_n), seats, passes, 0
    return inst


def test_the_delayer_holds_prefill_while_some_ranks_are_full_and_others_not_for_its_passes():
    # PR #14201's SchedulerEnhancer.get_schedule_decision: min < max_running and max == max_running
    inst = _delayer([4, 3, 4], seats=4, passes=SGLANG_PREFILL_DELAY_PASSES)
    held = [inst._prefill_delayed() for _ in range(2 * SGLANG_PREFILL_DELAY_PASSES)]
    assert held[: SGLANG_PREFILL_DELAY_PASSES - 1] == [True] * (SGLANG_PREFILL_DELAY_PASSES - 1)
    assert held[SGLANG_PREFILL_DELAY_PASSES - 1] is False  # the 30th pass lets a prefill through
    assert held[SGLANG_PREFILL_DELAY_PASSES] is True  # and the count starts again
    for balanced in ([4, 4, 4], [3, 2, 3], [0, 0, 0]):  # every rank full, or none: prefill at once
        assert _delayer(balanced, seats=4, passes=30)._prefill_delayed() is False
    assert _delayer([4, 3, 4], seats=4, passes=0)._prefill_delayed() is False  # off


@pytest.fixture(scope="module")
def runs():
    plan, _ = load_plan(WHOLE)
    traffic = Traffic(requests=1500, concurrency=140, warmup=300, seed=0)
    out = {}
    for mode, passes in (("instance", 0), ("per-rank", 0), ("per-rank", SGLANG_PREFILL_DELAY_PASSES)):
        res = simulate_plan(plan, traffic, colocated_prefill=mode, prefill_delay_passes=passes)
        out[(mode, passes)] = res.summary
    return out


def test_per_rank_forwards_without_the_delayer_serve_far_less_than_the_static_prediction(runs):
    # a full instance frees a seat or two a step; each prompt then prefills on its own rank while the others
    # idle ("prefill/idle mode", sgl-project/sglang PR #14201): measured on this plan, 54% below the static rate
    static = runs[("instance", 0)]["moeplan"]["static"]["output_throughput"]
    instance = runs[("instance", 0)]["moeplan"]["steady"]["output_throughput"]
    alone = runs[("per-rank", 0)]["moeplan"]["steady"]["output_throughput"]
    assert instance == pytest.approx(static, rel=0.05)
    assert alone < 0.7 * static
    assert runs[("per-rank", 0)]["moeplan"]["bound"]["prefill_delayed_steps"] == 0


def test_the_delayer_gathers_prompts_so_the_ranks_prefill_together(runs):
    summary = runs[("per-rank", SGLANG_PREFILL_DELAY_PASSES)]
    static = summary["moeplan"]["static"]["output_throughput"]
    gathered = summary["moeplan"]["steady"]["output_throughput"]
    assert gathered > 1.5 * runs[("per-rank", 0)]["moeplan"]["steady"]["output_throughput"]
    assert gathered == pytest.approx(static, rel=0.1)
    assert summary["moeplan"]["bound"]["prefill_delayed_steps"] > 0
    notes = " ".join(summary["moeplan"]["notes"])
    assert "per-rank prefill" in notes and "prefill delayer" in notes and "PR #14201" in notes


def test_a_rows_engine_names_its_prefill_scheduling():
    assert row_colocated_prefill("SGLang main, PD disaggregated, router --mini-lb") == ("instance", 0)
    assert row_colocated_prefill("SGLang main, PD mixed (colocated)") == ("per-rank", 0)
    on = "SGLang main (CANN 8.5), PD mixed (colocated), SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE=1"
    assert row_colocated_prefill(on) == ("per-rank", SGLANG_PREFILL_DELAY_PASSES)
    assert row_colocated_prefill("vllm-ascend, colocated") == ("instance", 0)


def test_sglangs_pd_mixed_runs_are_reproduced_within_tolerance():
    """The two DeepSeek-R1 W4A8 PD-mixed runs on 8 A3 cards (SGLang's Ascend best-practice page): every
    figure -- mean, median and P99 TTFT, mean, median and P99 TPOT, throughput -- within its tolerance,
    each run simulated as its client ran it with SGLang's per-rank forwards and its prefill delayer."""
    figures = [f for f in usable_figures(compare="simulated") if "-mixed8 " in f.row.id]
    assert len(figures) == 14
    judged = simulate_figures(figures)
    outside = [(j.figure.id, round(j.error, 3)) for j in judged if not j.within_tolerance]
    assert not outside
    assert not [f.id for f in figures if f.known_miss]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--prefill-delay-passes", "30"], "add --colocated-prefill per-rank"),
        (["--colocated-prefill", "per-rank", "--prefill-delay-passes", "-1"], "--prefill-delay-passes must be >= 0"),
        (["--colocated-prefill", "sideways"], "--colocated-prefill: 'sideways' is not one of instance, per-rank"),
    ],
)
def test_the_cli_refuses_a_prefill_scheduling_it_cannot_model(args, says):
    result = run_cli("simulate", WHOLE, "--concurrency", "8", "--requests", "16", *args)
    assert result.exit_code == 2
    assert says in " ".join(result.output.split())


def test_per_rank_forwards_on_a_disaggregated_plan_are_refused_by_name():
    result = run_cli("simulate", str(HERE / "small-pd.yaml"), "--concurrency", "8", "--requests", "16",
                     "--colocated-prefill", "per-rank")  # fmt: skip
    assert result.exit_code == 2
    assert "--colocated-prefill per-rank" in result.output and "no colocated section" in result.output
    with pytest.raises(BadInputError, match="chunk_tokens"):
        plan, _ = load_plan(str(HERE / "small-colocated.yaml"))
        simulate_plan(plan, Traffic(requests=8, concurrency=8, seed=0), colocated_prefill="per-rank")


def test_the_cli_runs_sglangs_scheduling_and_says_so():
    result = run_cli(
        "simulate", WHOLE, "--concurrency", "96", "--requests", "300",
        "--colocated-prefill", "per-rank", "--prefill-delay-passes", "30",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "per-rank prefill (SGLang with DP attention)" in text
    assert "no prefill for up to 30 passes in a row" in text
