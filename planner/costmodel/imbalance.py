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

The skew model above is an oracle: it places experts for the very popularity it then scores.
The default since issue 11 is `EngineImbalance`, the imbalance a real engine sees, in three named
parts. Their values are fitted jointly with every machine group's factors on all measured rows of
validation/ (planner.costmodel.store_fit, benchmarks/calibrate_factors.py; each row's expert
condition says which parts it sees), refitted in every leave-one-out, and shipped with their
leave-one-out range in data/imbalance.yaml. The rows that determine each part most:

1. *Intrinsic popularity skew* per layer (what placement can balance): log-normal popularity,
   per expert and independent of EP (arXiv 2605.20982, "DODOCO": the per-expert max/mean is a
   property of the router and the data and changes by <= 5% across EP sizes; random or mock
   tokens overstate it, so no synthetic-token figure is used). CM-D (one expert per device and no
   redundant copy: the hottest expert sets its step) and the CloudMatrix384 paper's EP320 decode
   rows determine sigma. Cross-check: Gini of a log-normal is 2 Phi(sigma/sqrt2) - 1, 0.13 at
   sigma 0.24 and 0.19 at 0.35; DODOCO measures >= 0.24 for MLA-routed DeepSeek-V2-Lite (aux-loss routing, 64
   experts, counts of finite batches, which add sampling spread); DeepSeek-V3's auxiliary-loss-
   free bias balancing flattens popularity, so a lower intrinsic Gini is expected.
2. *Drift*: the engine places from a past window (a profiling run, or EPLB every few minutes:
   deepseek-ai/EPLB takes the per-layer loads of a past window) and the placement serves the
   next one. Log-popularity moves between windows by `drift_sigma` (stationary: both windows
   keep skew sigma, correlation 1 - drift^2 / (2 sigma^2), held at 0 from drift sqrt(2) sigma on:
   past that the windows are independent, and a placement is uninformed about the next window,
   never its mirror image, which a negative correlation would make it); the static factor is the placement
   made from window A scored on window B. The one published measured price of real imbalance on
   Ascend determines it most: CloudMatrix384 prefill 5,655 tokens/s per NPU with its default EPLB
   against 6,688 with perfect balance (arXiv 2506.12708; rows `CM-P EPLB` and `CM-P balanced`).
3. *Per-step overdispersion*: tokens of one request route alike, so one step's per-device count
   varies more than Poisson: variance = lambda * (1 + rho * (a - 1)) when one request puts a
   assignments on the device (a = its tokens in the step x top-k / EP: decode ~0.06, prefill of
   a 4K prompt at EP32 ~1,000). It shrinks like 1/sqrt(requests), not 1/sqrt(tokens). SGLang's H100
   prefill determines rho most (LMSYS blog 2025-05-05: 50,302 tokens/s per node with the default
   expert distribution against 59,337 with simulated perfect EPLB, where EPLB was fed
   in-distribution statistics, so the gap is the per-step term; rows `SGLang-H100-P` and its
   balanced twin).
   DODOCO's finding that real text shows no batch-size trend of imbalance (the trend of mock
   tokens "vanishes") agrees: the request term, not the Poisson term, dominates.

SGLang's 2.54x EPLB decode gain (EP72) measures EPLB against no placement at all; its in-
distribution decode row (`SGLang-H100-D`, drift 0) checks parts 1 and 3 at EP72 with redundancy.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.disk_memo import DiskMemo, placement_code_digest

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

    def cache_key(self) -> str:
        """What the factors depend on, as text that means the same in every process: a digest of
        the loads (the array itself is not hashable, and its object address would be a key that
        no other process can read and that a later trace could reuse)."""
        loads = np.ascontiguousarray(self.loads)
        digest = hashlib.sha256(f"{loads.dtype}{loads.shape}".encode() + loads.tobytes()).hexdigest()
        return f"loads:{digest}"


# ---- the imbalance a real engine sees (issue 11) ------------------------------------------------

# The three parameters are fitted with the machines' factors on the measured rows of validation/
# (planner.costmodel.store_fit; benchmarks/calibrate_factors.py writes them here, with the range of
# their leave-one-out refits, which the prediction bands use).
FITTED_PARAMETERS = Path(__file__).resolve().parent / "data" / "imbalance.yaml"


