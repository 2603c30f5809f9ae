"""`moeplan hardware list|show` and `moeplan models list|show`."""

from __future__ import annotations

import typer

from planner.cli.common import console, run_guarded
from planner.report import catalog_report
from planner.specs.catalog import catalog_names, load_hardware, load_model

hardware_app = typer.Typer(help="The hardware catalog.", no_args_is_help=True)
models_app = typer.Typer(help="The model catalog.", no_args_is_help=True)


@hardware_app.command("list")
def hardware_list() -> None:
    """List the machines in the catalog."""
    specs = run_guarded(lambda: [load_hardware(n) for n in catalog_names("hardware")])
    console.print(catalog_report.hardware_list_table(specs))


@hardware_app.command("show")
def hardware_show(name: str = typer.Argument(..., help="Catalog name or path to a YAML.")) -> None:
    """Show one machine: peaks, memory, links and every efficiency with its source."""
    spec = run_guarded(lambda: load_hardware(name))
    for renderable in catalog_report.hardware_detail(spec):
        console.print(renderable)


@models_app.command("list")
def models_list() -> None:
    """List the models in the catalog."""
    specs = run_guarded(lambda: [load_model(n) for n in catalog_names("models")])
    console.print(catalog_report.model_list_table(specs))


@models_app.command("show")
def models_show(
    name: str = typer.Argument(..., help="Catalog name, or path to a YAML or config.json."),
) -> None:
    """Show one model: layers, attention, experts, parameter and KV-cache sizes."""
    spec = run_guarded(lambda: load_model(name))
    for renderable in catalog_report.model_detail(spec):
        console.print(renderable)
