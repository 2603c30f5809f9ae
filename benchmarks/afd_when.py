"""When does attention-FFN disaggregation win? The table of docs/afd.md, from the real search.

    python benchmarks/afd_when.py            # print the table (Markdown)
    python benchmarks/afd_when.py --write    # rewrite the marked block of docs/afd.md
    python benchmarks/afd_when.py --check    # exit 1 (and show a diff) if docs/afd.md has drifted

At every point of a grid (machine x model x input tokens x TPOT SLO) `moeplan plan` searches every
structure (colocated, PD, AFD decode instances fed by prefill instances) and its alternatives table
names the best AFD and the best non-AFD deployment; the row gives both, in output tokens/s per
card of the whole deployment, and the gain of the AFD one. No engine is imposed: the table says
what the cost model finds for the structure; which engines run it is docs/afd.md's engines table.

The block sits between `<!-- afd-when: table -->` and `<!-- /afd-when -->` in docs/afd.md.
tests/test_afd_when.py re-searches one point of it on every run (the whole grid takes minutes);
`--check` re-searches them all.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# the figures are those of a fresh search: no cost tables from a disk cache
os.environ.setdefault("MOEPLAN_CACHE_DIR", "off")

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "afd.md"
BEGIN, END = "<!-- afd-when: table -->", "<!-- /afd-when -->"

# (machine, card budget): an A3 deployment of six 8-card servers (moeplan's default budget), a
# whole CloudMatrix384 supernode with Huawei's stack's factors, and the same supernode with the
# factors fitted on vLLM-Ascend's afd-plugin runs (the engine that runs AFD on it)
MACHINES = (("a3", 48), ("cm384", 384), ("a3-superpod", 384))
# the models the two AFD engines run (DeepSeek V3 and V3.2 with the afd-plugin, Qwen3-MoE with SGLang)
MODELS = ("deepseek-v3.2", "deepseek-v3", "qwen3-235b-a22b")
INPUT_TOKENS = (4096, 16384, 32768)
TPOT_MS = (30.0, 50.0, 100.0)
OUTPUT_TOKENS = 1024
TTFT_MS = 4000.0
HEADER = (
    "| machine (cards) | model | input tokens | TPOT SLO ms | best non-AFD tok/s/card | best AFD tok/s/card "
    "| AFD gain | best AFD decode instance |\n"
    "|---|---|---:|---:|---:|---:|---:|---|\n"
)


@dataclass(frozen=True)
class Point:
    """One search of the grid."""

    hardware: str
    max_cards: int
    model: str
    input_tokens: int
    tpot_ms: float

    def args(self) -> list[str]:
        """The `moeplan plan` flags of this point (what a reader runs to see the whole answer)."""
        return [
            "--hardware",
            self.hardware,
            "--max-cards",
            str(self.max_cards),
            "--model",
            self.model,
            "--input-tokens",
            str(self.input_tokens),
            "--output-tokens",
            str(OUTPUT_TOKENS),
            "--tpot-ms",
            f"{self.tpot_ms:g}",
            "--ttft-ms",
            f"{TTFT_MS:g}",
        ]


def grid() -> list[Point]:
    return [
        Point(hw, cards, model, tokens, tpot)
        for hw, cards in MACHINES
        for model in MODELS
        for tokens in INPUT_TOKENS
        for tpot in TPOT_MS
    ]


def _best(outcome, label: str):
    """The plan the alternatives table names `label`, or rank 1 when rank 1 is of that kind."""
    first = outcome.plans[0]
    if (first.afd is not None) == (label == "best AFD"):
        return first
    for alt in outcome.alternatives:
        if alt.label == label:
            return alt.plan
    return None


def row(point: Point, cache=None) -> str:
    """One Markdown row: both bests, the gain, and the AFD instance (`cache`: a TableCache shared
    by the points, which only saves time)."""
    sys.path.insert(0, str(REPO))
    from planner.cli.plan_cmd import build_request
    from planner.errors import InfeasibleError
    from planner.report.plan_report import compact_afd, headline
    from planner.search.plan_search import run_search
    from planner.search.request import DEFAULT_WORKLOAD
    from planner.search.settings import DEFAULT_TIME_LIMIT_S
    from planner.specs.quantization import DEFAULT_QUANTIZATION

    head = f"| {point.hardware} ({point.max_cards}) | {point.model} | {point.input_tokens} | {point.tpot_ms:g} |"
    request = build_request(
        model=point.model,
        hardware=point.hardware,
        quantization=DEFAULT_QUANTIZATION,
        input_tokens=point.input_tokens,
        output_tokens=OUTPUT_TOKENS,
        mtp_acceptance=DEFAULT_WORKLOAD.mtp_acceptance,
        tpot_ms=point.tpot_ms,
        ttft_ms=TTFT_MS,
        max_cards=float(point.max_cards),
        phase="both",
        decode_devices=None,
        prefill_devices=None,
        rate=None,
        top=1,
        mtp=None,
        time_limit=DEFAULT_TIME_LIMIT_S,
        workers=2,
        loads=None,
        skew_sigma=None,
    )
    try:
        outcome = run_search(request, None, cache)
    except InfeasibleError as e:
        reason = str(e).split(":", 1)[0]
        return f"{head} - | - | - | infeasible ({reason}) |"
    non_afd, afd = _best(outcome, "best non-AFD"), _best(outcome, "best AFD")
    non_value = headline(non_afd) if non_afd is not None else None
    afd_value = headline(afd) if afd is not None else None
    non_cell = f"{non_value:.1f}" if non_value is not None else "none fits"
    afd_cell = f"{afd_value:.1f}" if afd_value is not None else "none fits"
    gain = f"{afd_value / non_value - 1:+.1%}" if afd_value and non_value else "-"
    what = "-"
    if afd is not None and afd.afd is not None:
        # (a layout's | would end the Markdown cell)
        what = f"{afd.afd.instances} x {compact_afd(afd.afd)}".replace("|", "\\|")
    return f"{head} {non_cell} | {afd_cell} | {gain} | {what} |"


def _cells(line: str) -> list[str]:
    """A Markdown row's cells (a \\| inside a cell does not split it)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def summary(rows: list[str]) -> str:
    """Per machine: at how many points AFD wins, and the largest gain and loss."""
    lines = []
    for hw, _ in MACHINES:
        gains = []
        for r in rows:
            cells = _cells(r)
            if cells[0].startswith(f"{hw} ") and cells[6].endswith("%"):
                gains.append((float(cells[6].rstrip("%")), cells[1], cells[2], cells[3]))
        if not gains:
            lines.append(f"- {hw}: no point with both an AFD and a non-AFD deployment.")
            continue
        wins = [g for g in gains if g[0] > 0]
        ties = [g for g in gains if g[0] == 0]
        best, worst = max(gains), min(gains)
        lines.append(
            f"- {hw}: AFD wins at {len(wins)} of {len(gains)} points and ties at {len(ties)}; its gain runs from "
            f"{worst[0]:+.1f}% ({worst[1]}, {worst[2]} input tokens, TPOT {worst[3]} ms) to {best[0]:+.1f}% "
            f"({best[1]}, {best[2]} input tokens, TPOT {best[3]} ms)."
        )
    return "\n".join(lines) + "\n"


