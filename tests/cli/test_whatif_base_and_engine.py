"""`moeplan whatif`: its base is `moeplan plan`'s answer (engine auto, quantization auto), a failing
base search names the base's flags, and every figure of a column counts what the plan holds."""

from __future__ import annotations

import json

from planner.cli.whatif_cmd import as_base_flags
from planner.ranking.binding import above
from tests.conftest import run_cli


def _json(r, path) -> dict:
    assert r.exit_code == 0, r.output
    return json.loads(path.read_text())


def test_the_default_base_is_plans_rank_1_and_says_which_engines_run_it(tmp_path):
    plan_out, whatif_out = tmp_path / "p.json", tmp_path / "w.json"
    plan = _json(run_cli("plan", "--top", "1", "--json", str(plan_out)), plan_out)["plans"][0]
    doc = _json(run_cli("whatif", "--tpot-ms", "50", "--json", str(whatif_out)), whatif_out)
    base = doc["base"]
    headline = "output_tokens_per_s_per_card"
    assert base["figures"][headline] == plan["predicted"]["system"][headline]
    assert base["choices"]["runs on"] != "none"
    assert doc["new"]["choices"]["runs on"] != "none"
    assert doc["assumptions"]["base"]["engine"] == "auto"
    # the free search is still there, by name
    free_out = tmp_path / "f.json"
    free = _json(run_cli("whatif", "--tpot-ms", "50", "--engine", "none", "--json", str(free_out)), free_out)
    assert {"name": "engine", "base": "auto", "new": "none"} in [
        {k: c[k] for k in ("name", "base", "new")} for c in free["changes"]["assumptions"]
    ]
    assert free["new"]["figures"][headline] >= doc["new"]["figures"][headline]


def test_a_machine_without_int8_takes_the_scheme_auto_gives_it():
    r = run_cli("whatif", "--hardware", "atlas950", "--model", "deepseek-v4-flash", "--engine", "none")
    assert r.exit_code == 0, r.output
    assert "quantization" in r.output and "fp8" in r.output


def test_an_infeasible_base_names_the_base_flags_not_the_new_ones(tmp_path):
    out = tmp_path / "w.json"
    r = run_cli("whatif", "--base", "max-cards=4", "--max-cards", "64", "--json", str(out))
    assert r.exit_code == 1, r.output
    assert "(of the base assumptions)" in r.output and "--base max-cards=16 or more" in r.output
    assert "Raise --max-cards" not in r.output
    doc = json.loads(out.read_text())
    assert doc["status"] == "INFEASIBLE"
    assert doc["constraint"] == "card budget (of the base assumptions)"
    assert doc["nearest"] == {"flag": "--base max-cards", "value": 16}
    bad = run_cli("whatif", "--base", "rate=-1", "--tpot-ms", "50")
    assert bad.exit_code == 2 and "--base rate" in bad.output, bad.output


def test_base_flags_are_rewritten_only_where_they_are_assumptions():
    text = "--tpot-ms 1 asks too much; relax --tpot-ms to at least 19.2 (see --explain-space)"
    assert as_base_flags(text) == (
        "--base tpot-ms=1 asks too much; relax --base tpot-ms=19.2 or more (see --explain-space)"
    )


def test_cards_of_a_plan_with_prefill_on_another_machine_count_each_machines_cards(tmp_path):
    out = tmp_path / "w.json"
    doc = _json(
        run_cli(
            "whatif",
            "--prefill-hardware",
            "a3",
            "--max-prefill-cards",
            "16",
            "--max-decode-cards",
            "32",
            "--engine",
            "none",
            "--json",
            str(out),
        ),
        out,
    )
    new = doc["new"]
    assert new["figures"]["cards"] == float(new["choices"]["cards"])
    assert new["figures"]["cards"] == new["plan"]["predicted"]["system"]["cards"]


def test_a_figure_over_its_limit_prints_the_places_that_show_it():
    assert above(100.04, 100.0, 1) == "100.04"
    assert above(100.4, 100.0, 1) == "100.4"
    assert above(2029.2, 2000.0, 0) == "2029"
    assert above(100.000001, 100.0, 1) == "100.000001"


def test_a_base_larger_than_a_new_rate_needs_is_not_said_to_be_sized_by_it(tmp_path):
    out = tmp_path / "w.json"
    doc = _json(run_cli("whatif", "--rate", "20", "--base", "max-cards=256", "--json", str(out)), out)
    rescored = " ".join(b["message"] for b in doc["binding"]["rescored"])
    assert "larger than the rate needs" in rescored
    assert "the rate sets the size" not in rescored
    assert "max-cards=256.0" not in doc["base_source"] and "max-cards=256" in doc["base_source"]
