"""Rich tables for `moeplan experts`: imbalance against the EPLB baselines and the bounds,
replica counts, nodes reached per token, and how placements hold up on the next window."""

from __future__ import annotations

import numpy as np
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from planner.placement.study import Scores, Study


def _stats(values: np.ndarray) -> tuple[str, str, str]:
    return (f"{values.min():.4f}", f"{np.median(values):.4f}", f"{values.max():.4f}")


def _gap(values: np.ndarray, bound: np.ndarray) -> str:
    gap = values / bound - 1.0
    return f"{np.median(gap) * 100:.2f}% / {gap.max() * 100:.2f}%"


def header(study: Study, what: str) -> Text:
    """One line: what was placed onto what."""
    layers = study.deployed.placement.layers
    experts = study.deployed.placement.num_experts
    slots = study.devices * study.slots_per_device
    r = study.routing
    routing = f"top-{r.experts_per_token}" + (f", {r.topk_group} of {r.n_group} groups" if r.n_group > 1 else "")
    return Text(
        f"{what}: {layers} MoE layers x {experts} experts onto {study.devices} devices x "
        f"{study.slots_per_device} slots = {slots} slots ({slots - experts} redundant), "
        f"{study.nodes} node(s); routing {routing}."
    )


def imbalance_table(scores: Scores, title: str) -> Table:
    """Min / median / max over layers of max device load / mean device load."""
    table = Table(title=title)
    for col in ("placement", "min", "median", "max", "above bound (median / worst layer)"):
        table.add_column(col, justify="left" if col == "placement" else "right")
    rows: list[tuple[str, np.ndarray]] = [
        ("moeplan", scores.ours),
        ("EPLB greedy (global)", scores.greedy),
    ]
    if scores.hierarchical is not None:
        rows.append(("EPLB hierarchical", scores.hierarchical))
    for name, values in rows:
        table.add_row(name, *_stats(values), _gap(values, scores.bound))
    table.add_row("lower bound", *_stats(scores.bound), "")
    table.add_row(
        "slot-aware bound",
        *_stats(scores.slot_aware_bound),
        "(moeplan: " + _gap(scores.ours, scores.slot_aware_bound) + ")",
    )
    return table


def drift_table(study: Study) -> Table | None:
    """Placements made from window t, scored on t and on t + 1 (median / worst layer)."""
    if len(study.windows) < 2:
        return None
    table = Table(title="Placement made from window t, scored on t and on t+1 (imbalance: median / worst layer)")
    for col in (
        "t",
        "moeplan on t",
        "moeplan on t+1",
        "greedy on t",
        "greedy on t+1",
        "bound on t+1",
    ):
        table.add_column(col, justify="right")
    for w in study.windows:
        if w.next is None:
            continue

        def cell(values: np.ndarray) -> str:
            return f"{np.median(values):.4f} / {values.max():.4f}"

        table.add_row(
            str(w.window),
            cell(w.own.ours),
            cell(w.next.ours),
            cell(w.own.greedy),
            cell(w.next.greedy),
            cell(w.next.bound),
        )
    return table


def held_out_table(study: Study) -> Table | Text:
    """The placement made from the first part of the loads, scored there and on the rest."""
    h = study.held_out
    if h is None:
        return Text(
            "held out: one window only, so nothing to score a placement on that it was not made from "
            "(give loads with windows, or --synthetic ... --windows 2 or more)."
        )
    rest = (
        f"windows {h.fit_windows}-{h.total_windows - 1}"
        if h.total_windows - h.fit_windows > 1
        else (f"window {h.fit_windows}")
    )
    table = Table(
        title=f"Held out: placement made from windows 0-{h.fit_windows - 1}, scored on them (fitted) and on "
        f"{rest} (held out); imbalance mean / median / worst layer"
    )
    for col in ("placement", "fitted", "held out", "held out / fitted"):
        table.add_column(col, justify="left" if col == "placement" else "right")

    def cell(values: np.ndarray) -> str:
        return f"{np.mean(values):.4f} / {np.median(values):.4f} / {values.max():.4f}"

    for name, fitted, held in (
        ("moeplan", h.fitted.ours, h.held_out.ours),
        ("EPLB greedy (global)", h.fitted.greedy, h.held_out.greedy),
    ):
        table.add_row(name, cell(fitted), cell(held), f"{np.mean(held) / np.mean(fitted):.3f}")
    table.add_row("lower bound", cell(h.fitted.bound), cell(h.held_out.bound), "")
    return table


