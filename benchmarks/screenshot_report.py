"""Screenshots of the HTML report for docs/, taken in the headless Chromium the browser test uses.

Writes the default plan's page (`moeplan plan --html`) and a 384-card CloudMatrix384 plan's page
(`moeplan plan --hardware cm384 --max-cards 384 --html`), then photographs each in Debian's
Chromium through Playwright (pip install '.[browser]'; apt-get install chromium): the top of the
page (the answer, the figures, the ranked plans) and the cluster drawing. Prints each page's size
and the time `moeplan` took to write it.

    python benchmarks/screenshot_report.py [--out docs] [--keep FOLDER]

`--keep FOLDER` also keeps the two HTML pages there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from planner.report.html.browser import CHROMIUM_FLAGS, chromium_path

REPO = Path(__file__).resolve().parent.parent
PAGES = {
    "a2": ["plan"],
    "cm384": ["plan", "--hardware", "cm384", "--max-cards", "384"],
}
WIDTH = 1280


def write_page(name: str, args: list[str], folder: Path) -> tuple[Path, float]:
    """Run moeplan to write one page; returns its path and the seconds the command took."""
    html = folder / f"plan-{name}.html"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "planner", *args, "--html", str(html)], cwd=folder, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"moeplan {' '.join(args)} failed: {done.stderr.strip()}")
    return html, time.perf_counter() - start


def photograph(pages: dict[str, Path], out: Path) -> list[Path]:
    """The top of each page and its cluster drawing, as PNG files in `out`."""
    from playwright.sync_api import sync_playwright

    chromium = chromium_path()
    if chromium is None:
        raise SystemExit("no Chromium: apt-get install chromium")
    written = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium, headless=True, args=list(CHROMIUM_FLAGS))
        for name, html in pages.items():
            page = browser.new_page(viewport={"width": WIDTH, "height": 1150})
            errors: list[str] = []
            page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
            page.goto(html.as_uri(), wait_until="load")
            if errors:
                raise SystemExit(f"{html}: console errors {errors}")
            top = out / f"html-report-{name}.png"
            page.screenshot(path=str(top))
            cluster = out / f"html-report-{name}-cluster.png"
            page.locator("#cluster").screenshot(path=str(cluster))
            written += [top, cluster]
            page.close()
        browser.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="folder of the PNG files (default docs/)")
    parser.add_argument("--keep", type=Path, default=None, help="also keep the HTML pages in this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        pages = {}
        print(f"{'page':8} {'command':52} {'bytes':>10} {'seconds':>8}")
        for name, cmd in PAGES.items():
            html, seconds = write_page(name, cmd, folder)
            pages[name] = html
            print(
                f"{name:8} {'moeplan ' + ' '.join(cmd) + ' --html ...':52} {html.stat().st_size:>10,} {seconds:>8.2f}"
            )
        for png in photograph(pages, args.out):
            print(f"wrote {png.relative_to(REPO) if png.is_relative_to(REPO) else png} ({png.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
