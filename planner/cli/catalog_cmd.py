"""`moeplan hardware list|show` and `moeplan models list|show`."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from planner.cli.common import console, run_guarded
from planner.cli.metavars import MetavarCommand
from planner.errors import BadInputError
from planner.report import catalog_report
from planner.specs.catalog import (
    catalog_names,
    draft_source,
    load_draft,
    load_hardware,
    load_model,
    model_source,
)

hardware_app = typer.Typer(help="The hardware catalog.")
models_app = typer.Typer(help="The model catalog.")


@hardware_app.callback(invoke_without_command=True, help="The hardware catalog (bare: the list).")
def hardware_root(ctx: typer.Context) -> None:
    """`moeplan hardware` alone lists the machines, as `moeplan hardware list` does."""
    if ctx.invoked_subcommand is None:
        hardware_list()


@models_app.callback(invoke_without_command=True, help="The model catalog (bare: the list).")
def models_root(ctx: typer.Context) -> None:
    """`moeplan models` alone lists the models, as `moeplan models list` does."""
    if ctx.invoked_subcommand is None:
        models_list()


@hardware_app.command("list", cls=MetavarCommand)
def hardware_list() -> None:
    """List the machines in the catalog."""
    specs = run_guarded(lambda: [load_hardware(n) for n in catalog_names("hardware")])
    console.print(catalog_report.hardware_list_table(specs))


@hardware_app.command("show", cls=MetavarCommand)
def hardware_show(name: str = typer.Argument(..., help="Catalog name or path to a YAML.")) -> None:
    """Show one machine: peaks, memory, links and every efficiency with its source."""
    spec = run_guarded(lambda: load_hardware(name))
    for renderable in catalog_report.hardware_detail(spec):
        console.print(renderable)


@models_app.command("list", cls=MetavarCommand)
def models_list() -> None:
    """List the models in the catalog."""
    names = catalog_names("models")
    specs = run_guarded(lambda: [load_model(n) for n in names])
    sources = {n: str(model_source(n).get("source", "")) for n in names}
    console.print(catalog_report.model_list_table(specs, sources))
    drafts = run_guarded(lambda: [load_draft(n) for n in catalog_names("drafts")])
    if drafts:
        draft_sources = {d.name: str(draft_source(d.name).get("source", "")) for d in drafts}
        console.print(catalog_report.draft_list_table(drafts, draft_sources))


@models_app.command("show", cls=MetavarCommand)
def models_show(
    name: str = typer.Argument(..., help="Catalog name, or path to a YAML or config.json."),
    json_out: Annotated[
        bool, typer.Option("--json", help="Print params_total, params_active, kv_bytes_per_token, ... as JSON.")
    ] = False,
    context: Annotated[
        int,
        typer.Option("--context", help="Context length (tokens) the cache per token is averaged over."),
    ] = 4096,
) -> None:
    """Show one model: layers, attention kinds, experts, parameter and KV-cache sizes."""

    def body() -> None:
        if not 1 <= context <= 1_000_000_000:
            raise BadInputError(f"--context = {context} must be between 1 and 1,000,000,000 tokens.")
        spec = load_model(name)
        if json_out:
            facts = catalog_report.model_facts(spec, context)
            if name in catalog_names("models"):
                facts["published"] = model_source(name)
            console.file.write(json.dumps(facts, indent=2) + "\n")
            return
        for renderable in catalog_report.model_detail(spec):
            console.print(renderable)

    run_guarded(body)