def table(points: list[Point] | None = None) -> str:
    sys.path.insert(0, str(REPO))
    from planner.search.table_cache import TableCache

    rows, cache, key = [], TableCache(), None
    for p in points or grid():
        if (p.hardware, p.model, p.input_tokens) != key:  # the TPOT SLOs of one workload share tables
            cache, key = TableCache(), (p.hardware, p.model, p.input_tokens)
        rows.append(row(p, cache))
        print(rows[-1], file=sys.stderr, flush=True)
    return HEADER + "\n".join(rows) + "\n\n" + summary(rows)


def block_of(text: str) -> str:
    """The lines between the markers of docs/afd.md."""
    head, sep, rest = text.partition(BEGIN + "\n")
    if not sep or END not in rest:
        raise SystemExit(f"{DOC.name}: no {BEGIN} ... {END} block")
    return rest.split(END, 1)[0]


def rows_of(block: str) -> dict[str, str]:
    """The block's data rows by their first four cells (machine, model, input tokens, TPOT)."""
    out = {}
    for line in block.splitlines():
        cells = _cells(line)
        if line.startswith("| ") and len(cells) == 8 and cells[2].isdigit():
            out["|".join(cells[:4])] = line
    return out


def main(argv: list[str]) -> int:
    fresh = table()
    if "--write" in argv or "--check" in argv:
        text = DOC.read_text(encoding="utf-8")
        old = block_of(text)
        if "--check" in argv:
            if old == fresh:
                print(f"{DOC.name}: up to date")
                return 0
            print("\n".join(difflib.unified_diff(old.splitlines(), fresh.splitlines(), "docs", "fresh", lineterm="")))
            print(f"{DOC.name} has drifted: run python benchmarks/afd_when.py --write")
            return 1
        DOC.write_text(text.replace(BEGIN + "\n" + old + END, BEGIN + "\n" + fresh + END), encoding="utf-8")
        print(f"{DOC.relative_to(REPO)}: rewrote the afd-when table")
        return 0
    print(fresh, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
