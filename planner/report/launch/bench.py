"""`bench/` of every export: the benchmark commands of the three clients, with the plan's workload.

Each export folder gets `bench/` with one command per client, all aimed at the deployment's entry
point (the router of a disaggregated plan, port 8000; a colocated plan's load balancer) and all
running the plan's own workload: fixed prompt and completion lengths at the plan's means, a closed
loop at the plan's decode concurrency (every decode slot of every instance busy), four prompts
per slot, completions forced to full length (EOS ignored), the result saved where
`moeplan calibrate --bench PLAN=RESULT` reads it:

- `vllm_bench_serve.sh`: `vllm bench serve` (vllm/benchmarks/serve.py, 0.25.1): `--random-range-ratio 0`
  (vLLM samples lengths around the mean, ratio 0: exactly the mean), `--save-result --result-dir bench
  --result-filename vllm_bench_serve.json`;
- `sglang_bench_serving.sh`: `python -m sglang.benchmark.serving` (0.5.23; `sglang.bench_serving` is its
  deprecated alias): `--random-range-ratio 1` (SGLang samples in [ratio x len, len]), `--output-file
  bench/sglang_bench_serving.jsonl` (one JSON line appended per run);
- `aisbench_config.py` + `aisbench.sh`: AISBench (ais-bench-benchmark 3.1) `--mode perf` with a
  synthetic token-id dataset of the plan's prompt length and `max_out_len` of its completion length;
  it writes `bench/aisbench/<time>/performances/moeplan/synthetic.csv` (and `.json`).

When the plan carries its predicted figures (as every export does), `vllm_bench_serve_rate.sh` and
`sglang_bench_serving_rate.sh` run the same workload arriving at the plan's predicted request rate
(Poisson, `--request-rate R`, still at most the decode slots in flight): the runs whose TTFT
`calibrate --bench` fits (a closed loop's TTFT is mostly queueing behind the other slots' prompts).
AISBench's summary does not record its request rate, so its runs give TPOT only.

`bench/README.md` says how to run them and hand the result back.
"""

from __future__ import annotations

import shlex

from planner.engines.plan_view import decode_slots
from planner.report.launch.common import ROUTER_PORT, model_path, node_addr
from planner.specs.plan import Plan

PROMPTS_PER_SLOT = 4  # four waves of the closed loop: the first and last are partial
VLLM_RESULT = "vllm_bench_serve.json"
SGLANG_RESULT = "sglang_bench_serving.jsonl"
VLLM_RATE_RESULT = "vllm_bench_serve_rate.json"
SGLANG_RATE_RESULT = "sglang_bench_serving_rate.jsonl"
AISBENCH_DIR = "aisbench"


def _quote(word: str) -> str:
    return f'"{word}"' if word.startswith("$") else shlex.quote(word)


def _script(argv: list[str], note: str) -> str:
    """A shell script running `argv`, one flag (with its value) per line."""
    head = [a for a in argv if not a.startswith("--")][: argv.index(next(a for a in argv if a.startswith("--")))]
    rows = [" ".join(_quote(a) for a in head)]
    rest = argv[len(head) :]
    for word in rest:
        if word.startswith("--"):
            rows.append(_quote(word))
        else:
            rows[-1] += " " + _quote(word)
    lines = " \\\n  ".join(rows)
    return f'#!/bin/sh\n# {note}\nset -e\ncd "$(dirname "$0")/.."\nROUTER="${{ROUTER:-http://{node_addr(0)}:{ROUTER_PORT}}}"\n{lines}\n'


