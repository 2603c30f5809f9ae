"""`moeplan plan` for the 2026 models on cm384 and a2: wall time (process start to exit) and the best plan.

    python benchmarks/bench_models_2026.py [--hardware cm384 a2]

For every catalog model of issue 13 part 1, runs the CLI in a subprocess with the default workload
and budget, and prints seconds, the best plan's output tokens/s per card, and the solver status
(or the infeasible message, which names the binding constraint).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = [
    "deepseek-v3",
    "deepseek-v3.2",
    "deepseek-v4-pro",
    "deepseek-v4-flash",
    "kimi-k2.5",
    "kimi-k3",
    "glm-5.1",
    "glm-5.2",
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
    # the table's columns move as features arrive: read the figures from the JSON written beside it
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plans.json"
        again = subprocess.run([*cmd, "--json", str(out)], capture_output=True, text=True)
        if again.returncode != 0 or not out.is_file():
            return seconds, f"exit {again.returncode} on the JSON re-run"
        doc = json.loads(out.read_text())
    best = doc["plans"][0]
    pred = best.get("predicted") or {}
    system = pred.get("system") or {}
    tok = system.get("output_tokens_per_s_per_card") or (pred.get("decode") or {}).get("tokens_per_s_per_card")
    cards = system.get("cards", "?")
    shape = "colocated" if best.get("colocated") else "disaggregated"
    return seconds, f"{float(tok):9.1f} tok/s/card, {cards} cards, {shape}, {doc.get('status', '?')}"


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
