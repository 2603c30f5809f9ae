"""How many decode steps a sequence needs for its remaining tokens, with MTP acceptance drawn per step.

Each step a sequence generates X = 1 + J tokens, J its accepted drafts out of k: a draft counts only
if every earlier one of the step was accepted, so P(J >= m) = a^m for m <= k (the cost model's
`emitted_tokens_per_step` is E[X]). The steps to generate R tokens are the renewal count
S = min{n : X_1 + ... + X_n >= R}. It is drawn once, when the sequence is admitted: exactly (the X
drawn one by one) for R up to `EXACT_TOKENS`, and for longer outputs from its normal limit (the
renewal central limit theorem: mean R / E[X], variance R Var[X] / E[X]^3), rounded up and kept
within [R / (1 + k), R]. Drawing S instead of every step's X lets a step cost what its ranks cost,
not what its thousands of sequences cost; the distribution of each request's steps (and so of
its TPOT) is the same.

Acceptance also differs from request to request: what a request generates sets how well the draft
head guesses it. The measured runs show it: SGLang's single-wave DeepSeek-R1 runs on A3 (32
requests decoding in the same synchronous steps, MTP 3 drafts) report a P99 TPOT 17-27% above the
median, where draws that differ only step by step give about 3%, and the one run there without
speculation (Qwen3-480B) 2%. So a request draws its own acceptance, logit-normal about the
workload's: logit(a_i) = logit(a) + tau z_i (`request_steps_scale`), and its steps scale by
E[X | a] / E[X | a_i], normalised so that the mean steps per token, and so the mean TPOT, stay
the cost model's (the workload's acceptance is the run's, a mean over its steps). `tau` is fitted
on measured runs by benchmarks/fit_acceptance_spread.py and shipped in
planner/simulate/data/acceptance_spread.json (`default_acceptance_spread`), with the runs it was
fitted on; the CLI's `--acceptance-spread` overrides it.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

EXACT_TOKENS = 64
SPREAD_FILE = Path(__file__).parent / "data" / "acceptance_spread.json"
QUADRATURE_POINTS = 48  # Gauss-Hermite points for the normalising mean (exact to far below a step)


def step_moments(mtp_tokens: int, acceptance: float) -> tuple[float, float]:
    """(E[X], Var[X]) of the tokens one step generates."""
    a, k = acceptance, mtp_tokens
    mean_j = sum(a**m for m in range(1, k + 1))
    second_j = sum((2 * m - 1) * a**m for m in range(1, k + 1))
    return 1.0 + mean_j, max(0.0, second_j - mean_j**2)


@cache
def spread_record() -> dict[str, Any]:
    """The shipped fit of the acceptance spread (value, the runs it was fitted on, how)."""
    record: dict[str, Any] = json.loads(SPREAD_FILE.read_text())
    return record


def default_acceptance_spread() -> float:
    """tau, the standard deviation of a request's acceptance on the logit scale, as shipped."""
    return float(spread_record()["tau"])


def _logit(a: float) -> float:
    return math.log(a / (1.0 - a))


def _emitted(mtp_tokens: int, acceptance: np.ndarray) -> np.ndarray:
    """E[X] at each acceptance: 1 + a + ... + a^k."""
    out = np.ones_like(acceptance)
    for m in range(1, mtp_tokens + 1):
        out = out + acceptance**m
    return out


def request_steps_scale(
    mtp_tokens: int, acceptance: float, tau: float, count: int, rng: np.random.Generator
) -> np.ndarray:
    """Each of `count` requests' factor on the steps its tokens take (mean 1; all 1 without MTP or spread).

    A request's acceptance is logit-normal about the workload's (`tau` on the logit scale); its steps
    per token are 1 / E[X | a_i], divided by their mean over the acceptance distribution (Gauss-Hermite)
    so that the mean is the workload's 1 / E[X | a]."""
    if mtp_tokens <= 0 or tau <= 0.0 or count <= 0 or not 0.0 < acceptance < 1.0:
        return np.ones(max(count, 0))
    z = rng.standard_normal(count)
    nodes, weights = np.polynomial.hermite_e.hermegauss(QUADRATURE_POINTS)
    centre = _logit(acceptance)
    mean_inverse = float(np.sum(weights / _emitted(mtp_tokens, 1.0 / (1.0 + np.exp(-(centre + tau * nodes))))))
    mean_inverse /= math.sqrt(2.0 * math.pi)
    inverse = 1.0 / _emitted(mtp_tokens, 1.0 / (1.0 + np.exp(-(centre + tau * z))))
    out: np.ndarray = inverse / mean_inverse
    return out


class StepSampler:
    """Draws the steps sequences need (see the module docstring)."""

    def __init__(self, mtp_tokens: int, acceptance: float, rng: np.random.Generator) -> None:
        self.k = mtp_tokens
        self.a = min(max(acceptance, 0.0), 1.0)
        self.rng = rng
        self.mean, self.var = step_moments(self.k, self.a)
        self.thresholds = [self.a**m for m in range(1, self.k + 1)]
        self._normals: list[float] = []

    def steps(self, tokens: int, scale: float = 1.0) -> int:
        """Steps to generate `tokens` tokens (at least one: a step always runs once admitted); `scale`: the
        request's own factor on its steps (`request_steps_scale`)."""
        if tokens <= 0:
            return 1
        if self.k == 0 or self.a <= 0.0:
            return tokens
        if self.a >= 1.0:
            return math.ceil(tokens / (1 + self.k))
        if tokens <= EXACT_TOKENS:
            u = self.rng.random(tokens)
            x = np.ones(tokens, dtype=np.int64)
            for t in self.thresholds:
                x += u < t
            s = int(np.searchsorted(np.cumsum(x), tokens) + 1)
            return s if scale == 1.0 else self._scaled(s, tokens, scale)
        mean = tokens / self.mean
        std = math.sqrt(tokens * self.var / self.mean**3)
        if not self._normals:  # drawn in blocks: one draw per call would cost more than the rest
            self._normals = self.rng.standard_normal(4096).tolist()
        return self._scaled(mean + std * self._normals.pop(), tokens, scale)

    def _scaled(self, steps: float, tokens: int, scale: float) -> int:
        """`steps` x `scale`, rounded up, within [tokens / (1 + k), tokens]."""
        s = math.ceil(steps * scale)
        return int(min(max(s, math.ceil(tokens / (1 + self.k)), 1), tokens))

    def steps_many(self, tokens: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
        """`steps` for many sequences at once (the normal limit for all but short ones, drawn one by one);
        `scale`: each sequence's factor (`request_steps_scale`), 1 when None."""
        tokens = np.asarray(tokens, dtype=np.int64)
        scale = np.ones(tokens.size) if scale is None else np.asarray(scale, dtype=float)
        out = np.empty(tokens.size, dtype=np.int64)
        short = tokens <= EXACT_TOKENS
        for i in np.flatnonzero(short):
            out[i] = self.steps(int(tokens[i]), float(scale[i]))
        long = ~short
        if long.any():
            t = tokens[long].astype(float)
            if self.k == 0 or self.a <= 0.0:
                s = t
            elif self.a >= 1.0:
                s = np.ceil(t / (1 + self.k))
            else:
                z = self.rng.standard_normal(t.size)
                s = np.ceil((t / self.mean + z * np.sqrt(t * self.var / self.mean**3)) * scale[long])
                s = np.minimum(np.maximum(s, np.ceil(t / (1 + self.k))), t)
            out[long] = np.maximum(s, 1).astype(np.int64)
        return out
