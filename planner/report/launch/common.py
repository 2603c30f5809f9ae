"""What every engine export shares: device allocation, expert maps, memory figures, the folder.

An export turns a plan into the files that start it: one process per node of every instance
(every device of the plan in exactly one process), the proxy/router of a disaggregated plan, the
expert maps, and `launch.json`, a machine-readable list of the processes::

    {"engine", "engine_version", "plan": "plan.json", "nodes": [...],
     "processes": [{"role", "instance", "node", "devices", "argv", "env"}]}

Nodes are numbered from 0 and devices are numbered inside their node. Node addresses are
placeholders (`NODE0_ADDR`, ...) that a launcher substitutes (README.md in the folder says how).
The folder is built beside its destination and renamed into place, so a reader never sees a
half-written export; an existing folder is replaced only with `force`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from planner.engines.plan_view import PlanView
from planner.engines.profiles import EngineProfile, load_profile, plan_problems
from planner.errors import BadInputError
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import PhasePlan, Plan

HF_NAMES = {
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite",
}
ROUTER_PORT = 8000
# API ports: 10 apart per instance (engines derive helper ports from the API port)
SERVER_PORT_BASE = {"prefill": 10000, "decode": 20000, "colocated": 30000}
PORT_STRIDE = 10
MAX_INSTANCES_PER_ROLE = 99


def node_addr(node: int) -> str:
    """The placeholder a launcher replaces with node `node`'s address."""
    return f"NODE{node}_ADDR"


@dataclass
class Process:
    """One process of the deployment (launch.json's `processes` entries)."""

    role: str
    instance: int
    node: int
    devices: list[int]
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def doc(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "instance": self.instance,
            "node": self.node,
            "devices": self.devices,
            "argv": self.argv,
            "env": self.env,
        }


@dataclass(frozen=True)
class Slot:
    """Where one instance runs: per node it spans, the node and its devices there."""

    role: str  # prefill | decode | colocated
    instance: int  # index within its role
    nodes: tuple[tuple[int, tuple[int, ...]], ...]

    @property
    def head_node(self) -> int:
        return self.nodes[0][0]

    @property
    def port(self) -> int:
        return SERVER_PORT_BASE[self.role] + PORT_STRIDE * self.instance


@dataclass
class Export:
    """Everything one engine export writes: files (relative path -> text) and the processes."""

    engine: EngineProfile
    files: dict[str, str]
    processes: list[Process]
    readme: str
    modes: dict[str, int] = field(default_factory=dict)  # file -> mode where the engine wants a narrower one


def sections(view: PlanView) -> list[tuple[str, PhasePlan]]:
    """(role, section) for every kind of instance of the plan, prefill first."""
    if view.colocated is not None:
        return [("colocated", view.colocated.phase)]
    out: list[tuple[str, PhasePlan]] = []
    if view.prefill is not None:
        out.append(("prefill", view.prefill))
    if view.decode is not None:
        out.append(("decode", view.decode))
    return out


