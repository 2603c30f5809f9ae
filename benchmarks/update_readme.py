"""Regenerate the README's example outputs from the real commands.

    python benchmarks/update_readme.py           # rewrite the marked blocks of README.md
    python benchmarks/update_readme.py --check   # exit 1 (and show a diff) if README.md has drifted
    python benchmarks/update_readme.py --only plan,plan-rate   # only these blocks (with or without --check)

Every example of moeplan's output in README.md sits between two marker lines:

    <!-- moeplan-output: plan -->
    ```
    ...the output of `moeplan plan`...
    ```
    <!-- /moeplan-output -->

`BLOCKS` maps each marker's name to the command it shows (what the README says it runs) and to the
part of the output shown. The blocks are rewritten from a fresh run of each command, in-process
and with the console at the 140 columns moeplan uses when its output is not a terminal. Wall
times in the output ("0.20 s") vary from run to run: `normalized` masks them, so the drift test
(tests/test_readme.py) compares everything else exactly. Rerun this script after any change
that moves an output (a merge, a cost-model change) and commit the README.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# the outputs shown are those of a first run: no cost tables or placements from the disk cache
os.environ["MOEPLAN_CACHE_DIR"] = "off"

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
# every Markdown file with marked blocks (the README and the docs that show real output)
DOCS = tuple(
    [
        README,
        *(
            REPO / "docs" / name
            for name in ("whatif.md", "simulate.md", "fidelity.md", "search.md", "afd.md", "evaluate.md", "model.md")
        ),
    ]
)
BEGIN = re.compile(r"^<!-- moeplan-output: (?P<name>[\w.-]+) -->$")
END = "<!-- /moeplan-output -->"
WALL_TIME = re.compile(r"\b\d[\d,]*\.\d+ s\b")


def _until(marker: str) -> Callable[[str], str]:
    """The output up to (not including) the first line that starts with `marker`."""

    def cut(text: str) -> str:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(marker):
                return "\n".join(lines[:i]).rstrip() + "\n"
        return text

    return cut


def _between(first: str, marker: str) -> Callable[[str], str]:
    """The output from the first line that starts with `first` up to (not including) the first
    line after it that starts with `marker`."""

    def cut(text: str) -> str:
        lines = text.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith(first)), 0)
        return _until(marker)("\n".join(lines[start:]) + "\n")

    return cut


def _rows_of(prefix: str) -> Callable[[str], str]:
    """A Markdown table's header and the rows whose first cell starts with `prefix`."""

    def cut(text: str) -> str:
        lines = text.splitlines()
        head = next(i for i, line in enumerate(lines) if line.startswith("| "))  # the summary lines come first
        keep = lines[head : head + 2] + [line for line in lines[head + 2 :] if line.startswith(f"| {prefix}")]
        return "\n".join(keep) + "\n"

    return cut


def _span(first: str, last: str) -> Callable[[str], str]:
    """The output from the first line that starts with `first` (leading spaces aside) to the first
    line after it that starts with `last`, both included."""

    def cut(text: str) -> str:
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip().startswith(first))
        end = next(i for i in range(start, len(lines)) if lines[i].startswith(last))
        return "\n".join(lines[start : end + 1]) + "\n"

    return cut


def _from(marker: str) -> Callable[[str], str]:
    """The output from (and including) the first line that starts with `marker`."""

    def cut(text: str) -> str:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(marker):
                return "\n".join(lines[i:]).rstrip() + "\n"
        return text

    return cut


def _whole(text: str) -> str:
    return text


@dataclass(frozen=True)
class Block:
    """A README example: the command (moeplan's arguments) and the part of its output shown.

    `compose`, when given, builds the block's text from moeplan runs itself (for a statement that
    compares two commands' figures); `args` then only names the commands in the docs."""

    args: tuple[str, ...]
    part: Callable[[str], str] = _whole
    fenced: bool = True  # inside ``` (terminal output); False for Markdown (a table)
    compose: Callable[[], str] | None = None


