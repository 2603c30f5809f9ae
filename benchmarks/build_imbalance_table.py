"""Compute the shipped engine-imbalance table (planner/costmodel/data/engine_imbalance.json).

    python benchmarks/build_imbalance_table.py [--jobs 2]

The default imbalance model (planner.costmodel.imbalance.EngineImbalance) places experts with
moeplan's own optimiser for every (routed experts, EP, slots per device) a layout asks for:
5-30 ms a placement, hundreds per supernode plan. The values are a pure function of those three
integers, the two default parameters and the placement code, so they are computed here ahead for
every key the catalog's models ask for on the catalog's machines and docs/examples' (every instance size, both
phases, the default scheme or, where a machine has no INT8, its FP8 one, and the shipped plans),
and shipped. The file records the hash of the placement code; moeplan uses it only while that
hash matches, and tests/costmodel/test_shipped_imbalance.py fails once it does not: rerun this
script after changing planner/costmodel/imbalance.py or planner/placement/.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCHEMES = ("a8w8c16", "fp8")


def _keys() -> set[tuple[int, int, int]]:
    """Every (experts, EP, slots) the catalog's tables and the shipped plans ask for."""
    from planner.candidates.space import DENSE_NODE_COUNTS, SpaceLimits
    from planner.costmodel import imbalance as imb
    from planner.costmodel.evaluate import evaluate_plan
    from planner.errors import BadInputError
    from planner.search.candidate_spaces import build_phase_space, phase_sizes
    from planner.search.contexts import make_context
    from planner.search.request import PlanRequest
    from planner.specs.catalog import catalog_names, load_plan, plan_files

    keys: set[tuple[int, int, int]] = set()

    def record(self, experts: int, ep: int, slots: int) -> float:
        if ep > 1 and self.popularity_sigma:
            keys.add((experts, ep, slots))
        return 1.3  # any value: only the keys are wanted here

    imb.EngineImbalance.static_factor = record  # type: ignore[method-assign]
    imb.EngineImbalance.fitted_factor = record  # type: ignore[method-assign]
    for model in catalog_names("models"):
        for hardware in [*catalog_names("hardware"), *map(str, sorted((REPO / "docs" / "examples").glob("*.yaml")))]:
            for scheme in SCHEMES:
                try:
                    ctx = make_context(PlanRequest(model=model, hardware=hardware, quantization=scheme))
                except BadInputError:
                    continue
                largest = ctx.hw.max_devices or DENSE_NODE_COUNTS * ctx.hw.devices_per_node
                sizes = phase_sizes(ctx, largest, None, 0, "decode")
                request = PlanRequest(model=model, hardware=hardware, quantization=scheme, max_cards=largest)
                for phase in ("decode", "prefill"):
                    build_phase_space(ctx, phase, sizes, request, SpaceLimits(max_devices=largest), keep=1)
                print(f"{model} on {hardware} ({scheme}): {len(keys)} keys so far", file=sys.stderr, flush=True)
                break  # the first scheme the machine runs
    for path in plan_files(REPO / "plans"):
        evaluate_plan(load_plan(str(path))[0])
    return keys


def _value(key: tuple[int, int, int]) -> tuple[tuple[int, int, int], tuple[float, float]]:
    from planner.costmodel.imbalance import DEFAULT_DRIFT_SIGMA, DEFAULT_POPULARITY_SIGMA, engine_static_computed

    return key, engine_static_computed(DEFAULT_POPULARITY_SIGMA, DEFAULT_DRIFT_SIGMA, *key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    opts = parser.parse_args()
    sys.path.insert(0, str(REPO))
    import os

    os.environ["MOEPLAN_CACHE_DIR"] = "off"
    from planner.costmodel.disk_memo import placement_code_digest
    from planner.costmodel.imbalance import (
        DEFAULT_DRIFT_SIGMA,
        DEFAULT_POPULARITY_SIGMA,
        SHIPPED_TABLE,
        engine_key,
    )

    start = time.perf_counter()
    keys = sorted(_keys())
    print(f"{len(keys)} keys in {time.perf_counter() - start:.1f} s; placing experts ...", file=sys.stderr)
    with multiprocessing.get_context("spawn").Pool(opts.jobs) as pool:
        values = dict(pool.map(_value, keys, chunksize=16))
    doc = {
        "about": "engine imbalance (fitted, following) per 'sigma,drift,experts,ep,slots'; "
        "made by benchmarks/build_imbalance_table.py",
        "code_digest": placement_code_digest(),
        "values": {
            engine_key(DEFAULT_POPULARITY_SIGMA, DEFAULT_DRIFT_SIGMA, *key): [values[key][0], values[key][1]]
            for key in keys
        },
    }
    SHIPPED_TABLE.parent.mkdir(parents=True, exist_ok=True)
    SHIPPED_TABLE.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    size = SHIPPED_TABLE.stat().st_size
    print(f"wrote {SHIPPED_TABLE} ({len(keys)} keys, {size / 1024:.0f} KiB) in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