def replica_table(study: Study) -> Table:
    """How many (layer, expert) pairs have 1, 2, 3, ... replicas: moeplan vs greedy."""
    ours = study.deployed.placement.replica_counts
    greedy = study.deployed.greedy.replica_counts
    top = int(max(ours.max(), greedy.max()))
    table = Table(title="Replicas per logical expert (count of layer x expert pairs)")
    table.add_column("replicas", justify="right")
    table.add_column("moeplan", justify="right")
    table.add_column("EPLB greedy", justify="right")
    ours_hist = np.bincount(ours.ravel(), minlength=top + 1)
    greedy_hist = np.bincount(greedy.ravel(), minlength=top + 1)
    for n in range(1, top + 1):
        if ours_hist[n] or greedy_hist[n]:
            table.add_row(str(n), str(int(ours_hist[n])), str(int(greedy_hist[n])))
    return table


def nodes_table(study: Study) -> Table | None:
    """Nodes a token's dispatch reaches (simulated), per placement."""
    if not study.nodes_per_token:
        return None
    table = Table(title=f"Nodes reached per token (of {study.nodes}; seeded routing simulation)")
    for col in ("placement", "min", "median", "max", "mean"):
        table.add_column(col, justify="left" if col == "placement" else "right")
    names = {"ours": "moeplan", "hierarchical": "EPLB hierarchical", "greedy": "EPLB greedy"}
    for key, values in study.nodes_per_token.items():
        table.add_row(
            names.get(key, key),
            f"{values.min():.2f}",
            f"{np.median(values):.2f}",
            f"{values.max():.2f}",
            f"{values.mean():.3f}",
        )
    return table


def notes(study: Study, uniform_layers: int, routing_assumed: bool) -> list[str]:
    """Plain-language remarks under the tables."""
    out: list[str] = []
    if uniform_layers:
        out.append(f"{uniform_layers} layer(s) had no load at all and were treated as uniform.")
    if routing_assumed and study.nodes > 1:
        out.append("no --model: routing assumed top-8 without expert groups; give --model for group-limited routing.")
    if study.nodes > 1 and not study.hierarchical_used:
        out.append(
            "EPLB hierarchical fell back to its global policy (expert groups do not divide evenly over the nodes)."
        )
    ours, greedy = study.deployed.own.ours, study.deployed.own.greedy
    worse = int((ours > greedy * (1 + 1e-12)).sum())
    predicts = (
        "the held-out score above is the one that predicts deployment"
        if study.held_out is not None
        else "with one window there is no held-out score, and an in-sample score flatters the placement"
    )
    out.append(
        f"on the window it was made from (in-sample) moeplan is below or equal to the EPLB greedy on "
        f"{len(ours) - worse} of {len(ours)} layers; {predicts}."
    )
    limited = study.deployed.own.slot_aware_bound > study.deployed.own.bound * (1 + 1e-9)
    if limited.any():
        out.append(
            f"{int(limited.sum())} layer(s): the heaviest replica must share its device "
            "with other replicas, so the plain lower bound cannot be reached there; the "
            "slot-aware bound accounts for that."
        )
    return out


def timing(study: Study, total_s: float) -> Text:
    """Time taken."""
    search = sum(w.search_s for w in study.windows)
    layers = study.deployed.placement.layers * len(study.windows)
    return Text(
        f"time: {total_s:.2f} s in all; placement search {search:.2f} s "
        f"({search / max(layers, 1) * 1e3:.1f} ms per layer)."
    )


def held_out_summary(study: Study) -> Text:
    """The headline: how the placements do on traffic they were not made from (in-sample figures mislead)."""
    h = study.held_out
    if h is None:
        return Text(
            "summary: no held-out score (one window of loads: every figure below is in-sample, on the traffic the "
            "placement was made from); give loads of several windows, or --windows N, to score it on the next ones"
        )
    ours, greedy = float(np.mean(h.held_out.ours)), float(np.mean(h.held_out.greedy))
    verdict = "below" if ours < greedy else ("level with" if ours == greedy else "above")
    return Text(
        f"summary (held out): on windows the placements were not made from, moeplan's imbalance is {ours:.4f}, "
        f"{verdict} the EPLB greedy's {greedy:.4f} ({(ours / greedy - 1):+.2%}); made from windows "
        f"0-{h.fit_windows - 1}, where moeplan scores {float(np.mean(h.fitted.ours)):.4f} and the greedy "
        f"{float(np.mean(h.fitted.greedy)):.4f}"
    )


def render(study: Study, what: str, uniform_layers: int, routing_assumed: bool, total_s: float) -> list[RenderableType]:
    """Everything the command prints, in order: the held-out summary first."""
    out: list[RenderableType] = [header(study, what), held_out_summary(study)]
    title = "Imbalance = max device load / mean device load (1.0 is perfect)"
    if len(study.windows) > 1:
        title += f", placement made from the last window ({study.deployed.window})"
    out.append(imbalance_table(study.deployed.own, title))
    drift = drift_table(study)
    if drift is not None:
        out.append(drift)
    out.append(held_out_table(study))
    out.append(replica_table(study))
    reach = nodes_table(study)
    if reach is not None:
        out.append(reach)
    out.extend(Text(f"note: {line}") for line in notes(study, uniform_layers, routing_assumed))
    out.append(timing(study, total_s))
    return out
