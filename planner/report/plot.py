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


def y_label(metric: str, y_axis: str = "tokens-per-card", currency: str | None = None) -> str:
    """The y axis: the deployment's output tokens/s per card, or the decode cards'; or its cost per
    million output tokens or joules per output token (`--y-axis cost`, `energy`)."""
    cards = "decode cards" if metric == "decode" else "prefill + decode cards"
    if y_axis == "cost":
        return f"{currency or 'cost'} per million output tokens ({cards}; lower is better)"
    if y_axis == "energy":
        return f"joules per output token ({cards}; lower is better)"
    if metric == "decode":
        return "decode output tokens/s per decode card"
    return "output tokens/s per card (prefill + decode cards)"


def frontier_figure(
    curves: list[Curve], published: list[PublishedPoint], metric: str, title: str, y_text: str | None = None
) -> Figure:
    """The figure: curves (Pareto points joined, dominated points hollow), annotations, "
    "published."""
    # imported here: matplotlib takes a good part of a second to import; only --plot needs it
    import matplotlib
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 6.0), dpi=110, layout="constrained")
    ax = fig.subplots()
    every = [p for c in curves for p in c.points] + list(published)
    x_max = max((p.x_tokens_per_s_per_user for p in every), default=1.0) or 1.0
    y_max = max((p.y for p in every), default=1.0) or 1.0
    # what is drawn where, as fractions of the axes: labels are placed away from it
    x_span, y_span = x_max * 1.22, y_max * 1.12
    taken: list[tuple[float, float]] = [(p.x_tokens_per_s_per_user / x_span, p.y / y_span) for p in every]
    for k, pub in enumerate(sorted(published, key=lambda q: q.x_tokens_per_s_per_user)):  # their labels (below)
        x, y = pub.x_tokens_per_s_per_user / x_span, pub.y / y_span
        taken += [(x + dx, y + (-0.025 if k % 2 == 0 else 0.02)) for dx in (0.05, 0.1, 0.15)]

    def place(x: float, y: float, text: str) -> tuple[tuple[int, int], int]:
        """The label offset (points) and rotation that keep the label farthest from what is drawn."""
        # a 6.5 pt label is about 0.0045 of the axes' width per character, drawn from its anchor
        length = 0.0045 * len(text)
        best, best_gap = ((4, 6), 20), -1.0
        for offset, rotation, dy in (((4, 6), 20, 0.025), ((6, -12), -20, -0.035), ((6, 14), 20, 0.05)):
            centre = (x + 0.01 + length / 2, y + dy + (length / 2 * 0.36 if rotation > 0 else -length / 2 * 0.36))
            gap = min((abs(centre[0] - q[0]) * 0.5 + abs(centre[1] - q[1]) for q in taken), default=1.0)
            if gap > best_gap + 1e-9:
                best, best_gap = (offset, rotation), gap
        return best

    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    hw_color: dict[str, str] = {}
    for i, curve in enumerate(curves):
        color = colors[i % len(colors)]
        hw_color.setdefault(curve.hardware, color)
        front = [curve.points[j] for j in curve.front]
        xs = [p.x_tokens_per_s_per_user for p in front]
        ys = [p.y for p in front]
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
                [p.y for p in dominated],
                facecolors="none",
                edgecolors=color,
                s=22,
                linewidths=0.8,
            )
        for j, text in curve.changes:
            p = curve.points[j]
            x, y = p.x_tokens_per_s_per_user / x_span, p.y / y_span
            offset, rotation = place(x, y, text)
            length = 0.0045 * len(text)
            slope = 0.36 if rotation > 0 else -0.36
            taken += [(x + 0.01 + length * f, y + offset[1] / 300 + slope * length * f) for f in (0.2, 0.5, 0.8)]
            ax.annotate(
                text,
                (p.x_tokens_per_s_per_user, p.y),
                xytext=offset,
                textcoords="offset points",
                fontsize=6.5,
                color=color,
                rotation=rotation,
            )
    if published:
        # neighbouring published points (A2-D70 and A2-D90) would print their labels on top of
        # each other: alternate the labels below and above their stars
        for k, pub in enumerate(sorted(published, key=lambda q: q.x_tokens_per_s_per_user)):
            color = hw_color.get(pub.hardware, "black")
            ax.scatter(
                [pub.x_tokens_per_s_per_user],
                [pub.y],
                marker="*",
                s=130,
                color=color,
                edgecolors="black",
                linewidths=0.6,
                zorder=5,
            )
            ax.annotate(
                f"{pub.id} (published)",
                (pub.x_tokens_per_s_per_user, pub.y),
                xytext=(6, -11 if k % 2 == 0 else 5),
                textcoords="offset points",
                fontsize=7,
                fontweight="bold",
            )
        pub_label = "published (decode-only per card)" if metric == "deployment" else "published"
        ax.scatter([], [], marker="*", s=130, color="white", edgecolors="black", label=pub_label)
    ax.set_xlabel("tokens/s per user (1000 / TPOT)")
    ax.set_ylabel(y_text or y_label(metric))
    # a long title would run past the figure's edges (matplotlib does not wrap): wrap each line
    lines = [textwrap.fill(line, TITLE_WIDTH_CHARS) for line in title.splitlines()]
    ax.set_title("\n".join(lines), fontsize=9)
    ax.grid(True, alpha=0.3)
    # room above the highest point and right of the rightmost one for their labels
    ax.set_xlim(0, x_span)
    ax.set_ylim(0, y_span)
    if curves or published:
        ax.legend(fontsize=8, loc="upper right")
    return fig


def render(fig: Figure, fmt: str, salt: str = "moeplan") -> bytes:
    """PNG or SVG bytes of the figure (SVG keeps text as text, and carries no date; `salt` seeds its
    element ids, so that several figures inlined in one page do not share ids)."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()
