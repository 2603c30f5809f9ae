"""How fast moeplan answers, end to end (process start to exit), against the issue-10 targets.

    python benchmarks/bench_speed.py [--repeat 5] [--before PATH]

Runs each command in a fresh `python -m planner` process and prints the median wall time and the
status line of `plan`. With `--before PATH` (another checkout of the repository, e.g. made with
`git worktree add /tmp/before <commit>` or `git archive <commit> | tar -x -C /tmp/before`) every
command also runs from that checkout, in alternation, so both see the same machine load, and the
table shows before and after side by side. The `experts` sample is the benchmark trace of
benchmarks/bench_experts.py: 58 layers x 256 experts, log-normal loads (sigma 1.0, seed 0),
32 devices x 9 slots.

Every command runs twice over: "warm", with a cache folder ($MOEPLAN_CACHE_DIR) that one untimed
run of the same command filled first (what a user sees from the second run on: cost tables and
placement imbalance read from disk, planner.candidates.table_store), and "cold", with an empty
cache folder each run (a first run after installing or changing moeplan). `--before` compares
the warm figures only. Each checkout's modules are byte-compiled first, as installing the wheel
does (with PYTHONDONTWRITEBYTECODE set, a source tree would otherwise be compiled on every run).
`plan` and `sweep` run at their default `--jobs` (up to 2 worker processes, one per core): the
figures depend on the cores this machine has, as a user's do.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CASES: list[tuple[str, list[str], float | None]] = [
    ("moeplan --version", ["--version"], 0.3),
    ("evaluate plans/a2-d70.yaml", ["evaluate", "plans/a2-d70.yaml"], 0.5),
    ("plan a2 <= 48 cards", ["plan", "--hardware", "a2", "--max-cards", "48"], 0.8),
    ("plan a2 <= 64 cards", ["plan", "--hardware", "a2", "--max-cards", "64"], None),
    ("plan cm384 <= 384 cards", ["plan", "--hardware", "cm384", "--max-cards", "384"], 2.0),
    (
        "sweep 15 TPOT points, cm384 <= 384",
        ["sweep", "--hardware", "cm384", "--max-cards", "384", "--tpot-ms", "10:150:10"],
        5.0,
    ),
    (
        "experts on the sample (32 x 9)",
        ["experts", "--loads", "{loads}", "--devices", "32", "--slots-per-device", "9", "--out", "{out}"],
        1.0,
    ),
]


def _run(repo: Path, args: list[str], cache_dir: Path) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(repo), COLUMNS="200", MOEPLAN_CACHE_DIR=str(cache_dir))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "planner", *args], cwd=repo, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{repo}: moeplan {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    status = ""
    m = re.search(r"^(OPTIMAL|FEASIBLE|UNKNOWN)[^\n]*", proc.stdout, re.M)
    if m:
        status = m.group(1)
    return seconds, status


def machine_reference_ms() -> float:
    """Milliseconds a fixed pure-Python workload takes here (best of 5): a yardstick for comparing
    figures taken on different machines or in different windows of a shared VM."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None, help="another checkout to compare with")
    parser.add_argument("--only", default=None, help="run only the cases whose label contains this")
    opts = parser.parse_args()
    sys.path.insert(0, str(REPO))
    import numpy as np

    from planner.placement.synthetic import generate_loads

    repos = [("after", REPO)] + ([("before", opts.before.resolve())] if opts.before else [])
    for _, repo in repos:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(repo / "planner")], check=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"moeplan end to end, median of {opts.repeat} runs, {os.cpu_count()} cores, load average {load:.2f}")
    print(f"machine reference: a 10^6-step Python loop takes {machine_reference_ms():.0f} ms here (best of 5)")
    with tempfile.TemporaryDirectory() as tmp:
        loads = Path(tmp) / "loads.npy"
        np.save(loads, generate_loads("lognormal:1.0", 58, 256, seed=0))
        header = f"{'command':38s} {'target':>8s} {'cold':>8s}"
        for name, _ in repos:
            header += f" {name + ' warm':>12s}"
        print(header + "  status")
        for c, (label, args, target) in enumerate(CASES):
            if opts.only and opts.only not in label:
                continue
            args = [a.format(loads=loads, out=Path(tmp) / "map.json") for a in args]
            times: dict[str, list[float]] = {name: [] for name, _ in repos}
            cold: list[float] = []
            warm = {name: Path(tmp) / f"warm-{name}-{c}" for name, _ in repos}
            for name, repo in repos:
                _run(repo, args, warm[name])  # fills the warm cache folder (not timed)
            status = ""
            for i in range(opts.repeat):
                cold.append(_run(REPO, args, Path(tmp) / f"cold-{c}-{i}")[0])
                for name, repo in repos:
                    seconds, st = _run(repo, args, warm[name])
                    times[name].append(seconds)
                    if name == "after":
                        status = st
            goal = f"<= {target:g} s" if target else ""
            row = f"{label:38s} {goal:>8s} {statistics.median(cold):7.2f}s"
            for name, _ in repos:
                row += f" {statistics.median(times[name]):11.2f}s"
            print(row + f"  {status}", flush=True)


if __name__ == "__main__":
    main()
