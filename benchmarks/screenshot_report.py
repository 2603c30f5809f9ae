"""Screenshots of the HTML report for docs/, taken in the headless Chromium the browser test uses.

Writes the default plan's page (`moeplan plan --html`), a 384-card CloudMatrix384 plan's page
(`moeplan plan --hardware cm384 --max-cards 384 --html`) and the page of the default plan's
simulated run (`moeplan simulate docs/examples/plan-a2-48-cards.yaml --html`, the run of
docs/simulate.md), then photographs each in Debian's Chromium through Playwright (pip install
'.[browser]'; apt-get install chromium): the top of the page (the answer, the figures, the ranked
plans or the run's question) and, for the plans, the cluster drawing. Prints each page's size and
the time `moeplan` took to write it.

    python benchmarks/screenshot_report.py [--out docs] [--keep FOLDER] [--pages a2,cm384,simulate-a2]

`--keep FOLDER` also keeps the HTML pages there; `--pages` writes only those.
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
# name -> (the command, the section photographed besides the top of the page)
PAGES: dict[str, tuple[list[str], str | None]] = {
    "a2": (["plan"], "cluster"),
    "cm384": (["plan", "--hardware", "cm384", "--max-cards", "384"], "cluster"),
    "simulate-a2": (["simulate", "docs/examples/plan-a2-48-cards.yaml"], None),
}
WIDTH = 1280


def write_page(name: str, args: list[str], folder: Path) -> tuple[Path, float]:
    """Run moeplan to write one page; returns its path and the seconds the command took."""
    html = (folder / f"{args[0]}-{name}.html").resolve()
    start = time.perf_counter()
    # run from the repository, so that a page names the plan file as docs/ does
    done = subprocess.run(
        [sys.executable, "-m", "planner", *args, "--html", str(html)], cwd=REPO, capture_output=True, text=True
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
            written.append(top)
            section = PAGES[name][1]
            if section is not None:
                part = out / f"html-report-{name}-{section}.png"
                page.locator(f"#{section}").screenshot(path=str(part))
                written.append(part)
            page.close()
        browser.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="folder of the PNG files (default docs/)")
    parser.add_argument("--keep", type=Path, default=None, help="also keep the HTML pages in this folder")
    parser.add_argument("--pages", default=",".join(PAGES), help="the pages to write (default: all)")
    args = parser.parse_args()
    wanted = [name.strip() for name in args.pages.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in PAGES]
    if unknown:
        raise SystemExit(f"--pages: unknown {', '.join(unknown)}; choose from {', '.join(PAGES)}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        pages = {}
        print(f"{'page':12} {'command':60} {'bytes':>10} {'seconds':>8}")
        for name in wanted:
            cmd = PAGES[name][0]
            html, seconds = write_page(name, cmd, folder)
            pages[name] = html
            print(
                f"{name:12} {'moeplan ' + ' '.join(cmd) + ' --html ...':60} {html.stat().st_size:>10,} {seconds:>8.2f}"
            )
        for png in photograph(pages, args.out):
            print(f"wrote {png.relative_to(REPO) if png.is_relative_to(REPO) else png} ({png.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
