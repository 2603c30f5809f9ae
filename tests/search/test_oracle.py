"""CP-SAT and the vectorised candidate enumeration against exhaustive oracles on small spaces."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.candidates.phase_candidates import (
    decode_candidates,
    prefill_candidates,
)
from planner.candidates.space import SpaceLimits, size_options
from planner.candidates.tables import decode_tables, prefill_tables, to_integer_tables
from planner.costmodel.context import CostContext
from planner.search.budget import Budget
from planner.search.cpsat_model import DeploymentModel
from planner.search.deployment import COLOCATED, DISAGGREGATED, Objective
from planner.search.enumerate_deployments import rank_deployments
from planner.search.oracle import best_deployment, best_phase_ratio
from planner.search.settings import SolverSettings
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import Workload
from planner.specs.quantization import get_quantization
from tests.search.deployment_cases import offers, one_machine

SOLVER = SolverSettings(time_limit_s=86_400, workers=1)  # no wall-clock limit a loaded machine can hit
RATES = st.integers(1, 5000)


@st.composite
def questions(draw):
    """A small deployment question: one machine (devices) or two (decode on a two-die-per-card
    machine, prefill on a one-die one, under a card, per-machine or cost cap), with its candidates
    and objective (per weight, or the least weight serving a target rate)."""
    mixed = draw(st.booleans())
    if mixed:
        caps = draw(st.sampled_from(["cards", "per-machine", "cost"]))
        if caps == "cards":  # both kinds of card together; weights in half cards
            cards = draw(st.integers(2, 24))
            budget = Budget((2 * cards,), ((1, 2),), (1, 2), (2 * cards, cards), "card", True)
        elif caps == "per-machine":
            d, p = draw(st.integers(1, 32)), draw(st.integers(1, 16))
            budget = Budget((d, p), ((1, 0), (0, 1)), (1, 2), (d, p), "card", True)
        else:  # prices per device of each machine, a cost cap
            price_d, price_p, cap = draw(st.integers(1, 7)), draw(st.integers(1, 7)), draw(st.integers(4, 60))
            budget = Budget(
                (cap,), ((price_d, price_p),), (price_d, price_p), (cap // price_d, cap // price_p), "cost unit", True
            )
        structures = [DISAGGREGATED]
    else:
        devices = draw(st.integers(2, 40))
        budget = one_machine(devices)
        structures = [DISAGGREGATED, COLOCATED]
    sizes_d, sizes_p = st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([1, 2, 4, 8])
    decode = draw(st.lists(st.tuples(RATES, sizes_d), min_size=1, max_size=3))
    prefill = draw(st.lists(st.tuples(RATES, sizes_p), min_size=1, max_size=3))
    coloc = [] if mixed else draw(st.lists(st.tuples(RATES, sizes_p), max_size=2))
    found = {
        "decode": offers(decode, budget, 0),
        "prefill": offers(prefill, budget, 1 if mixed else 0),
        "colocated": offers(coloc, budget, 0),
    }
    target = draw(st.one_of(st.none(), st.integers(1, 20_000)))
    objective = Objective() if target is None else Objective("target", target)
    return structures, found, budget, objective


def _value(dep, objective) -> Fraction:
    return Fraction(dep.weight) if objective.kind == "target" else Fraction(dep.rate_milli, dep.weight)


def _within(dep, budget, objective, found) -> None:
    """The deployment is what it says: its counts serve its rate within every cap."""
    chosen = [found[r][p] for r, p in zip(dep.structure.roles, dep.picks, strict=True)]
    assert dep.rate_milli == min(n * o.rate_milli for n, o in zip(dep.counts, chosen, strict=True))
    assert dep.weight == sum(n * o.weight for n, o in zip(dep.counts, chosen, strict=True))
    for k, limit in enumerate(budget.limits):
        assert sum(n * o.uses[k] for n, o in zip(dep.counts, chosen, strict=True)) <= limit
    if objective.kind == "target":
        assert dep.rate_milli >= objective.target_rate_milli


@settings(max_examples=60)
@given(questions())
def test_the_count_solver_and_the_enumerator_match_the_brute_force_oracle(question):
    """One machine and two, per weight and for a target rate: the enumerator's best (its counts
    from planner.search.instance_counts) is the exhaustive oracle's best."""
    structures, found, budget, objective = question
    expected = best_deployment(structures, found, budget, objective)
    ranked = rank_deployments(structures, found, budget, objective, 1)
    if expected is None:
        assert not ranked
        return
    _within(ranked[0], budget, objective, found)
    assert _value(ranked[0], objective) == expected


