"""What a user asks `moeplan plan` for, with the defaults of the report's A2 deployment."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planner.costmodel.imbalance import ImbalanceModel
from planner.search.settings import SolverSettings
from planner.specs.plan import SLO, Workload

PhaseChoice = Literal["both", "decode", "prefill"]

DEFAULT_MODEL = "deepseek-v3"
DEFAULT_HARDWARE = "a2"
DEFAULT_MAX_CARDS = 48  # the report's A2 deployment: 32 decode + 16 prefill cards
MAX_CARDS = 1_000_000  # larger budgets are refused (the solver's integers must stay bounded)
DEFAULT_WORKLOAD = Workload(input_tokens=2048, output_tokens=2048, mtp_acceptance=0.7)
DEFAULT_SLO = SLO(tpot_ms=100.0, ttft_ms=2000.0)


@dataclass(frozen=True)
class PlanRequest:
    """Model, machine, workload, SLOs, budget, and what the user pinned."""

    model: str = DEFAULT_MODEL
    hardware: str = DEFAULT_HARDWARE
    quantization: str = "a8w8c16"
    workload: Workload = DEFAULT_WORKLOAD
    slo: SLO = DEFAULT_SLO
    max_cards: float = DEFAULT_MAX_CARDS
    phase: PhaseChoice = "both"
    decode_devices: int | None = None
    prefill_devices: int | None = None
    rate_per_s: float | None = None
    top: int = 5
    mtp_tokens: tuple[int, ...] | None = None
    max_redundant_experts: int | None = None  # redundant expert copies per instance (0: none)
    colocated: bool = True  # also search colocated instances (prefill and decode on the same devices)
    # engine capability: decode micro-batch overlap (DeepSeek/SGLang two-batch overlap); --no-decode-microbatch
    decode_micro_batches: tuple[int, ...] = (1, 2)
    settings: SolverSettings = field(default_factory=SolverSettings)
    imbalance: ImbalanceModel | None = None
    imbalance_label: str = ""
