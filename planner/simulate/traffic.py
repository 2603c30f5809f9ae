"""The requests a benchmark client sends: their lengths and when each becomes ready to send.

Lengths come from one of:
- the plan's workload: its (input, output) pair, or its `lengths` bins drawn by weight;
- a `--workload FILE` (pairs or a histogram, `planner.specs.workload.WorkloadFile`), drawn by weight;
- the benchmark clients' random dataset with a range ratio r, as each client draws it:
  `vllm bench serve --dataset-name random` (vllm/benchmarks/datasets/random.py, `RandomDataset.
  get_sampling_params`): integers uniform on [floor(L (1 - r)), ceil(L (1 + r))], r in [0, 1),
  the output's low end at least 1; SGLang's `bench_serving` (python/sglang/benchmark/datasets/
  common.py, `compute_random_lens`): integers uniform on [max(int(L r), 1), L], so r = 1 is the
  fixed length L (what SGLang's Ascend best-practice runs use) and r = 0 draws from [1, L];
- a trace (`planner.simulate.tracefile`): arrival time, input and output tokens per request.

When requests become ready (`ready_s`): all at once for a closed loop (the client holds them and
sends one whenever a slot of its `--concurrency` frees, as `--max-concurrency` does), or, at a
rate R, spaced as `vllm bench serve` spaces them (vllm/benchmarks/serve.py, `get_request`): gaps
drawn from a gamma distribution of shape `burstiness` and scale 1 / (R burstiness) (burstiness 1:
exponential gaps, a Poisson process), then all gaps rescaled so that the last request is ready at
N / R exactly, as vLLM does to steady the throughput across seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import BadInputError
from planner.specs.workload import LengthBin

RANDOM_CONVENTIONS = ("vllm", "sglang")


@dataclass(frozen=True)
class Requests:
    """N requests: input and output tokens, and when the client has each ready to send (seconds)."""

    input_tokens: np.ndarray
    output_tokens: np.ndarray
    ready_s: np.ndarray
    lengths_source: str

    @property
    def count(self) -> int:
        """Number of requests."""
        return int(self.input_tokens.size)


def lengths_from_bins(bins: list[LengthBin], count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`count` (input, output) pairs drawn by the bins' weights (one bin: all of its shape)."""
    inp = np.array([b.input_tokens for b in bins], dtype=np.int64)
    out = np.array([b.output_tokens for b in bins], dtype=np.int64)
    if len(bins) == 1:
        return np.full(count, inp[0]), np.full(count, out[0])
    weights = np.array([b.weight for b in bins], dtype=float)
    pick = rng.choice(len(bins), size=count, p=weights / weights.sum())
    return inp[pick], out[pick]


def check_random_dataset(range_ratio: float, convention: str) -> None:
    """Refuse a range ratio or convention the random dataset cannot draw by (errors name the flag)."""
    if convention not in RANDOM_CONVENTIONS:
        raise BadInputError(f"--random-convention: '{convention}' is not one of {', '.join(RANDOM_CONVENTIONS)}.")
    if convention == "vllm" and not 0.0 <= range_ratio < 1.0:
        raise BadInputError(
            f"--random-range-ratio {range_ratio:g}: vLLM's random dataset takes a ratio in [0, 1); "
            "give one there, or --random-convention sglang (whose 1 means fixed lengths)."
        )
    if convention == "sglang" and not 0.0 <= range_ratio <= 1.0:
        raise BadInputError(f"--random-range-ratio {range_ratio:g}: SGLang's random dataset takes a ratio in [0, 1].")


def random_dataset_lengths(
    input_len: int, output_len: int, range_ratio: float, convention: str, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Lengths as `vllm bench serve` or SGLang's `bench_serving` random dataset draws them (module docstring)."""
    check_random_dataset(range_ratio, convention)
    if convention == "vllm":
        lo_in, hi_in = math.floor(input_len * (1 - range_ratio)), math.ceil(input_len * (1 + range_ratio))
        lo_out, hi_out = math.floor(output_len * (1 - range_ratio)), math.ceil(output_len * (1 + range_ratio))
        lo_in, lo_out = max(lo_in, 1), max(lo_out, 1)
    else:
        lo_in, hi_in = max(int(input_len * range_ratio), 1), input_len
        lo_out, hi_out = max(int(output_len * range_ratio), 1), output_len
    return rng.integers(lo_in, hi_in + 1, size=count), rng.integers(lo_out, hi_out + 1, size=count)


def arrival_times(count: int, rate_per_s: float | None, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """When each of `count` requests is ready: 0 for all (no rate), else vLLM's gamma-spaced schedule."""
    if rate_per_s is None or math.isinf(rate_per_s):
        return np.zeros(count)
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise BadInputError(f"--rate must be a finite number of requests per second > 0; got {rate_per_s:g}.")
    if not (burstiness > 0 and math.isfinite(burstiness) or burstiness == math.inf):
        raise BadInputError(f"--burstiness must be > 0 (1: Poisson arrivals); got {burstiness:g}.")
    if math.isinf(burstiness):
        gaps = np.full(count, 1.0 / rate_per_s)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate_per_s * burstiness), size=count)
    ready = np.cumsum(gaps)
    if ready[-1] > 0:  # vLLM rescales so the last request is ready at N / R
        ready *= (count / rate_per_s) / ready[-1]
    return ready
