"""Benchmark of redundant-expert placement: `moeplan experts` end to end, quality against the EPLB
greedy and the lower bound, and the speed of `imbalance_for` (the plan search's entry point).

Run: python benchmarks/bench_experts.py [--repeat N]

Loads: 58 MoE layers x 256 experts (DeepSeek-V3's shape), synthetic log-normal (sigma 1.0) and
Zipf (s 1.1) traces, seed 0 (see planner/placement/synthetic.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from planner.placement.eplb import global_placement, hierarchical_placement
from planner.placement.metrics import (
    Routing,
    imbalance,
    lower_bound,
    nodes_per_token,
    slot_aware_lower_bound,
)
from planner.placement.optimize import imbalance_for, optimize_placement
from planner.placement.synthetic import generate_loads

TRACES = ("lognormal:1.0", "zipf:1.1")
CLI_LAYOUTS = ((32, 9), (288, 1))
QUALITY_LAYOUTS = ((32, 9), (288, 1), (64, 5), (16, 17), (48, 6), (128, 3), (96, 3), (144, 2))
FAST_LAYOUTS = ((32, 8), (32, 9), (256, 1), (288, 1), (16, 16), (64, 5), (144, 2))


def _command() -> list[str]:
    exe = Path(sys.executable).with_name("moeplan")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("moeplan")
    return [found] if found else [sys.executable, "-m", "planner"]


def _pct(values: np.ndarray) -> str:
    return f"{np.median(values) * 100:6.3f}% / {values.max() * 100:6.3f}%"


def bench_cli(repeat: int) -> None:
    print(
        "== `moeplan experts` end to end (process start to exit; median of "
        f"{repeat} runs; loads from a .npy file, map written with --out) =="
    )
    cmd = _command()
    with tempfile.TemporaryDirectory() as tmp:
        for trace in TRACES:
            path = Path(tmp) / f"{trace.replace(':', '_')}.npy"
            np.save(path, generate_loads(trace, 58, 256, seed=0))
            for devices, slots in CLI_LAYOUTS:
                times = []
                for _ in range(repeat):
                    start = time.perf_counter()
                    out = subprocess.run(
                        [
                            *cmd,
                            "experts",
                            "--loads",
                            str(path),
                            "--devices",
                            str(devices),
                            "--slots-per-device",
                            str(slots),
                            "--out",
                            str(Path(tmp) / "map.json"),
                        ],
                        capture_output=True,
                        text=True,
                        env={**os.environ, "COLUMNS": "120"},
                    )
                    times.append(time.perf_counter() - start)
                    if out.returncode != 0:
                        raise SystemExit(f"moeplan experts failed: {out.stderr}")
                print(f"  {trace:14s} {devices:3d} devices x {slots} slots: {statistics.median(times):.2f} s")


def bench_nodes(repeat: int) -> None:
    print("\n== group-limited routing: DeepSeek-V3 (8 groups, top-4 groups, top-8), 32 devices x 9 slots on 4 nodes ==")
    routing = Routing(experts_per_token=8, n_group=8, topk_group=4)
    cmd = _command()
    with tempfile.TemporaryDirectory() as tmp:
        for trace in TRACES:
            loads = generate_loads(trace, 58, 256, seed=0)
            path = Path(tmp) / "loads.npy"
            np.save(path, loads)
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                out = subprocess.run(
                    [
                        *cmd,
                        "experts",
                        "--loads",
                        str(path),
                        "--devices",
                        "32",
                        "--slots-per-device",
                        "9",
                        "--nodes",
                        "4",
                        "--model",
                        "deepseek-v3",
                    ],
                    capture_output=True,
                    text=True,
                )
                times.append(time.perf_counter() - start)
                if out.returncode != 0:
                    raise SystemExit(f"moeplan experts failed: {out.stderr}")
            ours = optimize_placement(loads, 32, 9, nodes=4, routing=routing).placement
            flat = optimize_placement(loads, 32, 9).placement
            hier = hierarchical_placement(loads, 32, 9, 4, 8)
            greedy = global_placement(loads, 32, 9)
            bound = lower_bound(loads, 32, 9)
            print(f"  {trace:14s} end to end {statistics.median(times):.2f} s")
            for name, placement in (
                ("moeplan (nodes=4)", ours),
                ("moeplan (nodes=1)", flat),
                ("EPLB hierarchical", hier),
                ("EPLB greedy", greedy),
            ):
                gap = imbalance(loads, placement) / bound - 1
                reach = nodes_per_token(loads, placement, 4, routing)
                print(f"    {name:18s} above bound {_pct(gap)}   nodes per token {reach.mean():.3f}")


def bench_quality() -> None:
    print("\n== imbalance above the lower bound, median / worst layer (58 layers x 256 experts) ==")
    print(
        f"  {'trace':14s} {'layout':>8s} {'EPLB greedy':>20s} {'moeplan':>20s} "
        f"{'moeplan vs slot-aware':>22s} {'search':>8s} {'per layer':>9s}"
    )
    for trace in TRACES:
        loads = generate_loads(trace, 58, 256, seed=0)
        for devices, slots in QUALITY_LAYOUTS:
            bound = lower_bound(loads, devices, slots)
            aware = slot_aware_lower_bound(loads, devices, slots)
            start = time.perf_counter()
            result = optimize_placement(loads, devices, slots)
            search_s = time.perf_counter() - start
            ours = imbalance(loads, result.placement)
            greedy = imbalance(loads, global_placement(loads, devices, slots))
            print(
                f"  {trace:14s} {devices:3d}x{slots:<4d} {_pct(greedy / bound - 1):>20s} "
                f"{_pct(ours / bound - 1):>20s} {_pct(ours / aware - 1):>22s} "
                f"{search_s:7.2f}s {search_s / 58 * 1e3:7.1f}ms"
            )


def bench_fast(repeat: int) -> None:
    print(f"\n== imbalance_for (58 layers x 256 experts), median of {repeat} calls ==")
    print(f"  {'trace':14s} {'layout':>8s} {'time':>8s} {'fast vs full (median / worst)':>30s}")
    for trace in TRACES:
        loads = generate_loads(trace, 58, 256, seed=0)
        for devices, slots in FAST_LAYOUTS:
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                fast = imbalance_for(loads, devices, slots)
                times.append(time.perf_counter() - start)
            full = imbalance(loads, optimize_placement(loads, devices, slots).placement)
            print(
                f"  {trace:14s} {devices:3d}x{slots:<4d} {statistics.median(times) * 1e3:6.1f}ms "
                f"{_pct(fast / full - 1):>30s}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPU(s), numpy {np.__version__}, python {sys.version.split()[0]}\n")
    bench_cli(args.repeat)
    bench_quality()
    bench_fast(max(args.repeat, 5))
    bench_nodes(args.repeat)


if __name__ == "__main__":
    main()
