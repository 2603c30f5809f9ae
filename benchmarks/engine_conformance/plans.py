"""The fixed plan set the conformance harness exports and runs through the engines' own code.

Two kinds of plans:

- written out here, so the set does not move with the cost model: A2 and CloudMatrix384,
  disaggregated and colocated, instances over several nodes, MTP 1 and 2, redundant experts,
  whole prefill forwards and chunked prefill (with and without MTP), the report's A2 decode (LM head
  and dense FFN TP8 beside DP32 attention) and its CloudMatrix384 decode (the shared expert on 32
  dedicated dies);
- what a user gets: `moeplan plan` with no flags (every plan it lists runs on some engine; rank 1 is
  exported for each engine, and refused by those that do not run it) and `moeplan plan --engine E`
  (A2 48 cards and CloudMatrix384 64 cards, disaggregated), run as commands (`plan --json`).

Every plan carries its `predicted` block (the exports size memory from it).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from planner.costmodel.evaluate import evaluate_plan
from planner.engines.profiles import ENGINES
from planner.specs.catalog import catalog_dir, load_plan
from planner.specs.plan import Plan

COMMON = {
    "schema_version": 2,
    "model": "deepseek-v3",
    "quantization": "a8w8c16",
    "workload": {"input_tokens": 2048, "output_tokens": 2048, "mtp_acceptance": 0.7},
}


def _dp(devices: int) -> dict:
    """Attention, dense FFN and LM head all data-parallel (what every engine runs)."""
    return {
        "attention": {"dp": devices, "tp": 1},
        "dense_ffn": {"dp": devices, "tp": 1},
        "lm_head": {"dp": devices, "tp": 1},
    }


def _moe(ep: int, redundant: int) -> dict:
    return {"ep": ep, "slots_per_device": (256 + redundant) // ep, "comm": "alltoall"}


def _phase(devices: int, instances: int, redundant: int) -> dict:
    return {"devices": devices, "instances": instances, **_dp(devices), "moe": _moe(devices, redundant)}


# prefill batches give each of the 32 DP ranks a 2K prompt at least: MindIE prefills a prompt whole on its rank
WRITTEN: dict[str, dict] = {
    # A2: 4-node prefill (EP32), 4-node decode (EP32 + 32 redundant experts), MTP 1
    "a2-pd": {
        **COMMON,
        "hardware": "a2",
        "prefill": {**_phase(32, 1, 0), "batch_tokens": 65536},
        "decode": {**_phase(32, 1, 32), "concurrency_per_device": 64, "mtp_tokens": 1},
    },
    # A2 colocated: two instances of 4 nodes (EP32 + 32 redundant), chunked prefill, MTP 1
    "a2-colocated": {
        **COMMON,
        "hardware": "a2",
        "colocated": {
            **_phase(32, 2, 32),
            "concurrency_per_device": 16,
            "mtp_tokens": 1,
            "prefill_batch_tokens": 2048,
            "chunk_tokens": 2048,
        },
    },
    # CloudMatrix384 (dies): 2-node prefill EP32 + 32 redundant, 4-node decode EP64 + 64, MTP 2
    "cm384-pd": {
        **COMMON,
        "hardware": "cm384",
        "prefill": {**_phase(32, 1, 32), "batch_tokens": 65536},
        "decode": {**_phase(64, 1, 64), "concurrency_per_device": 32, "mtp_tokens": 2},
    },
    # CloudMatrix384 colocated: one 2-node instance (32 dies), no redundancy, no MTP
    "cm384-colocated": {
        **COMMON,
        "hardware": "cm384",
        "colocated": {
            **_phase(32, 1, 0),
            "concurrency_per_device": 16,
            "mtp_tokens": 0,
            "prefill_batch_tokens": 65536,
        },
    },
    # the same instance chunked (16K-token chunks along the decode steps): vLLM's every step and SGLang's
    # --enable-mixed-chunk (at MTP 0: SGLang's mixed steps drop the draft)
    "cm384-colocated-chunked": {
        **COMMON,
        "hardware": "cm384",
        "colocated": {
            **_phase(32, 1, 0),
            "concurrency_per_device": 16,
            "mtp_tokens": 0,
            "chunk_tokens": 16384,
        },
    },
}
# the published deployments that exercise per-module layouts: A2-D70 (LM head and dense FFN TP8
# beside DP32 attention, all-gather MoE) and CM-D (shared expert on 32 dedicated dies)
PUBLISHED = ("a2-d70", "cm-d", "a3-sglang-qwen3-235b-w8a8-d32")
# (the last: SGLang's A3 Qwen3-235B decode with an EAGLE-3 draft head beside the model, draft_model)


def scored(plan: Plan) -> Plan:
    """The plan with its `predicted` block, as `moeplan plan` writes it."""
    return plan.model_copy(update={"predicted": evaluate_plan(plan).model_dump(mode="json")})


def planned(*flags: str) -> Plan:
    """Rank 1 of `moeplan plan FLAGS`, as its --json export holds it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plans.json"
        cmd = [sys.executable, "-m", "planner", "plan", "--top", "1", *flags, "--json", str(out)]
        subprocess.run(cmd, check=True, capture_output=True)
        plan, _ = load_plan(str(out))
    return plan


def fixed_plans(searched: bool = True) -> dict[str, Plan]:
    """Every plan of the set by name (`searched`: also the searches' winners)."""
    out = {name: scored(Plan.model_validate(doc)) for name, doc in WRITTEN.items()}
    for name in PUBLISHED:
        plan, _ = load_plan(str(catalog_dir("plans") / f"{name}.yaml"))
        out[name] = scored(plan)
    if searched:
        out["default"] = planned()
        for engine in ENGINES:
            out[f"a2-{engine}"] = planned("--engine", engine)
            out[f"cm384-{engine}"] = planned(
                "--engine", engine, "--hardware", "cm384", "--max-cards", "64", "--no-colocated"
            )
    return out
