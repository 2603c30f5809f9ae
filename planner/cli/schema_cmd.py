"""`moeplan schema`: the plan file's JSON Schema (plans/plan.schema.json holds a copy)."""

from __future__ import annotations

import json

from planner.cli.common import console
from planner.specs.plan import Plan


def plan_schema_text() -> str:
    """The JSON Schema of the plan format, as committed in plans/plan.schema.json."""
    return json.dumps(Plan.model_json_schema(), indent=2, sort_keys=True) + "\n"


def schema() -> None:
    """Print the JSON Schema of the plan format."""
    console.file.write(plan_schema_text())
