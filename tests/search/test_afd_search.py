"""AFD in the one search: `--structure` picks the structures, the best AFD plan is the same
whether AFD is searched alone or beside colocated and PD, and AFD plans round-trip through
evaluate."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

# a small instance (DeepSeek-V2-Lite on A3, 16 cards): the search takes about a second
SMALL = ("--hardware", "a3", "--model", "deepseek-v2-lite", "--max-cards", "16")


def _plans(*args: str) -> list[dict]:
    r = run_cli("plan", "--json", "-", *SMALL, *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["plans"]


@pytest.fixture(scope="module")
def afd_only() -> list[dict]:
    return _plans("--structure", "afd", "--top", "3")


def test_structure_afd_returns_afd_decode_instances_fed_by_prefill_instances(afd_only):
    for plan in afd_only:
        assert "afd" in plan and "decode" not in plan and "prefill" in plan
        a = plan["afd"]
        assert a["attention_devices"] >= 1 and a["ffn_devices"] >= 1 and 1 <= a["micro_batches"] <= 4
        pred = plan["predicted"]
        assert pred["afd"]["fits_hbm"] and pred["afd"]["tpot_ms"] <= plan["slo"]["tpot_ms"]
        assert pred["system"]["cards"] <= 16
    # listed by tokens/s per card, plans within 0.5% of each other by TTFT (shorter first)
    values = [p["predicted"]["system"]["output_tokens_per_s_per_card"] for p in afd_only]
    assert all(later <= earlier * 1.005 for earlier, later in zip(values, values[1:], strict=False))


def test_structure_pd_has_no_afd_and_no_colocated_plan():
    for plan in _plans("--structure", "pd", "--top", "3"):
        assert "afd" not in plan and "colocated" not in plan and "decode" in plan


def test_a_longer_list_keeps_the_searchs_best_plan(afd_only):
    # rows within 0.5% of each other are listed by TTFT: here more than two 12-card rows come before
    # the search's best (15 cards); the list keeps it in its last row rather than cutting it
    best = _plans("--structure", "afd", "--top", "1")[0]["predicted"]["system"]["output_tokens_per_s_per_card"]
    listed = [p["predicted"]["system"]["output_tokens_per_s_per_card"] for p in afd_only]
    assert max(listed) == pytest.approx(best, rel=1e-9)


def test_the_best_afd_plan_is_the_same_searched_alone_or_beside_the_others(afd_only):
    r = run_cli("plan", *SMALL, "--top", "1")
    assert r.exit_code == 0, r.output
    # the search's own best (--top 1): a longer list orders plans within 0.5% of each other by TTFT
    best_alone = _plans("--structure", "afd", "--top", "1")[0]["predicted"]["system"]["output_tokens_per_s_per_card"]
    rows = [line for line in r.output.splitlines() if line.startswith("│ best AFD")]
    assert len(rows) == 1, r.output
    assert f"{best_alone:.1f}" in rows[0]
    top = _plans("--top", "1")[0]["predicted"]["system"]["output_tokens_per_s_per_card"]
    assert top >= best_alone


def test_an_afd_plan_evaluates_to_what_the_search_predicted(afd_only, tmp_path):
    f = tmp_path / "afd.json"
    f.write_text(json.dumps(afd_only[0]))
    r = run_cli("evaluate", str(f), "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["predicted"]["afd"] == afd_only[0]["predicted"]["afd"]


def test_an_alternative_is_the_best_of_every_engines_search_not_only_the_lead_engines():
    """MindIE runs no AFD: when its plan is rank 1, its own "best AFD" is empty, and the row must show
    vLLM-Ascend's AFD plan instead of saying none fits (planner.search.runnable)."""
    from types import SimpleNamespace

    from planner.search.alternatives import Alternative
    from planner.search.runnable import _best_alternatives
    from planner.specs.catalog import load_plan

    afd_plan, _ = load_plan("afd-a3-example")
    other, _ = load_plan("a2-d70")
    request = SimpleNamespace(rate_per_s=None)
    lead = SimpleNamespace(
        request=request,
        alternatives=[Alternative("best AFD", None, None, "none fits: no AFD configuration meets the SLOs and HBM")],
    )
    vllm = SimpleNamespace(request=request, alternatives=[Alternative("best AFD", afd_plan, None)])
    merged = _best_alternatives(lead, {"mindie": lead, "vllm-ascend": vllm}, [other], [])  # type: ignore[arg-type]
    assert [a.label for a in merged] == ["best AFD"]
    assert merged[0].plan is afd_plan and merged[0].rank is None
    # a label no engine fills keeps the lead's reason; a plan in the list gets its rank
    alone = _best_alternatives(lead, {"mindie": lead}, [other], [])  # type: ignore[arg-type]
    assert alone[0].plan is None and alone[0].reason and alone[0].reason.startswith("none fits")
    ranked = _best_alternatives(lead, {"mindie": lead, "vllm-ascend": vllm}, [other, afd_plan], [])  # type: ignore[arg-type]
    assert ranked[0].rank == 2


