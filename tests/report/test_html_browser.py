"""The default plan's HTML report, and a simulated run's, in a real browser (headless Chromium): what a
person would see.

The page loads with no console error and asks for nothing but itself; the cluster drawing has one
cell per device, each instance in one colour of its own; the table's rows are the plans of
`plan --json`, variants folded until asked for; a header sorts the table; and without JavaScript
the page still shows all of it but the sort buttons. The simulated run's page: no error and no
request either, its picture drawn, its tables the run's figures, the plan's devices drawn, and
every section there without JavaScript. One browser launch serves every page (conftest.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from planner.specs.catalog import EXPORT_ONLY_KEYS
from planner.specs.plan import Plan
from tests.conftest import run_cli


@dataclass
class Seen:
    """A page as the browser loaded it, and what it logged and asked for on the way."""

    page: Any
    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def _open(browser, url: str, javascript: bool = True) -> Seen:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=javascript)
    page = context.new_page()
    seen = Seen(page)
    page.on("console", lambda m: seen.console.append((m.type, m.text)))
    page.on("pageerror", lambda e: seen.errors.append(str(e)))
    page.on("request", lambda r: seen.requests.append(r.url))
    page.goto(url, wait_until="load")
    return seen


@pytest.fixture(scope="module")
def seen(browser, default_report):
    s = _open(browser, default_report.html.as_uri())
    yield s
    s.page.context.close()


@pytest.fixture(scope="module")
def plans(default_report) -> list[Plan]:
    doc = json.loads(default_report.json.read_text())["plans"]
    return [Plan.model_validate({k: v for k, v in p.items() if k not in EXPORT_ONLY_KEYS}) for p in doc]


def test_the_page_loads_with_no_error_and_no_request_but_itself(seen, default_report):
    assert seen.errors == []
    assert [m for m in seen.console if m[0] in ("error", "warning")] == []
    assert seen.requests == [default_report.html.as_uri()]
    assert seen.page.title().startswith("moeplan plan: deepseek-v3 on a2")
    assert "Best plan (rank 1)" in seen.page.inner_text("#answer")


def test_the_cluster_has_one_cell_per_device_in_its_instance_colour(seen, plans):
    cells = seen.page.eval_on_selector_all(
        "svg.cluster g.device",
        """gs => gs.map(g => ({
            role: g.dataset.role,
            instance: g.dataset.instance,
            fill: getComputedStyle(g.querySelector('rect')).fill,
            shown: g.getBoundingClientRect().width > 0,
        }))""",
    )
    best = plans[0]
    used = [c for c in cells if c["role"] != "idle"]
    assert len(used) == best.total_devices == 48 and all(c["shown"] for c in used)
    by_instance: dict[str, set[str]] = {}
    for c in used:
        by_instance.setdefault(c["instance"], set()).add(c["fill"])
    sizes = {k: sum(1 for c in used if c["instance"] == k) for k in by_instance}
    assert sizes == {"prefill-1": best.prefill.devices, "decode-1": best.decode.devices}
    assert all(len(fills) == 1 for fills in by_instance.values())  # one colour per instance ...
    assert len({next(iter(f)) for f in by_instance.values()}) == len(by_instance)  # ... each its own


def test_the_table_rows_are_the_plans_of_plan_json(seen, plans, default_report):
    rows = seen.page.eval_on_selector_all(
        "#plans-table tr.plan:not(.variant)",
        """trs => trs.map(tr => ({
            rank: tr.cells[0].innerText.trim(),
            cards: tr.cells[1].innerText.trim(),
            layouts: tr.cells[3].innerText,
            tpot: tr.cells[4].querySelector('.value').innerText.trim(),
            headline: tr.cells[7].querySelector('.value').innerText.trim(),
            shown: tr.getBoundingClientRect().height > 0,
        }))""",
    )
    assert [r["rank"] for r in rows] == [str(p.rank) for p in plans]
    for row, plan in zip(rows, plans, strict=True):
        pred = plan.predicted or {}
        assert row["cards"] == f"{pred['system']['cards']:g}"
        assert row["headline"] == f"{pred['system']['output_tokens_per_s_per_card']:,.1f}"
        assert row["tpot"] == f"{pred['decode']['tpot_ms']:,.1f}"
        for phase in (plan.decode, plan.prefill):
            assert f"dense FFN: {phase.dense_layout.short()}" in row["layouts"]
            assert f"LM head: {phase.lm_head_layout.short()}" in row["layouts"]
    # variants (the search's own folding: `variants` in plan --json) show only once a box is ticked
    groups = seen.page.locator("#plans-table tbody.group").count()
    assert groups == len(plans) and all(r["shown"] for r in rows)
    folded = sum(len(p.get("variants", [])) for p in json.loads(default_report.json.read_text())["plans"])
    assert folded > 0 and seen.page.locator("#plans-table tr.plan.variant").count() == folded
    box = seen.page.locator("#plans-table input.fold").first
    box.check()
    shown = seen.page.eval_on_selector_all(
        "#plans-table tr.plan", "trs => trs.filter(tr => tr.offsetHeight > 0).length"
    )
    box.uncheck()
    assert shown > groups


def test_a_header_sorts_the_table(browser, tmp_path_factory):
    # the default plan's five ranks fold into one group: a sweep's points sort instead (10 ms is
    # infeasible on 16 A2 cards; the others reach three different tokens/s per user)
    html = tmp_path_factory.mktemp("sweep") / "sweep.html"
    args = ("sweep", "--hardware", "a2", "--max-cards", "16", "--phase", "decode", "--tpot-ms", "10,30,40,100")
    assert run_cli(*args, "--html", str(html)).exit_code == 0
    s = _open(browser, html.as_uri())
    page = s.page
    try:
        assert s.errors == [] and [m for m in s.console if m[0] == "error"] == []

        def column(name: str) -> list[float | None]:
            index = page.eval_on_selector_all(
                "#points-table thead th", f"ths => ths.findIndex(th => th.innerText.trim().startsWith({name!r}))"
            )
            raw = page.eval_on_selector_all(
                "#points-table tbody tr", f"trs => trs.map(tr => tr.cells[{index}].dataset.value)"
            )
            return [float(v) if v else None for v in raw]

        per_user = page.locator("#points-table th button", has_text="tokens/s per user")
        per_user.click()
        up = column("tokens/s per user")
        assert up[-1] is None and up[:-1] == sorted(up[:-1]) and len(set(up)) == 4  # no value: last
        per_user.click()
        down = column("tokens/s per user")
        assert down[-1] is None and down[:-1] == sorted(down[:-1], reverse=True)
        assert column("point") == [2, 3, 4, 1]
        page.locator("#points-table th button", has_text="point").click()
        assert column("point") == [1, 2, 3, 4]
    finally:
        page.context.close()


def test_without_javascript_the_page_reads_the_same(browser, default_report, plans):
    s = _open(browser, default_report.html.as_uri(), javascript=False)
    try:
        page = s.page
        assert page.locator("#plans-table th button").count() == 0  # no sort buttons ...
        assert page.locator("#plans-table tr.plan:not(.variant)").count() == len(plans)  # ... the rest is there
        assert page.locator("svg.cluster g.device[data-role=decode]").count() == plans[0].decode.total_devices
        for section in ("question", "cluster", "experts", "time", "sure", "reproduce"):
            assert page.locator(f"#{section}").is_visible()
        assert s.requests == [default_report.html.as_uri()]
    finally:
        s.page.context.close()


# ---- the page of `moeplan simulate --html` --------------------------------------------------------


@pytest.fixture(scope="module")
def seen_simulate(browser, simulate_report):
    s = _open(browser, simulate_report.html.as_uri())
    yield s
    s.page.context.close()


def test_the_simulate_page_loads_with_no_error_and_no_request_but_itself(seen_simulate, simulate_report):
    page = seen_simulate.page
    assert seen_simulate.errors == []
    assert [m for m in seen_simulate.console if m[0] in ("error", "warning")] == []
    assert seen_simulate.requests == [simulate_report.html.as_uri()]
    assert page.title().startswith("moeplan simulate: ")
    assert page.inner_text("#answer").startswith("At P90 of simulated requests the plan ")


def test_the_simulate_page_shows_the_run_drawn_and_its_figures(seen_simulate, simulate_report):
    page = seen_simulate.page
    run = json.loads(simulate_report.json.read_text())
    picture = page.locator("#run-pictures svg").bounding_box()
    assert picture is not None and picture["width"] > 600 and picture["height"] > 300
    latency = page.eval_on_selector_all(
        "#simulated-2 tbody tr", "trs => trs.map(tr => Array.from(tr.cells, td => td.innerText.trim()))"
    )
    by_metric = {row[0]: row for row in latency}
    assert by_metric["TTFT"][3] == f"{run['p90_ttft_ms']:,.1f}" and by_metric["TPOT"][4] == f"{run['p99_tpot_ms']:,.1f}"
    assert page.locator("svg.cluster g.device").count() == 48  # the plan's 16 prefill and 32 decode devices
    assert page.locator("#bound-sentence").is_visible()


def test_the_simulate_page_reads_the_same_without_javascript(browser, simulate_report):
    s = _open(browser, simulate_report.html.as_uri(), javascript=False)
    try:
        page = s.page
        for section in ("question", "simulated", "run-pictures", "bound", "plans", "cluster", "time", "reproduce"):
            assert page.locator(f"#{section}").is_visible(), section
        assert page.locator("#run-pictures svg").is_visible()
        assert s.requests == [simulate_report.html.as_uri()]
    finally:
        s.page.context.close()
