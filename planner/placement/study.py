"""One `moeplan experts` run: place every window, score against the baselines and bounds.

For each window t of the loads, moeplan's placement is made from window t's loads and scored on
window t and, when there is one, on window t + 1 (how well a placement made from past traffic
holds up on the next traffic); the EPLB global greedy made from window t is scored the same way.
The placement to deploy is the one made from the last window.

Held out (with two windows or more): a placement made from the first half of the windows (their
loads summed, as an engine would collect them) is scored on that part and on the rest, which it
was not made from: the gap is what drift costs (planner.costmodel.imbalance, part 2).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planner.placement.eplb import hierarchical_applies, hierarchical_placement
from planner.placement.loads import ExpertLoads
from planner.placement.metrics import (
    Routing,
    check_layout,
    default_routing,
    imbalance,
    lower_bound,
    nodes_reached,
    route_tokens,
    slot_aware_lower_bound,
)
from planner.placement.model import Placement
from planner.placement.optimize import FULL_SEARCH, SearchSettings, optimize_placement

REPORT_TOKENS = 1024  # simulated tokens per layer for the reported nodes per token


@dataclass(frozen=True)
class Scores:
    """Per-layer imbalance of the placements made from one window, scored on some window."""

    ours: np.ndarray
    greedy: np.ndarray
    hierarchical: np.ndarray | None
    bound: np.ndarray
    slot_aware_bound: np.ndarray


@dataclass(frozen=True)
class WindowStudy:
    """Placements made from one window and their scores."""

    window: int
    placement: Placement
    greedy: Placement
    hierarchical: Placement | None
    source: list[str]  # per layer: which candidate won
    own: Scores  # scored on the window they were made from
    next: Scores | None  # scored on the following window
    search_s: float


@dataclass(frozen=True)
class HeldOut:
    """Placements made from windows [0, fit_windows), scored there (`fitted`) and on the rest (`held_out`)."""

    fit_windows: int
    total_windows: int
    fitted: Scores
    held_out: Scores


@dataclass(frozen=True)
class Study:
    """Everything `moeplan experts` reports."""

    devices: int
    slots_per_device: int
    nodes: int
    routing: Routing
    hierarchical_used: bool  # False: the hierarchical policy fell back to the global one
    windows: list[WindowStudy]
    nodes_per_token: dict[str, np.ndarray] = field(default_factory=dict)  # last window
    total_s: float = 0.0
    held_out: HeldOut | None = None

    @property
    def deployed(self) -> WindowStudy:
        """The placement to deploy: made from the last window."""
        return self.windows[-1]


def _scores(
    loads: np.ndarray,
    ours: Placement,
    greedy: Placement,
    hier: Placement | None,
    devices: int,
    slots: int,
) -> Scores:
    return Scores(
        ours=imbalance(loads, ours),
        greedy=imbalance(loads, greedy),
        hierarchical=imbalance(loads, hier) if hier is not None else None,
        bound=lower_bound(loads, devices, slots),
        slot_aware_bound=slot_aware_lower_bound(loads, devices, slots),
    )


def run_study(
    loads: ExpertLoads,
    devices: int,
    slots_per_device: int,
    nodes: int = 1,
    routing: Routing | None = None,
    settings: SearchSettings = FULL_SEARCH,
) -> Study:
    """Place and score every window (see the module docstring)."""
    start = time.perf_counter()
    routing = routing or default_routing(loads.experts)
    check_layout(loads.window(0), devices, slots_per_device, nodes)
    routing.check(loads.experts)
    hier_used = hierarchical_applies(loads.experts, devices, slots_per_device, nodes, routing.n_group)
    studies: list[WindowStudy] = []
    for t in range(loads.num_windows):
        w = loads.window(t)
        t0 = time.perf_counter()
        result = optimize_placement(w, devices, slots_per_device, nodes, routing, settings)
        search_s = time.perf_counter() - t0
        hier = hierarchical_placement(w, devices, slots_per_device, nodes, routing.n_group) if nodes > 1 else None
        own = _scores(w, result.placement, result.baseline, hier, devices, slots_per_device)
        nxt = None
        if t + 1 < loads.num_windows:
            nxt = _scores(
                loads.window(t + 1),
                result.placement,
                result.baseline,
                hier,
                devices,
                slots_per_device,
            )
        studies.append(WindowStudy(t, result.placement, result.baseline, hier, result.source, own, nxt, search_s))
    reach: dict[str, np.ndarray] = {}
    if nodes > 1:
        last = studies[-1]
        routes = route_tokens(loads.window(loads.num_windows - 1), routing, REPORT_TOKENS, settings.seed)
        reach["ours"] = nodes_reached(routes, last.placement, nodes)
        if last.hierarchical is not None:
            reach["hierarchical"] = nodes_reached(routes, last.hierarchical, nodes)
        reach["greedy"] = nodes_reached(routes, last.greedy, nodes)
    held = _held_out(loads, devices, slots_per_device, nodes, routing, settings)
    return Study(
        devices,
        slots_per_device,
        nodes,
        routing,
        hier_used,
        studies,
        reach,
        time.perf_counter() - start,
        held,
    )


def _held_out(
    loads: ExpertLoads,
    devices: int,
    slots: int,
    nodes: int,
    routing: Routing,
    settings: SearchSettings,
) -> HeldOut | None:
    """Fit on the first half of the windows (summed), score on the rest (summed); None for one window."""
    n = loads.num_windows
    if n < 2:
        return None
    k = (n + 1) // 2
    fit = np.sum([loads.window(t) for t in range(k)], axis=0)
    rest = np.sum([loads.window(t) for t in range(k, n)], axis=0)
    result = optimize_placement(fit, devices, slots, nodes, routing, settings)
    hier = hierarchical_placement(fit, devices, slots, nodes, routing.n_group) if nodes > 1 else None
    return HeldOut(
        k,
        n,
        _scores(fit, result.placement, result.baseline, hier, devices, slots),
        _scores(rest, result.placement, result.baseline, hier, devices, slots),
    )


def study_figures(study: Study) -> dict[str, object]:
    """The per-layer figures of the deployed placement, for moeplan's JSON."""
    last = study.deployed
    imbalance_lists = {
        "moeplan": _rounded(last.own.ours),
        "eplb_global_greedy": _rounded(last.own.greedy),
        "lower_bound": _rounded(last.own.bound),
        "slot_aware_lower_bound": _rounded(last.own.slot_aware_bound),
    }
    if last.own.hierarchical is not None:
        imbalance_lists["eplb_hierarchical"] = _rounded(last.own.hierarchical)
    figures: dict[str, object] = {
        "devices": study.devices,
        "nodes": study.nodes,
        "routing": {
            "experts_per_token": study.routing.experts_per_token,
            "n_group": study.routing.n_group,
            "topk_group": study.routing.topk_group,
        },
        "made_from_window": last.window,
        "imbalance": imbalance_lists,
        "candidate_per_layer": last.source,
    }
    if study.held_out is not None:
        h = study.held_out
        figures["held_out"] = {
            "fit_windows": h.fit_windows,
            "total_windows": h.total_windows,
            "moeplan_fitted_mean": round(float(np.mean(h.fitted.ours)), 6),
            "moeplan_held_out_mean": round(float(np.mean(h.held_out.ours)), 6),
            "eplb_global_greedy_fitted_mean": round(float(np.mean(h.fitted.greedy)), 6),
            "eplb_global_greedy_held_out_mean": round(float(np.mean(h.held_out.greedy)), 6),
        }
    if study.nodes_per_token:
        figures["nodes_per_token"] = {k: _rounded(v) for k, v in study.nodes_per_token.items()}
    return figures


def _rounded(values: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in values]