@lru_cache(maxsize=1)
def fitted_parameters() -> dict[str, dict[str, float]]:
    """{name: {value, low, high}} of the engine imbalance parameters (the shipped fit)."""
    import yaml

    doc = yaml.safe_load(FITTED_PARAMETERS.read_text(encoding="utf-8"))
    return {k: {f: float(v[f]) for f in ("value", "low", "high")} for k, v in doc["parameters"].items()}


DEFAULT_POPULARITY_SIGMA = fitted_parameters()["popularity_sigma"]["value"]
DEFAULT_DRIFT_SIGMA = fitted_parameters()["drift_sigma"]["value"]
DEFAULT_REQUEST_CORRELATION = fitted_parameters()["request_correlation"]["value"]
FITTED_SOURCE = "fitted with the machine factors on the measured rows of validation/ (benchmarks/calibrate_factors.py)"
ENGINE_LAYERS = 16  # synthetic layers averaged (seeded, deterministic)
ENGINE_SEED = 0


def gini_of_lognormal(sigma: float) -> float:
    """Gini coefficient of a log-normal popularity of log-sigma `sigma`."""
    return 2.0 * NormalDist().cdf(sigma / math.sqrt(2.0)) - 1.0


def lognormal_sigma_for_gini(gini: float) -> float:
    """Sigma of the log-normal popularity whose Gini coefficient is `gini` (Gini = 2 Phi(sigma/sqrt2) - 1)."""
    return math.sqrt(2.0) * NormalDist().inv_cdf((1.0 + gini) / 2.0)


def window_correlation(sigma: float, drift: float) -> float:
    """Correlation of log-popularity between two windows whose difference has standard deviation
    `drift` (both of skew `sigma`): 1 - drift^2 / (2 sigma^2), and 0 (independent windows) from
    drift sqrt(2) sigma on. Popularity that changes between windows loses what the placement knew;
    nothing makes the next window the inverse of the last, so the correlation is never negative."""
    if sigma <= 0:
        return 1.0
    return max(0.0, min(1.0, 1.0 - drift**2 / (2.0 * sigma**2)))


def drifted_windows(experts: int, sigma: float, drift: float, layers: int = ENGINE_LAYERS, seed: int = ENGINE_SEED):
    """Two windows of per-layer expert popularity, [layers, experts] each (the second drifted).

    Log-popularity is sigma * z; the next window's z is correlated with the first's so that
    the change between windows has standard deviation `drift` and both windows keep skew sigma.
    """
    rng = np.random.default_rng(seed)
    z_a = rng.standard_normal((layers, experts))
    z_new = rng.standard_normal((layers, experts))
    corr = window_correlation(sigma, drift)
    z_b = corr * z_a + math.sqrt(max(0.0, 1.0 - corr**2)) * z_new
    return np.exp(sigma * z_a) * 1e6, np.exp(sigma * z_b) * 1e6


_ENGINE_MEMO = DiskMemo("engine-imbalance")
# the same values for the default parameters and every (experts, EP, slots) the catalog's models
# and machines ask for, computed ahead and shipped (benchmarks/build_imbalance_table.py): a first
# run on a supernode would otherwise spend seconds placing experts. Used only while the code hash
# it was made with matches (tests/costmodel/test_shipped_imbalance.py recomputes a sample)
SHIPPED_TABLE = Path(__file__).resolve().parent / "data" / "engine_imbalance.json"


def engine_key(sigma: float, drift: float, experts: int, ep: int, slots: int) -> str:
    return f"{sigma!r},{drift!r},{experts},{ep},{slots}"


