"""Benchmark result files in each client's own format, from simulated per-request records.

Used by benchmarks/calibrate_bench_recovery.py and tests/costmodel/test_bench_calibration.py to
test `moeplan calibrate --bench` on files the clients would write. The per-request records come
from the static cost model (every request of the closed loop gets the plan's predicted TTFT and
TPOT, and emits its completion in decode steps of `tokens_per_step` tokens); the issue-19
simulator was not on main when this was written. Each writer computes the summary fields from the
records the way the client does and writes them field for field, in the client's order:

- `write_vllm`: vllm/benchmarks/serve.py (vLLM 0.25.1) `calculate_metrics` + the `result_json` of
  `main` (`json.dump` of one object): date ... max_concurrency, then the benchmark's result dict,
  then mean/median/std/pNN of ttft, tpot, itl, e2el (TPOT = (latency - TTFT) / (output - 1));
- `write_sglang`: sglang/benchmark/serving.py (0.5.23) `result` (one `json.dumps` line appended);
- `write_aisbench`: ais_bench calculators (3.1): `<dataset>.csv` (Performance Parameters, Stage, Average,
  Min, Max, Median, P75, P90, P99, N; ms and token/s units) and `<dataset>.json` (common metrics).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Run:
    """A closed-loop run: its configuration and per-request records (seconds)."""

    model: str
    input_len: int
    output_len: int
    concurrency: int
    ttft_s: list[float]
    tpot_s: list[float]
    tokens_per_step: float  # mean tokens per decode step (1 without speculative decoding)
    rate_per_s: float | None = None  # the client's --request-rate (None: inf, a closed loop)

    @property
    def n(self) -> int:
        return len(self.ttft_s)

    def itls(self, i: int) -> list[float]:
        """Gaps between streamed chunks: one chunk per decode step of `tokens_per_step` tokens."""
        steps = max(1, round((self.output_len - 1) / self.tokens_per_step))
        gap = self.tpot_s[i] * (self.output_len - 1) / steps
        return [gap] * steps

    def latency(self, i: int) -> float:
        return self.ttft_s[i] + self.tpot_s[i] * (self.output_len - 1)

    def duration(self) -> float:
        """Closed loop: `concurrency` requests at a time, back to back."""
        waves = -(-self.n // self.concurrency)
        return waves * max(self.latency(i) for i in range(self.n))


def simulated_run(model: str, input_len: int, output_len: int, concurrency: int, ttft_ms: float, tpot_ms: float,
                  tokens_per_step: float, requests: int, spread: float = 0.0,
                  rate_per_s: float | None = None) -> Run:  # fmt: skip
    """`requests` records around the predicted means (+-spread, deterministic, mean preserved)."""
    k = np.linspace(-1, 1, requests) if requests > 1 else np.zeros(1)
    ttft = (ttft_ms / 1e3 * (1 + spread * k)).tolist()
    tpot = (tpot_ms / 1e3 * (1 + spread * k[::-1])).tolist()
    return Run(model, input_len, output_len, concurrency, ttft, tpot, tokens_per_step, rate_per_s)


def _stats(values: list[float], percentiles: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    arr = np.array(values or [0.0]) * 1000
    out = {"mean": float(arr.mean()), "median": float(np.median(arr)), "std": float(arr.std())}
    out.update({f"p{p}": float(np.percentile(arr, p)) for p in percentiles})
    return out


def write_vllm(path: Path, run: Run) -> None:
    """What `vllm bench serve --save-result --result-filename` writes."""
    outs = [run.output_len] * run.n
    latencies = [run.latency(i) for i in range(run.n)]
    tpots = [(latencies[i] - run.ttft_s[i]) / (outs[i] - 1) for i in range(run.n)]
    itls = [run.itls(i) for i in range(run.n)]
    duration = run.duration()
    doc: dict = {
        "date": "20261201-120000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": run.model,
        "tokenizer_id": run.model,
        "num_prompts": run.n,
        "request_rate": run.rate_per_s if run.rate_per_s is not None else "inf",
        "burstiness": 1.0,
        "max_concurrency": run.concurrency,
        "duration": duration,
        "completed": run.n,
        "failed": 0,
        "total_input_tokens": run.input_len * run.n,
        "total_output_tokens": sum(outs),
        "request_throughput": run.n / duration,
        "request_goodput": None,
        "output_throughput": sum(outs) / duration,
        "total_token_throughput": (run.input_len * run.n + sum(outs)) / duration,
        "input_lens": [run.input_len] * run.n,
        "output_lens": outs,
        "ttfts": run.ttft_s,
        "itls": itls,
        "start_times": [0.0] * run.n,
        "generated_texts": [""] * run.n,
        "errors": [""] * run.n,
        "max_output_tokens_per_s": run.concurrency / min(min(x) for x in itls) * run.tokens_per_step,
        "max_concurrent_requests": run.concurrency,
        "rtfx": 0.0,
    }
    if run.tokens_per_step > 1:
        steps = sum(len(x) for x in itls)
        accepted = sum(outs) - run.n - steps  # tokens beyond one per step (the first token is the prefill's)
        doc["spec_decode_acceptance_rate"] = None  # set below from drafts
        doc["spec_decode_acceptance_length"] = 1 + accepted / steps
        doc["spec_decode_num_drafts"] = steps
        doc["spec_decode_draft_tokens"] = steps
        doc["spec_decode_accepted_tokens"] = accepted
        doc["spec_decode_acceptance_rate"] = accepted / steps * 100
        doc["spec_decode_per_position_acceptance_rates"] = [accepted / steps]
    for name, values in (("ttft", run.ttft_s), ("tpot", tpots), ("itl", [g for x in itls for g in x]),
                         ("e2el", latencies)):  # fmt: skip
        s = _stats(values)
        doc[f"mean_{name}_ms"], doc[f"median_{name}_ms"], doc[f"std_{name}_ms"] = s["mean"], s["median"], s["std"]
        for p in (50, 90, 99):
            doc[f"p{p}_{name}_ms"] = s[f"p{p}"]
    path.write_text(json.dumps(doc))


def write_sglang(path: Path, run: Run) -> None:
    """One line of `python -m sglang.benchmark.serving --output-file` (appended)."""
    outs = [run.output_len] * run.n
    latencies = [run.latency(i) for i in range(run.n)]
    tpots = [(latencies[i] - run.ttft_s[i]) / (outs[i] - 1) for i in range(run.n)]
    itls = [g for i in range(run.n) for g in run.itls(i)]
    duration = run.duration()
    result: dict = {
        "tag": None,
        "backend": "sglang-oai",
        "dataset_name": "random",
        "request_rate": run.rate_per_s if run.rate_per_s is not None else float("inf"),
        "max_concurrency": run.concurrency,
        "sharegpt_output_len": None,
        "random_input_len": run.input_len,
        "random_output_len": run.output_len,
        "random_range_ratio": 1.0,
        "server_info": None,
        "duration": duration,
        "completed": run.n,
        "total_input_tokens": run.input_len * run.n,
        "total_input_text_tokens": run.input_len * run.n,
        "total_input_vision_tokens": 0,
        "total_output_tokens": sum(outs),
        "total_output_tokens_retokenized": sum(outs),
        "request_throughput": run.n / duration,
        "input_throughput": run.input_len * run.n / duration,
        "output_throughput": sum(outs) / duration,
        "total_throughput": (run.input_len * run.n + sum(outs)) / duration,
    }
    for name, values in (("e2e_latency", latencies), ("ttft", run.ttft_s), ("tpot", tpots), ("itl", itls)):
        s = _stats(values, (90, 95, 99))
        result[f"mean_{name}_ms"], result[f"median_{name}_ms"], result[f"std_{name}_ms"] = (
            s["mean"], s["median"], s["std"],
        )  # fmt: skip
        for p in (90, 95, 99):
            result[f"p{p}_{name}_ms"] = s[f"p{p}"]
    result["concurrency"] = sum(latencies) / duration
    result["accept_length"] = run.tokens_per_step if run.tokens_per_step > 1 else None
    result["max_output_tokens_per_s"] = run.concurrency * run.tokens_per_step / min(itls)
    result["max_concurrent_requests"] = run.concurrency
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")


def write_aisbench(folder: Path, run: Run, dataset: str = "synthetic") -> Path:
    """AISBench's performances/<model>/<dataset>.csv and .json; returns the CSV's path."""
    folder.mkdir(parents=True, exist_ok=True)
    outs = [run.output_len] * run.n
    latencies = [run.latency(i) for i in range(run.n)]
    tpots = [(latencies[i] - run.ttft_s[i]) / (outs[i] - 1) for i in range(run.n)]
    speed = [outs[i] / latencies[i] for i in range(run.n)]
    metrics = {
        "E2EL": (latencies, " ms", 1000),
        "TTFT": (run.ttft_s, " ms", 1000),
        "TPOT": (tpots, " ms", 1000),
        "ITL": ([g for i in range(run.n) for g in run.itls(i)], " ms", 1000),
        "InputTokens": ([run.input_len] * run.n, "", 1),
        "OutputTokens": (outs, "", 1),
        "OutputTokenThroughput": (speed, " token/s", 1),
    }
    header = ["Average", "Min", "Max", "Median", "P75", "P90", "P99", "N"]
    path = folder / f"{dataset}.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Performance Parameters", "Stage", *header])
        for name, (values, unit, scale) in metrics.items():
            arr = np.array(values, dtype=float)
            stats = [arr.mean(), arr.min(), arr.max(), np.percentile(arr, 50), np.percentile(arr, 75),
                     np.percentile(arr, 90), np.percentile(arr, 99)]  # fmt: skip
            cells = [f"{round(float(v) * scale, 4)}{unit}" if unit else str(round(float(v), 4)) for v in stats]
            w.writerow([name, "total", *cells, str(run.n)])
    duration = run.duration()
    common = {
        "Benchmark Duration": {"total": f"{round(duration * 1000, 4)} ms"},
        "Total Requests": {"total": run.n},
        "Failed Requests": {"total": 0},
        "Success Requests": {"total": run.n},
        "Concurrency": {"total": round(sum(latencies) / duration, 4)},
        "Max Concurrency": {"total": run.concurrency},
        "Request Throughput": {"total": f"{round(run.n / duration, 4)} req/s"},
        "Total Input Tokens": {"total": run.input_len * run.n},
        "Prefill Token Throughput": {"total": f"{round(run.input_len * run.n / sum(run.ttft_s), 4)} token/s"},
        "Total Generated Tokens": {"total": sum(outs)},
        "Input Token Throughput": {"total": f"{round(run.input_len * run.n / duration, 4)} token/s"},
        "Output Token Throughput": {"total": f"{round(sum(outs) / duration, 4)} token/s"},
        "Total Token Throughput": {"total": f"{round((run.input_len * run.n + sum(outs)) / duration, 4)} token/s"},
    }
    (folder / f"{dataset}.json").write_text(json.dumps(common, indent=4, ensure_ascii=False))
    return path