def predicted_rate(plan: Plan) -> float | None:
    """The requests per second the plan is predicted to sustain (its `predicted` block), if it has one."""
    system = (plan.predicted or {}).get("system") or {}
    rate = system.get("requests_per_s")
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def bench_commands(plan: Plan, rate: float | None = None) -> dict[str, list[str]]:
    """Each client's command line (`$ROUTER` stands for the entry point's URL). `rate`: the vLLM and
    SGLang runs arrive at that many requests per second (Poisson), still at most the decode slots in
    flight, and save to their `_rate` result files; None: a closed loop."""
    w = plan.workload
    arrival = "inf" if rate is None else f"{rate:.4g}"
    vllm_out = VLLM_RESULT if rate is None else VLLM_RATE_RESULT
    sglang_out = SGLANG_RESULT if rate is None else SGLANG_RATE_RESULT
    slots = decode_slots(plan)
    prompts = PROMPTS_PER_SLOT * slots
    tokenizer = model_path(plan)
    vllm = [
        "vllm", "bench", "serve", "--backend", "vllm", "--base-url", "$ROUTER", "--endpoint", "/v1/completions",
        "--model", plan.model, "--tokenizer", tokenizer, "--dataset-name", "random",
        "--random-input-len", str(w.input_tokens), "--random-output-len", str(w.output_tokens),
        "--random-range-ratio", "0", "--num-prompts", str(prompts), "--max-concurrency", str(slots),
        "--request-rate", arrival, "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99", "--save-result", "--result-dir", "bench",
        "--result-filename", vllm_out,
    ]  # fmt: skip
    sglang = [
        "python", "-m", "sglang.benchmark.serving", "--backend", "sglang-oai", "--base-url", "$ROUTER",
        "--model", plan.model, "--tokenizer", tokenizer, "--dataset-name", "random",
        "--random-input-len", str(w.input_tokens), "--random-output-len", str(w.output_tokens),
        "--random-range-ratio", "1", "--num-prompts", str(prompts), "--max-concurrency", str(slots),
        "--request-rate", arrival, "--output-file", f"bench/{sglang_out}",
    ]  # fmt: skip
    ais = ["ais_bench", "bench/aisbench_config.py", "--mode", "perf", "--work-dir", f"bench/{AISBENCH_DIR}",
           "--num-prompts", str(prompts)]  # fmt: skip
    return {"vllm": vllm, "sglang": sglang, "aisbench": ais}


def bench_files(plan: Plan) -> dict[str, str]:
    """The files of `bench/` (relative to the export folder)."""
    w = plan.workload
    slots = decode_slots(plan)
    prompts = PROMPTS_PER_SLOT * slots
    commands = bench_commands(plan)
    note = f"the plan's workload: {w.input_tokens} in / {w.output_tokens} out, closed loop at {slots} in flight"
    files = {
        "bench/vllm_bench_serve.sh": _script(commands["vllm"], "vllm bench serve (vLLM 0.25.1): " + note),
        "bench/sglang_bench_serving.sh": _script(commands["sglang"], "SGLang's bench_serving (0.5.23): " + note),
        "bench/aisbench.sh": _script(commands["aisbench"], "AISBench (ais-bench-benchmark 3.1): " + note),
        "bench/aisbench_config.py": _aisbench_config(plan, slots, prompts),
    }
    rate = predicted_rate(plan)
    if rate is not None:
        timed = bench_commands(plan, rate)
        note = f"the plan's workload at its predicted {rate:.4g} requests/s (at most {slots} in flight)"
        files["bench/vllm_bench_serve_rate.sh"] = _script(timed["vllm"], "vllm bench serve (vLLM 0.25.1): " + note)
        files["bench/sglang_bench_serving_rate.sh"] = _script(
            timed["sglang"], "SGLang's bench_serving (0.5.23): " + note
        )
    files["bench/README.md"] = _readme(plan, slots, prompts, rate)
    return files


def _aisbench_config(plan: Plan, slots: int, prompts: int) -> str:
    w = plan.workload
    return f'''"""AISBench configuration for this plan (ais-bench-benchmark 3.1).

Run it with `ais_bench bench/aisbench_config.py --mode perf` (bench/aisbench.sh).

The dataset is AISBench's synthetic token-id set ({w.input_tokens}-token prompts, {prompts} requests); the model entry
is its OpenAI-compatible streaming client (VLLMCustomAPIChat) at the deployment's entry point with
{slots} requests in flight (batch_size) and {w.output_tokens}-token completions (ignore_eos). Set ROUTER_HOST /
ROUTER_PORT in the environment, and TOKENIZER to a local copy of the model's tokenizer.
"""

import os

from ais_bench.benchmark.datasets import MATHEvaluator, SyntheticDataset, math_postprocess_v2
from ais_bench.benchmark.models import VLLMCustomAPIChat
from ais_bench.benchmark.openicl.icl_inferencer import GenInferencer
from ais_bench.benchmark.openicl.icl_prompt_template import PromptTemplate
from ais_bench.benchmark.openicl.icl_retriever import ZeroRetriever

TOKENIZER = os.environ.get("TOKENIZER", {model_path(plan)!r})

synthetic_config = {{
    "Type": "tokenid",
    "RequestCount": {prompts},
    "TrustRemoteCode": False,
    "StringConfig": {{
        "Input": {{"Method": "uniform", "Params": {{"MinValue": {w.input_tokens}, "MaxValue": {w.input_tokens}}}}},
        "Output": {{"Method": "uniform", "Params": {{"MinValue": {w.output_tokens}, "MaxValue": {w.output_tokens}}}}},
    }},
    "TokenIdConfig": {{"RequestSize": {w.input_tokens}, "PrefixLen": 0}},
}}

datasets = [
    dict(
        abbr="synthetic",
        type=SyntheticDataset,
        config=synthetic_config,
        path=TOKENIZER,
        reader_cfg=dict(input_columns=["question", "max_out_len"], output_column="answer"),
        infer_cfg=dict(
            prompt_template=dict(type=PromptTemplate, template="{{question}}"),
            retriever=dict(type=ZeroRetriever),
            inferencer=dict(type=GenInferencer),
        ),
        eval_cfg=dict(
            evaluator=dict(type=MATHEvaluator, version="v2"), pred_postprocessor=dict(type=math_postprocess_v2)
        ),
    )
]

models = [
    dict(
        attr="service",
        type=VLLMCustomAPIChat,
        abbr="moeplan",
        path=TOKENIZER,
        model={plan.model!r},
        stream=True,
        request_rate=0,
        retry=2,
        host_ip=os.environ.get("ROUTER_HOST", "{node_addr(0)}"),
        host_port=int(os.environ.get("ROUTER_PORT", "{ROUTER_PORT}")),
        max_out_len={w.output_tokens},
        batch_size={slots},
        trust_remote_code=False,
        generation_kwargs=dict(temperature=0.01, ignore_eos=True),
    )
]
'''


