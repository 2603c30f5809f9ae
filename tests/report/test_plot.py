"""The frontier plot renders headless (PNG and SVG) with the expected series, and the terminal
chart and exports carry the same points."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET

import matplotlib.image
import pytest

from planner.ranking.frontier import published_points, sweep_curves, sweep_metric
from planner.report.plot import frontier_figure, plot_format, render
from planner.report.sweep_report import sweep_csv, sweep_document, terminal_chart
from planner.search.request import PlanRequest
from planner.search.sweep import SweepAxis, grid, run_sweep
from planner.specs.catalog import load_model
from planner.specs.plan import SLO

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def decode_sweep():
    """DeepSeek-V3 decode on A2 (32 cards) and CM384 (64 cards) at four TPOT SLOs."""
    axes = [SweepAxis("hardware", ("a2", "cm384")), SweepAxis("tpot-ms", (10.0, 30.0, 60.0, 100.0))]
    budgets = {"a2": 32, "cm384": 64}
    points = [
        (
            {**v, "max-cards": budgets[v["hardware"]]},
            PlanRequest(
                hardware=v["hardware"],
                max_cards=budgets[v["hardware"]],
                phase="decode",
                top=1,
                slo=SLO(tpot_ms=v["tpot-ms"]),
            ),
        )
        for v in grid(axes)
    ]
    return run_sweep(points, axes)


@pytest.fixture(scope="module")
def figure_parts(decode_sweep):
    curves = sweep_curves(decode_sweep)
    published = published_points(load_model("deepseek-v3"), {c.hardware for c in curves})
    return curves, published


def test_the_sweep_reuses_tables_and_keeps_infeasible_points(decode_sweep):
    assert decode_sweep.cache_hits > decode_sweep.cache_misses > 0
    statuses = {(p.values["hardware"], p.values["tpot-ms"]): p.status for p in decode_sweep.points}
    assert statuses[("a2", 10.0)] == "infeasible"
    assert statuses[("cm384", 100.0)] == "ok"
    bad = next(p for p in decode_sweep.points if p.status == "infeasible")
    assert bad.binding_tag == "TPOT" and "Relax --tpot-ms" in bad.message


def test_curves_one_per_machine_on_the_pareto_front(figure_parts, decode_sweep):
    curves, published = figure_parts
    assert sweep_metric(decode_sweep) == "decode"
    assert [c.name for c in curves] == ["a2, <= 32 cards", "cm384, <= 64 cards"]
    for c in curves:
        xs = [c.points[i].x_tokens_per_s_per_user for i in c.front]
        ys = [c.points[i].y for i in c.front]
        assert xs == sorted(xs) and ys == sorted(ys, reverse=True)
        assert c.changes and c.changes[0][0] == c.front[0]  # the first point names the structure
    assert {p.id for p in published} == {"A2-D70", "A2-D90", "A2 30 ms", "CM-D", "CM 15 ms", "xDeepServe-D"}


def test_png_renders_headless_with_the_expected_series(figure_parts):
    curves, published = figure_parts
    fig = frontier_figure(curves, published, "decode", "test frontier")
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == [c.name for c in curves]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "published" in legend and "a2, <= 32 cards" in legend
    texts = [t.get_text() for t in ax.texts]
    assert "A2-D70 (published)" in texts and "CM 15 ms (published)" in texts
    assert ax.get_ylabel() == "decode output tokens/s per decode card"
    data = render(fig, "png")
    assert data.startswith(PNG_SIGNATURE)
    image = matplotlib.image.imread(io.BytesIO(data), format="png")
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 500


def test_svg_is_xml_with_series_labels_as_text(figure_parts):
    curves, published = figure_parts
    data = render(frontier_figure(curves, published, "deployment", "test frontier"), "svg")
    root = ET.fromstring(data)
    assert root.tag == f"{SVG}svg"
    text = "".join(root.itertext())
    for label in (
        "a2, <= 32 cards",
        "cm384, <= 64 cards",
        "CM-D (published)",
        "published (decode-only per card)",
        "tokens/s per user (1000 / TPOT)",
    ):
        assert label in text
    ids = {el.get("id") for el in root.iter() if el.get("id")}
    assert {"series-a2, <= 32 cards", "series-cm384, <= 64 cards"} <= ids
    # deterministic: no date, fixed hash salt
    assert data == render(frontier_figure(curves, published, "deployment", "test frontier"), "svg")


def test_plot_format_names_the_flag():
    assert plot_format("x.PNG") == "png" and plot_format("a/b.svg") == "svg"
    with pytest.raises(Exception, match="--plot"):
        plot_format("x.gif")


def test_terminal_chart_and_exports(figure_parts, decode_sweep):
    curves, published = figure_parts
    chart = terminal_chart(curves, published, "decode tokens/s per card")
    assert "o a2, <= 32 cards" in chart and "x cm384, <= 64 cards" in chart and "A2-D70" in chart
    rows = list(csv.DictReader(io.StringIO(sweep_csv(decode_sweep))))
    assert len(rows) == 8 and rows[0]["hardware"] == "a2" and rows[0]["status"] == "infeasible"
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(float(r["tokens_per_s_per_user"]) > 0 and r["binds"].startswith("D:") for r in ok)
    doc = json.loads(sweep_document(decode_sweep))
    assert doc["swept"] == {"hardware": ["a2", "cm384"], "tpot-ms": [10.0, 30.0, 60.0, 100.0]}
    assert doc["points"][0]["status"] == "infeasible" and doc["points"][0]["binds"] == "TPOT"
    assert doc["points"][1]["plan"]["predicted"]["decode"]["tpot_ms"] <= 30.0


def test_a_long_title_stays_inside_the_figure(figure_parts):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    curves, published = figure_parts
    title = (
        "deepseek-v3, prefill + decode, 2048+2048 tokens, MTP acceptance 0.7; swept hardware a2/cm384, "
        "tpot-ms 10..150\ncurves: whole deployment per card (prefill cards included); published stars: decode "
        "cards only (the report gives no whole-deployment figure), so a star sits higher than its curve would"
    )
    fig = frontier_figure(curves, published, "deployment", title)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = fig.axes[0].title.get_window_extent(canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width  # before: one line ~1.6 figure widths long


def test_the_structure_labels_stay_in_the_axes_clear_of_each_other(figure_parts):
    """Labels of where the plan's structure changes: inside the axes (the top one ran into the
    title) and not on top of one another (the first points of a curve sit close together)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    curves, published = figure_parts
    fig = frontier_figure(curves, published, "decode", "title")
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = fig.axes[0]
    frame = ax.get_window_extent(renderer)
    labels = [t.get_window_extent(renderer) for t in ax.texts if "(published)" not in t.get_text()]
    assert labels, "no structure change annotated: the test would check nothing"
    for box in labels:
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1 and box.y1 <= frame.y1 + 1
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            overlap_x = min(a.x1, b.x1) - max(a.x0, b.x0)
            overlap_y = min(a.y1, b.y1) - max(a.y0, b.y0)
            assert overlap_x <= 2 or overlap_y <= 2, "two labels drawn over each other"
