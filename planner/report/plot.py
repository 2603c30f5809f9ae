"""The frontier plot of a sweep: output tokens/s per card against tokens/s per user.

Drawn on a bare matplotlib `Figure` (no pyplot, so no display and no global state: it renders
with the Agg canvas in CI), one curve per machine or per value of the second swept parameter,
with the points where the plan's structure changes annotated and the published deployments
overlaid. `render` returns PNG or SVG bytes for an atomic write.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from planner.errors import BadInputError
from planner.ranking.frontier import Curve, PublishedPoint

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = {".png": "png", ".svg": "svg"}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">"]
TITLE_WIDTH_CHARS = 100  # at 9 pt, what the 9-inch figure holds on one line


def plot_format(path: Path) -> str:
    """'png' or 'svg' from the file's suffix; anything else is a BadInputError naming --plot."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise BadInputError(f"--plot: '{path}' must end in .png or .svg.")
    return fmt


def y_label(metric: str) -> str:
    """The y axis: the deployment's output tokens/s per card, or the decode cards'."""
    if metric == "decode":
        return "decode output tokens/s per decode card"
    return "output tokens/s per card (prefill + decode cards)"


def frontier_figure(curves: list[Curve], published: list[PublishedPoint], metric: str, title: str) -> Figure:
    """The figure: curves (Pareto points joined, dominated points hollow), annotations, "
    "published."""
    # imported here: matplotlib takes a good part of a second to import; only --plot needs it
    import matplotlib
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 6.0), dpi=110, layout="constrained")
    ax = fig.subplots()
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    hw_color: dict[str, str] = {}
    for i, curve in enumerate(curves):
        color = colors[i % len(colors)]
        hw_color.setdefault(curve.hardware, color)
        front = [curve.points[j] for j in curve.front]
        xs = [p.x_tokens_per_s_per_user for p in front]
        ys = [p.y_tokens_per_s_per_card for p in front]
        (line,) = ax.plot(
            xs,
            ys,
            marker=MARKERS[i % len(MARKERS)],
            color=color,
            label=curve.name,
            linewidth=1.6,
            markersize=5,
        )
        line.set_gid(f"series-{curve.name}")
        dominated = [p for j, p in enumerate(curve.points) if j not in set(curve.front)]
        if dominated:
            ax.scatter(
                [p.x_tokens_per_s_per_user for p in dominated],
                [p.y_tokens_per_s_per_card for p in dominated],
                facecolors="none",
                edgecolors=color,
                s=22,
                linewidths=0.8,
            )
        for j, text in curve.changes:
            p = curve.points[j]
            ax.annotate(
                text,
                (p.x_tokens_per_s_per_user, p.y_tokens_per_s_per_card),
                xytext=(4, 6),
                textcoords="offset points",
                fontsize=6.5,
                color=color,
                rotation=20,
            )
    if published:
        # neighbouring published points (A2-D70 and A2-D90) would print their labels on top of
        # each other: alternate the labels below and above their stars
        for k, pub in enumerate(sorted(published, key=lambda q: q.x_tokens_per_s_per_user)):
            color = hw_color.get(pub.hardware, "black")
            ax.scatter(
                [pub.x_tokens_per_s_per_user],
                [pub.y_tokens_per_s_per_card],
                marker="*",
                s=130,
                color=color,
                edgecolors="black",
                linewidths=0.6,
                zorder=5,
            )
            ax.annotate(
                f"{pub.id} (published)",
                (pub.x_tokens_per_s_per_user, pub.y_tokens_per_s_per_card),
                xytext=(6, -11 if k % 2 == 0 else 5),
                textcoords="offset points",
                fontsize=7,
                fontweight="bold",
            )
        pub_label = "published (decode-only per card)" if metric == "deployment" else "published"
        ax.scatter([], [], marker="*", s=130, color="white", edgecolors="black", label=pub_label)
    ax.set_xlabel("tokens/s per user (1000 / TPOT)")
    ax.set_ylabel(y_label(metric))
    # a long title would run past the figure's edges (matplotlib does not wrap): wrap each line
    lines = [textwrap.fill(line, TITLE_WIDTH_CHARS) for line in title.splitlines()]
    ax.set_title("\n".join(lines), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    if curves or published:
        ax.legend(fontsize=8, loc="upper right")
    return fig


def render(fig: Figure, fmt: str) -> bytes:
    """PNG or SVG bytes of the figure (SVG keeps text as text, and carries no date)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "moeplan"}):
        fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()
