"""Frontier helpers (Pareto points, structure changes, published points) and plan comparison."""

from __future__ import annotations

import pytest

from planner.costmodel.evaluate import evaluate_plan, plan_with_prediction
from planner.ranking.compare import changed_choices, figure_deltas, plan_choices, plan_figures
from planner.ranking.frontier import (
    FrontierPoint,
    pareto_front,
    published_points,
    structure_changes,
)
from planner.specs.catalog import load_hardware, load_model, load_plan


def test_pareto_front_keeps_only_undominated_points():
    xy = [(10, 800), (20, 500), (15, 400), (30, 300), (30, 250), (5, 700)]
    assert pareto_front(xy) == [0, 1, 3]
    assert pareto_front([]) == []


def _pt(ep: str, mtp: str, pd: str | None = None) -> FrontierPoint:
    s = {"EP": ep, "MTP": mtp}
    if pd:
        s["P:D"] = pd
    return FrontierPoint(0, 0, {}, s)


def test_structure_changes_mark_ep_mtp_and_large_pd_moves():
    pts = [
        _pt("64", "0", "1:4.0"),
        _pt("64", "0", "1:4.2"),
        _pt("64", "1", "1:4.2"),
        _pt("96", "1", "1:3.0"),
    ]
    changes = dict(structure_changes(pts))
    assert changes[0] == "EP64 MTP0 P:D 1:4.0"
    assert 1 not in changes  # a 5% P:D move is noise
    assert changes[2] == "MTP0->1"
    assert changes[3] == "EP64->96 P:D 1:4.2->1:3.0"


def test_published_points_for_deepseek_v3():
    model = load_model("deepseek-v3")
    a2 = {p.id: p for p in published_points(model, {"a2"})}
    assert set(a2) == {"A2-D70", "A2-D90", "A2 30 ms"}
    assert a2["A2-D70"].y == 723
    assert a2["A2-D70"].x_tokens_per_s_per_user == pytest.approx(723 / 72)
    assert a2["A2 30 ms"].y == pytest.approx(4 / 0.030)
    cm = {p.id: p for p in published_points(model, {"cm384"})}
    # CM-D is DeepSeek-R1: the same architecture; CM-D-max has no latency and is left out;
    # xDeepServe-D is a validation row (arXiv 2508.02520), a published deployment all the same
    assert set(cm) == {"CM-D", "CM 15 ms", "xDeepServe-D"}
    assert cm["xDeepServe-D"].y == 2400
    assert cm["CM 15 ms"].y == pytest.approx(8 / 0.015)
    assert cm["CM-D"].x_tokens_per_s_per_user == pytest.approx(20.0)
    assert published_points(load_model("kimi-k2"), {"a2", "cm384"}) == []


def _scored(name: str):
    plan, _ = load_plan(name)
    return plan_with_prediction(plan, evaluate_plan(plan))


def test_compare_two_plans():
    a2 = load_hardware("a2")
    model = load_model("deepseek-v3")
    d70, d30 = _scored("a2-d70"), _scored("a2-d-30ms")
    base, new = plan_choices(d70, a2, model), plan_choices(d30, a2, model)
    assert base["decode redundant expert slots"] == "0"
    changes = {c.name: (c.base, c.new) for c in changed_choices(base, new)}
    assert changes == {"decode concurrency per device": ("72", "4")}
    deltas = {d.name: d for d in figure_deltas(plan_figures(d70, a2), plan_figures(d30, a2))}
    assert deltas["tpot_ms"].delta < 0 and deltas["output_tokens_per_s_per_card"].relative < -0.5
    assert "ttft_ms" not in deltas and deltas["cards"].delta == 0
