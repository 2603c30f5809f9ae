"""The `plan --json` export as pydantic models: what `moeplan schema --export` prints and what a test
parses every export with (planner.report.plan_report.plans_document and infeasible_document write it).

A plan file (`moeplan schema`) is one `Plan`; an export lists ranked plans, each a `Plan` with what the
search adds beside it: the engines that run it (`runs_on`), what each other engine lacks
(`cannot_run`), and the plans folded under it (`variants`: the same deployment with another dense FFN
or LM head layout), with the status, the named limits of the space it holds over and the notes.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from planner.specs.plan import Plan


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpaceLimit(_Strict):
    """One named limit of the space the status holds over (planner.candidates.restrictions)."""

    limit: str = Field(description="the limit's key; 'yours-...' for a limit the request's own flags set")
    keeps_out: str = Field(description="what the search did not visit")
    lift: str = Field(description="the flag that lifts it, or '-'")


class ExportedPlan(Plan):
    """A ranked plan of the export: the plan file's fields and what the search adds."""

    runs_on: list[str] | None = Field(default=None, description="the engines that run this plan (--engine auto)")
    cannot_run: dict[str, str] | None = Field(
        default=None, description="per other engine, the first field it lacks, as its message says"
    )
    variants: list[Plan] | None = Field(
        default=None, description="plans folded under this one: another dense FFN / LM head layout, same figures"
    )


class PlansExport(_Strict):
    """`plan --json` when a plan was found."""

    status: str = Field(description="OPTIMAL (proven over `space`), FEASIBLE, INTERRUPTED, ...")
    space: list[SpaceLimit] | None = None
    notes: list[str] | None = None
    plans: list[ExportedPlan] = Field(min_length=1)
    simulated: list[dict[str, Any]] | None = Field(
        default=None, description="plan --simulate: each plan's simulated percentiles and verdict, by rank"
    )


class Nearest(_Strict):
    flag: str
    value: float | None


class InfeasibleExport(_Strict):
    """`plan --json` when nothing is feasible (exit 1)."""

    status: Literal["INFEASIBLE"]
    reason: str = Field(description="the message naming the binding constraint")
    constraint: str | None
    nearest: Nearest | None = Field(description="the flag to change and, where the diagnosis names it, the value")


class Export(RootModel[PlansExport | InfeasibleExport]):
    """Either document."""


def export_schema_text() -> str:
    """The JSON Schema of the export."""
    return json.dumps(Export.model_json_schema(), indent=2, sort_keys=True) + "\n"
