"""Where the time and the memory go, drawn with matplotlib as SVG for the page.

The time chart stacks a decode step and a prefill forward by module as `predicted` breaks them
down (the busiest device's times, `planner.costmodel`), with the MoE part split into what the
mean device takes and what the busiest one adds over it (`planner.ranking.robust.split_expert_balance`,
the split the lead analysis uses). Communication hidden by micro-batching is a negative part of
the breakdown: the bar stacks compute first and communication last, every part at full length,
and hatches the hidden stretch at its end (over the communication it hides), so the bar's solid
end is the step. The band of the step (every factor at an end of its range)
is an error bar.

The memory chart stacks one device's HBM by part against two lines: what the engine may fill
(the device's HBM x --hbm-utilization) and the device's whole HBM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.ranking.robust import split_expert_balance
from planner.report.evaluate_report import BREAKDOWN_LABELS

if TYPE_CHECKING:
    from matplotlib.axes import Axes

GIB = 1024.0**3
WIDTH_IN = 9.0

# part of the breakdown -> (label, colour), in the order the bar stacks them
TIME_PARTS: dict[str, tuple[str, str]] = {
    # compute first ...
    "attention": (BREAKDOWN_LABELS["attention"], "#4c78a8"),
    "dense_ffn": (BREAKDOWN_LABELS["dense_ffn"], "#54a24b"),
    "moe_mean": ("MoE router + experts (mean device)", "#e45756"),
    "moe_balance": ("expert imbalance (busiest device over the mean)", "#ff9d98"),
    "lm_head": (BREAKDOWN_LABELS["lm_head"], "#9d755d"),
    "mtp": (BREAKDOWN_LABELS["mtp"], "#72b7b2"),
    "launch_overhead": (BREAKDOWN_LABELS["launch_overhead"], "#79706e"),
    # ... then communication, which micro-batching hides under compute: the hatch lies over it
    "attention_comm": (BREAKDOWN_LABELS["attention_comm"], "#9ecae9"),
    "dense_ffn_comm": (BREAKDOWN_LABELS["dense_ffn_comm"], "#a6dba0"),
    "moe_comm": (BREAKDOWN_LABELS["moe_comm"], "#b279a2"),
    "lm_head_comm": (BREAKDOWN_LABELS["lm_head_comm"], "#d8b5a5"),
}
HIDDEN_LABEL = BREAKDOWN_LABELS["micro_batch_overlap"]
HBM_COLOURS = [
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#b279a2",
    "#e45756",
    "#72b7b2",
    "#eeca3b",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
    "#79706e",
    "#d67195",
    "#439894",
]


@dataclass(frozen=True)
class TimeBar:
    """One step or forward of the busiest device, by module."""

    title: str
    breakdown_ms: dict[str, float]
    total_ms: float
    band_ms: tuple[float, float] | None
    moe_imbalance: float


@dataclass(frozen=True)
class HbmBar:
    """One device's HBM, by part."""

    title: str
    breakdown_bytes: dict[str, int]
    capacity_bytes: float  # what the plan may fill
    device_bytes: float  # the device's whole HBM


def time_parts(bar: TimeBar) -> tuple[list[tuple[str, float]], float]:
    """The bar's positive parts in stacking order (key of TIME_PARTS, ms) and the hidden ms (>= 0)."""
    parts: list[tuple[str, float]] = []
    hidden = 0.0
    for key, ms in bar.breakdown_ms.items():
        if key == "micro_batch_overlap":
            hidden += -ms
        elif key == "moe":
            mean_ms, extra_ms = split_expert_balance(ms, bar.moe_imbalance)
            parts += [("moe_mean", mean_ms), ("moe_balance", extra_ms)]
        else:
            parts.append((key, ms))
    order = list(TIME_PARTS)
    parts = [p for p in parts if p[1] > 0]
    parts.sort(key=lambda p: order.index(p[0]) if p[0] in order else len(order))
    return parts, max(0.0, hidden)


def _figure(height_in: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(WIDTH_IN, height_in), dpi=100, layout="constrained")


def time_chart(bars: list[TimeBar]) -> bytes:
    """SVG: one stacked bar per step or forward, each on its own millisecond axis, one legend."""
    from planner.report.plot import render

    fig = _figure(1.25 * len(bars) + 1.3)
    axes = fig.subplots(len(bars), 1, squeeze=False)[:, 0]
    used: dict[str, None] = {}
    for ax, bar in zip(axes, bars, strict=True):
        used.update(dict.fromkeys(_draw_time_bar(ax, bar)))
    handles, labels = _legend_entries(used)
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=7.5, frameon=False)
    return render(fig, "svg", salt="moeplan-time")