CM384_PLAN_ARGS = (
    "plan", "--hardware", "cm384", "--model", "deepseek-r1", "--phase", "decode", "--decode-devices", "288",
    "--max-cards", "144", "--tpot-ms", "50", "--top", "1", "--json", "-",
)  # fmt: skip


def difference_shares(diff: dict[str, float], top: int = 3) -> str:
    """What a lead rests on: the `top` parts that make it (positive differences, largest first) and
    the `top` that take from it (negative ones, largest first), each as its share of the whole
    difference, so shares above 100% say what the others give back."""
    total = sum(diff.values())
    if total <= 0:
        raise ValueError("difference_shares: the parts sum to no lead")
    gains = sorted(((v, k) for k, v in diff.items() if v > 0), reverse=True)[:top]
    losses = sorted((v, k) for k, v in diff.items() if v < 0)[:top]
    text = ", ".join(f"{k} ({v / total:.0%})" for v, k in gains)
    if losses:
        text += ", against " + ", ".join(f"{k} ({v / total:.0%})" for v, k in losses)
    return text


def cm384_lead() -> str:
    """moeplan's best CM384 decode plan against the report's (plans/cm-d.yaml), under the shipped model.

    The lead is their tokens/s per card ratio; what it rests on is the per-token step time of each
    module in the two plans (the modules whose difference makes the lead and those that take from it,
    largest first: `difference_shares`)."""
    import json

    from planner.specs.validation import all_figures

    report_plan = json.loads(run(("evaluate", "plans/cm-d.yaml", "--json", "-")))
    report = report_plan["predicted"]["decode"]
    # what the report measured for that plan (validation/huawei-ascend-report-2025.yaml, row CM-D)
    measured = next(
        f.figure.value
        for f, why in all_figures()
        if not why and f.plan == "cm-d" and f.metric == "decode.tokens_per_s_per_card"
    )
    best_doc = json.loads(run(CM384_PLAN_ARGS))
    best = best_doc["plans"][0]
    ours = best["predicted"]["decode"]
    lead = ours["tokens_per_s_per_card"] / report["tokens_per_s_per_card"]

    def per_token(pred: dict[str, object], plan_seqs: float) -> dict[str, float]:
        emitted = float(pred["tokens_per_step_per_sequence"])  # type: ignore[arg-type]
        return {k: float(v) / (plan_seqs * emitted) for k, v in pred["breakdown_ms"].items()}  # type: ignore[union-attr]

    r = report_plan["decode"]
    a = per_token(report, float(r["concurrency_per_device"]))
    b = per_token(ours, float(best["decode"]["concurrency_per_device"]))
    rests = difference_shares({k: a.get(k, 0.0) - b.get(k, 0.0) for k in set(a) | set(b)})
    shared = r["shared_expert"]
    report_layout = (
        f"EP{r['moe']['ep']}"
        + (f" + {shared['devices']} shared-expert dies" if shared["placement"] == "dedicated" else "")
        + f", {r['concurrency_per_device']} sequences per die, MTP {r.get('mtp_tokens', 0)}"
    )
    d = best["decode"]
    layout = (
        f"EP{d['moe']['ep']} x {d['moe']['slots_per_device']} slots, {d['concurrency_per_device']} sequences per die, "
        f"MTP {d.get('mtp_tokens', 0)}, {d.get('micro_batches', 1)} micro-batch(es)"
    )
    unc = best["predicted"].get("uncertainty") or {}
    band = (unc.get("bands") or {}).get("decode", {}).get("tokens_per_s_per_card")
    band_text = f" (band {band['low']:.0f}-{band['high']:.0f})" if band else ""
    report_band = report_plan["predicted"]["uncertainty"]["bands"]["decode"]["tokens_per_s_per_card"]
    # each band's ends are its plan at every factor's and imbalance parameter's slow (fast) end, widened by
    # one relative error (one machine's): the ratio of the two slow ends is the lead with every range there
    ends = (
        f"; between the two bands' slow ends (the report's plan: {report_band['low']:.0f}-{report_band['high']:.0f}) "
        f"it is x{band['low'] / report_band['low']:.2f}, "
        f"between their fast ends x{band['high'] / report_band['high']:.2f}"
        if band
        else ""
    )
    return (
        f"- the report's CloudMatrix384 decode plan (plans/cm-d.yaml: {report_layout}) scores "
        f"{report['tokens_per_s_per_card']:.0f} tokens/s per card under the shipped model (the report measured "
        f"{measured:.0f});\n"
        f"- moeplan's best plan for the same 144 cards and 50 ms TPOT (`moeplan {' '.join(CM384_PLAN_ARGS[:-2])}`: "
        f"{layout}) scores {ours['tokens_per_s_per_card']:.0f}{band_text};\n"
        f"- the lead over the report is x{lead:.2f}{ends}; per output token it rests on {rests} "
        "(shares of the difference in the decode step's parts, report's plan minus moeplan's).\n"
    )


