"""`moeplan schema --export` describes what `plan --json` writes: real exports (engines, variants,
an infeasible request) parse with the models the schema is generated from, and the schema is that
model's."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from planner.report.export_schema import Export, InfeasibleExport, PlansExport
from tests.conftest import run_cli


def _export(tmp_path, *args: str) -> dict:
    out = tmp_path / "e.json"
    run_cli("plan", *args, "--json", str(out))
    return json.loads(out.read_text())


def test_an_export_with_engines_and_variants_parses(tmp_path):
    doc = _export(tmp_path, "--model", "deepseek-v2-lite", "--max-cards", "11", "--top", "3")
    parsed = Export.model_validate(doc).root
    assert isinstance(parsed, PlansExport)
    assert parsed.plans[0].runs_on  # --engine auto: what each plan runs on
    assert any(p.variants for p in parsed.plans), "expected a folded variant in this export"
    assert parsed.space and parsed.space[0].limit == "ep-instance"


def test_an_infeasible_export_parses(tmp_path):
    doc = _export(tmp_path, "--model", "deepseek-r1", "--max-cards", "1")
    parsed = Export.model_validate(doc).root
    assert isinstance(parsed, InfeasibleExport) and parsed.nearest is not None


def test_a_field_the_export_does_not_write_is_refused():
    with pytest.raises(ValidationError):
        PlansExport.model_validate({"status": "OPTIMAL", "plans": [], "extra": 1})


def test_schema_export_prints_the_models_schema():
    out = run_cli("schema", "--export")
    assert out.exit_code == 0
    assert json.loads(out.output) == Export.model_json_schema()
    assert json.loads(run_cli("schema").output)["title"] == "Plan"
