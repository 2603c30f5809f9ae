"""Shared fixtures: the shipped plans, a CLI runner, and a helper to run moeplan in-process."""

from __future__ import annotations

import os
from pathlib import Path

# tests never read or write the user's cache folder (planner.costmodel.disk_memo has its own test)
os.environ["MOEPLAN_CACHE_DIR"] = "off"

import pytest
from hypothesis import settings
from typer.testing import CliRunner

from planner.cli.app import app
from planner.search.settings import SolverSettings

# Hypothesis profiles: "ci" draws the same examples on every run (derandomised, no example
# database), so CI is reproducible; "random" (local runs, the default) draws new ones each time and
# replays the failures it keeps. .ci/run sets MOEPLAN_HYPOTHESIS_PROFILE=ci. Neither has a
# deadline: a test's wall time on a loaded machine is not behaviour.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("random", deadline=None)
settings.load_profile(os.environ.get("MOEPLAN_HYPOTHESIS_PROFILE", "random"))

REPO = Path(__file__).resolve().parent.parent
# for tests that assert a proof (`outcome.optimal`): a time limit no loaded machine can hit
PROOF = SolverSettings(time_limit_s=86_400, workers=1)
PLANS = REPO / "plans"


# `moeplan plan`'s flags at their defaults, as keyword arguments of planner.cli.plan_cmd.build_request
PLAN_FLAGS: dict[str, object] = dict(
    model="deepseek-v3",
    hardware="a2",
    quantization="a8w8c16",
    input_tokens=2048,
    output_tokens=2048,
    mtp_acceptance=0.7,
    tpot_ms=100.0,
    ttft_ms=2000.0,
    max_cards=48.0,
    phase="both",
    decode_devices=None,
    prefill_devices=None,
    rate=None,
    top=5,
    mtp=None,
    time_limit=60.0,
    workers=1,
    loads=None,
    skew_sigma=None,
)


def plan_request(**flags: object):
    """The request `moeplan plan` builds with these flags changed (the ITL limit 3x TPOT unless given)."""
    from planner.cli.plan_cmd import build_request

    return build_request(**{**PLAN_FLAGS, **flags})  # type: ignore[arg-type]


def llama_8b_config(max_position_embeddings: int) -> dict[str, object]:
    """A Llama-3-8B-shaped dense config.json (8 KV heads of 128 dims, 32 layers: 128 KiB of BF16 KV a token)."""
    return {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": max_position_embeddings,
    }


def collective_cost_contexts(raise_by_s: float):
    """Cost contexts of the cm-d plan (DeepSeek on CloudMatrix384) as shipped and with
    `fixed_costs.collective` raised by `raise_by_s`: what a module's cost gains per collective charge."""
    from planner.costmodel.context import CostContext
    from planner.costmodel.evaluate import load_plan_specs
    from planner.costmodel.fitting import factor_value, with_factors
    from planner.specs.catalog import catalog_dir, load_plan

    plan, _ = load_plan("cm-d")
    specs = load_plan_specs(plan, catalog_dir("plans"))
    name = "fixed_costs.collective"
    raised = with_factors(specs.hw, {name: factor_value(specs.hw, name) + raise_by_s})
    return tuple(CostContext(specs.model, hw, specs.quant, plan.workload) for hw in (specs.hw, raised))


KEPT_ASIDE_SOURCE = {"title": "a run kept aside", "url": "https://example.invalid/run", "read": "2026-12-05"}


def kept_aside_row(row_id: str, plan: str, figures: list[dict], **extra) -> dict:
    """A row of a kept-aside file (planner.specs.validation's format) on `plan`, with `figures`."""
    return {
        "id": row_id,
        "plan": plan,
        "measures": "a decode instance held at its plan's concurrency",
        "traffic": {"mode": "steady"},
        "figures": figures,
        **extra,
    }


def kept_aside_figure(metric: str, value: float, **extra) -> dict:
    """One measured figure of a kept-aside row, 10% tolerance."""
    return {"metric": metric, "value": value, "unit": "as measured", "per": "request", "tolerance": 0.10, **extra}


def write_kept_aside(tmp_path: Path, rows: list[dict], name: str = "kept.yaml") -> Path:
    """A kept-aside file of `rows` under `tmp_path` (one controlled source)."""
    import yaml

    path = tmp_path / name
    path.write_text(yaml.safe_dump({"source": {**KEPT_ASIDE_SOURCE, "reliability": "controlled"}, "rows": rows}))
    return path


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def load_script(path: Path):
    """A benchmarks/ script imported as a module (its functions are what the docs' tests check)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def engines_embedding(path: Path, tmp_path: Path) -> Path:
    """A copy of a shipped plan with its `embedding` lines dropped: the layout an engine launches (the
    embedding over the attention's TP group), where the source's own stack split it with the LM head."""
    out = tmp_path / f"engines-{path.name}"
    out.write_text("".join(line for line in path.read_text().splitlines(True) if "embedding: {" not in line))
    return out


def without_embedding(plan):
    """`plan` (a Plan) with every phase's `embedding` left to the default (see `engines_embedding`)."""
    update = {
        name: getattr(plan, name).model_copy(update={"embedding": None})
        for name in ("decode", "prefill", "colocated", "afd")
        if getattr(plan, name, None) is not None
    }
    return plan.model_copy(update=update)


def run_cli(*args: str):
    """Run `moeplan ARGS` in-process; returns typer's Result (exit_code, output, exception)."""
    return CliRunner().invoke(app, list(args))


def wait_until_it_catches_sigterm(proc, timeout_s: float = 60.0) -> None:
    """Block until the child process has installed its SIGTERM handler (Linux lists caught
    signals in /proc/PID/status), however loaded the machine is; a fixed sleep raced with slow
    imports and killed the process before the CLI could handle the signal."""
    import signal
    import time

    def catches() -> bool:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                status = f.read()
        except OSError:
            return False
        caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
        return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None and not catches():
        time.sleep(0.02)


def wait_until_it_loads(proc, fragment: str, timeout_s: float = 120.0) -> None:
    """Block until the child process has mapped a file whose path contains `fragment` (Linux lists
    a process's mappings in /proc/PID/maps): "ortools" once its search has reached the first
    CP-SAT solve (planner.search.cpsat imports OR-Tools then), however loaded the machine is."""
    import time

    def loaded() -> bool:
        try:
            with open(f"/proc/{proc.pid}/maps") as f:
                return fragment in f.read()
        except OSError:
            return False

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None and not loaded():
        time.sleep(0.02)