def test_where_no_engine_runs_afd_the_row_says_so_not_that_none_fits():
    """On A2 no engine runs AFD (the afd-plugin targets 910C): the row and the AFD line say that, and
    how to search it anyway, instead of claiming no AFD configuration meets the SLOs."""
    r = run_cli("plan", "--hardware", "a2", "--model", "deepseek-v2-lite", "--max-cards", "8", "--top", "1")
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.startswith("│ best AFD"))
    assert "no engine runs AFD of this model on this machine" in row
    assert "AFD: not in the list: no engine runs AFD of this model on this machine (--engine none" in r.output


def test_the_no_afd_reason_is_none_fits_when_an_engine_that_runs_afd_found_none():
    from types import SimpleNamespace

    from planner.search.alternatives import NO_AFD_FITS, NO_ENGINE_RUNS_AFD, Alternative
    from planner.search.runnable import _no_afd_alternative

    def outcome(engine: str, searched: bool) -> SimpleNamespace:
        reason = NO_AFD_FITS if searched else f"none fits: {engine}: it has no attention-FFN disaggregation"
        return SimpleNamespace(alternatives=[Alternative("best AFD", None, None, reason, unsearched=not searched)])

    none_run = {e: outcome(e, False) for e in ("vllm-ascend", "sglang", "mindie")}
    empty = none_run["mindie"].alternatives[0]
    merged = _no_afd_alternative(empty, none_run, [])  # type: ignore[arg-type]
    assert merged.reason == NO_ENGINE_RUNS_AFD and merged.unsearched
    one_searched = {**none_run, "vllm-ascend": outcome("vllm-ascend", True)}
    merged = _no_afd_alternative(empty, one_searched, [])  # type: ignore[arg-type]
    assert merged.reason == NO_AFD_FITS and not merged.unsearched
    # an engine that runs AFD here but whose whole search found nothing (no outcome at all) searched it too
    others = {e: outcome(e, False) for e in ("sglang", "mindie")}
    merged = _no_afd_alternative(empty, others, ["vllm-ascend"])  # type: ignore[arg-type]
    assert merged.reason == NO_AFD_FITS and not merged.unsearched


def test_engines_that_found_nothing_count_as_afd_searchers_only_where_they_run_afd():
    from planner.search.request import PlanRequest
    from planner.search.runnable import _afd_runners

    request = PlanRequest(model="deepseek-v3.2", hardware="a3")
    assert _afd_runners(request, ["vllm-ascend", "sglang", "mindie"]) == ["vllm-ascend"]
    assert _afd_runners(PlanRequest(model="deepseek-v3.2", hardware="a2"), ["vllm-ascend"]) == []
    assert _afd_runners(request, []) == []
