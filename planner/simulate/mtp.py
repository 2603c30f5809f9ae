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

Acceptance also differs from request to request (planner.costmodel.acceptance_spread): each request
draws its own standard normal z once, and its steps scale by `steps_scale` at that z
(`request_steps_scale`); the CLI's `--acceptance-spread` overrides the shipped tau.
"""

from __future__ import annotations

import math

import numpy as np

from planner.costmodel.acceptance_spread import steps_scale

EXACT_TOKENS = 64


def step_moments(mtp_tokens: int, acceptance: float) -> tuple[float, float]:
    """(E[X], Var[X]) of the tokens one step generates."""
    a, k = acceptance, mtp_tokens
    mean_j = sum(a**m for m in range(1, k + 1))
    second_j = sum((2 * m - 1) * a**m for m in range(1, k + 1))
    return 1.0 + mean_j, max(0.0, second_j - mean_j**2)


def request_steps_scale(
    mtp_tokens: int, acceptance: float, tau: float, count: int, rng: np.random.Generator
) -> np.ndarray:
    """Each of `count` requests' factor on the steps its tokens take (mean 1; all 1 without MTP or spread):
    planner.costmodel.acceptance_spread.steps_scale at a standard normal draw per request."""
    if mtp_tokens <= 0 or tau <= 0.0 or count <= 0 or not 0.0 < acceptance < 1.0:
        return np.ones(max(count, 0))
    return steps_scale(mtp_tokens, acceptance, tau, rng.standard_normal(count))


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
