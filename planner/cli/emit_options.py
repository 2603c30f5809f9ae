"""`--emit ENGINE DIR` and `--force`, shared by `plan` and `evaluate`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import Outputs
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
    from planner.engines.profiles import ENGINES

    if emit is None:
        return []
    names, folder = emit
    if names.strip().lower() == "all":
        return [(e, folder / e) for e in ENGINES]
    engines = list(dict.fromkeys(_engine(n) for n in names.split(",") if n.strip()))
    if not engines:
        raise BadInputError(f"--emit: give an engine ({', '.join(ENGINES)}, a comma list or 'all') and a folder.")
    if len(engines) == 1:
        return [(engines[0], folder)]
    return [(e, folder / e) for e in engines]


def _engine(name: str) -> str:
    """An engine name of --emit, or an error naming --emit (not --engine) and the engines."""
    from planner.engines.profiles import ENGINES, engine_name

    try:
        return engine_name(name)
    except BadInputError:
        raise BadInputError(
            f"--emit: unknown engine '{name.strip()}'; give one of {', '.join(ENGINES)}, a comma list of them or "
            "'all', then a folder (--emit vllm-ascend DIR)."
        ) from None


def check_new_folders(emits: list[tuple[str, Path]], force: bool) -> None:
    """Refuse before any work a folder --emit could not write: one that exists (without --force),
    is a file, or whose parent folder is missing (for several engines, DIR may be new)."""
    several = len(emits) > 1
    for _, folder in emits:
        if folder.exists() and not folder.is_dir():
            raise BadInputError(f"--emit: '{folder}' is a file, not a folder; choose another path.")
        if folder.exists() and not force:
            raise BadInputError(f"--emit: '{folder}' exists; choose a new folder or add --force to replace it.")
        parent = folder.resolve().parent
        if several and not parent.exists():
            parent = parent.parent  # DIR of `--emit all DIR` is made with the engines' folders
        if not parent.is_dir():
            what = f"'{parent}' is a file, not a folder" if parent.exists() else f"folder '{parent}' does not exist"
            raise BadInputError(f"--emit: {what}; create the folder first or write elsewhere.")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise BadInputError(f"--emit: folder '{parent}' is not writable; write elsewhere.")


def stage_emits(
    outputs: Outputs,
    emits: list[tuple[str, Path]],
    plan: Plan,
    model: ModelSpec,
    hw: HardwareSpec,
    loads: Path | None,
    force: bool,
) -> list[str]:
    """Refuse (naming the plan fields) unless every requested engine runs `plan`, then build each
    export and add it to `outputs` (written with the command's other files); returns the lines
    that say what was written, to print once it is."""
    from planner.cli.options import loads_array
    from planner.report.launch import prepare
    from planner.report.launch.common import check_runnable

    refusals = []
    for engine, _ in emits:
        try:
            check_runnable(plan, model, hw, engine)
        except BadInputError as exc:
            refusals.append(str(exc))
    if refusals:  # every engine that cannot run it, not only the first
        raise BadInputError("\n".join(refusals))
    array = loads_array(loads) if loads else None
    lines = []
    several = len(emits) > 1
    for engine, folder in emits:
        prepared = prepare(engine, plan, model, hw, folder, force, array, create_parent=several)
        outputs.folder(prepared, "--emit")
        lines.append(f"wrote {len(prepared.files)} files to {folder} ({engine})")
    return lines
