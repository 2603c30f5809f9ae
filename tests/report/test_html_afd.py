"""The HTML report of an AFD plan: its instances in words, both sides' layouts, and a round trip
through evaluate (the page embeds the plan)."""

from __future__ import annotations

import json

from planner.report.html.plans_table import plan_row, plan_sections
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.files import embedded_json
from tests.conftest import PLANS, run_cli


def test_an_afd_plan_reads_as_attention_and_ffn_devices(tmp_path):
    page = tmp_path / "afd.html"
    r = run_cli("evaluate", str(PLANS / "afd-a3-example.yaml"), "--html", str(page))
    assert r.exit_code == 0, r.output
    text = page.read_text(encoding="utf-8")
    assert "1 AFD decode instance of 32 cards (48 attention + 16 FFN devices)" in text
    assert "output tokens/s per card" in text and "serve " in text
    doc = json.loads(embedded_json(text, str(page), "plan"))
    again = tmp_path / "again.json"
    again.write_text(json.dumps(doc["plans"][0]))
    r2 = run_cli("evaluate", str(again), "--json", "-")
    assert r2.exit_code == 0, r2.output
    assert json.loads(r2.output)["predicted"]["afd"] == doc["plans"][0]["predicted"]["afd"]


def test_the_rows_take_tpot_and_headroom_from_the_afd_block():
    plan, _ = load_plan(str(PLANS / "afd-a3-example.yaml"))
    hw, model = load_hardware(plan.hardware), load_model(plan.model)
    r = run_cli("evaluate", str(PLANS / "afd-a3-example.yaml"), "--json", "-")
    scored = plan.model_copy(update={"predicted": json.loads(r.output)["predicted"]})
    row = plan_row(scored, hw, model)
    afd = scored.predicted["afd"]
    assert row.tpot_ms.value == afd["tpot_ms"] and row.itl_max_ms.value == afd["step_ms"]
    assert "AFD " in row.code
    sections = {s.role: s for s in plan_sections(scored, hw, model)}
    layouts = dict(sections["AFD decode"].layouts)
    assert "experts (16 FFN devices)" in layouts and "attention (48 attention devices)" in layouts


def test_instances_are_counted_per_instance():
    from planner.report.html.pages import instances_text

    plan, _ = load_plan(str(PLANS / "afd-a3-example.yaml"))
    three = plan.model_copy(update={"afd": plan.afd.model_copy(update={"instances": 3})})
    text = instances_text(three, load_hardware(plan.hardware))
    assert "3 AFD decode instances of 32 cards (48 attention + 16 FFN devices)" in text
    sections = {s.role: s for s in plan_sections(three, load_hardware(plan.hardware), load_model(plan.model))}
    assert (sections["AFD decode"].instances, sections["AFD decode"].devices) == (3, 64)
