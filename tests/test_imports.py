"""Each command imports only what it needs (issue 10, part 6): behaviour, not timing.

Run in fresh interpreters, since the test process itself has imported everything.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("ortools", "numpy", "pandas", "matplotlib", "scipy")


def _modules_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True, env={"PYTHONPATH": "."}
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_imports_no_heavy_library():
    loaded = _modules_after("import planner.cli.app")
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_version_imports_no_heavy_library():
    code = "from planner.cli.app import app\ntry:\n    app(['--version'])\nexcept SystemExit:\n    pass"
    assert not _modules_after(code) & set(HEAVY)


def test_evaluate_does_not_import_the_solver():
    code = (
        "from planner.cli.app import app\n"
        "try:\n    app(['evaluate', 'plans/a2-d70.yaml'])\nexcept SystemExit:\n    pass"
    )
    loaded = _modules_after(code)
    assert "ortools" not in loaded and "pandas" not in loaded and "matplotlib" not in loaded


def test_plan_solves_without_pandas_and_pandas_still_imports_afterwards():
    code = (
        "from planner.search.plan_search import run_search\n"
        "from planner.search.request import PlanRequest\n"
        "o = run_search(PlanRequest(max_cards=24, top=1))\n"
        "assert o.status == 'OPTIMAL', o.status\n"
        "assert 'pandas' not in sys.modules\n"
    )
    loaded = _modules_after(code)
    assert "ortools" in loaded and "pandas" not in loaded
    real = subprocess.run(
        [
            sys.executable,
            "-c",
            "from planner.search.cpsat import cp_model\ncp_model()\nimport pandas\nprint(pandas.Series([1, 2]).sum())",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": "."},
    )
    if "No module named 'pandas'" in real.stderr:
        pytest.skip("pandas is not installed")
    assert real.stdout.strip() == "3", real.stderr


def test_no_import_cycle_in_the_package():
    """Imports between planner's modules form no cycle (module level or inside functions): each
    module of a pipeline imports only the steps before it."""
    modules = {
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (REPO / "planner").rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
                out |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
        # a package's __init__ is its own node: importing planner.x.y does not import planner.x's siblings
        graph[name] = {m for m in out if m in modules and m != name}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle.extend(path[path.index(nxt) :] + [node, nxt] if nxt in path else [node, nxt])
                return True
            if state.get(nxt) is None and visit(nxt, [*path, node]):
                return True
        state[node] = 2
        return False

    for name in sorted(graph):
        if state.get(name) is None and visit(name, []):
            break
    assert not cycle, " -> ".join(cycle)
