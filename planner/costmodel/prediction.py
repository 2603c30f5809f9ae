"""The `predicted` block of a plan: what the cost model says of each phase and of the whole system.

Field names are part of the plan-format contract. Times in ms, throughputs in tokens/s, memory in
bytes; "per device" is per die as the software sees it, "per card" per sold card (A2: one die;
CM384: one 910C package of two dies).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _HbmFigures(_Out):
    """HBM figures every phase block carries (per device of the fuller role)."""

    hbm_bytes_per_device: int
    hbm_capacity_bytes: int
    hbm_headroom_bytes: int
    fits_hbm: bool
    hbm_breakdown_bytes: dict[str, int]


class DecodePrediction(_HbmFigures):
    """One decode instance at its concurrency."""

    step_ms: float
    tpot_ms: float
    tokens_per_step_per_sequence: float
    tokens_per_s_per_device: float
    tokens_per_s_per_card: float
    tokens_per_s_per_user: float
    sequences_per_instance: int
    moe_imbalance: float
    hbm_role: str
    max_concurrency_per_device: int
    meets_tpot_slo: bool | None
    breakdown_ms: dict[str, float]


class PrefillPrediction(_HbmFigures):
    """One prefill instance at its batch size."""

    forward_ms: float
    ttft_ms: float
    requests_per_forward: float
    tokens_per_s_per_device: float
    tokens_per_s_per_card: float
    moe_imbalance: float
    hbm_role: str
    max_batch_tokens: int
    meets_ttft_slo: bool | None
    breakdown_ms: dict[str, float]


class ColocatedPrediction(_HbmFigures):
    """One colocated instance: prefill and decode in turn on the same devices."""

    requests_per_s_per_instance: float
    prefill_time_fraction: float
    tpot_ms: float
    ttft_ms: float
    longest_decode_pause_ms: float
    tokens_per_s_per_card: float
    meets_tpot_slo: bool | None
    meets_ttft_slo: bool | None


class SystemPrediction(_Out):
    """A plan with both phases: prefill and decode capacity matched into a request rate."""

    devices: int
    cards: float
    prefill_requests_per_s: float
    decode_requests_per_s: float
    requests_per_s: float
    bottleneck: str
    output_tokens_per_s: float
    output_tokens_per_s_per_card: float
    input_tokens_per_s: float


class BandFigure(_Out):
    """A figure at the pessimistic end of the factor ranges, as predicted, and at the optimistic end."""

    low: float
    mid: float
    high: float


class Uncertainty(_Out):
    """How sure the prediction is: bands per block (decode, prefill, colocated, system) and the ranges behind them."""

    method: str
    factors: dict[str, list[float]]
    bands: dict[str, dict[str, BandFigure]]


class Prediction(_Out):
    """Everything `evaluate` predicts for a plan."""

    cost_model: str
    imbalance_model: str
    decode: DecodePrediction | None = None
    prefill: PrefillPrediction | None = None
    colocated: ColocatedPrediction | None = None
    system: SystemPrediction | None = None
    uncertainty: Uncertainty | None = None  # set by `evaluate` and `plan` (costmodel.uncertainty), not by the search
