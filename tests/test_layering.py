"""Imports follow the data flow: no module imports a layer to its right."""

from __future__ import annotations

import ast
from pathlib import Path

import planner

ORDER = ["specs", "engines", "placement", "costmodel", "simulate", "candidates", "search", "ranking", "report", "cli"]
ROOT = Path(planner.__file__).resolve().parent


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "planner" or len(parts) < 2:
        return None
    return ORDER.index(parts[1]) if parts[1] in ORDER else None


def test_imports_only_go_left():
    offenders = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        own = _layer(".".join(rel.parts))
        if own is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                target = _layer(name)
                if target is not None and target > own:
                    offenders.append(f"{rel} imports {name}")
    assert not offenders, offenders
