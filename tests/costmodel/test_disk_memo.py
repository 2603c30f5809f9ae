"""The persistent memo of the skew model's placement imbalance returns what the code computes."""

from __future__ import annotations

import json
from pathlib import Path

from planner.costmodel import disk_memo, imbalance


def test_memo_round_trip_and_same_values(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(tmp_path))
    memo = disk_memo.DiskMemo("test-memo")
    assert memo.get("a") is None
    memo.put("a", 1.25)
    memo.flush()
    files = list(tmp_path.glob("test-memo-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text()) == {"a": 1.25}
    again = disk_memo.DiskMemo("test-memo")
    assert again.get("a") == 1.25

    # the skew model through the memo: same value computed fresh and read back
    monkeypatch.setattr(imbalance, "_SKEW_MEMO", disk_memo.DiskMemo("skew-test"))
    imbalance._skew_static.cache_clear()
    fresh = imbalance._skew_static(0.3, 256, 32, 9)
    imbalance._SKEW_MEMO.flush()
    imbalance._skew_static.cache_clear()
    monkeypatch.setattr(imbalance, "_SKEW_MEMO", disk_memo.DiskMemo("skew-test"))
    assert imbalance._SKEW_MEMO.get("0.3,256,32,9") == fresh
    assert imbalance._skew_static(0.3, 256, 32, 9) == fresh
    imbalance._skew_static.cache_clear()


def test_memo_off_and_unwritable_folder_are_harmless(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", "off")
    memo = disk_memo.DiskMemo("x")
    memo.put("k", 2.0)
    memo.flush()
    assert memo.get("k") == 2.0
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MOEPLAN_CACHE_DIR", str(blocker / "sub"))
    memo = disk_memo.DiskMemo("y")
    memo.put("k", 3.0)
    memo.flush()  # cannot create the folder: ignored
    assert memo.get("k") == 3.0


def _imports(module: str) -> set[str]:
    """The planner modules `module` imports (module-level and inside functions)."""
    import ast

    root = Path(disk_memo.__file__).resolve().parent.parent.parent
    path = root / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = root / module.replace(".", "/") / "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("planner"):
            out.add(node.module)
            for alias in node.names:  # `from planner.placement import optimize`-style submodules
                sub = f"{node.module}.{alias.name}"
                if (root / (sub.replace(".", "/") + ".py")).exists():
                    out.add(sub)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("planner")}
    return out


def test_the_code_digest_covers_every_module_the_placement_imports():
    """A change to any module the memoised placement runs must start a new memo file: the digest's
    source list is the transitive import closure of planner.costmodel.imbalance, no less."""
    seen, todo = set(), ["planner.costmodel.imbalance"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_imports(module))
    files = set()
    for module in seen:
        rel = module.removeprefix("planner.").replace(".", "/")
        package = Path(disk_memo.__file__).resolve().parent.parent / rel
        files.add(f"{rel}/__init__.py" if package.is_dir() else f"{rel}.py")
    assert files <= set(disk_memo._SOURCES), sorted(files - set(disk_memo._SOURCES))
