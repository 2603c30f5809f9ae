"""What a user asks `moeplan plan` for, with the defaults of the report's A2 deployment."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planner.costmodel.context import DEFAULT_HBM_UTILIZATION
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
ITL_TPOT_MULTIPLE = 3.0  # --max-itl-ms defaults to 3x the TPOT SLO (the longest gap between two tokens)


def default_max_itl_ms(tpot_ms: float | None) -> float | None:
    """The default limit on the longest gap between two tokens: 3x the TPOT SLO (None without one)."""
    return None if tpot_ms is None else ITL_TPOT_MULTIPLE * tpot_ms


@dataclass(frozen=True)
class PlanRequest:
    """Model, machine, workload, SLOs, budget, and what the user pinned."""

    model: str = DEFAULT_MODEL
    hardware: str = DEFAULT_HARDWARE
    quantization: str = "a8w8c16"
    workload: Workload = DEFAULT_WORKLOAD
    slo: SLO = DEFAULT_SLO
    max_cards: float = DEFAULT_MAX_CARDS  # a whole number of cards (build_request refuses fractions)
    phase: PhaseChoice = "both"
    decode_devices: int | None = None
    prefill_devices: int | None = None
    rate_per_s: float | None = None
    top: int = 5
    mtp_tokens: tuple[int, ...] | None = None
    draft_model: str | None = None  # an EAGLE-3 head beside the model (drafts/): drafts instead of MTP layers
    max_redundant_experts: int | None = None  # redundant expert copies per instance (0: none)
    # named limits of the space the user lifts (planner.candidates.restrictions)
    max_extra_slots: int | None = None  # expert slots per device beyond the fewest (None: 4, within 50% copies)
    any_tp: bool = False  # TP of any size dividing the instance and the heads
    colocated: bool = True  # also search colocated instances (prefill and decode on the same devices)
    disaggregated: bool = True  # search prefill and decode instances apart (--structure pd)
    afd: bool = False  # also search attention-FFN disaggregated decode instances (--structure afd)
    # what the search optimises: tokens-per-card (tokens/s per card), total (tokens/s within the
    # budget), cost (tokens/s per cost unit: the least cost per token) or energy (per watt)
    objective: Literal["tokens-per-card", "total", "cost", "energy"] = "tokens-per-card"
    # --price-per-card-hour: (machine name or None for every machine, price) pairs, in `currency`
    prices: tuple[tuple[str | None, float], ...] = ()
    currency: str = "units"
    alternatives: bool = True  # also find the best plan of each other structure (`plan` shows them)
    # engine capability: decode micro-batch overlap (DeepSeek/SGLang two-batch overlap); --no-decode-microbatch
    decode_micro_batches: tuple[int, ...] = (1, 2)
    engine: str | None = None  # only layouts this serving engine can run (planner.engines); None: any
    # how the CLI searches: "auto" (each engine's search, merged: planner.search.runnable), "none" (the
    # free search) or an engine's name (then `engine` holds it); run_search reads `engine` only
    engine_mode: str = "none"
    settings: SolverSettings = field(default_factory=SolverSettings)
    imbalance: ImbalanceModel | None = None
    imbalance_label: str = ""
    pessimistic_factors: bool = False  # --robust: search with every factor at the slow end of its range
    hbm_utilization: float = DEFAULT_HBM_UTILIZATION  # fraction of each device's HBM a plan may fill
    # False: the decode attention kernel gives each (sequence, KV head) one core (planner/costmodel/kv_split.py)
    decode_attention_kv_split: bool = True
    # the ITL limit is --max-itl-ms's default, 3x the TPOT SLO: a new --tpot-ms moves it too
    itl_from_tpot: bool = False
    # prefill on one machine, decode on another (planner.search.contexts); None: `hardware`
    prefill_hardware: str | None = None
    decode_hardware: str | None = None
    kv_transfer_bytes_per_s: float | None = None  # prefill->decode KV link per device (None: the YAMLs')
    max_prefill_cards: float | None = None  # cards of the prefill machine (replaces max_cards for prefill)
    max_decode_cards: float | None = None
    max_cost: float | None = None  # in the YAMLs' price_per_card units

    def __post_init__(self) -> None:
        # both phases on one other machine: that machine is the plan's (a single-machine search)
        p, d = self.prefill_hardware, self.decode_hardware
        if p is not None and p == d and p != self.hardware:
            object.__setattr__(self, "hardware", p)
        if self.prefill_hardware == self.hardware:
            object.__setattr__(self, "prefill_hardware", None)
        if self.decode_hardware == self.hardware:
            object.__setattr__(self, "decode_hardware", None)

    @property
    def prefill_hw_name(self) -> str:
        """The machine prefill instances run on."""
        return self.prefill_hardware or self.hardware

    @property
    def decode_hw_name(self) -> str:
        """The machine decode instances run on."""
        return self.decode_hardware or self.hardware

    def budget_text(self) -> str:
        """The budget as the search applies it (planner.search.budget): --max-cards over both phases'
        cards, or each phase's own cap (a phase without one: --max-cards of its machine), and the cost
        cap (with it and no phase cap, no card cap)."""
        parts: list[str] = []
        if self.max_prefill_cards is not None or self.max_decode_cards is not None:
            prefill = self.max_cards if self.max_prefill_cards is None else self.max_prefill_cards
            decode = self.max_cards if self.max_decode_cards is None else self.max_decode_cards
            parts = [f"<= {prefill:g} prefill cards", f"<= {decode:g} decode cards"]
        if self.max_cost is not None:
            parts.append(f"cost <= {self.max_cost:g}")
        return ", ".join(parts) if parts else f"<= {self.max_cards:g} cards"

    @property
    def is_mixed(self) -> bool:
        """True when the phases run on different machines or are budgeted apart (mixed search)."""
        return (
            self.prefill_hw_name != self.decode_hw_name
            or self.max_prefill_cards is not None
            or self.max_decode_cards is not None
            or self.max_cost is not None
            or self.kv_transfer_bytes_per_s is not None
        )