@settings(max_examples=40)
@given(questions())
def test_the_cpsat_model_matches_the_brute_force_oracle(question):
    """The CP-SAT model from no start (its own first solve) proves the oracle's best, on one
    machine and two."""
    structures, found, budget, objective = question
    expected = best_deployment(structures, found, budget, objective)
    result = DeploymentModel(structures, found, budget, objective, SOLVER).solve()
    if expected is None:
        assert result.deployment is None and result.status == "INFEASIBLE"
        return
    assert result.optimal and result.status == "OPTIMAL"
    _within(result.deployment, budget, objective, found)
    assert _value(result.deployment, objective) == expected


def test_a_target_rate_buys_the_fewest_instances_of_each_phase():
    """Prefill on one machine, decode on another, --rate: each phase gets the fewest instances that
    carry the rate on their own. A large decode instance (10 requests/s) and small prefill ones
    (2.5 requests/s) serve 2 requests/s with one of each; balancing prefill to the decode
    instance's capacity (what the mixed search did before) bought four prefill instances."""
    budget = Budget((400,), ((1, 2),), (1, 2), (400, 200), "card", True)
    found = {"decode": offers([(10_000, 288)], budget, 0), "prefill": offers([(2_500, 16)], budget, 1)}
    objective = Objective("target", 2_000)
    dep = rank_deployments([DISAGGREGATED], found, budget, objective, 1)[0]
    assert dep.counts == (1, 1) and dep.weight == 288 + 32
    assert best_deployment([DISAGGREGATED], found, budget, objective) == dep.weight
    solved = DeploymentModel([DISAGGREGATED], found, budget, objective, SOLVER).solve().deployment
    assert solved is not None and solved.counts == (1, 1)


def test_the_round_cap_leaves_the_answer_unproven(monkeypatch):
    """Dinkelbach rounds cut by their cap: the answer is whatever was reached, and not proven."""
    from planner.search import cpsat_model

    monkeypatch.setattr(cpsat_model, "MAX_DINKELBACH_ROUNDS", 0)
    budget = one_machine(16)
    found = {"decode": offers([(300, 2), (500, 4)], budget), "prefill": offers([(700, 1)], budget)}
    result = DeploymentModel([DISAGGREGATED], found, budget, Objective(), SOLVER).solve()
    assert result.deployment is not None
    assert not result.optimal and result.status == "FEASIBLE"


@pytest.fixture(scope="module")
def lite_ctx():
    model = load_model("deepseek-v2-lite")
    hw = load_hardware("a2")
    return CostContext(model, hw, get_quantization("a8w8c16"), Workload(input_tokens=512, output_tokens=256))


@pytest.mark.parametrize(("devices", "slo_us"), [(1, None), (2, 20000), (4, 15000), (8, 12000)])
def test_decode_candidates_match_brute_force(lite_ctx, devices, slo_us):
    opts = size_options(lite_ctx.model, lite_ctx.hw, devices, "decode", SpaceLimits(64))
    t = decode_tables(lite_ctx, opts, [0], np.arange(1, 48) * 8)
    ints = to_integer_tables(t, lite_ctx.hw.hbm_bytes)
    best = decode_candidates(t, ints, slo_us, keep=1)
    oracle = best_phase_ratio(t, ints, slo_us)
    if oracle == 0:
        assert not best
    else:
        assert Fraction(best[0].num, best[0].den) == oracle


@pytest.mark.parametrize(("devices", "slo_us"), [(1, None), (4, 400000), (8, 200000)])
def test_prefill_candidates_match_brute_force(lite_ctx, devices, slo_us):
    opts = size_options(lite_ctx.model, lite_ctx.hw, devices, "prefill", SpaceLimits(64))
    t = prefill_tables(lite_ctx, opts, [1, 2], np.arange(1, 24))
    ints = to_integer_tables(t, lite_ctx.hw.hbm_bytes)
    best = prefill_candidates(t, ints, slo_us, 1, lite_ctx.model.num_layers, 1.0)
    oracle = best_phase_ratio(t, ints, slo_us, lite_ctx.model.num_layers, 1.0)
    if oracle == 0:
        assert not best
    else:
        assert Fraction(best[0].num, best[0].den) == oracle