KEPT_ASIDE_ARGS = ("fidelity", "--rows", "kept-aside", "--json")


def kept_aside_summary() -> str:
    """The runs of kept-aside/ (measured after the fit, never fitted on) under the shipped model: the static
    figures' errors and the simulated ones' within their tolerance, held-out counted apart."""
    import json
    from statistics import median

    doc = json.loads(run(KEPT_ASIDE_ARGS))
    static = doc["rows"]
    simulated = [r for r in doc["simulated_rows"] if r["within_tolerance"] is not None]
    held = [r for r in simulated if not r["fitted_to"]]
    sys.path.insert(0, str(REPO))
    from planner.specs.catalog import load_plan

    plans = {r["plan"] for r in simulated}
    machines = sorted(
        {r["hardware"] for r in static} | {load_plan(str(REPO / "kept-aside" / p))[0].hardware for p in plans}
    )
    errors = [abs(r["error"]) for r in static]
    within = sum(1 for r in static if abs(r["error"]) <= r["tolerance"])
    sim_within = sum(1 for r in simulated if r["within_tolerance"])
    held_within = sum(1 for r in held if r["within_tolerance"])
    static_held = [r for r in static if not r["fitted_to"]]
    static_held_within = sum(1 for r in static_held if abs(r["error"]) <= r["tolerance"])
    return (
        f"- runs kept aside from every fit (`moeplan {' '.join(KEPT_ASIDE_ARGS[:3])}`, on {', '.join(machines)}; "
        f"[docs/validation.md](docs/validation.md)): {len(static)} static figures, |error| median "
        f"{median(errors):.1%}, within their tolerance {within} of {len(static)}, {static_held_within} of the "
        f"{len(static_held)} nothing was chosen on; {len(simulated)} served-traffic "
        f"figures (simulated), within their tolerance {sim_within} of {len(simulated)}, {held_within} of the "
        f"{len(held)} on runs nothing was chosen on\n"
    )


# the case of tests/search/test_objectives.py: dear A2 prefill cards, cheap CloudMatrix384 decode cards
PRICED_TWO_MACHINES = (
    "plan",
    "--prefill-hardware",
    "a2",
    "--decode-hardware",
    "cm384",
    "--max-prefill-cards",
    "16",
    "--max-decode-cards",
    "24",
    "--price-per-card-hour",
    "a2=20,cm384=1",
    "--currency",
    "USD",
    "--top",
    "1",
)
SIMULATED_PLAN = "docs/examples/plan-a2-48-cards.yaml"

