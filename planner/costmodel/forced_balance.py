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
