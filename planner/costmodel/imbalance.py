"""Expert load imbalance: how much more work the busiest MoE device gets than the mean one.

The MoE part of every layer waits for its busiest device. Two things make a device busy:

1. *Skew*: some experts are hotter than others. For a placement of experts (with redundant
   copies) onto devices, the static factor is max device load / mean device load, averaged over
   layers. With a user's measured loads (`LoadsImbalance`) it comes from the placement moeplan
   would deploy for those loads; without them from the default skew model (`SkewImbalance`).
2. *Sampling*: in one step a device receives a random number of token-expert assignments. With
   lambda the expected count on the hottest device, the busiest device sees about
   lambda + z_n * sqrt(lambda) (Poisson, Gaussian tail over n devices, z_n = sqrt(2 ln n)).
   This term dominates at small batches and vanishes at large ones.

The default skew model: per layer, expert popularity is log-normal with sigma = 0.3, taken at
evenly spaced quantiles (deterministic, no random draws). Where sigma comes from: no public
per-layer load statistics of DeepSeek-V3 give it directly. Of the published rows, only CM-D
depends on it (one routed expert per die and no redundant copy, so the hottest expert sets the
step; the A2 rows hold 8-16 experts per device, which packing balances whatever sigma is), and
sigma = 0.3 reproduces it (`benchmarks/calibrate_factors.py cm384` scans sigma). SGLang's 2.54x
EPLB decode gain at EP72 (LMSYS blog, 2025-05-05), read as the ratio of the busiest device's load
without and with EPLB, would imply sigma ~ 0.7; under 0.7 the report's CM-D deployment would
serve 1180 tokens/s per card, 39% under its published 1920, so we take the SGLang figure as the
skewed end of real workloads. Users pass `--skew-sigma` or measured `--loads`. Placements in the
cost model are the ones moeplan deploys (planner.placement), so redundant slots lower the factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.disk_memo import DiskMemo

DEFAULT_SKEW_SIGMA = 0.3
DEFAULT_SKEW_SOURCE = (
    "default skew model: log-normal expert popularity, sigma 0.3 (reproduces CM-D; see planner/costmodel/imbalance.py)"
)


class ImbalanceModel(Protocol):
    """Static (skew) imbalance of a placement: max device load / mean device load."""

    def static_factor(self, experts: int, ep: int, slots_per_device: int) -> float:
        """Mean over layers of the placement's max/mean device load."""
        ...

    def describe(self) -> str:
        """One line saying where the factor comes from."""
        ...


def lognormal_popularity(experts: int, sigma: float) -> np.ndarray:
    """Expert popularity at evenly spaced log-normal quantiles, normalised to sum 1."""
    nd = NormalDist()
    z = np.array([nd.inv_cdf((i + 0.5) / experts) for i in range(experts)])
    pop = np.exp(sigma * z)
    return pop / pop.sum()


_SKEW_MEMO = DiskMemo("skew-imbalance")


@lru_cache(maxsize=4096)
def _skew_static(sigma: float, experts: int, ep: int, slots: int) -> float:
    key = f"{sigma!r},{experts},{ep},{slots}"
    known = _SKEW_MEMO.get(key)
    if known is not None:
        return known
    from planner.placement import imbalance_for

    loads = lognormal_popularity(experts, sigma)[None, :] * 1e6
    value = float(np.mean(imbalance_for(loads, ep, slots)))
    _SKEW_MEMO.put(key, value)
    return value


@dataclass(frozen=True)
class SkewImbalance:
    """The default skew model (see the module docstring)."""

    sigma: float = DEFAULT_SKEW_SIGMA

    def static_factor(self, experts: int, ep: int, slots_per_device: int) -> float:
        if ep <= 1 or self.sigma == 0:
            return 1.0
        return _skew_static(self.sigma, experts, ep, slots_per_device)

    def describe(self) -> str:
        if self.sigma == DEFAULT_SKEW_SIGMA:
            return DEFAULT_SKEW_SOURCE
        return f"log-normal expert popularity, sigma {self.sigma:g} (user choice)"


@dataclass(frozen=True)
class LoadsImbalance:
    """Imbalance of the placement moeplan deploys for measured per-layer expert loads."""

    loads: np.ndarray = field(repr=False)
    label: str = "measured loads"
    _cache: dict[tuple[int, int], float] = field(default_factory=dict, repr=False, compare=False)

    def static_factor(self, experts: int, ep: int, slots_per_device: int) -> float:
        if ep <= 1:
            return 1.0
        key = (ep, slots_per_device)
        if key not in self._cache:
            from planner.placement import imbalance_for

            self._cache[key] = float(np.mean(imbalance_for(self.loads, ep, slots_per_device)))
        return self._cache[key]

    def describe(self) -> str:
        return f"placement on {self.label} ({self.loads.shape[0]} layers)"


def default_imbalance_model() -> ImbalanceModel:
    """The default skew model."""
    return SkewImbalance()


def straggler_z(n: int) -> float:
    """Gaussian tail multiplier of the maximum over n devices (0 for one device)."""
    return math.sqrt(2.0 * math.log(n)) if n > 1 else 0.0


def busiest_over_mean(mean_count: ArrayLike, static_factor: float, n: int) -> np.ndarray:
    """Load of the busiest of n devices over the mean load, skew and sampling combined.

    `mean_count` is the mean number of token-expert assignments per device in one step.
    """
    lam_mean = np.maximum(np.asarray(mean_count, dtype=float), 1e-12)
    lam_hot = lam_mean * static_factor
    return (lam_hot + straggler_z(n) * np.sqrt(lam_hot)) / lam_mean