@lru_cache(maxsize=1)
def shipped_engine_values() -> dict[str, list[float]]:
    """The shipped table's values, or nothing if it was made from other placement code."""
    import json

    try:
        doc = json.loads(SHIPPED_TABLE.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("code_digest") != placement_code_digest():
        return {}
    return dict(doc.get("values", {}))


def engine_static_computed(sigma: float, drift: float, experts: int, ep: int, slots: int) -> tuple[float, float]:
    """(fitted, following) imbalance of the placement made from the first window (no memo)."""
    from planner.placement import FAST_SEARCH, imbalance, optimize_placement

    fitted, following = drifted_windows(experts, sigma, drift)
    placement = optimize_placement(fitted, ep, slots, 1, None, FAST_SEARCH).placement
    return float(np.mean(imbalance(fitted, placement))), float(np.mean(imbalance(following, placement)))


@lru_cache(maxsize=4096)
def _engine_static(sigma: float, drift: float, experts: int, ep: int, slots: int) -> tuple[float, float]:
    # a pure function of its arguments (seeded windows, deterministic placement): shipped for the
    # catalog, and kept on disk like the skew model's, since a supernode plan asks for hundreds of
    # (EP, slots) pairs
    key = engine_key(sigma, drift, experts, ep, slots)
    shipped = shipped_engine_values().get(key)
    if shipped is not None:
        return float(shipped[0]), float(shipped[1])
    fitted_known, following_known = _ENGINE_MEMO.get(key + ":fitted"), _ENGINE_MEMO.get(key + ":following")
    if fitted_known is not None and following_known is not None:
        return fitted_known, following_known
    out = engine_static_computed(sigma, drift, experts, ep, slots)
    _ENGINE_MEMO.put(key + ":fitted", out[0])
    _ENGINE_MEMO.put(key + ":following", out[1])
    return out


@dataclass(frozen=True)
class EngineImbalance:
    """Intrinsic skew, drift between placement windows and per-step overdispersion (module docstring)."""

    popularity_sigma: float = DEFAULT_POPULARITY_SIGMA
    drift_sigma: float = DEFAULT_DRIFT_SIGMA
    request_correlation: float = DEFAULT_REQUEST_CORRELATION

    def static_factor(self, experts: int, ep: int, slots_per_device: int) -> float:
        """Placement made from one window, scored on the next (mean over layers of max/mean)."""
        if ep <= 1 or self.popularity_sigma == 0:
            return 1.0
        return _engine_static(self.popularity_sigma, self.drift_sigma, experts, ep, slots_per_device)[1]

    def fitted_factor(self, experts: int, ep: int, slots_per_device: int) -> float:
        """The same placement scored on the window it was made from (what an oracle would see)."""
        if ep <= 1 or self.popularity_sigma == 0:
            return 1.0
        return _engine_static(self.popularity_sigma, self.drift_sigma, experts, ep, slots_per_device)[0]

    def dispersion(self, assignments_per_request: ArrayLike) -> np.ndarray:
        """Variance over mean of a device's per-step count when one request puts a assignments on it."""
        a = np.asarray(assignments_per_request, dtype=float)
        return 1.0 + self.request_correlation * np.maximum(0.0, a - 1.0)

    def describe(self) -> str:
        return (
            f"engine imbalance: intrinsic log-normal sigma {self.popularity_sigma:.3g} "
            f"(Gini {gini_of_lognormal(self.popularity_sigma):.2f}), "
            f"drift {self.drift_sigma:g} between placement windows (correlation "
            f"{window_correlation(self.popularity_sigma, self.drift_sigma):.2f}), request correlation "
            f"{self.request_correlation:g} (see planner/costmodel/imbalance.py)"
        )


def default_imbalance_model() -> ImbalanceModel:
    """The default: the imbalance a real engine sees (`EngineImbalance`)."""
    return EngineImbalance()


def dispersion_of(model: ImbalanceModel, assignments_per_request: ArrayLike) -> np.ndarray | float:
    """Variance of a device's per-step count over its mean (1: Poisson), for any model.

    `assignments_per_request`: token-expert assignments one request puts on one device in the step.
    """
    fn = getattr(model, "dispersion", None)
    return fn(assignments_per_request) if fn is not None else 1.0


def straggler_z(n: int) -> float:
    """Gaussian tail multiplier of the maximum over n devices (0 for one device)."""
    return math.sqrt(2.0 * math.log(n)) if n > 1 else 0.0


def busiest_over_mean(mean_count: ArrayLike, static_factor: float, n: int, dispersion: ArrayLike = 1.0) -> np.ndarray:
    """Load of the busiest of n devices over the mean load, skew and sampling combined.

    `mean_count` is the mean number of token-expert assignments per device in one step;
    `dispersion` the variance of a device's count over its mean (1 for Poisson).
    """
    lam_mean = np.maximum(np.asarray(mean_count, dtype=float), 1e-12)
    lam_hot = lam_mean * static_factor
    return (lam_hot + straggler_z(n) * np.sqrt(lam_hot * dispersion)) / lam_mean
