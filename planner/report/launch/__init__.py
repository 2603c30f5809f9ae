"""Launch files that start a plan on a real engine: vLLM-Ascend, SGLang on Ascend, MindIE.

`emit(engine, plan, model, hw, out_dir)` writes one folder per engine (see `common` for its
layout and `launch.json`); an engine that cannot run a plan field refuses with a message naming it.
`prepare(...)` builds the same folder without writing it, for a command that writes it together
with its other outputs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from planner.engines.profiles import ENGINES, engine_name
from planner.report.launch.common import PreparedExport, prepare_export
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan


def _builder(engine: str):
    if engine == "vllm-ascend":
        from planner.report.launch.vllm_ascend import build
    elif engine == "sglang":
        from planner.report.launch.sglang import build
    else:
        from planner.report.launch.mindie import build
    return build


def emit(
    engine: str,
    plan: Plan,
    model: ModelSpec,
    hw: HardwareSpec,
    out_dir: Path,
    force: bool = False,
    loads: np.ndarray | None = None,
) -> list[Path]:
    """Write `engine`'s launch folder for `plan` into `out_dir`; returns the files written."""
    return prepare(engine, plan, model, hw, out_dir, force, loads).write()


def prepare(
    engine: str,
    plan: Plan,
    model: ModelSpec,
    hw: HardwareSpec,
    out_dir: Path,
    force: bool = False,
    loads: np.ndarray | None = None,
    create_parent: bool = False,
) -> PreparedExport:
    """`engine`'s launch folder for `plan`, built in memory and not yet written (see PreparedExport)."""
    from planner.report.launch.bench import bench_files

    key = engine_name(engine)
    build = _builder(key)
    plan_json = json.dumps(plan.model_dump(mode="json", exclude_none=True), indent=2) + "\n"
    prepared = prepare_export(
        out_dir, force, lambda final: build(plan, model, hw, final, loads), plan_json, create_parent
    )
    bench = bench_files(plan)  # the benchmark commands with the plan's workload (bench/)
    prepared.files.update(bench)
    prepared.modes.update({rel: 0o755 for rel in bench if rel.endswith(".sh")})
    return prepared


__all__ = ["ENGINES", "PreparedExport", "emit", "prepare"]


def engine_verdicts(plan: Plan, model: ModelSpec, hw: HardwareSpec) -> dict:
    """`runs_on` (the engines that run `plan`) and `cannot_run` (per other engine, the first field it
    lacks, as its message says), for the JSON export."""
    from planner.engines.profiles import model_engines_that_run

    found = model_engines_that_run(plan, hw, model)  # (the model's architectures too, as engines_line)
    return {
        "runs_on": [e for e, problems in found.items() if not problems],
        "cannot_run": {e: problems[0] for e, problems in found.items() if problems},
    }


def engines_line(plan: Plan, model: ModelSpec, hw: HardwareSpec) -> str:
    """One line saying which engines can run `plan` and, for the others, the first reason."""
    from planner.engines.profiles import load_profile, model_engines_that_run

    verdicts = []
    for engine, problems in model_engines_that_run(plan, hw, model).items():
        profile = load_profile(engine)
        label = profile.label
        if plan.afd is not None and profile.capabilities.afd is not None:
            label += f" + {profile.capabilities.afd.via.split(' (')[0]}"
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            verdicts.append(f"{label}: no, {problems[0].split(':')[0]}{more}")
        else:
            verdicts.append(f"{label}: yes")
    return "engines that run this plan: " + "; ".join(verdicts)
