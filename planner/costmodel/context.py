"""What every cost function needs: the specs, and the effective rates derived from them once.

Effective rate = physical peak × the named efficiency of that kind of work (see `specs.hardware`).
The roofline time of an operator is the larger of its math at the effective math rate and its
HBM traffic at the effective bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.imbalance import ImbalanceModel, default_imbalance_model
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Workload
from planner.specs.quantization import QuantizationScheme


@dataclass(frozen=True)
class CostContext:
    """Model, machine, scheme and workload, with effective rates precomputed."""

    model: ModelSpec
    hw: HardwareSpec
    quant: QuantizationScheme
    workload: Workload
    imbalance: ImbalanceModel = field(default_factory=default_imbalance_model)

    @property
    def linear_flops_per_s(self) -> float:
        """Effective math rate of linear layers and experts under the scheme."""
        peak = self.hw.peak_flops_per_s
        raw = peak.int8 if self.quant.linear_math == "int8" else peak.bf16
        return raw * self.hw.efficiency.matmul.value

    @property
    def bf16_matmul_flops_per_s(self) -> float:
        """Effective BF16 GEMM rate (LM head, router, absorbed MLA batched matmuls)."""
        return self.hw.peak_flops_per_s.bf16 * self.hw.efficiency.matmul.value

    @property
    def attention_flops_per_s(self) -> float:
        """Effective rate of the attention kernel (BF16 scores and values)."""
        return self.hw.peak_flops_per_s.bf16 * self.hw.efficiency.attention_compute.value

    @property
    def routed_expert_weight_bytes(self) -> float:
        """Bytes per routed-expert weight: the scheme's, or the checkpoint's format if narrower.

        Checkpoints with FP4/INT4 experts from quantisation-aware training (DeepSeek-V4,
        Kimi-K2.5/K3, NVFP4 MiniMax) are served in their own format: a scheme never widens them.
        """
        bits = self.model.expert_weight_bits
        if bits is None:
            return self.quant.expert_weight_bytes
        return min(self.quant.expert_weight_bytes, bits / 8.0)

    @property
    def hbm_bytes_per_s(self) -> float:
        """Effective HBM bandwidth per device."""
        return self.hw.hbm_bandwidth_bytes_per_s * self.hw.efficiency.hbm_bandwidth.value

    def roofline_s(self, flops: ArrayLike, hbm_bytes: ArrayLike, flops_per_s: float) -> np.ndarray:
        """Time of an operator: math at `flops_per_s` or HBM traffic, whichever is longer."""
        return np.maximum(
            np.asarray(flops, dtype=float) / flops_per_s,
            np.asarray(hbm_bytes, dtype=float) / self.hbm_bytes_per_s,
        )

    # ---- workload-derived lengths ------------------------------------------------------------
    @property
    def mean_decode_context_tokens(self) -> float:
        """Mean KV length a decode step attends to: prompt plus half the completion."""
        w = self.workload
        return w.input_tokens + w.output_tokens / 2.0

    @property
    def max_context_tokens(self) -> int:
        """KV slots a sequence needs at its end: prompt plus completion."""
        w = self.workload
        return w.input_tokens + w.output_tokens