BLOCKS: dict[str, Block] = {
    # `moeplan plan` with no flags: the ranked table, the status and the why line
    "plan": Block(("plan",), _until("Best plan (rank 1) in detail")),
    # README "Size a cluster for a request rate": the fewest cards that serve 20 requests/s
    "plan-rate": Block(
        ("plan", "--rate", "20", "--max-cards", "256", "--top", "1"), _until("Best plan (rank 1) in detail")
    ),
    # docs/evaluate.md: `moeplan evaluate plans/a2-d70.yaml`, every table
    "evaluate-a2-d70": Block(("evaluate", "plans/a2-d70.yaml")),
    # README "How sure are the figures": the summary lines above the fidelity table
    "fidelity-summary": Block(("fidelity", "--markdown"), _until("| row"), fenced=False),
    # `moeplan fidelity --markdown`: docs/fidelity.md's table (the static figures)
    "fidelity": Block(("fidelity", "--markdown"), _until("| simulated run"), fenced=False),
    # docs/search.md: the verdict and the named limits of the space, deepseek-v2-lite on 8 A2 cards
    "explain-space-v2-lite": Block(
        (
            "plan",
            "--model",
            "deepseek-v2-lite",
            "--hardware",
            "a2",
            "--max-cards",
            "8",
            "--tpot-ms",
            "50",
            "--top",
            "1",
            "--explain-space",
        ),
        _between("OPTIMAL", "why:"),
    ),
    # docs/whatif.md: the report's A2 decode deployment at 30 ms per token
    "whatif-a2-d70-30ms": Block(("whatif", "plans/a2-d70.yaml", "--tpot-ms", "30")),
    # docs/afd.md: the shipped hand-written AFD plan, up to its HBM tables
    "evaluate-afd-a3-example": Block(("evaluate", "plans/afd-a3-example.yaml"), _until("     AFD HBM")),
    # docs/afd.md: the fidelity table's AFD rows
    "fidelity-afd": Block(("fidelity", "--markdown"), _rows_of("AFD-plugin"), fenced=False),
    # docs/afd.md: the search with AFD among the structures (the alternatives and the AFD line)
    "plan-afd-a3-16k": Block(
        ("plan", "--hardware", "a3", "--model", "deepseek-v3.2", "--input-tokens", "16384"),
        _span("Best plan of each other structure", "AFD: "),
    ),
    # docs/afd.md: two machines priced per card-hour, ranked by tokens per card and by cost
    "plan-two-machines-per-card": Block(PRICED_TWO_MACHINES, _until("P:D cards:")),
    "plan-two-machines-cost": Block((*PRICED_TWO_MACHINES, "--objective", "cost"), _until("P:D cards:")),
    # README: the simulated run's latency percentiles beside the static figures
    "simulate-a2-48-latency": Block(("simulate", SIMULATED_PLAN), _span("latency, ms", "└")),
    # docs/simulate.md: the default plan served at the rate it claims, from empty (simulate's defaults)
    "simulate-a2-48": Block(("simulate", SIMULATED_PLAN)),
    # docs/simulate.md: the same plan in a closed loop past its seats: the steady state against the static model
    "simulate-a2-48-closed": Block(
        ("simulate", SIMULATED_PLAN, "--concurrency", "3000", "--requests", "20000", "--warmup", "6000")
    ),
    # docs/simulate.md: the store's queueing-dominated figures against the simulator
    "fidelity-simulated": Block(("fidelity", "--markdown"), _from("| simulated run"), fenced=False),
    # docs/fidelity.md: how often the bands hold the measured figure, by machine group and width
    "band-coverage": Block(("fidelity", "--coverage")),
    # docs/fidelity.md: the cm384 lead over the report's plan under the shipped model
    "cm384-lead": Block(CM384_PLAN_ARGS, fenced=False, compose=cm384_lead),
    # README "How sure are the figures": the runs kept aside from the fit
    "kept-aside-summary": Block(KEPT_ASIDE_ARGS, fenced=False, compose=kept_aside_summary),
}

# pictures the docs show, drawn by the same commands (rewritten by this script, not drift-checked: PNG bytes
# depend on the matplotlib build)
PICTURES: dict[str, tuple[str, ...]] = {
    "docs/simulate-a2-48.png": ("simulate", SIMULATED_PLAN, "--plot", "docs/simulate-a2-48.png"),
}


_RUNS: dict[tuple[str, ...], str] = {}


def run(args: tuple[str, ...]) -> str:
    """moeplan's output for `args`, run in-process from the repository root (once per args and process:
    the README's and docs/simulate.md's fidelity blocks are two parts of one run)."""
    if args not in _RUNS:
        _RUNS[args] = _run(args)
    return _RUNS[args]


