"""Bytes the memory-bound elementwise kernels between the GEMMs move, per token and layer.

The GEMMs' rooflines count their weights (and, for the experts, their activations); the kernels
between them are separate launches that read a tensor from HBM and write the next: RMSNorm with
the activation quantisation, RoPE, the key assembly of non-absorbed MLA, the quantisation before
the output projection, SwiGLU with its quantisation, the MoE permutation into expert order and the
weighted un-permutation, and the residual adds. They have no arithmetic to speak of: each costs
its bytes at the HBM rate. Per decode token they are small against the weights a step reads; per
prefill token they are a fixed share of the work (DeepSeek-V3: about 0.6 MB per token per MoE
layer), which is why a prefill forward runs well under its GEMMs' peak (the CloudMatrix384 paper's
INT8 GEMM at 77-83% and MLA at 65.4% of peak, arXiv 2506.12708, are kernel figures; the
end-to-end prefill of that paper runs at about 4.45 tokens/s per TFLOPS).

Counts follow the fused operators of the engines' Ascend and CUDA graphs: RMSNorm fused with the
dynamic quantisation (read BF16, write the activation format), SwiGLU fused with it (read the
gate and up halves in BF16, write the activation format), RoPE in place (read and write), the
residual add (read two, write one). A token's tensors split by heads over a TP group cost the
same per device (the group's tokens times the device's share of the heads), so the counts are
per token whatever the layout.
"""

from __future__ import annotations

from planner.specs.model import ModelSpec
from planner.specs.quantization import QuantizationScheme

BF16 = 2.0


def _act(q: QuantizationScheme) -> float:
    return q.activation_bytes_per_element


def residual_bytes(model: ModelSpec) -> float:
    """The residual connection around one sub-layer (attention or FFN).

    A plain residual add reads the two BF16 inputs and writes the sum. A model with n residual
    streams (DeepSeek-V4's manifold-constrained hyper-connections, n = hc_mult = 4) runs two fused
    kernels instead: hc_pre reads the n streams and writes the sub-layer's input, hc_post reads the
    sub-layer's output and the n streams and writes the n new ones, all BF16 (the shapes of CANN's
    npu_hc_pre / npu_hc_post in its DeepSeek-V4 reference, hicann/cann-recipes-infer
    models/deepseek_v4/models/modules/op_impls/mhc.py @ fe9bc80, the kernels its benchmarks run by
    default). The mixing weights (a (2n + n^2) x nh FP32 matrix per sub-layer, 1.5 MB in V4-Flash) and
    the Sinkhorn iterations on each token's n x n mix are left out: tens of microseconds a step.
    """
    h, n = model.hidden_size, model.residual_streams
    if n == 1:
        return 3 * h * BF16
    return (n + 1) * h * BF16 + (2 * n + 1) * h * BF16


def hyper_connection_matrix_ops(model: ModelSpec) -> int:
    """Operators a sub-layer's residual connection adds to the plain add's: hc_pre, whose mixing
    GEMM makes it a matrix launch (hc_post takes the add's place); none for a plain residual."""
    return 1 if model.residual_streams > 1 else 0


def norm_quant_bytes(width: float, q: QuantizationScheme) -> float:
    """RMSNorm fused with the activation quantisation: read BF16, write the activation format."""
    return width * (BF16 + _act(q))


def attention_bytes_per_token(model: ModelSpec, q: QuantizationScheme, decode: bool) -> float:
    """Elementwise bytes of one attention layer (input norm to residual add) per token."""
    a, h = model.attention, model.hidden_size
    out = norm_quant_bytes(h, q) + residual_bytes(model)
    if a.kv_lora_rank:
        rope, nope, v = a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim
        latent = a.kv_lora_rank + rope
        out += norm_quant_bytes(a.q_lora_rank, q) if a.q_lora_rank else 0.0
        out += 2 * latent * BF16  # kv_a norm and the key's RoPE, in place
        out += 2 * a.num_heads * rope * BF16  # the query's RoPE, in place
        if not decode:
            # non-absorbed prefill: every head's key is the up-projected nope part and the shared rope part
            out += a.num_heads * nope * BF16 + a.num_heads * (nope + rope) * BF16
        out += a.num_heads * v * (BF16 + _act(q))  # quantise the attention output for o_proj
        return out
    d = a.head_dim
    heads = a.num_heads + a.num_kv_heads
    out += 2 * heads * d * BF16  # RoPE on queries and keys (and their norms where the model has them)
    out += a.num_heads * d * (BF16 + _act(q))
    return out


def dense_ffn_bytes_per_token(model: ModelSpec, q: QuantizationScheme) -> float:
    """Elementwise bytes of one dense SwiGLU FFN layer per token."""
    inter = model.dense_intermediate_size
    return norm_quant_bytes(model.hidden_size, q) + inter * (2 * BF16 + _act(q)) + residual_bytes(model)


def moe_bytes_per_token(model: ModelSpec, q: QuantizationScheme) -> float:
    """Elementwise bytes of one MoE layer per token of the device (norm, combine, shared expert, residual)."""
    assert model.moe is not None
    h = model.expert_token_width()
    out = norm_quant_bytes(model.hidden_size, q) + residual_bytes(model)
    out += h * BF16  # the weighted sum of the returned copies, written once per token
    if model.moe.shared_experts:
        inter = model.moe.shared_expert_intermediate_size or model.moe.expert_intermediate_size
        out += model.moe.shared_experts * inter * (2 * BF16 + _act(q))
    return out


def moe_bytes_per_assignment(model: ModelSpec, q: QuantizationScheme) -> float:
    """Elementwise bytes of one token-expert assignment on the device that runs the expert.

    Permute the received copy into expert order (read and write it at dispatch precision), SwiGLU
    with its quantisation, and read the expert's BF16 output back for the weighted sum.
    """
    assert model.moe is not None
    h = model.expert_token_width()
    inter = model.moe.expert_intermediate_size
    return 2 * h * q.dispatch_bytes_per_element + inter * (2 * BF16 + _act(q)) + h * BF16
