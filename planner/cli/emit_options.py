"""`--emit ENGINE DIR` and `--force`, shared by `plan` and `evaluate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import err_console
from planner.errors import BadInputError
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

EmitOpt = Annotated[
    tuple[str, Path] | None,
    typer.Option(
        "--emit",
        help="ENGINE DIR: launch files for vllm-ascend, sglang or mindie (launch.json, configs, expert maps); "
        "several engines (a comma list, or 'all') write DIR/ENGINE each.",
    ),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Let --emit replace an existing folder.")]


def parse_emits(emit: tuple[str, Path] | None) -> list[tuple[str, Path]]:
    """--emit ENGINE DIR: one engine writes DIR; several (a comma list, or 'all') write DIR/<engine>."""
    from planner.engines.profiles import ENGINES, engine_name

    if emit is None:
        return []
    names, folder = emit
    if names.strip().lower() == "all":
        return [(e, folder / e) for e in ENGINES]
    engines = list(dict.fromkeys(engine_name(n) for n in names.split(",") if n.strip()))
    if not engines:
        raise BadInputError(f"--emit: give an engine ({', '.join(ENGINES)}, a comma list or 'all') and a folder.")
    if len(engines) == 1:
        return [(engines[0], folder)]
    return [(e, folder / e) for e in engines]


def check_new_folders(emits: list[tuple[str, Path]], force: bool) -> None:
    """Refuse before any work when a folder exists and --force is not given."""
    for _, folder in emits:
        if folder.exists() and not force:
            raise BadInputError(f"--emit: '{folder}' exists; choose a new folder or add --force to replace it.")


def write_emits(
    emits: list[tuple[str, Path]],
    plan: Plan,
    model: ModelSpec,
    hw: HardwareSpec,
    loads: Path | None,
    force: bool,
) -> None:
    """Refuse (naming the plan fields) unless every requested engine runs `plan`, then write."""
    from planner.cli.options import loads_array
    from planner.report.launch import emit as emit_engine
    from planner.report.launch.common import check_runnable

    for engine, _ in emits:
        check_runnable(plan, model, hw, engine)
    array = loads_array(loads) if loads else None
    for engine, folder in emits:
        if folder.name == engine and not folder.parent.exists() and folder.parent.parent.is_dir():
            folder.parent.mkdir()  # the DIR of `--emit all DIR`
        files = emit_engine(engine, plan, model, hw, folder, force, array)
        err_console.print(f"wrote {len(files)} files to {folder} ({engine})")
