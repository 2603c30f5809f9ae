"""Properties of the search: relaxing a constraint never lowers the best output tokens/s per card.

A looser TPOT or TTFT SLO, a larger card budget, or more HBM per device only ever enlarges the
set of feasible deployments, and the search is exact on its integer tables, so the best
figure cannot drop. Small instances (DeepSeek-V2-Lite and DeepSeek-V3 on A2, small budgets, a
short workload) keep each search in tens of milliseconds.
"""

from __future__ import annotations

import os

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InfeasibleError
from planner.report.plan_report import headline
from planner.search.plan_search import TableCache, run_search
from planner.search.request import PhaseChoice, PlanRequest
from planner.specs.catalog import load_hardware
from planner.specs.plan import SLO, Workload
from tests.conftest import PROOF

EXAMPLES = int(os.environ.get("MOEPLAN_PROPERTY_EXAMPLES", "12"))
WORKLOAD = Workload(input_tokens=1024, output_tokens=512, mtp_acceptance=0.7)
HBM_SCALES = (1.0, 1.1, 1.25, 1.5, 2.0)
CACHE = TableCache()  # shared like a sweep's: the properties must hold with reused tables too

# (model, smallest and largest card budget worth trying on A2)
INSTANCES = {"deepseek-v2-lite": (1, 16), "deepseek-v3": (16, 48)}


def best(
    model: str,
    phase: PhaseChoice,
    cards: float,
    tpot_ms: float | None,
    ttft_ms: float | None,
    hardware: str = "a2",
    colocated: bool = True,
) -> float:
    """Best output tokens/s per card of the search, 0 when nothing is feasible."""
    request = PlanRequest(
        colocated=colocated,
        model=model,
        hardware=hardware,
        workload=WORKLOAD,
        slo=SLO(tpot_ms=tpot_ms, ttft_ms=ttft_ms),
        max_cards=cards,
        phase=phase,
        top=1,
        settings=PROOF,
    )
    try:
        outcome = run_search(request, cache=CACHE)
    except InfeasibleError:
        return 0.0
    assert outcome.optimal, outcome.status
    return headline(outcome.plans[0])


instance = st.sampled_from(sorted(INSTANCES))
phase = st.sampled_from(["decode", "both"])
colocated = st.booleans()  # with or without colocated instances in the search space


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    model=instance,
    phase=phase,
    data=st.data(),
    tpot=st.floats(8, 150),
    tpot_more=st.floats(0, 100),
    ttft=st.floats(150, 4000),
    ttft_more=st.floats(0, 3000),
    coloc=colocated,
)
def test_a_looser_slo_never_lowers_the_best(model, phase, data, tpot, tpot_more, ttft, ttft_more, coloc):
    lo, hi = INSTANCES[model]
    cards = data.draw(st.integers(lo, hi), label="cards")
    tight = best(model, phase, cards, tpot, ttft, colocated=coloc)
    assert best(model, phase, cards, tpot + tpot_more, ttft, colocated=coloc) >= tight - 1e-9
    if phase == "both":
        assert best(model, phase, cards, tpot, ttft + ttft_more, colocated=coloc) >= tight - 1e-9


@settings(max_examples=EXAMPLES, deadline=None)
@given(model=instance, phase=phase, data=st.data(), tpot=st.floats(10, 150), coloc=colocated)
def test_more_cards_never_lower_the_best(model, phase, data, tpot, coloc):
    lo, hi = INSTANCES[model]
    cards = data.draw(st.integers(lo, hi), label="cards")
    more = data.draw(st.integers(cards, hi + 16), label="more_cards")
    fewer_best = best(model, phase, cards, tpot, 2000.0, colocated=coloc)
    assert best(model, phase, more, tpot, 2000.0, colocated=coloc) >= fewer_best - 1e-9


@pytest.fixture(scope="module")
def hbm_variants(tmp_path_factory) -> dict[float, str]:
    """A2 with its HBM per device scaled, as hardware files (any path is accepted as --hardware)."""
    folder = tmp_path_factory.mktemp("hardware")
    a2 = load_hardware("a2")
    out = {}
    for scale in HBM_SCALES:
        spec = a2.model_copy(update={"hbm_bytes": a2.hbm_bytes * scale})
        path = folder / f"a2-hbm-x{scale:g}.yaml"
        path.write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
        out[scale] = str(path)
    return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    model=instance,
    phase=phase,
    data=st.data(),
    tpot=st.floats(10, 150),
    scales=st.lists(st.sampled_from(HBM_SCALES), min_size=2, max_size=2, unique=True).map(sorted),
    coloc=colocated,
)
def test_more_hbm_never_lowers_the_best(hbm_variants, model, phase, data, tpot, scales, coloc):
    lo, hi = INSTANCES[model]
    cards = data.draw(st.integers(lo, hi), label="cards")
    small, large = (hbm_variants[s] for s in scales)
    assert (
        best(model, phase, cards, tpot, 2000.0, large, colocated=coloc)
        >= best(model, phase, cards, tpot, 2000.0, small, colocated=coloc) - 1e-9
    )


def test_more_hbm_regression_colocated(hbm_variants):
    """A counterexample the property once found: with 1.25x HBM the colocated candidates missed
    the 1.0x best plan (B78 MTP1, 12K tokens per forward, 617.8 tokens/s per card)."""
    small = best("deepseek-v3", "both", 27, 143.0, 2000.0, hbm_variants[1.0])
    large = best("deepseek-v3", "both", 27, 143.0, 2000.0, hbm_variants[1.25])
    assert large >= small - 1e-9


def test_the_hbm_variants_differ_only_in_hbm(hbm_variants):
    base, bigger = load_hardware(hbm_variants[1.0]), load_hardware(hbm_variants[2.0])
    assert bigger.hbm_bytes == 2 * base.hbm_bytes
    assert bigger.model_dump(exclude={"hbm_bytes"}) == base.model_dump(exclude={"hbm_bytes"})
