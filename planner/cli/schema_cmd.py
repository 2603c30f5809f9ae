"""`moeplan schema`: the plan file's JSON Schema (plans/plan.schema.json holds a copy), or with
--export the schema of `plan --json`'s document (planner.report.export_schema)."""

from __future__ import annotations

import json

import typer

from planner.cli.common import console
from planner.specs.plan import Plan


def plan_schema_text() -> str:
    """The JSON Schema of the plan format, as committed in plans/plan.schema.json."""
    return json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True) + "\n"


def schema(
    export: bool = typer.Option(
        False,
        "--export",
        help="The schema of `plan --json`'s document (ranked plans with runs_on, cannot_run, "
        "variants; status, space, notes) instead of one plan file.",
    ),
) -> None:
    """Print the JSON Schema of the plan format."""
    if export:
        from planner.report.export_schema import export_schema_text

        console.file.write(export_schema_text())
        return
    console.file.write(plan_schema_text())
