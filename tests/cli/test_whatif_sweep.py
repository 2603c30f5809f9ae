"""`moeplan whatif` and `moeplan sweep` end to end: outputs, JSON fields, exit codes."""

from __future__ import annotations

import csv
import json

import matplotlib.image
import pytest

from tests.conftest import PLANS, run_cli

# ---- whatif ------------------------------------------------------------------------------------


def test_whatif_a_plan_file_at_a_tighter_tpot():
    r = run_cli("whatif", str(PLANS / "a2-d70.yaml"), "--tpot-ms", "30")
    assert r.exit_code == 0, r.output
    out = r.output
    for text in (
        "tpot-ms 100 -> 30",
        "new (re-planned)",
        "base re-scored",
        "decode concurrency per device",
        "TPOT binds: one more sequence per device",
        "decode misses the TPOT SLO: ",
        "What binds",
    ):
        assert text in out, text
    assert "NO" in out  # the re-scored base does not meet 30 ms


def test_whatif_json_has_base_new_rescored_changes_deltas_binding(tmp_path):
    r = run_cli("whatif", "a2-d70", "--tpot-ms", "50", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    for key in ("base", "new", "rescored", "changes", "deltas", "binding", "assumptions"):
        assert key in doc
    assert doc["changes"]["assumptions"] == [{"name": "tpot-ms", "base": 100.0, "new": 50.0}]
    assert doc["new"]["plan"]["predicted"]["decode"]["tpot_ms"] <= 50
    assert doc["rescored"]["plan"]["predicted"]["decode"]["meets_tpot_slo"] is False
    assert doc["rescored"]["meets_slo"] is False and doc["base"]["meets_slo"] is True
    tpot = next(d for d in doc["deltas"] if d["name"] == "tpot_ms")
    assert tpot["delta"] == pytest.approx(tpot["new"] - tpot["base"]) and tpot["delta"] < 0
    # with MTP, the TPOT of the p90 request at its own acceptance beside the mean, for both plans
    at = next(d for d in doc["deltas"] if d["name"] == "tpot_at_acceptance_percentile_ms")
    assert at["base"] > tpot["base"] and at["new"] > tpot["new"]
    assert {b["phase"] for b in doc["binding"]["new"]} == {"decode", "deployment"}
    assert any(b["violated"] for b in doc["binding"]["rescored"])
    # the same document to a file (atomically)
    out = tmp_path / "w.json"
    r = run_cli("whatif", "a2-d70", "--tpot-ms", "50", "--json", str(out))
    assert r.exit_code == 0 and json.loads(out.read_text())["changes"] == doc["changes"]


def test_whatif_without_a_file_reuses_the_cost_tables():
    r = run_cli(
        "whatif",
        "--base",
        "max-cards=32",
        "--base",
        "phase=decode",
        "--tpot-ms",
        "50",
        "--json",
        "-",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["base_source"].startswith("moeplan plan defaults with max-cards=32, phase=decode")
    assert doc["table_cache"]["hits"] > 0
    assert doc["base"]["plan"]["slo"]["tpot_ms"] == 100 and doc["new"]["plan"]["slo"]["tpot_ms"] == 50


def test_whatif_rescoring_that_cannot_run_says_why():
    r = run_cli("whatif", "a2-d70", "--model", "deepseek-v2-lite", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert "plan" not in doc["rescored"]
    assert "cannot run under the new assumptions" in doc["rescored"]["error"]
    assert "MTP" in doc["rescored"]["error"]


def test_whatif_infeasible_exits_1_with_the_binding_constraint():
    r = run_cli("whatif", "a2-d70", "--tpot-ms", "5")
    assert r.exit_code == 1
    assert "TPOT: the lowest TPOT reachable" in r.output and "Traceback" not in r.output


def test_whatif_infeasible_json_writes_the_status_and_the_nearest_point(tmp_path):
    out = tmp_path / "w.json"
    r = run_cli("whatif", "a2-d70", "--tpot-ms", "5", "--json", str(out))
    assert r.exit_code == 1
    doc = json.loads(out.read_text())
    assert doc["status"] == "INFEASIBLE" and doc["constraint"] == "TPOT"
    assert doc["nearest"]["flag"] == "--tpot-ms" and doc["nearest"]["value"] > 5


def test_whatif_of_a_colocated_plan_keeps_its_card_count_as_the_budget(tmp_path):
    """A colocated plan's instances serve both phases: its budget is its cards, once (it was
    counted for each phase, so a 24-card base was re-planned with 48 cards)."""
    base = tmp_path / "p.json"
    r = run_cli("plan", "--max-cards", "24", "--top", "1", "--json", str(base))
    assert r.exit_code == 0, r.output
    plan = json.loads(base.read_text())["plans"][0]
    assert plan.get("colocated"), "the a2 24-card plan is no longer colocated: pick another base"
    r = run_cli("whatif", str(base), "--tpot-ms", "80", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["assumptions"]["base"]["max-cards"] == 24
    assert doc["new"]["plan"]["predicted"]["system"]["cards"] <= 24
    new = doc["new"]["plan"]["colocated"]
    assert new is not None and new["concurrency_per_device"] < plan["colocated"]["concurrency_per_device"]
    text = run_cli("whatif", str(base), "--tpot-ms", "80").output
    assert "decode (or colocated)" in text and "concurrency per device" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("whatif", "a2-d70", "--base", "hardware=cm384"),
            "--base sets the base when there is no BASE_PLAN",
        ),
        (("whatif", "--base", "colour=blue"), "--base 'colour=blue'"),
        (("whatif", "--base", "max-cards=many"), "--base max-cards=many"),
        (("whatif", "no-such-plan"), "unknown plan"),
        (("whatif", "--tpot-ms", "-3"), "--tpot-ms"),
    ],
)
def test_whatif_bad_input_exits_2(args, message):
    r = run_cli(*args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


# ---- sweep -------------------------------------------------------------------------------------

SMALL = ("--phase", "decode", "--max-cards", "32")


def test_sweep_table_exports_and_infeasible_rows(tmp_path):
    csv_path, json_path = tmp_path / "s.csv", tmp_path / "s.json"
    r = run_cli("sweep", "--tpot-ms", "10,50,100", *SMALL, "--csv", str(csv_path), "--json", str(json_path))
    assert r.exit_code == 0, r.output
    assert "Best plan per point" in r.output and "infeasible [1]" in r.output
    assert "3 points (2 feasible)" in r.output and "reused" in r.output
    assert "tokens/s per user (1000 / TPOT)" in r.output  # the terminal chart
    rows = list(csv.DictReader(csv_path.open()))
    assert [r_["tpot-ms"] for r_ in rows] == ["10.0", "50.0", "100.0"]
    assert rows[0]["status"] == "infeasible" and rows[0]["binds"] == "TPOT"
    assert float(rows[1]["tpot_ms"]) <= 50 < float(rows[2]["tpot_ms"])
    for row in rows[1:]:  # with MTP the p90 request's TPOT beside the mean; without, blank
        at = row["tpot_at_acceptance_percentile_ms"]
        assert (float(at) > float(row["tpot_ms"])) if int(row["decode_mtp_tokens"]) else at == ""
    doc = json.loads(json_path.read_text())
    assert doc["swept"] == {"tpot-ms": [10.0, 50.0, 100.0]}
    assert doc["table_cache"]["hits"] > 0 and len(doc["points"]) == 3


def test_sweep_two_parameters_and_a_png_plot(tmp_path):
    plot = tmp_path / "f.png"
    r = run_cli("sweep", "--tpot-ms", "50,100", "--input-tokens", "1024,4096", *SMALL, "--plot", str(plot))
    assert r.exit_code == 0, r.output
    assert "frontier plot written" in r.output
    image = matplotlib.image.imread(str(plot))
    assert image.shape[0] > 300
    assert not list(tmp_path.glob(".*.tmp"))


def test_sweep_csv_to_stdout_only():
    r = run_cli("sweep", "--tpot-ms", "50,100", *SMALL, "--csv", "-")
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0].startswith("tpot-ms,status,cards") and len(lines) == 3


def test_sweep_over_machines_takes_each_machines_default_scheme():
    # with no --quantization, the Ascend 950 point runs FP8 (it lists no INT8 peak) and the A2 point
    # the report's INT8 scheme; the note names the machine that left the default
    r = run_cli("sweep", "--hardware", "a2,atlas950", "--tpot-ms", "100", *SMALL)
    assert r.exit_code == 0, r.output
    assert "2 points (2 feasible)" in r.output
    assert "note: quantization fp8 (--quantization auto): atlas950 lists no INT8 peak" in r.output
    assert "a2 lists" not in r.output


def test_sweep_per_machine_budgets():
    r = run_cli(
        "sweep",
        "--hardware",
        "a2,cm384",
        "--max-cards",
        "a2=16,cm384=32",
        "--phase",
        "decode",
        "--tpot-ms",
        "100",
        "--json",
        "-",
    )
    assert r.exit_code == 0, r.output
    points = json.loads(r.output)["points"]
    assert [p["values"] for p in points] == [
        {"hardware": "a2", "max-cards": 16.0},
        {"hardware": "cm384", "max-cards": 32.0},
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--tpot-ms", "10:5:1"), "--tpot-ms: range '10:5:1' is empty"),
        (("--tpot-ms", "abc"), "--tpot-ms: 'abc' is not a number"),
        (("--tpot-ms", "10:50"), "--tpot-ms: range '10:50' needs start:stop:step"),
        (("--tpot-ms", "10:50:0"), "needs a step > 0"),
        (("--input-tokens", "1000.5"), "--input-tokens: '1000.5' is not a whole number"),
        (("--tpot-ms", "1:100000:1"), "at most 400"),
        (
            ("--tpot-ms", "10,20", "--ttft-ms", "1000,2000", "--input-tokens", "1024,2048"),
            "at most 2 parameters",
        ),
        (("--hardware", "a2,cm384", "--max-cards", "a2=64"), "--max-cards: no budget for cm384"),
        (("--plot", "f.gif"), "--plot: 'f.gif' must end in .png or .svg"),
        (("--phase", "prefill", "--plot", "f.png"), "--plot draws tokens/s per user"),
        (("--hardware", "a9"), "unknown hardware 'a9'"),
        (("--input-tokens", "200000"), "--input-tokens + --output-tokens"),
    ],
)
def test_sweep_bad_values_exit_2_naming_the_flag(args, message):
    r = run_cli("sweep", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_sweep_results_do_not_depend_on_jobs():
    args = ("sweep", "--tpot-ms", "10,40,70,100", "--hardware", "a2,cm384", "--max-cards", "32")
    one = run_cli(*args, "--phase", "decode", "--jobs", "1", "--csv", "-")
    two = run_cli(*args, "--phase", "decode", "--jobs", "2", "--csv", "-")
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    assert one.output == two.output
    assert len([ln for ln in one.output.splitlines() if ln.startswith(("a2,", "cm384,"))]) == 8


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_interrupted_sweep_keeps_the_points_done(jobs):
    from planner.search.request import PlanRequest
    from planner.search.sweep import SweepAxis, run_sweep
    from planner.specs.plan import SLO

    axis = SweepAxis("tpot-ms", (40.0, 60.0, 80.0, 100.0, 120.0, 140.0))
    points = [
        ({"tpot-ms": t}, PlanRequest(phase="decode", max_cards=16, top=1, slo=SLO(tpot_ms=t))) for t in axis.values
    ]

    def progress(done, total, values):
        if done == 2:
            raise KeyboardInterrupt

    result = run_sweep(points, [axis], progress=progress, jobs=jobs)
    assert result.interrupted and len(result.points) == 2
    assert all(p.status == "ok" for p in result.points)


def test_sigterm_stops_a_sweep_cleanly(tmp_path):
    """Workers included: exit 130, the points done are shown, no file, no traceback, no orphans."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "s.csv"
    args = ["sweep", "--tpot-ms", "100:390:10", "--hardware", "a2", "--max-cards", "96"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "planner", *args, "--csv", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    from tests.conftest import wait_until_it_catches_sigterm, wait_until_it_loads

    wait_until_it_catches_sigterm(proc)
    wait_until_it_loads(proc, "ortools")  # the sweep under way: its first point has reached CP-SAT
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    # the points done are shown; under load the signal may come before the first point finishes
    assert any(said in stderr for said in ("no file was written", "nothing was written", "nothing written"))
    assert "Traceback" not in stderr + stdout
    assert not out.exists() and not list(tmp_path.iterdir())


def test_whatif_refuses_a_json_path_it_cannot_write_before_searching(tmp_path):
    r = run_cli("whatif", "a2-d70", "--tpot-ms", "50", "--json", str(tmp_path / "missing" / "w.json"))
    assert r.exit_code == 2 and "--json" in r.output
    assert not (tmp_path / "missing").exists()


def test_whatif_base_may_be_a_plan_json_export(tmp_path):
    """The issue's own words: `whatif --base FILE` with the document `plan --json` writes."""
    base = tmp_path / "p.json"
    assert run_cli("plan", "--max-cards", "32", "--top", "2", "--json", str(base)).exit_code == 0
    by_flag = run_cli("whatif", "--base", str(base), "--rank", "2", "--tpot-ms", "90", "--json", "-")
    by_argument = run_cli("whatif", str(base), "--rank", "2", "--tpot-ms", "90", "--json", "-")
    assert by_flag.exit_code == 0, by_flag.output
    assert json.loads(by_flag.output)["base"] == json.loads(by_argument.output)["base"]
    r = run_cli("whatif", "--base", str(tmp_path / "missing.json"))
    assert r.exit_code == 2 and "moeplan whatif PLAN_FILE" in r.output
