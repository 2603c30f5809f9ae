"""`moeplan experts`: place redundant experts for measured or synthetic loads; write the map."""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import check_output, console, err_console, run_guarded, write_text_atomic
from planner.cli.options import check_loads_file
from planner.errors import BadInputError
from planner.placement.expert_map import moeplan_json, vllm_ascend_json
from planner.placement.loads import ExpertLoads, check_experts, from_array, read_expert_loads
from planner.placement.metrics import Routing, check_layout, default_routing
from planner.placement.study import run_study, study_figures
from planner.placement.synthetic import generate_loads, parse_trace_spec
from planner.report import experts_report
from planner.specs.catalog import load_model
from planner.specs.model import ModelSpec

MAX_PHYSICAL_SLOTS = 20_000_000  # layers x devices x slots, a guard against runaway memory


class MapFormat(StrEnum):
    vllm_ascend = "vllm-ascend"
    json = "json"


def experts(
    devices: Annotated[
        int,
        typer.Option("--devices", min=1, max=65536, help="Devices (dies) in the expert-parallel group."),
    ],
    slots_per_device: Annotated[
        int,
        typer.Option("--slots-per-device", min=1, max=4096, help="Expert slots on every device."),
    ],
    loads: Annotated[
        Path | None,
        typer.Option(
            "--loads",
            help="Expert loads: CSV, JSON or .npy, [layers, experts] or with windows (see docs/experts.md).",
        ),
    ] = None,
    synthetic: Annotated[
        str | None,
        typer.Option("--synthetic", help="Generate loads instead: zipf:S or lognormal:SIGMA."),
    ] = None,
    layers: Annotated[
        int | None,
        typer.Option(
            "--layers",
            min=1,
            max=10000,
            help="--synthetic: MoE layers (default: the model's, else 58).",
        ),
    ] = None,
    experts_count: Annotated[
        int | None,
        typer.Option(
            "--experts",
            min=1,
            max=65536,
            help="--synthetic: experts per layer (default: the model's, else 256).",
        ),
    ] = None,
    windows: Annotated[
        int | None,
        typer.Option("--windows", min=1, max=100, help="--synthetic: time windows (default 1)."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option("--seed", min=0, max=2**32 - 1, help="--synthetic: random seed (default 0)."),
    ] = None,
    tokens_per_layer: Annotated[
        int | None,
        typer.Option(
            "--tokens-per-layer",
            min=1,
            max=10**9,
            help="--synthetic: tokens per layer and window (default 16384).",
        ),
    ] = None,
    nodes: Annotated[
        int,
        typer.Option(
            "--nodes",
            min=1,
            max=65536,
            help="Nodes the devices split evenly over (for the hierarchical baseline and locality).",
        ),
    ] = 1,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Catalog name or path: experts count and group-limited routing."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the expert map here ('-' for stdout).")] = None,
    fmt: Annotated[
        MapFormat,
        typer.Option(
            "--format",
            help="vllm-ascend expert map, or moeplan's JSON with the figures.",
        ),
    ] = MapFormat.vllm_ascend,
) -> None:
    """Place redundant experts so no device straggles; compare with DeepSeek EPLB's greedy."""

    def body() -> None:
        start = time.perf_counter()
        check_output("--out", out)  # before the placement: a path it cannot write fails at once
        spec = load_model(model) if model else None
        if spec is not None and spec.moe is None:
            raise BadInputError(f"--model {model}: '{spec.name}' has no MoE layers to place.")
        data, what = _loads(loads, synthetic, layers, experts_count, windows, seed, tokens_per_layer, spec)
        if spec is not None and spec.moe is not None:
            check_experts(data, spec.moe.routed_experts, str(model))
        routing, assumed = _routing(spec, data.experts)
        check_layout(data.window(0), devices, slots_per_device, nodes)
        if data.layers * devices * slots_per_device > MAX_PHYSICAL_SLOTS:
            raise BadInputError(
                f"{data.layers} layers x {devices} devices x {slots_per_device} slots is more than "
                f"{MAX_PHYSICAL_SLOTS} slots in all; place fewer layers at a time."
            )
        study = run_study(data, devices, slots_per_device, nodes, routing)
        text = None
        if out is not None:
            placement = study.deployed.placement
            text = (
                vllm_ascend_json(placement)
                if fmt is MapFormat.vllm_ascend
                else moeplan_json(placement, study_figures(study))
            )
        screen = err_console if out is not None and str(out) == "-" else console
        for renderable in experts_report.render(
            study, what, len(data.uniform_layers), assumed, time.perf_counter() - start
        ):
            screen.print(renderable)
        if out is not None and text is not None:
            write_text_atomic(out, text, "--out")
            if str(out) != "-":
                screen.print(
                    f"wrote {out} ({fmt.value}, {study.deployed.placement.layers} layers "
                    f"x {devices} devices x {slots_per_device} slots)"
                )

    run_guarded(body)


def _loads(
    path: Path | None,
    synthetic: str | None,
    layers: int | None,
    experts: int | None,
    windows: int | None,
    seed: int | None,
    tokens_per_layer: int | None,
    spec: ModelSpec | None,
) -> tuple[ExpertLoads, str]:
    """The loads the flags ask for, and a phrase saying where they came from."""
    if (path is None) == (synthetic is None):
        raise BadInputError("give exactly one of --loads FILE or --synthetic SPEC (e.g. --synthetic zipf:1.1).")
    if path is not None:
        given = [
            name
            for name, value in (
                ("--layers", layers),
                ("--experts", experts),
                ("--windows", windows),
                ("--seed", seed),
                ("--tokens-per-layer", tokens_per_layer),
            )
            if value is not None
        ]
        if given:
            raise BadInputError(f"{', '.join(given)} only apply to --synthetic; the loads file sets its own shape.")
        check_loads_file(path)
        return read_expert_loads(path), f"loads {path.name}"
    assert synthetic is not None
    trace = parse_trace_spec(synthetic)
    moe = spec.moe if spec is not None else None
    n_layers = layers or (spec.num_moe_layers if spec is not None else 58)
    n_experts = experts or (moe.routed_experts if moe is not None else 256)
    top_k = min(moe.experts_per_token if moe is not None else 8, n_experts)
    if n_layers * n_experts * (windows or 1) > 50_000_000:
        raise BadInputError("--layers x --experts x --windows is over 50 million loads; use fewer.")
    arr = generate_loads(trace, n_layers, n_experts, windows or 1, tokens_per_layer or 16384, seed or 0, top_k)
    data = from_array(arr, f"synthetic {trace}")
    n_windows = data.num_windows
    return data, (f"synthetic {trace}, seed {seed or 0}" + (f", {n_windows} windows" if n_windows > 1 else ""))


def _routing(spec: ModelSpec | None, experts: int) -> tuple[Routing, bool]:
    """The model's routing, or top-8 without groups (and True: assumed)."""
    if spec is not None and spec.moe is not None:
        moe = spec.moe
        return Routing(moe.experts_per_token, moe.n_group, moe.topk_group), False
    return default_routing(experts), True


def register(app: typer.Typer) -> None:
    """Add the experts command to the app."""
    from planner.cli.metavars import MetavarCommand

    app.command("experts", cls=MetavarCommand)(experts)
