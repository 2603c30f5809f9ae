"""Shared fixtures of the report tests: the default plan's HTML report, made once per session."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from planner.report.html.browser import CHROMIUM_FLAGS, chromium_path
from tests.conftest import run_cli


@dataclass(frozen=True)
class Report:
    """A `moeplan plan --html` page and the `--json` document of the same run."""

    html: Path
    json: Path


@pytest.fixture(scope="session")
def default_report(tmp_path_factory) -> Report:
    """`moeplan plan` with no other flag than its outputs: DeepSeek-V3 on 48 A2 cards."""
    folder = tmp_path_factory.mktemp("report")
    html, doc = folder / "plan.html", folder / "plan.json"
    result = run_cli("plan", "--json", str(doc), "--html", str(html))
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
