"""What every cost function needs: the specs, and the effective rates derived from them once.

Effective rate = physical peak × the named efficiency of that kind of work (see `specs.hardware`).
The roofline time of an operator is the larger of its math at the effective math rate and its
HBM traffic at the effective bandwidth.

HBM a plan may fill is `hbm_utilization` of the device's HBM (`hbm_capacity_bytes`), as serving
engines reserve: vLLM's `gpu_memory_utilization` (default 0.9) is "the fraction of GPU memory to be
used for the model executor" (vLLM EngineArgs, v0.9+; vllm-ascend inherits it). The rest stays
free for fragmentation, the framework's own allocations and what the model here does not count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from planner.costmodel.imbalance import ImbalanceModel, default_imbalance_model
from planner.costmodel.kv_split import check_unsplit_decode_attention
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Workload
from planner.specs.quantization import QuantizationScheme, check_scheme_on_hardware

DEFAULT_HBM_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization default


@dataclass(frozen=True)
class CostContext:
    """Model, machine, scheme and workload, with effective rates precomputed."""

    model: ModelSpec
    hw: HardwareSpec
    quant: QuantizationScheme
    workload: Workload
    imbalance: ImbalanceModel = field(default_factory=default_imbalance_model)
    hbm_utilization: float = DEFAULT_HBM_UTILIZATION

    @property
    def hbm_capacity_bytes(self) -> float:
        """HBM per device a plan may fill: the device's HBM times `hbm_utilization`."""
        return self.hw.hbm_bytes * self.hbm_utilization

    kv_transfer_bytes_per_s: float | None = None  # prefill->decode link per device; None: the machine's
    # False: the decode attention kernel gives every (sequence, KV head) one core (planner/costmodel/kv_split.py)
    decode_attention_kv_split: bool = True

    def __post_init__(self) -> None:
        # a scheme whose GEMMs need a format the chip lacks is refused here, for every command
        check_scheme_on_hardware(self.quant, self.hw)
        if not self.decode_attention_kv_split:
            check_unsplit_decode_attention(self.model, self.hw)

    def module_flops_per_s(self, module: str) -> float:
        """Effective GEMM rate of `module` ('attention', 'dense_ffn', 'experts') at its scheme's math format."""
        fmt = self.quant.math_formats()[module]
        peak = self.hw.peak_flops_per_s.get(fmt)
        assert peak is not None  # checked in __post_init__
        return peak * self.hw.efficiency.matmul.value

    @property
    def linear_flops_per_s(self) -> float:
        """Effective math rate of the attention projections under the scheme."""
        return self.module_flops_per_s("attention")

    @property
    def bf16_matmul_flops_per_s(self) -> float:
        """Effective BF16 GEMM rate (LM head, router, absorbed MLA batched matmuls)."""
        return self.hw.peak_flops_per_s.bf16 * self.hw.efficiency.matmul.value

    @property
    def attention_flops_per_s(self) -> float:
        """Effective rate of the attention kernel (BF16 scores and values)."""
        return self.hw.peak_flops_per_s.bf16 * self.hw.efficiency.attention_compute.value

    @property
    def prefill_attention_flops_per_s(self) -> float:
        """Effective rate of the prefill attention kernel (its own factor where the machine states one)."""
        f = self.hw.efficiency.prefill_attention_compute or self.hw.efficiency.attention_compute
        return self.hw.peak_flops_per_s.bf16 * f.value

    @property
    def kv_link_bytes_per_s(self) -> float:
        """Prefill-to-decode KV transfer bandwidth per device (a stated override, else the machine's)."""
        return self.kv_transfer_bytes_per_s or self.hw.kv_transfer_bandwidth_bytes_per_s

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

    @property
    def kv_read_bytes_per_s(self) -> float:
        """Effective HBM bandwidth of the decode attention kernel's KV-cache reads per device (the machine's
        `efficiency.decode_kv_read_bandwidth`, else the HBM factor every other read uses)."""
        factor = self.hw.efficiency.decode_kv_read_bandwidth
        return self.hbm_bytes_per_s if factor is None else self.hw.hbm_bandwidth_bytes_per_s * factor.value

    def roofline_s(
        self, flops: ArrayLike, hbm_bytes: ArrayLike, flops_per_s: float, hbm_bytes_per_s: float | None = None
    ) -> np.ndarray:
        """Time of an operator: math at `flops_per_s` or HBM traffic (at `hbm_bytes_per_s`, default the
        effective HBM rate), whichever is longer."""
        return np.maximum(
            np.asarray(flops, dtype=float) / flops_per_s,
            np.asarray(hbm_bytes, dtype=float) / (self.hbm_bytes_per_s if hbm_bytes_per_s is None else hbm_bytes_per_s),
        )

    def elementwise_s(self, tokens: ArrayLike, bytes_per_token: float) -> np.ndarray:
        """Time of memory-bound elementwise kernels moving `bytes_per_token` for each of `tokens`
        (planner.costmodel.elementwise): bytes at the effective HBM rate, no arithmetic to hide them."""
        return np.asarray(tokens, dtype=float) * bytes_per_token / self.hbm_bytes_per_s

    # ---- workload-derived lengths (planner.specs.workload: the distribution, prefix hits) ------
    @property
    def mean_decode_context_tokens(self) -> float:
        """Mean KV length a decode step attends to: prompt plus half the completion, weighted by the
        time each request spends decoding (its output length) when lengths are a distribution."""
        return self.workload.stats.decode_context_mean

    @property
    def decode_context_std_tokens(self) -> float:
        """Spread of the contexts in the decode pool (uniform over each completion, over the mix)."""
        return self.workload.stats.decode_context_std

    @property
    def max_context_tokens(self) -> int:
        """KV slots the longest sequence needs at its end: prompt plus completion."""
        return self.workload.longest_context_tokens

    @property
    def prefill_tokens_per_request(self) -> int:
        """Prompt tokens a prefill instance computes per request (prefix-cache hits are not computed)."""
        w = self.workload
        return max(1, round(w.stats.mean_input * (1.0 - w.hit_rate)))

    @property
    def prefill_attended_tokens(self) -> float:
        """Mean KV positions a computed prompt token attends to (causal; over the mix of prompt lengths).

        A prompt of L tokens with a cached prefix of hL computes tokens hL..L, each attending to its
        position: on average (1 + h) L / 2. Over a mix, weighted by computed tokens:
        (1 + h) / 2 * E[L^2] / E[L] (+1/2 for the token itself).
        """
        w = self.workload
        s = w.stats
        return (1.0 + w.hit_rate) / 2.0 * s.input_second_moment / s.mean_input + 0.5

    @property
    def kv_tokens_per_computed_token(self) -> float:
        """KV positions a prefill instance holds per token it computes (cached prefixes occupy KV too)."""
        return self.workload.stats.mean_input / self.prefill_tokens_per_request

    @property
    def ttft_input_tokens(self) -> int:
        """Prompt length the TTFT SLO is judged at (the workload's SLO percentile)."""
        return self.workload.slo_input_tokens
