"""The package works from wherever it is installed: catalogs found outside the repository."""

from __future__ import annotations

import subprocess
import sys


def test_catalogs_are_found_from_another_directory(tmp_path):
    code = (
        "from planner.specs.catalog import catalog_dir, catalog_names;"
        "print(catalog_dir('hardware'));"
        "print(catalog_names('hardware'), catalog_names('models'), catalog_names('plans'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "'a2'" in out.stdout and "'deepseek-v3'" in out.stdout and "'a2-d70'" in out.stdout


def test_cli_runs_from_another_directory(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "planner", "evaluate", "a2-d70", "--json", "-"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert '"tokens_per_s_per_card"' in out.stdout
