"""How well `moeplan calibrate --bench` recovers a known machine from benchmark result files.

    python benchmarks/calibrate_bench_recovery.py [--simulator] [--write-docs]

A "true" A2 (a2.yaml with TRUTH's factors) serves a set of disaggregated and colocated plans; each
plan's benchmark run (the closed loop its bench/ command runs) is written as the result file of
one of the three clients (benchmarks/bench_files.py: records from the static model's predicted
TTFT and TPOT, +-5% spread between requests, the mean kept; mean figures perturbed by +-noise).
`calibrate --bench` fits the shipped a2.yaml to the FIT plans' files; the fitted machine then
predicts the HELD_OUT plans, which it never saw, against the truth. Prints each factor (true,
fitted) and each held-out figure's error; the test (tests/costmodel/test_bench_calibration.py)
asserts the held-out figures within 3%.

`--simulator`: the result files are written by `moeplan simulate PLAN --concurrency C --json F`
(the discrete-event simulator of issue 19, run on the true machine as a hardware file: its JSON is
keyed as `vllm bench serve --save-result` writes), closed loop at each plan's decode slots, two
prompts per slot, the first half left out as warm-up. The simulator's queues and batching are
not the static model's, so this measures the fit through that difference too.

`--write-docs`: runs all three (no noise, +-1% noise, the simulator) and records their output in
docs/calibration.md's marked block (the test checks the +-1% part against a fresh run).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE.parent / "docs" / "calibration.md"
BEGIN, END = "<!-- bench-recovery -->", "<!-- /bench-recovery -->"
sys.path.insert(0, str(HERE))

from bench_files import simulated_run, write_aisbench, write_sglang, write_vllm  # noqa: E402
from calibrate_recovery import TRUTH  # noqa: E402  (the same known machine as the CSV recovery)

from planner.costmodel.calibration import calibrate, read_bench  # noqa: E402
from planner.costmodel.decode import emitted_tokens_per_step  # noqa: E402
from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, load_plan_specs  # noqa: E402
from planner.costmodel.fitting import factor_value, metric_value, with_factors  # noqa: E402
from planner.engines.plan_view import decode_slots  # noqa: E402
from planner.specs.catalog import load_hardware  # noqa: E402
from planner.specs.hardware import HardwareSpec  # noqa: E402
from planner.specs.plan import Plan  # noqa: E402

WORKLOAD = {"input_tokens": 2048, "output_tokens": 1024, "mtp_acceptance": 0.7}
RECORDS = 16  # per simulated run (the summary fields are what calibrate reads)


HEADER = {"schema_version": 2, "model": "deepseek-v3", "hardware": "a2", "quantization": "a8w8c16"}
HEADER["workload"] = WORKLOAD


def _flat(devices: int, tp: int = 1) -> dict:
    lay = {"dp": devices // tp, "tp": tp}
    return {"attention": lay, "dense_ffn": lay, "lm_head": lay}


def pd(decode_conc: int, mtp: int, batch_tokens: int, comm: str = "alltoall", decode_devices: int = 32) -> dict:
    return {
        **HEADER,
        "prefill": {
            "devices": 16,
            "instances": 1,
            **_flat(16, 2),
            "moe": {"ep": 16, "slots_per_device": 16, "comm": "allgather"},
            "batch_tokens": batch_tokens,
        },
        "decode": {
            "devices": decode_devices,
            "instances": 1,
            **_flat(decode_devices),
            "moe": {"ep": decode_devices, "slots_per_device": 256 // decode_devices, "comm": comm},
            "concurrency_per_device": decode_conc,
            "mtp_tokens": mtp,
        },
    }


def colocated(conc: int, mtp: int, batch_tokens: int) -> dict:
    return {
        **HEADER,
        "colocated": {
            "devices": 32,
            "instances": 1,
            **_flat(32),
            "moe": {"ep": 32, "slots_per_device": 8, "comm": "alltoall"},
            "concurrency_per_device": conc,
            "mtp_tokens": mtp,
            "prefill_batch_tokens": batch_tokens,
        },
    }


FIT = {
    "pd-c8-mtp0": pd(8, 0, 8192),
    "pd-c64-mtp1": pd(64, 1, 16384),
    "pd-c32-mtp1-allgather": pd(32, 1, 32768, "allgather"),
    "colo-c16-mtp1": colocated(16, 1, 16384),
    "pd-c48-mtp0": pd(48, 0, 16384),
}
HELD_OUT = {
    "pd-c24-mtp1": pd(24, 1, 8192),
    "pd-c72-mtp1-allgather": pd(72, 1, 16384, "allgather"),
    "colo-c32-mtp0": colocated(32, 0, 8192),
}
WRITERS = ("vllm", "sglang", "aisbench")


def figures(plan: Plan, hw: HardwareSpec) -> dict[str, float]:
    """The figures a benchmark of the plan measures: TPOT and TTFT (and tokens/s per card)."""
    specs = load_plan_specs(plan, None)
    pred = evaluate_plan(plan, specs=PlanSpecs(specs.model, hw, specs.quant))
    block = "colocated" if plan.is_colocated else None
    tpot = metric_value(pred, f"{block or 'decode'}.tpot_ms")
    ttft = metric_value(pred, f"{block or 'prefill'}.ttft_ms")
    per_card = metric_value(pred, "system.output_tokens_per_s_per_card")
    rate = metric_value(pred, "system.requests_per_s")
    return {"tpot_ms": tpot, "ttft_ms": ttft, "output_tokens_per_s_per_card": per_card, "requests_per_s": rate}


def write_runs(folder: Path, truth: HardwareSpec, noise: float) -> list[str]:
    """The FIT plans and their result files; returns the PLAN=RESULT pairs."""
    pairs = []
    for i, (name, doc) in enumerate(FIT.items()):
        plan = Plan.model_validate(doc)
        f = figures(plan, truth)
        sign = (-1) ** i
        section = plan.colocated if plan.is_colocated else plan.decode
        mtp = section.mtp_tokens if section is not None else 0
        writer = WRITERS[i % len(WRITERS)]
        # vLLM and SGLang runs at the plan's rate (their TTFT is fitted too), AISBench's a closed loop
        rate = f["requests_per_s"] if writer != "aisbench" else None
        run = simulated_run(
            plan.model, WORKLOAD["input_tokens"], WORKLOAD["output_tokens"], decode_slots(plan),
            f["ttft_ms"] * (1 + noise * sign), f["tpot_ms"] * (1 - noise * sign),
            emitted_tokens_per_step(mtp, WORKLOAD["mtp_acceptance"]), RECORDS, spread=0.05, rate_per_s=rate,
        )  # fmt: skip
        plan_path = folder / f"{name}.json"
        plan_path.write_text(json.dumps(doc))
        if writer == "vllm":
            result = folder / f"{name}-vllm.json"
            write_vllm(result, run)
        elif writer == "sglang":
            result = folder / f"{name}-sglang.jsonl"
            write_sglang(result, run)
        else:
            result = write_aisbench(folder / f"{name}-ais" / "performances" / "moeplan", run)
        pairs.append(f"{plan_path}={result}")
    return pairs


def simulator_runs(folder: Path, truth: HardwareSpec) -> list[str]:
    """The FIT plans run by `moeplan simulate` on the true machine; returns the PLAN=RESULT pairs."""
    import subprocess

    from planner.costmodel.calibration import hardware_yaml

    machine = folder / "truth-a2.yaml"
    # the true factors lie outside a2.yaml's ranges (which the file's validation checks): no range for them
    ranged = with_factors(truth, {}, {n: {"range": None} for n in TRUTH})
    machine.write_text(hardware_yaml(ranged.model_copy(update={"name": "truth-a2"}), "the true machine"))
    pairs = []
    for name, doc in FIT.items():
        plan_path, result = folder / f"{name}.json", folder / f"{name}-sim.json"
        plan_path.write_text(json.dumps({**doc, "hardware": str(machine)}))
        slots = decode_slots(Plan.model_validate(doc))
        cmd = [sys.executable, "-m", "planner", "simulate", str(plan_path), "--concurrency", str(slots),
               "--requests", str(2 * slots), "--warmup", str(slots), "--json", str(result)]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True)
        pairs.append(f"{plan_path}={result}")
    return pairs


def recover(noise: float = 0.0, log=print, simulator: bool = False) -> dict[str, float]:
    """Fit from simulated files; returns each held-out figure's relative error."""
    a2 = load_hardware("a2")
    truth = with_factors(a2, TRUTH)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = simulator_runs(Path(tmp), truth) if simulator else write_runs(Path(tmp), truth, noise)
        t0 = time.perf_counter()
        result = calibrate(read_bench(pairs, a2), a2, list(TRUTH))
        seconds = time.perf_counter() - t0
    source = "moeplan simulate" if simulator else f"noise +-{noise:.0%}, {', '.join(WRITERS)}"
    log(f"{source}: {len(pairs)} runs, {result.rows} rows, fitted in {seconds:.1f} s")
    for n, v in TRUTH.items():
        got = factor_value(result.hw, n)
        log(f"  {n:32s} true {v:.4g}  fitted {got:.4g} ({got / v - 1:+.2%})")
    errors = {}
    for name, doc in HELD_OUT.items():
        plan = Plan.model_validate(doc)
        want, got = figures(plan, truth), figures(plan, result.hw)
        for key in ("tpot_ms", "ttft_ms", "output_tokens_per_s_per_card"):
            errors[f"{name} {key}"] = got[key] / want[key] - 1
            log(f"  not seen: {name:24s} {key:30s} truth {want[key]:9.2f}  fitted {got[key]:9.2f} "
                f"({got[key] / want[key] - 1:+.2%})")  # fmt: skip
    log(f"  largest held-out error {max(abs(e) for e in errors.values()):.2%}")
    return errors


def write_docs() -> None:
    """Record the three recoveries' output in docs/calibration.md's marked block."""
    import re

    lines: list[str] = []
    for kwargs in ({"noise": 0.0}, {"noise": 0.01}, {"simulator": True}):
        recover(log=lines.append, **kwargs)  # type: ignore[arg-type]
    block = BEGIN + "\n```\n" + "\n".join(lines) + "\n```\n" + END
    text = DOCS.read_text()
    if BEGIN not in text:
        raise SystemExit(f"{DOCS}: no {BEGIN} block to write into")
    DOCS.write_text(re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S))
    print(f"wrote {DOCS}")


if __name__ == "__main__":
    if "--write-docs" in sys.argv:
        write_docs()
    elif "--simulator" in sys.argv:
        recover(simulator=True)
    else:
        recover(0.0)
        recover(0.01)
