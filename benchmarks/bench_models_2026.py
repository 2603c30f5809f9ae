"""`moeplan plan` for the 2026 models on cm384 and a2: wall time (process start to exit) and the best plan.

    python benchmarks/bench_models_2026.py [--hardware cm384 a2]

For every catalog model of issue 13 part 1, runs the CLI in a subprocess with the default workload
and budget, and prints seconds, the best plan's output tokens/s per card, and the solver status
(or the infeasible message, which names the binding constraint).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

MODELS = [
    "deepseek-v3",
    "deepseek-v3.2",
    "deepseek-v4-pro",
    "deepseek-v4-flash",
    "kimi-k2.5",
    "kimi-k3",
    "glm-5.1",
    "qwen3.5-397b-a17b",
    "minimax-m2.5",
]


def run(model: str, hardware: str) -> tuple[float, str]:
    """(seconds, one-line summary) of `moeplan plan --model MODEL --hardware HW --top 1`."""
    cmd = [sys.executable, "-m", "planner", "plan", "--model", model, "--hardware", hardware, "--top", "1"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode == 1:
        return seconds, "infeasible: " + " ".join(proc.stdout.split() + proc.stderr.split())[:140]
    if proc.returncode != 0:
        return seconds, f"exit {proc.returncode}: {proc.stderr.strip()[:140]}"
    row = next((ln for ln in proc.stdout.splitlines() if ln.startswith("│ 1 ")), "")
    cells = [c.strip() for c in row.strip("│").split("│")]
    status = next((ln.split(":")[0] for ln in proc.stdout.splitlines() if "configurations costed" in ln), "?")
    tok = cells[7] if len(cells) > 7 else "?"
    cards = cells[1] if len(cells) > 1 else "?"
    shape = re.sub(r"\s+", " ", cells[2]) if len(cells) > 2 else "?"
    return seconds, f"{tok:>9} tok/s/card, {cards} cards, {shape}, {status}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hardware", nargs="+", default=["cm384", "a2"])
    args = parser.parse_args()
    for hw in args.hardware:
        print(f"== {hw}")
        for model in MODELS:
            seconds, line = run(model, hw)
            print(f"{model:20s} {seconds:6.2f} s  {line}")


if __name__ == "__main__":
    main()
