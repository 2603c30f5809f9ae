"""A benchmark's forced expert routing, as an imbalance model (for the published rows that ran so).

vLLM-Ascend's `enable_force_load_balance` (with the afd-plugin's `force_load_balance_topn_per_rank`)
replaces the router's expert ids by a deterministic cycle over a fixed number of experts of every
EP rank (vllm-project/afd-plugin, recipe/npu/CAMP2pAFDConnector/deepseek_v3_2/README.md,
"Important configuration"): every device gets exactly the mean load every step (no skew, no
sampling spread), and only those experts' weights are read. It is a property of the measurement,
not of real traffic: only rows that ran so use it (`forced_balance_experts_per_device` in
validation/ (the measured rows, docs/validation.md)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


@dataclass(frozen=True)
class ForcedBalance:
    """Every device at the mean load, routing cycling over `active_experts_per_device` experts."""

    active_experts_per_device: int

    def static_factor(self, experts: int, ep: int, slots_per_device: int) -> float:
        """No skew: the cycle spreads the tokens evenly."""
        return 1.0

    def dispersion(self, assignments_per_request: ArrayLike) -> np.ndarray:
        """A deterministic cycle: no per-step spread at all."""
        return np.zeros_like(np.asarray(assignments_per_request, dtype=float))

    def describe(self) -> str:
        return (
            f"forced balance: routing cycles over {self.active_experts_per_device} experts per device, every "
            "device at the mean load (a benchmark setting)"
        )


def round_robin_experts_per_device(routed_experts: int, ep: int, picks_per_rank: int) -> int:
    """Distinct experts the busiest EP rank serves under CANN's forced-EPLB decode routing.

    CANN's reference inference (hicann/cann-recipes-infer: `gen_cur_topk_idx` in
    models/deepseek-v4/models/modeling_deepseek.py at 5df82b1, `gen_force_eplb_topk_idx` in
    executor/core/model_worker/model_worker.py from c056cd7) gives rank r, without MoE TP, the picks at
    positions r * (p + 1) ... r * (p + 1) + p - 1 of one cycle over (local expert, rank), where p is its
    decode tokens times top-k: position g goes to rank g mod ep, local expert (g // ep) mod
    (routed_experts / ep). The ranks' runs are offset, so together they reach more of a rank's experts
    than one rank's picks do.
    """
    if ep < 1 or picks_per_rank < 1 or routed_experts % ep:
        raise ValueError("routed_experts must be a positive multiple of ep, and picks_per_rank positive")
    per_rank = routed_experts // ep
    starts = np.arange(ep)[:, None] * (picks_per_rank + 1)
    positions = (starts + np.arange(picks_per_rank)[None, :]).ravel()
    expert_ids = np.unique((positions % ep) * per_rank + (positions // ep) % per_rank)
    return int(np.bincount(expert_ids // per_rank, minlength=ep).max())
