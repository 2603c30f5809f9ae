"""How a report page is opened headless: the system's Chromium and the flags it is started with.

The browser test (tests/report/test_html_browser.py) and the screenshots for docs/
(benchmarks/screenshot_report.py) open pages the same way: Debian's `chromium` (no browser is
downloaded), with every background service that could reach the network switched off, so the
only request a page load makes is for the page itself. moeplan itself never starts a browser.
"""

from __future__ import annotations

import shutil

CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium_path() -> str | None:
    """Debian's Chromium (`apt-get install chromium`), if this machine has it."""
    return shutil.which("chromium") or shutil.which("chromium-browser")