def allocate(view: PlanView, hw: HardwareSpec, max_instances: int | None = MAX_INSTANCES_PER_ROLE) -> list[Slot]:
    """Place every instance on nodes: whole-node instances from a node boundary, smaller ones
    packed into nodes (their sizes are powers of two dividing a node, so they tile it).

    `max_instances`: the most instances of a role the exports number ports for (None: no limit,
    for the HTML report's drawing, which places instances the same way)."""
    node = hw.devices_per_node
    cursor = 0
    slots = []
    for role, phase in sections(view):
        if max_instances is not None and phase.instances > max_instances:
            raise BadInputError(
                f"{role}.instances = {phase.instances}: the export numbers ports per instance and supports at most "
                f"{MAX_INSTANCES_PER_ROLE} instances of a role; export a plan with fewer, larger instances."
            )
        n = phase.devices
        for i in range(phase.instances):
            if n >= node or cursor % node + n > node:
                cursor = -(-cursor // node) * node
            spans = []
            left, at = n, cursor
            while left:
                take = min(left, node - at % node)
                spans.append((at // node, tuple(range(at % node, at % node + take))))
                left -= take
                at += take
            cursor = at
            slots.append(Slot(role, i, tuple(spans)))
    return slots


def nodes_used(slots: list[Slot]) -> int:
    """Nodes the deployment occupies."""
    return 1 + max(n for s in slots for n, _ in s.nodes)


def visible_devices(devices: tuple[int, ...] | list[int]) -> str:
    return ",".join(str(d) for d in devices)


def model_path(plan: Plan) -> str:
    """The weights the servers load (a HuggingFace id for catalog models, else the plan's path)."""
    return HF_NAMES.get(plan.model, plan.model)


def draft_model_path(plan: Plan) -> str | None:
    """The draft model's weights the servers load (its checkpoint for a catalog draft, else the plan's
    path); None without a draft model."""
    if plan.draft_model is None:
        return None
    from planner.specs.catalog import draft_source

    return str(draft_source(plan.draft_model).get("checkpoint") or plan.draft_model)


def context_tokens(plan: Plan) -> int:
    """Longest sequence the plan serves: prompt plus completion."""
    return plan.workload.input_tokens + plan.workload.output_tokens


# ---- memory ----------------------------------------------------------------------------------


def _prediction(plan: Plan, role: str) -> dict[str, Any]:
    pred = plan.predicted or {}
    block = pred.get("colocated" if role == "colocated" else role)
    if not block:
        raise BadInputError(
            f"the plan has no predicted.{role} block (HBM per device); export plans from `moeplan plan` or "
            "re-score the file with `moeplan evaluate --json` first."
        )
    return block


def afd_side_block(plan: Plan, side: str) -> dict[str, Any]:
    """The prediction's HBM figures of one side of an AFD plan ("attention" or "ffn"), as a memory fraction
    reads them."""
    afd = (plan.predicted or {}).get("afd")
    if not afd:
        raise BadInputError(
            "the plan has no predicted.afd block (HBM per device); export plans from `moeplan plan` or re-score the "
            "file with `moeplan evaluate --json` first."
        )
    if side == "attention":
        return afd
    return {
        "hbm_capacity_bytes": afd["hbm_capacity_bytes"],
        "hbm_bytes_per_device": afd["ffn_hbm_bytes_per_device"],
        "hbm_free_bytes": afd["ffn_hbm_free_bytes"],
        "hbm_breakdown_bytes": afd["ffn_hbm_breakdown_bytes"],
    }


def device_hbm_bytes(block: dict[str, Any]) -> float:
    """The device's whole HBM, from a prediction block (what it uses plus what is free)."""
    return float(block["hbm_bytes_per_device"] + block["hbm_free_bytes"])


def outside_engine_bytes(block: dict[str, Any], exclude: tuple[str, ...]) -> float:
    """HBM per device outside an engine's memory fraction: the runtime reserve and the `exclude` parts."""
    parts = block["hbm_breakdown_bytes"]
    return float(parts.get("runtime_reserve", 0) + sum(v for k, v in parts.items() if k in exclude))


def memory_fraction(plan: Plan, role: str, exclude: tuple[str, ...], profile: EngineProfile, flag: str) -> float:
    """The fraction of HBM an engine may take for everything but `exclude` (the runtime reserve is
    always left out), rounded down to thousandths; refused when the plan's own use would not fit."""
    return memory_fraction_of(_prediction(plan, role), role, exclude, profile, flag)


def memory_fraction_of(
    block: dict[str, Any], role: str, exclude: tuple[str, ...], profile: EngineProfile, flag: str
) -> float:
    """`memory_fraction` of one block of HBM figures (a prediction block, or one side of an AFD instance)."""
    # the engine's fraction is of the device's whole HBM; the plan may fill hbm_utilization of it
    # (--hbm-utilization), runtime reserve included, so the engine gets that share less the reserve
    cap = float(block["hbm_capacity_bytes"])
    whole = device_hbm_bytes(block)
    parts = block["hbm_breakdown_bytes"]
    outside = outside_engine_bytes(block, exclude)
    # floored to thousandths; the 1e-6 (of a thousandth: a few bytes) keeps a share that is a whole number
    # of thousandths up to integer-byte noise (a plan sized by memory_flags.hbm_utilization_for) whole
    fraction = math.floor((cap - outside) / whole * 1000 + 1e-6) / 1000
    inside = sum(v for k, v in parts.items() if k not in exclude and k != "runtime_reserve")
    if fraction * whole < inside <= cap - outside:
        # a plan filled to its cap: the fraction rounded down to thousandths would cut into it, so it is
        # rounded up instead, the engine taking at most a thousandth of the HBM from the runtime reserve
        fraction = math.ceil(inside / whole * 1000) / 1000
    if inside > fraction * whole:
        raise BadInputError(
            f"{role}: the plan's HBM per device ({inside / 2**30:.1f} GiB under {flag}) exceeds {flag} "
            f"{fraction} x {whole / 2**30:.1f} GiB for {profile.label}; plan with more devices per instance or "
            "lower concurrency."
        )
    return fraction


def kv_cache_gib(plan: Plan, role: str) -> int:
    """KV cache the plan gives one device, in whole GiB (rounded up)."""
    parts = _prediction(plan, role)["hbm_breakdown_bytes"]
    kv = parts.get("kv_cache", 0) + parts.get("prefill_kv_cache", 0)
    return max(1, math.ceil(kv / 2**30))


# ---- expert maps -----------------------------------------------------------------------------


def default_loads(model: ModelSpec) -> np.ndarray:
    """Per-layer loads of the default skew model: [MoE layers, routed experts]."""
    from planner.costmodel.imbalance import DEFAULT_SKEW_SIGMA, lognormal_popularity

    assert model.moe is not None
    pop = lognormal_popularity(model.moe.routed_experts, DEFAULT_SKEW_SIGMA)
    return np.repeat(pop[None, :] * 1e6, model.num_moe_layers, axis=0)


def placement_for(model: ModelSpec, phase: PhasePlan, loads: np.ndarray | None):
    """moeplan's placement of the phase's expert slots (measured loads, or the default skew model)."""
    from planner.placement import optimize_placement
    from planner.placement.optimize import FAST_SEARCH

    assert phase.moe is not None
    layer_loads = loads if loads is not None else default_loads(model)
    return optimize_placement(layer_loads, phase.moe.ep, phase.moe.slots_per_device, settings=FAST_SEARCH).placement


# ---- the folder ------------------------------------------------------------------------------


def check_runnable(plan: Plan, model: ModelSpec, hw: HardwareSpec, engine: str) -> EngineProfile:
    """The engine's profile; BadInputError listing every plan field the engine cannot run."""
    profile = load_profile(engine)
    experts = model.moe.routed_experts if model.moe is not None else None
    problems = plan_problems(plan, hw, engine, experts, model.num_dense_layers > 0, model.architectures)
    if problems:
        raise BadInputError(f"--emit {engine}: {profile.label} cannot run this plan: " + " | ".join(problems))
    afd = profile.capabilities.afd
    if plan.afd is not None and afd is not None and not afd.launch_documented:
        raise BadInputError(
            f"--emit {engine}: {profile.label}'s attention-FFN disaggregation ({afd.via}) documents no launch "
            "(no recipe or guide says how to start its attention and FFN servers), so moeplan writes none; start "
            "it by hand from the plan, or emit a non-AFD plan."
        )
    return profile


def compact_json(value: Any, depth: int = 0) -> str:
    """JSON text with every list of scalars (devices, argv) on one line."""
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(str(k))}: {compact_json(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + compact_json(v, depth + 1) for v in value) + "\n" + pad + "]"
    return json.dumps(value)


def launch_document(export: Export, nodes: int) -> str:
    doc = {
        "engine": export.engine.engine,
        "engine_version": export.engine.release,
        "plan": "plan.json",
        "nodes": [{"node": n, "address": node_addr(n)} for n in range(nodes)],
        "processes": [p.doc() for p in export.processes],
    }
    return compact_json(doc) + "\n"


class PreparedExport:
    """An export built in memory for its destination, written in two steps so that a command
    writing several outputs can stage all of them before it renames any into place.

    `stage()` writes the folder beside its destination (a hidden temporary folder), `commit()`
    renames it into place (replacing an existing folder), `discard()` removes what `stage()` wrote.
    """

    def __init__(
        self, final: Path, files: dict[str, str], create_parent: bool = False, modes: dict[str, int] | None = None
    ) -> None:
        self.final = final
        self.destination = final  # (named in a write error)
        self.files = files
        self.modes = modes or {}
        self.create_parent = create_parent
        self._tmp: Path | None = None

    @property
    def paths(self) -> list[Path]:
        """The files the export holds once committed."""
        return sorted(self.final / rel for rel in self.files)

    def stage(self) -> None:
        parent = self.final.parent
        where = parent if parent.is_dir() else parent.parent  # (`create_parent`: made at commit)
        self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.final.name}.", dir=where))
        for rel, text in self.files.items():
            path = self._tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            if rel in self.modes:
                os.chmod(path, self.modes[rel])
        os.chmod(self._tmp, 0o755)

    def commit(self) -> None:
        assert self._tmp is not None, "stage() first"
        final = self.final
        if self.create_parent:
            final.parent.mkdir(exist_ok=True)
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
            os.replace(final, old / "x")
        os.replace(self._tmp, final)
        self._tmp = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def discard(self) -> None:
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(self._tmp)
            self._tmp = None

    def write(self) -> list[Path]:
        """Stage and commit at once; returns the files written."""
        try:
            self.stage()
            self.commit()
        except BaseException:
            self.discard()
            raise
        return self.paths


def prepare_export(
    out_dir: Path,
    force: bool,
    build: Callable[[Path], tuple[Export, int]],
    plan_json: str,
    create_parent: bool = False,
) -> PreparedExport:
    """Check the destination and build the export's files in memory (nothing is written).

    `build(final_dir)` returns the export and the number of nodes; it gets the final absolute
    path because engines want absolute paths to the files they load (expert maps, configs).
    `create_parent`: the destination's folder may be missing (made at commit) if its own parent
    exists: the DIR of `--emit all DIR`."""
    out_dir = Path(out_dir)
    final = out_dir.resolve()
    parent = final.parent
    if not (parent.is_dir() or (create_parent and not parent.exists() and parent.parent.is_dir())):
        raise BadInputError(f"--emit: folder '{parent}' does not exist; create it first.")
    if final.exists() and not force:
        raise BadInputError(f"--emit: '{out_dir}' exists; choose a new folder or add --force to replace it.")
    if final.exists() and not final.is_dir():
        raise BadInputError(f"--emit: '{out_dir}' is a file, not a folder; choose another path.")
    export, nodes = build(final)
    files = dict(export.files)
    files["plan.json"] = plan_json
    files["launch.json"] = launch_document(export, nodes)
    files["README.md"] = export.readme + BENCH_NOTE
    check_conformance(export)
    return PreparedExport(final, files, create_parent, export.modes)


BENCH_NOTE = """
## Benchmark and calibrate

`bench/` holds the benchmark commands of vLLM, SGLang and AISBench with this plan's workload, and `bench/README.md`
says how to run them against the entry point and hand the result back (`moeplan calibrate --bench`).
"""


def check_conformance(export: Export) -> None:
    """Refuse to write an export the engine's own load-time rules would refuse (planner.engines.
    conformance): such an export is moeplan's bug, named here instead of at the engine's start."""
    from planner.engines.conformance import export_problems

    processes = [p.doc() for p in export.processes]
    problems = export_problems(export.engine.engine, export.files, processes, export.modes)
    if problems:
        raise RuntimeError(
            f"moeplan's {export.engine.label} export breaks the engine's own rules (a moeplan bug; please report it): "
            + " | ".join(problems)
        )


def readme_common(export_name: str, profile: EngineProfile, nodes: int, processes: list[Process]) -> str:
    """The part of every README that says how to start the processes of launch.json."""
    roles: dict[str, int] = {}
    for p in processes:
        roles[p.role] = roles.get(p.role, 0) + 1
    counts = ", ".join(f"{n} {r}" for r, n in roles.items())
    return (
        f"# {export_name} launch files (moeplan)\n\n"
        f"Engine: {profile.display} {profile.release} (read from {profile.read_from}).\n\n"
        f"`launch.json` lists every process: {counts} process(es) on {nodes} node(s). For each process, on node "
        "`node`, set the environment `env` and run `argv`. Replace `NODEi_ADDR` (in argv, env and the config files) "
        "with the address of node i. Devices are numbered inside each node; `env` pins them "
        "(ASCEND_RT_VISIBLE_DEVICES). Start the servers first (every node of an instance), the router last.\n\n"
        "A minimal launcher, once the addresses are substituted:\n\n"
        "```python\nimport json, os, subprocess\nnode = int(os.environ['NODE'])  # this machine\n"
        "for p in json.load(open('launch.json'))['processes']:\n    if p['node'] == node:\n"
        "        subprocess.Popen(p['argv'], env={**os.environ, **p['env']})\n```\n\n"
        "`plan.json` is the plan these files start (with the cost model's predictions).\n"
    )
