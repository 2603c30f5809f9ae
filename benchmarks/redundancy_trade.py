"""Redundant expert slots against HBM, inside the plan search, on a skewed expert-load trace.

    python benchmarks/redundancy_trade.py [zipf:1.1]

Generates a 58-layer x 256-expert trace (planner.placement.generate_loads), saves it as .npy,
and runs `moeplan plan --loads` for DeepSeek-V3 decode on 32 A2 cards (the report's size) and on
288 CM384 dies at 50 ms, with no redundant expert copies allowed (--max-redundant-experts 0) and
with redundancy left to the search. Prints the chosen slots, the MoE imbalance of the deployed placement, the
concurrency HBM allowed, and decode tokens/s per card.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from planner.placement import generate_loads

CASES = [
    (
        "a2, 32 devices, TPOT <= 100 ms",
        ["--hardware", "a2", "--decode-devices", "32", "--tpot-ms", "100"],
    ),
    (
        "cm384, 288 dies, TPOT <= 50 ms",
        ["--hardware", "cm384", "--decode-devices", "288", "--max-cards", "144", "--tpot-ms", "50"],
    ),
]


def main(spec: str) -> None:
    loads = generate_loads(spec, layers=58, experts=256, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "loads.npy"
        np.save(path, loads)
        print(f"trace {spec}: 58 layers x 256 experts")
        for label, args in CASES:
            for extra in ("0", None):
                cmd = [
                    sys.executable,
                    "-m",
                    "planner",
                    "plan",
                    "--phase",
                    "decode",
                    "--top",
                    "1",
                    "--loads",
                    str(path),
                    "--json",
                    "-",
                    *args,
                ]
                if extra is not None:
                    cmd += ["--max-redundant-experts", extra]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                plan = json.loads(out)["plans"][0]
                d, pd = plan["decode"], plan["predicted"]["decode"]
                kind = "no redundant experts" if extra == "0" else "redundancy searched"
                print(
                    f"  {label:34s} {kind:22s}: EP{d['moe']['ep']} x {d['moe']['slots_per_device']} slots "
                    f"({d['moe']['comm']}), imbalance {pd['moe_imbalance']:.3f}, B = {d['concurrency_per_device']} "
                    f"(HBM allows {pd['max_concurrency_per_device']}), MTP {d['mtp_tokens']}, "
                    f"{pd['tokens_per_s_per_card']:.0f} tokens/s per card"
                )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "zipf:1.1")
