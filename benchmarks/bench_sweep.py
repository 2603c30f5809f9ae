"""End-to-end speed of `moeplan sweep` and `moeplan whatif` (process start to exit).

    python benchmarks/bench_sweep.py [--repeat N]

1. A 15-point TPOT sweep (10..150 ms, step 10) of DeepSeek-V3 on cm384 with up to 384 cards
   (target <= 10 s on a 2-core machine), with the table cache's hits and misses: as run by
   default, on one core (`--jobs 1`), and without colocated instances (`--no-colocated`, the
   search space before colocated plans existed).
2. A what-if against a single `moeplan plan` on the same assumptions (target: what-if <= 2x
   plan): `moeplan whatif --base ... --tpot-ms 30` runs two searches (base and new) that share
   one cost-table cache, against one `moeplan plan` with the base assumptions.

Each command runs `--repeat` times (default 3) and the median is printed, with the machine's
load average: the figures are only comparable on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

SWEEP = ["sweep", "--hardware", "cm384", "--max-cards", "384", "--tpot-ms", "10:150:10"]
SWEEP_VARIANTS = [
    ("(defaults: colocated too, --jobs 2)", []),
    ("--jobs 1", ["--jobs", "1"]),
    ("--no-colocated", ["--no-colocated"]),
]
PLAN_BASES = [
    ("a2, <= 48 cards (the defaults)", []),
    ("cm384, <= 384 cards, TPOT 50 ms", ["hardware=cm384", "max-cards=384", "tpot-ms=50"]),
]
WHATIF_CHANGE = ["--tpot-ms", "30"]


def run(args: list[str]) -> tuple[float, str]:
    """(seconds, stdout) of one moeplan run in a fresh process."""
    cmd = [sys.executable, "-m", "planner", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"moeplan {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return seconds, proc.stdout


def median_run(args: list[str], repeat: int) -> tuple[float, str]:
    """Median seconds over `repeat` runs, and the last run's stdout."""
    times, out = [], ""
    for _ in range(repeat):
        seconds, out = run(args)
        times.append(seconds)
    return statistics.median(times), out


def plan_flags(pairs: list[str]) -> list[str]:
    """`--base NAME=VALUE` pairs as the same `moeplan plan` flags."""
    flags = []
    for pair in pairs:
        name, _, value = pair.partition("=")
        flags += [f"--{name}", value]
    return flags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per command (median is printed)")
    repeat = parser.parse_args().repeat
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"moeplan sweep / whatif, end to end, {os.cpu_count()} cores, load average {load:.2f}")

    for label, extra in SWEEP_VARIANTS:
        seconds, out = median_run(SWEEP + extra, repeat)
        found = re.search(
            r"(\d+) points \((\d+) feasible\) in ([\d.]+) s; "
            r"cost tables: (\d+) built, (\d+) reused",
            out,
        )
        detail = (
            f"{found.group(1)} points ({found.group(2)} feasible); cost tables {found.group(4)} "
            f"built, {found.group(5)} reused"
            if found
            else "?"
        )
        verdict = "OK" if seconds <= 10 else "over target"
        print(f"  sweep {label:42s} {seconds:6.2f} s  [{verdict}, target <= 10 s]; {detail}")

    for label, pairs in PLAN_BASES:
        plan_s, _ = median_run(["plan", *plan_flags(pairs)], repeat)
        base_args = [a for pair in pairs for a in ("--base", pair)]
        whatif_s, out = median_run(["whatif", *base_args, *WHATIF_CHANGE], repeat)
        reuse = re.search(r"cost tables: (\d+) built, (\d+) reused", out)
        ratio = whatif_s / plan_s
        verdict = "OK" if ratio <= 2 else "over target"
        print(
            f"  whatif {label}, TPOT -> 30 ms: {whatif_s:5.2f} s vs plan {plan_s:5.2f} s "
            f"= {ratio:4.2f}x "
            f"[{verdict}, target <= 2x]; cost tables {reuse.group(1) if reuse else '?'} built / "
            f"{reuse.group(2) if reuse else '?'} reused"
        )


if __name__ == "__main__":
    main()
