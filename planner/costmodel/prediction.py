"""The `predicted` block of a plan: what the cost model says of each phase and of the whole system.

Field names are part of the plan-format contract. Times in ms, throughputs in tokens/s, memory in
bytes; "per device" is per die as the software sees it, "per card" per sold card (A2: one die;
CM384: one 910C package of two dies).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _HbmFigures(_Out):
    """HBM figures every phase block carries (per device of the fuller role)."""

    hbm_bytes_per_device: int
    hbm_capacity_bytes: int  # what the engine may fill: the device's HBM x hbm_utilization
    hbm_headroom_bytes: int  # capacity - use (>= 0 when the plan fits)
    hbm_utilization: float
    hbm_free_bytes: int  # the device's whole HBM - use: what stays free on the device
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
    # in steps of one sequence per attention TP group, as a plan states it (0.25: one on a TP4 group)
    max_concurrency_per_device: int | float
    meets_tpot_slo: bool | None
    meets_itl_slo: bool | None  # the step (the gap between two emissions) within slo.max_itl_ms
    breakdown_ms: dict[str, float]
    acceptance_percentile: float | None = None  # MTP: the share of requests, %, the next figure is read at
    # MTP: TPOT of the request at that percentile of its own acceptance (planner.costmodel.acceptance_spread);
    # the mean TPOT above is what the search holds to the SLO; other sources of spread are the simulator's
    tpot_at_acceptance_percentile_ms: float | None = None


class PrefillPrediction(_HbmFigures):
    """One prefill instance at its batch size."""

    forward_ms: float
    ttft_ms: float
    # TTFT of the TTFT-percentile prompt alone on an idle instance, without queueing
    # (planner.costmodel.prefill.prompt_alone_s); None for colocated instances, whose TTFT is the colocated block's
    prompt_alone_ms: float | None = None
    requests_per_forward: float
    tokens_per_s_per_device: float
    tokens_per_s_per_card: float
    moe_imbalance: float
    hbm_role: str
    max_batch_tokens: int
    meets_ttft_slo: bool | None
    breakdown_ms: dict[str, float]


class AfdPrediction(_HbmFigures):
    """One attention-FFN disaggregated instance at its concurrency: its decode steps.

    The `hbm_*` figures are an attention device's (it holds the KV cache); the `ffn_hbm_*` figures
    an FFN device's; `fits_hbm` is true when both fit. Per device and per card figures count both
    sides' devices; `tokens_per_s_per_attention_device` only the attention side's.
    """

    attention_devices: int
    ffn_devices: int
    micro_batches: int
    link: str  # the machine's link level that carries the activations
    step_ms: float
    tpot_ms: float
    tokens_per_step_per_sequence: float
    tokens_per_s_per_device: float
    tokens_per_s_per_card: float
    tokens_per_s_per_attention_device: float
    tokens_per_s_per_user: float
    sequences_per_instance: int
    moe_imbalance: float
    attention_layer_ms: float  # one MoE layer of one micro-batch on the attention side
    ffn_layer_ms: float  # the same layer on the FFN side (experts, router, dispatch/combine)
    transfer_layer_ms: float  # one direction of that layer's activations
    bound: str  # what sets the layer period: attention, ffn, transfer, or 'in turn' (one micro-batch)
    hbm_role: str
    max_concurrency_per_device: int | float  # per attention device, in steps of one sequence per its TP group
    meets_tpot_slo: bool | None
    meets_itl_slo: bool | None
    breakdown_ms: dict[str, float]
    attention_fits_hbm: bool
    ffn_hbm_bytes_per_device: int
    ffn_hbm_headroom_bytes: int
    ffn_hbm_free_bytes: int
    ffn_fits_hbm: bool
    ffn_hbm_breakdown_bytes: dict[str, int]
    prefill_forward_ms: float | None = None  # the instances also prefill: one forward of afd.prefill_batch_tokens
    acceptance_percentile: float | None = None  # MTP: the share of requests, %, the next figure is read at
    # MTP: TPOT of the request at that percentile of its own acceptance (planner.costmodel.acceptance_spread);
    # the mean TPOT above is what the search holds to the SLO; other sources of spread are the simulator's
    tpot_at_acceptance_percentile_ms: float | None = None


class ColocatedPrediction(_HbmFigures):
    """One colocated instance: prefill and decode in turn on the same devices."""

    requests_per_s_per_instance: float
    prefill_time_fraction: float
    tpot_ms: float
    ttft_ms: float
    longest_decode_pause_ms: float
    itl_p50_ms: float  # gap between two steps that emit a sequence's tokens (planner.costmodel.colocated)
    itl_p99_ms: float
    chunk_tokens: int | None  # chunked prefill's prompt tokens per step (None: whole forwards)
    chunk_step_fraction: float  # chunked: share of the steps that carry a chunk
    # whole forwards: requests a forward holds when the engine prefills what a full instance admits
    # (planner.costmodel.colocated: min(batch, a / (1 - e^-a)), a = N e / out); chunked: None
    prompts_per_forward: float | None = None
    # whole forwards: the forwards the TTFT-percentile prompt takes on its attention DP rank, back to back (its
    # rank's share of the batch: planner.costmodel.colocated); chunked: None
    forwards_per_prompt: int | None = None
    tokens_per_s_per_user: float  # 1000 / TPOT, the stalls included: what `plan`, `evaluate`, `whatif` show
    tokens_per_s_per_card: float
    meets_tpot_slo: bool | None
    meets_ttft_slo: bool | None
    meets_itl_slo: bool | None
    acceptance_percentile: float | None = None  # MTP: the share of requests, %, the next figure is read at
    # MTP: TPOT of the request at that percentile of its own acceptance (planner.costmodel.acceptance_spread);
    # the mean TPOT above is what the search holds to the SLO; other sources of spread are the simulator's
    tpot_at_acceptance_percentile_ms: float | None = None


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

    @classmethod
    def matched(
        cls,
        devices: int,
        cards: float,
        decode_requests_per_s: float,
        prefill_requests_per_s: float,
        input_tokens: float,
        output_tokens: float,
    ) -> SystemPrediction:
        """Disaggregated phases: the request rate is the slower phase's capacity (figures rounded)."""
        rps = min(decode_requests_per_s, prefill_requests_per_s)

        def r(x: float) -> float:
            return float(round(float(x), 4))

        return cls(
            devices=devices,
            cards=r(cards),
            prefill_requests_per_s=r(prefill_requests_per_s),
            decode_requests_per_s=r(decode_requests_per_s),
            requests_per_s=r(rps),
            bottleneck="prefill" if prefill_requests_per_s < decode_requests_per_s else "decode",
            output_tokens_per_s=r(rps * output_tokens),
            output_tokens_per_s_per_card=r(rps * output_tokens / cards),
            input_tokens_per_s=r(rps * input_tokens),
        )


