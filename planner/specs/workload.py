"""The workload of a plan: request lengths (one pair, or a distribution), MTP acceptance, prefix hits.

`input_tokens`/`output_tokens` alone describe requests all of one shape. With `lengths` (a list of
(input, output, weight) bins: the pairs of a trace, or a histogram) they are the weighted means,
filled in when left out; the cost model then uses the distribution itself where the mean would
mislead (`LengthStats`):

- decode: a sequence stays in the KV pool for its whole completion, so the pool is weighted by
  output length: the mean context a step attends to is E[out * (in + out/2)] / E[out], and its
  spread (which sets the 2-sigma KV margin and the DP straggler) comes from the same weighting.
  The longest request (in + out) must fit its device's KV next to the others.
- prefill: causal attention over a mixed batch costs E[in^2] / E[in] per token, not E[in].
- TTFT is judged at `slo_percentile` of the prompt lengths (default p90): its KV transfer is that
  prompt's, and prefill batches are sized to hold such a prompt whole.

`prefix_hit_rate`: the fraction of input tokens found in a prefix cache. Hits skip prefill
compute (only the rest of each prompt is computed, attending to the whole prompt) but still
occupy KV on both sides and are still sent to decode. DeepSeek reports 56.3% of its V3/R1
input tokens hit its on-disk KV cache over 24 h (deepseek-ai/open-infra-index,
202502OpenSourceWeek/day_6_one_more_thing_deepseekV3R1_inference_system_overview.md).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from planner.specs.hardware import Strict

MAX_LENGTH_BINS = 100_000
MAX_TOKENS = 100_000_000
DEFAULT_SLO_PERCENTILE = 90.0


class LengthBin(Strict):
    """Requests of one (input, output) shape, and their share (a count or a fraction)."""

    input_tokens: int = Field(ge=1, le=MAX_TOKENS)
    output_tokens: int = Field(ge=1, le=MAX_TOKENS)
    weight: float = Field(default=1.0, gt=0, le=1e15, allow_inf_nan=False)


class LengthStats:
    """Moments and percentiles of a length distribution, as the cost model uses them."""

    def __init__(self, bins: list[tuple[int, int, float]]) -> None:
        total = sum(w for _, _, w in bins)
        self.mean_input = sum(i * w for i, _, w in bins) / total
        self.mean_output = sum(o * w for _, o, w in bins) / total
        self.input_second_moment = sum(i * i * w for i, _, w in bins) / total
        # decode pool: each request present for `out` steps at a uniform position of its completion
        time_w = sum(o * w for _, o, w in bins)
        self.decode_context_mean = sum(o * w * (i + o / 2.0) for i, o, w in bins) / time_w
        second = sum(o * w * (i * i + i * o + o * o / 3.0) for i, o, w in bins) / time_w
        self.decode_context_std = math.sqrt(max(0.0, second - self.decode_context_mean**2))
        self.longest_context = max(i + o for i, o, _ in bins)
        self._inputs = sorted((i, w / total) for i, _, w in bins)

    def input_percentile(self, pct: float) -> int:
        """Prompt length at `pct` percent of requests (the smallest length covering that share)."""
        acc = 0.0
        for length, share in self._inputs:
            acc += share
            if acc * 100.0 >= pct - 1e-9:
                return length
        return self._inputs[-1][0]


@lru_cache(maxsize=64)
def _stats(bins: tuple[tuple[int, int, float], ...]) -> LengthStats:
    return LengthStats(list(bins))


class Workload(Strict):
    """Request shape: lengths (or their distribution), MTP acceptance, prefix-cache hits."""

    input_tokens: int = Field(ge=1, le=MAX_TOKENS, description="prompt tokens (the mean with `lengths`)")
    output_tokens: int = Field(ge=1, le=MAX_TOKENS, description="completion tokens (the mean with `lengths`)")
    mtp_acceptance: float = Field(default=0.7, ge=0, le=1, allow_inf_nan=False)
    prefix_hit_rate: float | None = Field(
        default=None, ge=0, lt=1, allow_inf_nan=False, description="share of input tokens found in a prefix cache"
    )
    lengths: list[LengthBin] | None = Field(
        default=None, min_length=1, max_length=MAX_LENGTH_BINS, description="(input, output, weight) bins"
    )
    slo_percentile: float | None = Field(
        default=None,
        gt=0,
        le=100,
        allow_inf_nan=False,
        description=f"prompt-length percentile the TTFT SLO is judged at (default {DEFAULT_SLO_PERCENTILE:g})",
    )

    @model_validator(mode="before")
    @classmethod
    def _means_from_lengths(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and data.get("lengths")
            and ("input_tokens" not in data or "output_tokens" not in data)
        ):
            try:
                bins = [LengthBin.model_validate(b) for b in data["lengths"]]
            except Exception:
                return data  # the field validation reports it
            stats = LengthStats([(b.input_tokens, b.output_tokens, b.weight) for b in bins])
            data = {
                **data,
                "input_tokens": data.get("input_tokens", max(1, round(stats.mean_input))),
                "output_tokens": data.get("output_tokens", max(1, round(stats.mean_output))),
            }
        return data

    @model_validator(mode="after")
    def _means_match(self) -> Workload:
        if self.lengths:
            s = self.stats
            for name, mean in (("input_tokens", s.mean_input), ("output_tokens", s.mean_output)):
                if abs(getattr(self, name) - mean) > 0.5 + 1e-9:
                    raise ValueError(
                        f"{name} = {getattr(self, name)} is not the mean of 'lengths' ({mean:.1f}); leave {name} "
                        "out (it is filled in) or make it the weighted mean"
                    )
        return self

    @property
    def stats(self) -> LengthStats:
        """The distribution's moments (one bin of the means when no `lengths` are given).

        Memoised by value, not on the instance: `model_copy(update=...)` copies an instance's
        attributes, so a cache kept there would go stale."""
        if self.lengths:
            return _stats(tuple((b.input_tokens, b.output_tokens, b.weight) for b in self.lengths))
        return _stats(((self.input_tokens, self.output_tokens, 1.0),))

    @property
    def has_distribution(self) -> bool:
        """True when the workload carries a length distribution."""
        return bool(self.lengths) and len(self.lengths) > 1  # type: ignore[arg-type]

    @property
    def hit_rate(self) -> float:
        """Share of input tokens served from the prefix cache (0 when not given)."""
        return self.prefix_hit_rate or 0.0

    @property
    def ttft_percentile(self) -> float:
        """Percentile of prompt lengths the TTFT SLO is judged at."""
        return self.slo_percentile if self.slo_percentile is not None else DEFAULT_SLO_PERCENTILE

    @property
    def tpot_percentile(self) -> float:
        """Percentile of requests a request's own TPOT is read at (the TTFT's share: one --slo-percentile)."""
        return self.ttft_percentile

    @property
    def longest_context_tokens(self) -> int:
        """Prompt plus completion of the longest request."""
        return self.stats.longest_context

    @property
    def slo_input_tokens(self) -> int:
        """Prompt length at the SLO percentile (the plain prompt length without a distribution)."""
        return self.stats.input_percentile(self.ttft_percentile) if self.has_distribution else self.input_tokens


class WorkloadFile(Strict):
    """A `--workload FILE`: the (input, output) pairs of a trace, or a histogram of them."""

    pairs: list[tuple[int, int]] | None = Field(
        default=None, min_length=1, max_length=10_000_000, description="one [input, output] per request"
    )
    histogram: list[LengthBin] | None = Field(default=None, min_length=1, max_length=MAX_LENGTH_BINS)
    prefix_hit_rate: float | None = Field(default=None, ge=0, lt=1, allow_inf_nan=False)
    slo_percentile: float | None = Field(default=None, gt=0, le=100, allow_inf_nan=False)
    source: str = Field(default="", description="where the lengths come from")

    @model_validator(mode="after")
    def _one_form(self) -> WorkloadFile:
        if (self.pairs is None) == (self.histogram is None):
            raise ValueError("give either 'pairs' ([[input, output], ...]) or 'histogram' (bins with weights)")
        for k, (i, o) in enumerate(self.pairs or []):
            if not (1 <= i <= MAX_TOKENS and 1 <= o <= MAX_TOKENS):
                raise ValueError(f"pairs[{k}] = [{i}, {o}]: lengths must be between 1 and {MAX_TOKENS:,} tokens")
        return self

    def bins(self) -> list[LengthBin]:
        """The lengths as bins (pairs: identical pairs merged, then geometric bins if too many)."""
        if self.histogram is not None:
            return self.histogram
        counts: dict[tuple[int, int], float] = {}
        for pair in self.pairs or []:
            counts[pair] = counts.get(pair, 0.0) + 1.0
        if len(counts) > PAIR_BINS:
            counts = _geometric_bins(counts)
        return [LengthBin(input_tokens=i, output_tokens=o, weight=w) for (i, o), w in sorted(counts.items())]


PAIR_BINS = 4096  # distinct pairs kept as they are; more are merged into 1/8-octave bins
_BIN_STEPS_PER_OCTAVE = 8


def _geometric_bins(counts: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """Merge pairs into 1/8-octave bins of both lengths; each bin at its members' weighted means."""
    acc: dict[tuple[int, int], list[float]] = {}
    for (i, o), w in counts.items():
        key = (int(math.log2(i) * _BIN_STEPS_PER_OCTAVE), int(math.log2(o) * _BIN_STEPS_PER_OCTAVE))
        a = acc.setdefault(key, [0.0, 0.0, 0.0])
        a[0] += w
        a[1] += w * i
        a[2] += w * o
    out: dict[tuple[int, int], float] = {}
    for w, wi, wo in acc.values():
        pair = (max(1, round(wi / w)), max(1, round(wo / w)))
        out[pair] = out.get(pair, 0.0) + w
    return out


def load_workload_file(path: Path) -> WorkloadFile:
    """Read a `--workload` YAML/JSON file (a top-level list is read as pairs)."""
    import yaml

    from planner.specs.files import load_yaml, parse_mapping, read_text, validate_model

    text = read_text(path, "workload")
    try:
        data: Any = load_yaml(text)
    except yaml.YAMLError:
        data = None
    data = {"pairs": data} if isinstance(data, list) else parse_mapping(text, str(path), "workload")
    return validate_model(WorkloadFile, data, str(path), "workload", text)
