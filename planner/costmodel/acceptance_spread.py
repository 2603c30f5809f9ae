"""How far one request's TPOT lies from the mean because its own MTP acceptance differs from the workload's.

A request's acceptance is logit-normal about the workload's: logit(a_i) = logit(a) + tau z_i, z_i
standard normal. What a request generates sets how well the draft head guesses it: SGLang's
single-wave DeepSeek-R1 runs on A3 (32 requests decoding in the same synchronous steps, MTP 3
drafts) report a P99 TPOT 17-27% above the median, and the page's one run without speculation 2%.

A request's steps per token are 1 / E[X | a_i] (E[X] = 1 + a + ... + a^k, `emitted`), divided by
their mean over the acceptance distribution (Gauss-Hermite quadrature) so that the mean steps per
token, and so the mean TPOT the cost model gives, stay the workload's: the workload's acceptance is
a run's, a mean over its steps. `steps_scale` is that factor; the simulator draws z per request
(planner.simulate.mtp), and `tpot_percentile_factor` reads it at a percentile of the requests: the
TPOT of the request at the P-th percentile is the mean TPOT times the factor at z = -Phi^-1(P/100)
(a lower acceptance, more steps). It covers this one source of spread; batching, context lengths and
queueing are the simulator's.

tau is fitted on measured runs by benchmarks/fit_acceptance_spread.py and shipped in
planner/costmodel/data/acceptance_spread.json with the runs it was fitted on (`spread_record`).
"""

from __future__ import annotations

import json
import math
from functools import cache, lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from planner.specs.plan import SLO
    from planner.specs.workload import Workload

SPREAD_FILE = Path(__file__).parent / "data" / "acceptance_spread.json"
MAX_ACCEPTANCE_SPREAD = 5.0  # logit-scale standard deviation: beyond it every request is all or nothing
QUADRATURE_POINTS = 48  # Gauss-Hermite points for the normalising mean (exact to far below a step)


@cache
def spread_record() -> dict[str, Any]:
    """The shipped fit of the acceptance spread (value, the runs it was fitted on, how)."""
    record: dict[str, Any] = json.loads(SPREAD_FILE.read_text())
    return record


def default_acceptance_spread() -> float:
    """tau, the standard deviation of a request's acceptance on the logit scale, as shipped."""
    return float(spread_record()["tau"])


def spread_fit_runs() -> list[str]:
    """The measured runs the shipped tau was fitted on."""
    return list(spread_record().get("fitted_on", []))


def emitted(mtp_tokens: int, acceptance: np.ndarray) -> np.ndarray:
    """E[X] at each acceptance: 1 + a + ... + a^k (planner.costmodel.decode.emitted_tokens_per_step, vectorised)."""
    out = np.ones_like(acceptance)
    for m in range(1, mtp_tokens + 1):
        out = out + acceptance**m
    return out


def _acceptance_at(centre_logit: float, tau: float, z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-(centre_logit + tau * z)))
    return out


def steps_scale(mtp_tokens: int, acceptance: float, tau: float, z: np.ndarray) -> np.ndarray:
    """Each request's factor on the steps its tokens take, at its standard normal draw `z` (mean 1 over
    z; all 1 without MTP or spread)."""
    z = np.asarray(z, dtype=float)
    if mtp_tokens <= 0 or tau <= 0.0 or not 0.0 < acceptance < 1.0:
        return np.ones_like(z)
    nodes, weights = np.polynomial.hermite_e.hermegauss(QUADRATURE_POINTS)
    centre = math.log(acceptance / (1.0 - acceptance))
    mean_inverse = float(np.sum(weights / emitted(mtp_tokens, _acceptance_at(centre, tau, nodes))))
    mean_inverse /= math.sqrt(2.0 * math.pi)
    out: np.ndarray = (1.0 / emitted(mtp_tokens, _acceptance_at(centre, tau, z))) / mean_inverse
    return out


@lru_cache(maxsize=1024)
def tpot_percentile_factor(mtp_tokens: int, acceptance: float, tau: float, percentile: float) -> float:
    """The TPOT of the request at `percentile` (0-100] of the requests over the mean TPOT, from its own
    acceptance alone (1 without MTP or spread; below 1 for percentiles under about the median; at 100
    the request that accepts no draft)."""
    if not 0.0 < percentile <= 100.0:
        raise ValueError(f"percentile {percentile:g} must lie in (0, 100]")
    z = -math.inf if percentile >= 100.0 else -NormalDist().inv_cdf(percentile / 100.0)
    return float(steps_scale(mtp_tokens, acceptance, tau, np.array([z]))[0])


def percentile_request_factor(workload: Workload, mtp_tokens: int) -> float:
    """The TPOT of the workload's `slo_percentile` request over the mean TPOT at this MTP depth, with
    the shipped tau."""
    return tpot_percentile_factor(
        mtp_tokens, workload.mtp_acceptance, default_acceptance_spread(), workload.tpot_percentile
    )


def slo_tpot_factor(slo: SLO | None, workload: Workload, mtp_tokens: int) -> float:
    """What the SLO's TPOT limit holds over the mean TPOT at this MTP depth: 1 (the mean), or with
    `slo.tpot_at_percentile` `percentile_request_factor`. A mean TPOT of `tpot_ms` / this factor
    meets the SLO."""
    if slo is None or not slo.tpot_at_percentile or mtp_tokens <= 0:
        return 1.0
    return percentile_request_factor(workload, mtp_tokens)
