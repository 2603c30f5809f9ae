"""`moeplan sweep`'s columns hold what they name: a prefill-only point has prompt tokens/s, not output
tokens/s; blank CSV cells are JSON nulls; K is 1,024 tokens; each point names the engines that run it."""

from __future__ import annotations

import csv
import json

from planner.report.plan_report import kilo_tokens
from tests.conftest import run_cli

PREFILL = ("sweep", "--phase", "prefill", "--ttft-ms", "500,2000")


def test_a_prefill_only_point_reports_prompt_tokens_per_card(tmp_path):
    out, doc_out = tmp_path / "s.csv", tmp_path / "s.json"
    r = run_cli(*PREFILL, "--csv", str(out), "--json", str(doc_out))
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2
    for row in rows:
        assert row["output_tokens_per_s_per_card"] == ""
        assert float(row["prefill_tokens_per_s_per_card"]) > 0
        assert row["runs_on"] not in ("", "none")
    assert "prompt tok/s/card" in r.output
    doc = json.loads(doc_out.read_text())
    summary = doc["points"][0]["summary"]
    assert summary["output_tokens_per_s_per_card"] is None and summary["tpot_ms"] is None
    assert "" not in summary.values()


def test_k_is_1024_tokens_and_says_so(tmp_path):
    assert kilo_tokens(73728) == "72K"
    assert kilo_tokens(3500) == "3.418K"
    r = run_cli(*PREFILL)
    assert r.exit_code == 0, r.output
    assert "K: 1,024 tokens per forward" in r.output and "thousand" not in r.output


def test_engine_none_searches_freely(tmp_path):
    out = tmp_path / "s.csv"
    r = run_cli(*PREFILL, "--engine", "none", "--csv", str(out))
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2 and all(row["runs_on"] == "" for row in rows)
