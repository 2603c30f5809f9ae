"""Synthetic expert-load traces, for trying the tool without real counts and for tests.

A trace spec is a string:

- `zipf:S` (S > 0): in every layer the experts' popularity follows Zipf's law, the r-th most
  popular expert having weight r**-S; which expert holds which rank is a random permutation per
  layer. S = 1.0 to 1.2 gives a hot expert a few times the mean; larger S is harsher.
- `lognormal:SIGMA` (SIGMA > 0): popularity exp(SIGMA * z) with z standard normal, independent
  per expert and layer. SIGMA = 0.5 is mild, 1.0 skewed, 1.5 very skewed.

From a popularity p (normalised to sum 1), a layer's loads are token->expert assignments:
`tokens_per_layer` tokens each pick `experts_per_token` experts, so the counts are one multinomial
draw of tokens_per_layer * experts_per_token assignments with probabilities p. A router sends a
token to distinct experts, so no expert can receive more than tokens_per_layer assignments: p is
first capped at 1 / experts_per_token (the excess re-spread over the other experts in proportion
to their popularity).

Windows (several time windows of the same deployment): window 0 uses the popularity above;
window t + 1 multiplies every expert's popularity by exp(drift * z) with z standard normal, fresh
per expert, layer and window (a random walk of log-popularity; drift 0.1 by default), then
re-normalises. Counts are drawn independently per window.

Everything comes from one `numpy.random.default_rng(seed)`: the same arguments give the same trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.errors import BadInputError

TraceKind = Literal["zipf", "lognormal"]

_RANGES: dict[str, tuple[float, float]] = {"zipf": (0.0, 5.0), "lognormal": (0.0, 5.0)}


@dataclass(frozen=True)
class TraceSpec:
    """A parsed `zipf:S` or `lognormal:SIGMA` spec."""

    kind: TraceKind
    parameter: float

    def __str__(self) -> str:
        return f"{self.kind}:{self.parameter:g}"


def parse_trace_spec(text: str) -> TraceSpec:
    """Parse `zipf:S` or `lognormal:SIGMA`; BadInputError says what is wrong and what is allowed."""
    raw = text.strip()
    kind, sep, value = raw.partition(":")
    kind = kind.strip().lower()
    if kind not in _RANGES or not sep:
        raise BadInputError(
            f"--synthetic '{text}' is not a trace spec; use zipf:S (e.g. zipf:1.1) or "
            f"lognormal:SIGMA (e.g. lognormal:1.0)."
        )
    try:
        parameter = float(value)
    except ValueError:
        raise BadInputError(f"--synthetic '{text}': '{value}' is not a number; use e.g. {kind}:1.0.") from None
    low, high = _RANGES[kind]
    if not (low < parameter <= high):
        name = "S" if kind == "zipf" else "SIGMA"
        raise BadInputError(f"--synthetic '{text}': {name} must be > {low:g} and <= {high:g}; got {value}.")
    return TraceSpec(kind, parameter)  # type: ignore[arg-type]


def _popularity(spec: TraceSpec, layers: int, experts: int, rng: np.random.Generator) -> np.ndarray:
    if spec.kind == "zipf":
        by_rank = np.arange(1, experts + 1, dtype=np.float64) ** -spec.parameter
        return np.stack([by_rank[rng.permutation(experts)] for _ in range(layers)])
    return np.exp(spec.parameter * rng.standard_normal((layers, experts)))


def cap_popularity(p: np.ndarray, cap: float) -> np.ndarray:
    """Normalise rows of `p` to sum 1 with no entry above `cap` (excess spread proportionally)."""
    p = p / p.sum(axis=-1, keepdims=True)
    if cap >= 1.0:
        return p
    for _ in range(p.shape[-1]):
        over = p > cap * (1 + 1e-12)
        if not over.any():
            break
        fixed = p >= cap * (1 - 1e-12)
        free_mass = np.where(fixed, 0.0, p).sum(axis=-1, keepdims=True)
        room = 1.0 - cap * fixed.sum(axis=-1, keepdims=True)
        scale = np.divide(room, free_mass, out=np.ones_like(room), where=free_mass > 0)
        p = np.where(fixed, cap, p * scale)
    return p


def generate_loads(
    spec: TraceSpec | str,
    layers: int,
    experts: int,
    windows: int = 1,
    tokens_per_layer: int = 16384,
    seed: int = 0,
    experts_per_token: int = 8,
    drift: float = 0.1,
) -> np.ndarray:
    """Token counts per expert, [layers, experts]; [windows, layers, experts] if windows > 1."""
    if isinstance(spec, str):
        spec = parse_trace_spec(spec)
    for name, value, low in (
        ("layers", layers, 1),
        ("experts", experts, 1),
        ("windows", windows, 1),
        ("tokens_per_layer", tokens_per_layer, 1),
        ("experts_per_token", experts_per_token, 1),
    ):
        if value < low:
            raise BadInputError(f"synthetic trace: {name} must be >= {low}; got {value}.")
    if experts_per_token > experts:
        raise BadInputError(f"synthetic trace: experts_per_token ({experts_per_token}) exceeds experts ({experts}).")
    if not (0.0 <= drift <= 5.0):
        raise BadInputError(f"synthetic trace: drift must be in [0, 5]; got {drift}.")
    rng = np.random.default_rng(seed)
    popularity = _popularity(spec, layers, experts, rng)
    out = np.empty((windows, layers, experts), dtype=np.float64)
    assignments = tokens_per_layer * experts_per_token
    for window in range(windows):
        if window:
            popularity = popularity * np.exp(drift * rng.standard_normal(popularity.shape))
            popularity /= popularity.sum(axis=1, keepdims=True)
        p = cap_popularity(popularity, 1.0 / experts_per_token)
        out[window] = rng.multinomial(assignments, p)
    return out[0] if windows == 1 else out
