"""Shared fixtures of the report tests: the default plan's HTML report and a small simulated run's,
each made once per session."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.report.html.browser import CHROMIUM_FLAGS, chromium_path
from tests.conftest import REPO, run_cli

SMALL_PLAN = REPO / "tests" / "simulate" / "small-pd.yaml"  # 16 prefill + 32 decode A2 cards
# a short open-loop run with vLLM's two-value --goodput (the pairs after the first arrive as extra arguments)
SIMULATE_ARGS = ("--rate", "4", "--requests", "200", "--warmup", "20", "--goodput", "ttft:1500", "tpot:40")


@dataclass(frozen=True)
class Report:
    """A `moeplan plan --html` page and the `--json` document of the same run."""

    html: Path
    json: Path


@pytest.fixture(scope="session")
def default_report(tmp_path_factory) -> Report:
    """`moeplan plan --engine none --no-colocated` (the free search, disaggregated plans: prefill and decode
    instances to draw) with its outputs: DeepSeek-V3 on 48 A2 cards."""
    folder = tmp_path_factory.mktemp("report")
    html, doc = folder / "plan.html", folder / "plan.json"
    result = run_cli("plan", "--engine", "none", "--no-colocated", "--json", str(doc), "--html", str(html))
    assert result.exit_code == 0, result.output
    return Report(html, doc)


@pytest.fixture(scope="session")
def simulate_report(tmp_path_factory) -> Report:
    """`moeplan simulate` of the small plan (200 requests at 4 req/s) with `--html` and `--json`."""
    folder = tmp_path_factory.mktemp("simulate")
    html, doc = folder / "run.html", folder / "run.json"
    result = run_cli("simulate", str(SMALL_PLAN), *SIMULATE_ARGS, "--json", str(doc), "--html", str(html))
    assert result.exit_code == 0, result.output
    return Report(html, doc)


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium driven by Playwright, launched once per session (the system's browser: no
    download). Skipped, saying why, where Chromium or Playwright is missing."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; .ci/run installs it where it can)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (pip install '.[browser]'; .ci/run installs it)")
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=executable, headless=True, args=list(CHROMIUM_FLAGS))
        yield launched
        launched.close()
