"""Shared fixtures: the shipped plans, a CLI runner, and a helper to run moeplan in-process."""

from __future__ import annotations

import os
from pathlib import Path

# tests never read or write the user's cache folder (planner.costmodel.disk_memo has its own test)
os.environ.setdefault("MOEPLAN_CACHE_DIR", "off")

import pytest
from typer.testing import CliRunner

from planner.cli.app import app

REPO = Path(__file__).resolve().parent.parent
PLANS = REPO / "plans"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def run_cli(*args: str):
    """Run `moeplan ARGS` in-process; returns typer's Result (exit_code, output, exception)."""
    return CliRunner().invoke(app, list(args))