def _readme(plan: Plan, slots: int, prompts: int, rate: float | None) -> str:
    w = plan.workload
    lengths = (
        "\nThe plan's workload has a length histogram; these commands use its mean lengths (a closer match needs a "
        "custom dataset).\n"
        if w.lengths
        else ""
    )
    timed = (
        f"`vllm_bench_serve_rate.sh` and `sglang_bench_serving_rate.sh` run the same workload arriving at the plan's "
        f"predicted {rate:.4g} requests/s (Poisson, still at most {slots} in flight) into `bench/{VLLM_RATE_RESULT}` "
        f"and `bench/{SGLANG_RATE_RESULT}`; hand those in too, and the TTFT is fitted as well.\n\n"
        if rate is not None
        else "This plan carries no predicted system request rate (a decode-only plan has no TTFT to measure), so "
        "there is no run at a rate here: its runs give TPOT only.\n\n"
    )
    also = f" \\\n    --bench plan.json=bench/{VLLM_RATE_RESULT}" if rate is not None else ""
    return f"""# Benchmarking this plan, and handing the result back to moeplan

The plan predicts its figures for {w.input_tokens}-token prompts and {w.output_tokens}-token completions with
{slots} sequences in flight (every decode slot busy). Each command here runs exactly that against the
deployment's entry point: a closed loop of {slots} concurrent requests, {prompts} prompts (four per slot),
fixed lengths, completions forced to full length. Start the deployment (`../launch.json`), then run one of:

| client | command | result file (what `moeplan calibrate --bench` reads) |
|---|---|---|
| vLLM | `sh bench/vllm_bench_serve.sh` | `bench/{VLLM_RESULT}` (`vllm bench serve --save-result`) |
| SGLang | `sh bench/sglang_bench_serving.sh` | `bench/{SGLANG_RESULT}` (one JSON line per run) |
| AISBench | `sh bench/aisbench.sh` | `bench/{AISBENCH_DIR}/<time>/performances/moeplan/synthetic.csv` |

from the export folder. `ROUTER` (default `http://{node_addr(0)}:{ROUTER_PORT}`) is the router of a disaggregated
plan (launch.json's `router` process) or the load balancer in front of a colocated plan's instances; replace
`{node_addr(0)}` with its address. `--tokenizer` (AISBench: `TOKENIZER`) should name a local copy of the model's
tokenizer. Any client works against any engine's OpenAI-compatible entry point.
{lengths}
Then fit the machine to what was measured and plan again on it:

```
moeplan calibrate --bench plan.json=bench/{VLLM_RESULT}{also} --hardware {plan.hardware} --out my-{plan.hardware}.yaml
moeplan plan --hardware my-{plan.hardware}.yaml
```

{timed}Several runs (of different plans) fit better:
`--bench a/plan.json=a/bench/{VLLM_RESULT} --bench b/plan.json=b/bench/{SGLANG_RESULT} ...`. Every run's mean TPOT
is compared with the plan's decode (or colocated) TPOT; the mean TTFT only from a run at a request rate (a closed
loop's TTFT is mostly the wait behind the other slots' prompts, which the plan's TTFT does not model). A run whose
lengths or concurrency differ from the plan's is refused (it measured another workload), and a measured MTP
acceptance replaces the plan's.
"""
