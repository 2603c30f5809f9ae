"""Speed and memory of the serving simulator (issue 19's targets); prints figures, asserts nothing.

    python benchmarks/bench_simulate.py            # every case
    python benchmarks/bench_simulate.py --quick    # the 48-card cases only

Cases, each in a fresh process pinned to one core (os.sched_setaffinity), with its wall time, its
CPU time (what the wall time is on an otherwise idle core) and its peak memory (ru_maxrss):

1. 10,000 requests through the 48-card disaggregated plan moeplan plan finds with no flags
   (docs/examples/plan-a2-48-cards.yaml), Poisson at the rate it claims, and in a closed loop at
   3,000 clients (target: <= 2 s each);
2. `plan --simulate` against `plan`: the time the simulation of the top 5 adds (target: <= 1 s);
3. the best plan within 384 CloudMatrix384 cards at the rate it claims, 100,000 requests
   (target: <= 20 s), and the same plan with 10,000 and 30,000 requests (memory grows with the
   requests, a few dozen bytes each: never with the tokens).

The times include building the cost tables, not the interpreter's start or the imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLAN_48 = REPO / "docs" / "examples" / "plan-a2-48-cards.yaml"

CASE = """
import json, os, resource, sys, time
os.sched_setaffinity(0, {{0}})
sys.path.insert(0, {repo!r})
from planner.specs.catalog import load_plan
from planner.simulate.build import Traffic
from planner.simulate.run import simulate_plan, claimed_rate
from planner.costmodel.evaluate import evaluate_plan
plan, _ = load_plan({plan!r}, 1)
rate = claimed_rate(plan, evaluate_plan(plan)) if {rate!r} == "claimed" else None
traffic = Traffic(requests={requests}, rate_per_s=rate, concurrency={concurrency!r}, seed=0)
start, cpu = time.perf_counter(), time.process_time()
result = simulate_plan(plan, traffic)
wall, cpu = time.perf_counter() - start, time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
steps = result.summary["moeplan"]["bound"]["decode_steps"]
print(json.dumps({{"wall_s": wall, "cpu_s": cpu, "max_rss_mib": rss, "completed": result.summary["completed"],
                   "steps": steps, "rate": rate}}))
"""


def run_case(plan: Path | str, requests: int, rate: str | None, concurrency: int | None) -> dict[str, float]:
    code = CASE.format(repo=str(REPO), plan=str(plan), requests=requests, rate=rate, concurrency=concurrency)
    env = {**os.environ, "MOEPLAN_CACHE_DIR": "off"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def plan_time(extra: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of `moeplan plan` (with `extra`) on one core, cost tables from a warm disk cache."""
    import resource

    env = {**os.environ, "MOEPLAN_CACHE_DIR": str(Path(tempfile.gettempdir()) / "moeplan-bench-simulate-cache")}
    cmd = ["taskset", "-c", "0", sys.executable, "-m", "planner", "plan", *extra]
    subprocess.run(cmd, capture_output=True, env=env, cwd=REPO, check=True)  # warm the cache
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, capture_output=True, env=env, cwd=REPO, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.perf_counter() - start, cpu


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    print("1. the 48-card disaggregated plan (docs/examples/plan-a2-48-cards.yaml), 10,000 requests, one core")
    for label, rate, conc in (
        ("Poisson at its claimed rate", "claimed", None),
        ("closed loop, 3,000 clients", None, 3000),
    ):
        r = run_case(PLAN_48, 10_000, rate, conc)
        print(
            f"   {label:32s} {r['wall_s']:6.2f} s wall, {r['cpu_s']:.2f} s CPU (target <= 2 s)  "
            f"{r['steps']:,} decode steps, peak memory {r['max_rss_mib']:.0f} MiB"
        )
    print("2. plan --simulate against plan (defaults: DeepSeek-V3 on a2, 48 cards, top 5), one core, warm table cache")
    (base, base_cpu), (sim, sim_cpu) = plan_time([]), plan_time(["--simulate"])
    print(
        f"   plan {base:.2f} s wall ({base_cpu:.2f} s CPU), plan --simulate {sim:.2f} s ({sim_cpu:.2f} s CPU): the "
        f"simulation adds {sim - base:.2f} s wall, {sim_cpu - base_cpu:.2f} s CPU (target <= 1 s)"
    )
    if quick:
        return 0
    print("3. the best plan within 384 CloudMatrix384 cards, at its claimed rate, one core")
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "cm384.json"
        env = {**os.environ, "MOEPLAN_CACHE_DIR": "off"}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "planner",
                "plan",
                "--hardware",
                "cm384",
                "--max-cards",
                "384",
                "--json",
                str(export),
            ],
            capture_output=True,
            env=env,
            cwd=REPO,
            check=True,
        )
        plan = json.loads(export.read_text())["plans"][0]
        cards = plan["predicted"]["system"]["cards"]
        for n in (10_000, 30_000, 100_000):
            r = run_case(export, n, "claimed", None)
            target = "  (target <= 20 s)" if n == 100_000 else ""
            print(
                f"   {cards:g} cards, {r['rate']:.1f} req/s, {n:>7,} requests: {r['wall_s']:6.2f} s wall, "
                f"{r['cpu_s']:.2f} s CPU{target}  {r['steps']:,} decode steps, peak memory {r['max_rss_mib']:.0f} MiB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