def _run(args: tuple[str, ...]) -> str:
    import os

    sys.path.insert(0, str(REPO))
    from typer.testing import CliRunner

    from planner.cli.app import app

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        result = CliRunner().invoke(app, list(args))
    finally:
        os.chdir(cwd)
    if result.exit_code != 0:
        raise SystemExit(f"moeplan {' '.join(args)} exited {result.exit_code}:\n{result.output}")
    return result.stdout


def render(name: str) -> str:
    """The lines between a block's markers, from a fresh run of its command."""
    block = BLOCKS[name]
    text = (block.compose() if block.compose else block.part(run(block.args))).rstrip("\n")
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return f"```\n{text}\n```\n" if block.fenced else text + "\n"


def blocks_of(readme: str) -> dict[str, str]:
    """The marked blocks of a README text: name -> the lines between the markers."""
    out: dict[str, str] = {}
    lines = readme.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        begin = BEGIN.match(lines[i].rstrip("\n"))
        if begin:
            j = i + 1
            while j < len(lines) and lines[j].rstrip("\n") != END:
                j += 1
            if j == len(lines):
                raise SystemExit(f"README.md: block '{begin['name']}' has no closing {END}")
            out[begin["name"]] = "".join(lines[i + 1 : j])
            i = j
        i += 1
    return out


def rewritten(readme: str, fresh: dict[str, str]) -> str:
    """The README with every marked block replaced by its fresh output."""
    out, name = [], None
    for line in readme.splitlines(keepends=True):
        begin = BEGIN.match(line.rstrip("\n"))
        if name is None:
            out.append(line)
            if begin and begin["name"] in fresh:
                name = begin["name"]
                out.append(fresh[name])
        elif line.rstrip("\n") == END:
            out.append(line)
            name = None
    return "".join(out)


def normalized(text: str) -> str:
    """A block with its wall times masked (they differ from run to run)."""
    return WALL_TIME.sub("<time> s", text)


def update(path: Path, check: bool, only: frozenset[str] | None = None) -> bool:
    """Rewrite (or with `check`, compare) the marked blocks of one file (with `only`, those named
    there alone); True when it had drifted."""
    text = path.read_text(encoding="utf-8")
    present = blocks_of(text)
    unknown = sorted(set(present) - set(BLOCKS))
    if unknown:
        raise SystemExit(f"{path.name}: unknown blocks {unknown}; add them to BLOCKS")
    if only is not None:
        present = {name: body for name, body in present.items() if name in only}
    fresh = {name: render(name) for name in present}
    drifted = [n for n in present if normalized(present[n]) != normalized(fresh[n])]
    if check:
        for n in drifted:
            diff = difflib.unified_diff(
                present[n].splitlines(), fresh[n].splitlines(), f"{path.name} [{n}]", f"moeplan [{n}]", lineterm=""
            )
            print("\n".join(diff))
        if drifted:
            print(f"{path.name} has drifted in {drifted}: run python benchmarks/update_readme.py")
        return bool(drifted)
    new = rewritten(text, fresh)
    if new != text:
        path.write_text(new, encoding="utf-8")
        print(f"{path.relative_to(REPO)}: rewrote {', '.join(present)}")
    else:
        print(f"{path.relative_to(REPO)}: up to date")
    return bool(drifted)


def _only(argv: list[str]) -> frozenset[str] | None:
    """The block names given with `--only NAME[,NAME...]` (None without it: every block)."""
    if "--only" not in argv:
        return None
    i = argv.index("--only")
    if i + 1 >= len(argv):
        raise SystemExit("--only: give block names, e.g. --only plan,plan-rate")
    names = frozenset(n for n in argv[i + 1].split(",") if n)
    unknown = sorted(names - set(BLOCKS))
    if unknown:
        raise SystemExit(f"--only: unknown blocks {unknown}; known: {', '.join(BLOCKS)}")
    return names


def main(argv: list[str]) -> int:
    check = "--check" in argv
    only = _only(argv)
    drifted = [update(path, check, only) for path in DOCS if path.is_file()]
    if not check and only is None:
        for picture, args in PICTURES.items():
            run(args)
            print(f"{picture}: redrawn")
    return 1 if check and any(drifted) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
