"""The HTML report without a browser: what it embeds, that evaluate reads it back, that it asks the
network for nothing, its size, its bad inputs, and the parts it is built from (variants, the
cluster grid, the expert layer)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from planner.errors import BadInputError
from planner.report.html.cluster import ROLES, cluster_drawing, instance_colour
from planner.report.html.experts import HOT_RATIO, expert_drawing, expert_layer
from planner.report.html.plans_table import grouped_rows, plan_sections
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.files import embedded_json
from planner.specs.plan import Plan
from tests.conftest import PLANS, run_cli

MAX_PAGE_BYTES = 2 * 1024 * 1024


def _embedded(path: Path) -> dict:
    return json.loads(embedded_json(path.read_text(encoding="utf-8"), str(path), "plan"))


def _one_line_error(output: str) -> str:
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text of <pre id="command">."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.command = ""
        self._in_command = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_command = tag == "pre" and dict(attrs).get("id") == "command"

    def handle_endtag(self, tag):
        self._in_command = False

    def handle_data(self, data):
        if self._in_command:
            self.command += data


def _parse(path: Path) -> _Tags:
    parser = _Tags()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


# ---- the default plan's page --------------------------------------------------------------------


def test_the_page_embeds_the_plan_json_document(default_report):
    assert _embedded(default_report.html) == json.loads(default_report.json.read_text())


@pytest.mark.parametrize("rank", ["1", "2"])
def test_evaluate_reads_the_plans_back_from_the_page(default_report, rank):
    from_page = run_cli("evaluate", str(default_report.html), "--rank", rank, "--json")
    from_json = run_cli("evaluate", str(default_report.json), "--rank", rank, "--json")
    assert from_page.exit_code == 0 and from_json.exit_code == 0, from_page.output
    assert json.loads(from_page.output) == json.loads(from_json.output)
    assert json.loads(from_page.output)["rank"] == int(rank)


def test_the_page_asks_the_network_for_nothing(default_report):
    text = default_report.html.read_text(encoding="utf-8")
    tags = _parse(default_report.html).tags
    for tag, attrs in tags:
        assert tag not in ("link", "img", "iframe", "object", "embed"), tag
        assert "src" not in attrs, (tag, attrs)
        href = attrs.get("href")
        assert href is None or href.startswith("#"), (tag, href)
    assert "@import" not in text and not re.search(r"url\((?!#)", text)  # (url(#id): a clip path of the page)
    assert not re.search(r"https?://(?!www\.w3\.org/)", text)  # (SVG's namespace is a name, not a request)
    scripts = [attrs for tag, attrs in tags if tag == "script"]
    assert {a.get("type") for a in scripts} == {None, "application/json"}


def test_the_page_says_the_command_that_wrote_it(default_report):
    command = _parse(default_report.html).command
    assert command == f"moeplan plan --json {default_report.json} --html {default_report.html}"


def test_the_page_shows_every_layout_of_every_plan_in_full(default_report):
    text = default_report.html.read_text(encoding="utf-8")
    doc = json.loads(default_report.json.read_text())
    for p in doc["plans"]:
        plan = Plan.model_validate(p)
        for phase in (plan.decode, plan.prefill):
            assert f"dense FFN: {phase.dense_layout.short()}" in text
            assert f"LM head: {phase.lm_head_layout.short()}" in text
            assert f"EP{phase.moe.ep} × {phase.moe.slots_per_device} slots" in text
    assert "…" not in text  # nothing cut


# ---- evaluate and sweep pages -------------------------------------------------------------------


def _cm384_full_plan(folder: Path) -> Path:
    """A 384-card CloudMatrix384 plan (768 dies): 8 prefill instances of 16 dies, 2 decode instances
    of 320 dies with 288 expert devices and 32 dedicated shared-expert devices each."""
    doc = {
        "schema_version": 2,
        "model": "deepseek-r1",
        "hardware": "cm384",
        "workload": {"input_tokens": 2048, "output_tokens": 2048},
        "slo": {"tpot_ms": 50, "ttft_ms": 2000},
        "prefill": {
            "devices": 16,
            "instances": 8,
            "attention": {"dp": 16, "tp": 1},
            "dense_ffn": {"dp": 16, "tp": 1},
            "moe": {"ep": 16, "slots_per_device": 16, "comm": "alltoall"},
            "lm_head": {"dp": 16, "tp": 1},
            "batch_tokens": 65536,
            "micro_batches": 2,
        },
        "decode": {
            "devices": 320,
            "instances": 2,
            "attention": {"dp": 320, "tp": 1},
            "dense_ffn": {"dp": 160, "tp": 2},
            "moe": {"ep": 288, "slots_per_device": 2, "comm": "alltoall"},
            "shared_expert": {"placement": "dedicated", "devices": 32},
            "lm_head": {"dp": 160, "tp": 2},
            "concurrency_per_device": 48,
            "mtp_tokens": 1,
        },
    }
    path = folder / "cm384-384-cards.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_384_card_cm384_page_draws_every_die_and_stays_under_2_mb(tmp_path):
    plan_path = _cm384_full_plan(tmp_path)
    html = tmp_path / "cm.html"
    r = run_cli("evaluate", str(plan_path), "--html", str(html))
    assert r.exit_code == 0, r.output
    size = html.stat().st_size
    assert size < MAX_PAGE_BYTES, size
    text = html.read_text(encoding="utf-8")
    instances = re.findall(r'<g class="device[^"]*" data-role="(\w+)" data-instance="([\w-]+)"', text)
    assert len(instances) == 768
    counts: dict[str, int] = {}
    for _, inst in instances:
        counts[inst] = counts.get(inst, 0) + 1
    assert counts == {**{f"prefill-{i}": 16 for i in range(1, 9)}, "decode-1": 320, "decode-2": 320}
    assert text.count('class="device shared-expert"') == 64
    assert text.count('class="slot') == 2 * 288 + 16 * 16  # one expert drawing per kind of instance
    assert _embedded(html)["plans"][0]["decode"]["instances"] == 2


def test_evaluate_writes_no_page_when_an_engine_refuses_the_plan(tmp_path):
    html = tmp_path / "f.html"
    r = run_cli("evaluate", str(PLANS / "a2-d70.yaml"), "--html", str(html), "--emit", "sglang", str(tmp_path / "D"))
    assert r.exit_code == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [("plan",), ("evaluate", "a2-d70"), ("sweep", "--tpot-ms", "50")])
def test_a_bad_html_destination_is_one_line_and_exit_2_before_any_work(tmp_path, command):
    folder = tmp_path / "page.html"
    folder.mkdir()
    for dest, words in ((folder, "is a folder"), (tmp_path / "missing" / "p.html", "does not exist"), ("-", "stdout")):
        r = run_cli(*command, "--html", str(dest))
        assert r.exit_code == 2, r.output
        line = _one_line_error(r.output)
        assert line.startswith("error: --html") and words in line, line
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_nothing_feasible_writes_no_page_and_says_so(tmp_path):
    html = tmp_path / "plan.html"
    r = run_cli("plan", "--max-cards", "1", "--html", str(html))
    assert r.exit_code == 1
    assert f"Not written: {html}." in " ".join(r.output.split())
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_page_numbers_its_plans_by_point(tmp_path):
    html = tmp_path / "sweep.html"
    r = run_cli(
        "sweep", "--hardware", "a2", "--max-cards", "16", "--tpot-ms", "5,100", "--phase", "decode", "--html", str(html)
    )
    assert r.exit_code == 0, r.output
    doc = _embedded(html)
    assert doc["status"] == "SWEEP" and [p["rank"] for p in doc["plans"]] == [2]  # 5 ms is infeasible
    point = run_cli("evaluate", str(html), "--rank", "2", "--json")
    assert point.exit_code == 0 and json.loads(point.output)["slo"]["tpot_ms"] == 100
    missing = run_cli("evaluate", str(html), "--rank", "1")
    assert missing.exit_code == 2 and "numbered 2" in _one_line_error(missing.output)
    text = html.read_text(encoding="utf-8")
    assert 'id="frontier"' in text and "<svg" in text and "infeasible:" in text


def test_an_html_page_without_plans_is_refused_by_name(tmp_path):
    page = tmp_path / "other.html"
    page.write_text("<!DOCTYPE html><html><body><p>hello</p></body></html>")
    r = run_cli("evaluate", str(page))
    assert r.exit_code == 2
    assert 'no <script id="moeplan-plans">' in _one_line_error(r.output)
    with pytest.raises(BadInputError):
        embedded_json("<html></html>", "x.html", "plan")


# ---- the parts ----------------------------------------------------------------------------------


def _scored(doc: dict) -> list[Plan]:
    return [Plan.model_validate(p) for p in doc["plans"]]


def test_plans_that_differ_only_in_layouts_fold_under_the_first(default_report):
    plans = _scored(json.loads(default_report.json.read_text()))
    hw, model = load_hardware("a2"), load_model("deepseek-v3")
    groups = grouped_rows(plans, hw, model)
    assert sum(1 + len(g.variants) for g in groups) == len(plans)
    assert [r.rank for g in groups for r in [g.leader, *g.variants]] == [p.rank for p in plans]
    for g in groups:
        for v in g.variants:
            assert v.headline.text == g.leader.headline.text and v.pd == g.leader.pd
            assert v.differs and all(" " in d for d in v.differs)  # e.g. "decode dense FFN"
    # a plan with other figures is never folded: the default plan's rank 1 leads its own group
    other = plans[0].model_copy(update={"decode": plans[0].decode.model_copy(update={"concurrency_per_device": 50})})
    assert len(grouped_rows([plans[0], other], hw, model)) == 2


def test_the_cluster_has_one_cell_per_device_coloured_by_instance():
    plan, _ = load_plan(str(PLANS / "a2-d70.yaml"))
    hw, model = load_hardware("a2"), load_model("deepseek-v3")
    plan = plan.model_copy(update={"decode": plan.decode.model_copy(update={"instances": 3})})
    drawing = cluster_drawing(hw, plan, plan_sections(plan, hw, model), {}, budget_devices=112)
    used = [c for c in drawing.cells if c.role != "idle"]
    assert len(used) == 96 and len(drawing.cells) == 112  # the budget's 14 nodes, 16 devices free
    fills: dict[str, set[str]] = {}
    for c in used:
        fills.setdefault(c.instance, set()).add(c.fill)
    assert sorted(fills) == ["decode-1", "decode-2", "decode-3"]
    assert all(len(f) == 1 for f in fills.values())
    assert len({next(iter(f)) for f in fills.values()}) == 3  # instances differ
    # placed as --emit places them: instance k on nodes 4(k-1) .. 4(k-1)+3 (32 devices = 4 nodes)
    for k in (1, 2, 3):
        nodes = {int(re.search(r"node (\d+),", c.title).group(1)) for c in used if c.instance == f"decode-{k}"}
        assert nodes == set(range(4 * (k - 1), 4 * k))


def test_roles_have_distinct_hues_and_instances_distinct_shades():
    fills = {instance_colour(role, i, 8) for role in ROLES for i in range(8)}
    assert len(fills) == 8 * len(ROLES)


def test_the_expert_layer_marks_hot_experts_and_redundant_copies():
    plan, _ = load_plan(str(PLANS / "cm-d.yaml"))
    model = load_model("deepseek-r1")
    phase = plan.decode.model_copy(update={"moe": plan.decode.moe.model_copy(update={"slots_per_device": 2})})
    layer = expert_layer("decode", phase, model)
    assert layer is not None and layer.synthetic and layer.dedicated_shared_devices == 32
    drawing = expert_drawing(layer, 1.5)
    slots = [s for b in drawing.devices for s in b.slots]
    assert len(slots) == 256 * 2 and sum(b.shared for b in drawing.devices) == 32
    mean = sum(layer.expert_loads) / len(layer.expert_loads)
    hot = {e for e, load in enumerate(layer.expert_loads) if load >= HOT_RATIO * mean}
    assert hot and {s.expert for s in slots if s.hot} == hot
    copies = {s.expert for s in slots if s.copies > 1}
    assert copies and all(layer.replica_counts[e] > 1 for e in copies)
    assert sum(layer.replica_counts[e] - 1 for e in copies) == 2 * 256 - 256  # every redundant slot
    assert any("synthetic" in f for f in drawing.facts)