def _draw_time_bar(ax: Axes, bar: TimeBar) -> list[str]:
    parts, hidden = time_parts(bar)
    span = sum(ms for _, ms in parts)
    left = 0.0
    for key, ms in parts:
        label, colour = TIME_PARTS.get(key, (key, "#cccccc"))
        ax.barh(0, ms, left=left, height=0.6, color=colour, edgecolor="white", linewidth=0.6)
        if ms >= 0.06 * span:
            dark = key in ("attention_comm", "dense_ffn_comm", "lm_head_comm", "moe_balance")
            ax.text(
                left + ms / 2, 0, f"{ms:.0f}", ha="center", va="center", fontsize=7, color="black" if dark else "white"
            )
        left += ms
    keys = [k for k, _ in parts]
    if hidden > 0:
        ax.barh(0, hidden, left=span - hidden, height=0.6, color="white", alpha=0.55, hatch="////", edgecolor="#333333")
        keys.append("hidden")
    ax.plot([bar.total_ms, bar.total_ms], [-0.42, 0.42], color="black", linewidth=2.0)
    if bar.band_ms is not None and bar.band_ms[0] != bar.band_ms[1]:
        low, high = bar.band_ms
        ax.errorbar(
            [bar.total_ms],
            [0.5],
            xerr=[[bar.total_ms - low], [high - bar.total_ms]],
            fmt="none",
            ecolor="black",
            capsize=3,
            linewidth=1,
        )
    title = f"{bar.title}: {bar.total_ms:,.1f} ms"
    if bar.band_ms is not None and bar.band_ms[0] != bar.band_ms[1]:
        title += f" (band {bar.band_ms[0]:,.1f}–{bar.band_ms[1]:,.1f} ms, error bar)"
    if hidden > 0:
        title += f"; {hidden:,.1f} ms hidden by micro-batching (hatched)"
    ax.set_title(title, fontsize=8.5, loc="left")
    ax.set_yticks([])
    ax.set_ylim(-0.55, 0.75)
    right = max(span, bar.band_ms[1] if bar.band_ms else 0.0, bar.total_ms)
    ax.set_xlim(0, right * 1.03)
    ax.set_xlabel("ms (busiest device)", fontsize=7.5)
    ax.tick_params(labelsize=7.5)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    return keys


def _legend_entries(used: dict[str, None]) -> tuple[list, list[str]]:
    from matplotlib.patches import Patch

    handles: list = []
    labels: list[str] = []
    for key in TIME_PARTS:
        if key in used:
            label, colour = TIME_PARTS[key]
            handles.append(Patch(facecolor=colour, edgecolor="white"))
            labels.append(label)
    if "hidden" in used:
        handles.append(Patch(facecolor="white", hatch="////", edgecolor="#333333"))
        labels.append(HIDDEN_LABEL + " (the bar's solid end is the step)")
    from matplotlib.lines import Line2D

    handles.append(Line2D([0], [0], color="black", linewidth=2))
    labels.append("step / forward time; error bar: its band")
    return handles, labels


def hbm_chart(bars: list[HbmBar]) -> bytes:
    """SVG: one stacked bar per kind of device, against its fill limit and its whole HBM."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from planner.report.plot import render

    fig = _figure(0.62 * len(bars) + 1.6)
    ax = fig.subplots()
    keys: list[str] = []
    for bar in bars:
        keys += [k for k in bar.breakdown_bytes if k not in keys]
    colour = {k: HBM_COLOURS[i % len(HBM_COLOURS)] for i, k in enumerate(keys)}
    right = 0.0
    for y, bar in enumerate(bars):
        left = 0.0
        for key, b in bar.breakdown_bytes.items():
            gib = b / GIB
            ax.barh(y, gib, left=left, height=0.6, color=colour[key], edgecolor="white", linewidth=0.6)
            if gib >= 2.5:
                ax.text(left + gib / 2, y, f"{gib:.1f}", ha="center", va="center", fontsize=7, color="white")
            left += gib
        cap, whole = bar.capacity_bytes / GIB, bar.device_bytes / GIB
        ax.plot([cap, cap], [y - 0.42, y + 0.42], color="#d62728", linestyle="--", linewidth=1.6)
        ax.plot([whole, whole], [y - 0.42, y + 0.42], color="black", linewidth=1.6)
        verdict = "fits" if left <= cap else "OVERFLOWS"
        ax.text(
            max(whole, left) * 1.015,
            y,
            f"{left:.1f} GiB: {verdict} in {cap:.1f}\n({bar.capacity_bytes / bar.device_bytes:g} of {whole:.0f} GiB)",
            fontsize=7,
            va="center",
            color="black" if left <= cap else "#d62728",
        )
        right = max(right, whole, left)
    ax.set_yticks(range(len(bars)), [b.title for b in bars], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, right * 1.3)
    ax.set_xlabel("GiB per device", fontsize=7.5)
    ax.tick_params(axis="x", labelsize=7.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles: list = [Patch(facecolor=colour[k], edgecolor="white") for k in keys]
    labels = [k.replace("_", " ") for k in keys]
    handles += [
        Line2D([0], [0], color="#d62728", linestyle="--", linewidth=1.6),
        Line2D([0], [0], color="black", linewidth=1.6),
    ]
    labels += ["what the plan may fill (--hbm-utilization of the HBM)", "the device's HBM"]
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=7.5, frameon=False)
    return render(fig, "svg", salt="moeplan-hbm")
