"""End-to-end speed and memory of `moeplan plan` (process start to exit), as the README reports.

    python benchmarks/bench_plan.py

Runs the CLI in a subprocess for the issue's targets (DeepSeek-V3 on a2 with up to 64 cards;
on cm384 with up to 384 cards; on 8 CM384 supernodes = 3,072 cards) and for a range of budgets,
and prints wall time, peak resident memory (from /usr/bin/time when present, else getrusage),
the solver's status and how many configurations were costed.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import time

CASES = [
    ("a2, <= 64 cards (target <= 1.5 s)", ["--hardware", "a2", "--max-cards", "64"]),
    (
        "cm384, <= 384 cards (target <= 3 s, optimal)",
        ["--hardware", "cm384", "--max-cards", "384", "--tpot-ms", "50"],
    ),
    (
        "8 x CM384 = 3,072 cards (target <= 15 s)",
        ["--hardware", "cm384", "--max-cards", "3072", "--tpot-ms", "50"],
    ),
]
SCALING = [16, 64, 384, 3072]


def run(args: list[str]) -> tuple[float, float, str]:
    """(seconds, peak MiB, stdout) of one `moeplan plan` run."""
    cmd = [sys.executable, "-m", "planner", "plan", "--top", "5", *args]
    timer = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    if timer:
        start = time.perf_counter()
        proc = subprocess.run([timer, "-f", "MAXRSS_KB %M", *cmd], capture_output=True, text=True)
        seconds = time.perf_counter() - start
        match = re.search(r"MAXRSS_KB (\d+)", proc.stderr)
        peak = int(match.group(1)) / 1024 if match else float("nan")
    else:
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    if proc.returncode != 0:
        raise SystemExit(f"moeplan plan {' '.join(args)} failed:\n{proc.stderr}")
    return seconds, peak, proc.stdout


def summary(stdout: str) -> str:
    line = next((ln for ln in stdout.splitlines() if "configurations costed" in ln), "")
    status = line.split(":")[0]
    costed = re.search(r"([\d,]+) configurations costed", line)
    return f"{status}, {costed.group(1) if costed else '?'} configurations costed"


def main() -> None:
    print("moeplan plan, end to end (process start to exit), 2-core machine")
    for label, args in CASES:
        seconds, peak, out = run(args)
        print(f"  {label:48s} {seconds:6.2f} s  peak {peak:6.0f} MiB  {summary(out)}")
    print("growth with the card budget (cm384, TPOT <= 50 ms):")
    for cards in SCALING:
        seconds, peak, out = run(["--hardware", "cm384", "--max-cards", str(cards), "--tpot-ms", "50"])
        print(f"  {cards:6d} cards: {seconds:6.2f} s  peak {peak:6.0f} MiB  {summary(out)}")


if __name__ == "__main__":
    main()