class EconomicsPrediction(_Out):
    """Cost and energy of the plan's devices at its predicted throughput (planner.costmodel.economics)."""

    cards: float
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None  # input + output
    throughput_basis: str  # which devices and tokens the figures cover
    power_w: float | None
    power_basis: str | None
    joules_per_output_token: float | None
    joules_per_token: float | None  # per input or output token
    price_per_hour: float | None
    currency: str | None
    cost_per_million_output_tokens: float | None
    cost_per_million_tokens: float | None  # per million input + output tokens
    missing: list[str]  # the hardware fields a figure above lacks


def slo_judged_tpot_ms(
    at_percentile: bool, block: DecodePrediction | AfdPrediction | ColocatedPrediction
) -> tuple[float, bool]:
    """(the TPOT a TPOT SLO judges in `block`, whether it is the SLO-percentile request's): with
    `slo.tpot_at_percentile` (`at_percentile`) and MTP that request's figure, else the mean."""
    at = block.tpot_at_acceptance_percentile_ms
    return (at, True) if at_percentile and at is not None else (block.tpot_ms, False)


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
    afd: AfdPrediction | None = None
    system: SystemPrediction | None = None
    economics: EconomicsPrediction | None = None  # cost and energy at the predicted throughput
    uncertainty: Uncertainty | None = None  # set by `evaluate` and `plan` (costmodel.uncertainty), not by the search
    notes: list[str] = Field(
        default_factory=list,
        description="what the figures rest on beyond the plan: announced hardware (vendor claims), mixed "
        "hardware, the length percentile the TTFT is judged at, prefix-cache hits (left out when empty)",
    )

    def to_json(self) -> dict[str, Any]:
        """JSON form for a plan's `predicted` block (`uncertainty` and `notes` only when there are any)."""
        exclude = {
            name
            for name, empty in (
                ("uncertainty", self.uncertainty is None),
                ("notes", not self.notes),
                ("afd", self.afd is None),
                ("economics", self.economics is None),
            )
            if empty
        }
        return self.model_dump(mode="json", exclude=exclude or None)
