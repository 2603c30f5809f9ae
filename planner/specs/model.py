"""The model: attention (MLA or GQA), dense and MoE layers, shared experts, MTP layers.

`ModelSpec` is moeplan's own normalised description. It is built either from a YAML file in this
form or from a HuggingFace `config.json` (`specs.hf_config.from_hf_config`), the way the catalog
stores models. Parameter counts, per-token cache sizes and attention FLOPs are methods here so
that every later module computes them the same way. Attention kinds by layer: MLA, GQA, DSA
(MLA + lightning indexer; `dsa_shared`: a DSA layer reusing an earlier layer's top-k, GLM-5.2's
IndexShare), DeepSeek-V4's SWA/CSA/HCA, and linear attention (hybrids).
"""

from __future__ import annotations

from functools import lru_cache
from math import gcd
from typing import Literal

from pydantic import Field, model_validator

from planner.specs.hardware import Strict

AttentionKind = Literal["mla", "gqa", "compressed"]
LayerKind = Literal["mla", "gqa", "dsa", "dsa_shared", "swa", "csa", "hca", "linear"]
# layers of MLA's latent cache and weights (DSA's two kinds add the indexer's top-k to plain MLA)
MLA_KINDS: tuple[LayerKind, ...] = ("mla", "dsa", "dsa_shared")
DSA_KINDS: tuple[LayerKind, ...] = ("dsa", "dsa_shared")


class IndexerSpec(Strict):
    """DSA's lightning indexer: scores every earlier (or compressed) position, keeps the top-k.

    DeepSeek-V3.2 and GLM-5 (`index_n_heads`, `index_head_dim`, `index_topk`): the indexer has
    its own query heads (from the query LoRA), one shared key per position (its own small KV
    cache) and a weight per head; attention then reads only the top-k positions.
    """

    num_heads: int = Field(ge=1, le=4096)
    head_dim: int = Field(ge=1, le=4096)
    top_k: int = Field(ge=1, le=100_000_000)
    shared_layers: tuple[int, ...] = Field(
        default=(),
        description=(
            "0-based main layers that reuse the top-k of the nearest earlier layer with an indexer (GLM-5.2's "
            "IndexShare, config.json 'indexer_types' = 'shared'): no indexer weights, keys or scoring of their own"
        ),
    )
    mtp_reuses_top_k: bool = Field(
        default=False,
        description=(
            "MTP drafts after the first reuse the first draft's top-k (config.json 'index_share_for_mtp_iteration')"
        ),
    )

    @model_validator(mode="after")
    def _shared_layers_valid(self) -> IndexerSpec:
        if len(set(self.shared_layers)) != len(self.shared_layers) or any(i < 1 for i in self.shared_layers):
            raise ValueError("indexer.shared_layers must be distinct indices >= 1 (layer 0 has no earlier indexer)")
        return self


class CompressedAttentionSpec(Strict):
    """DeepSeek-V4's attention: one shared KV head of `head_dim`, compressed per layer.

    `compress_ratios[i]` for layer i (main layers, then MTP layers): 0 = sliding window only;
    a ratio r > 0 keeps one compressed entry per r tokens besides the window. Layers with
    0 < r <= `sparse_max_ratio` (CSA, r = 4) select the indexer's top-k compressed entries and
    compress with overlapping windows (twice the compressor weights); larger ratios (HCA, 128)
    attend to every compressed entry. The output projection is grouped low-rank
    (`o_groups` groups of `o_lora_rank`). DeepSeek-V4 tech report / model card (2026-04).
    """

    compress_ratios: tuple[int, ...] = Field(min_length=1, max_length=10_000)
    sliding_window: int = Field(ge=1, le=1_000_000)
    o_lora_rank: int = Field(ge=1, le=65536)
    o_groups: int = Field(ge=1, le=4096)
    sparse_max_ratio: int = Field(default=4, ge=1)

    @model_validator(mode="after")
    def _ratios_valid(self) -> CompressedAttentionSpec:
        if any(r < 0 for r in self.compress_ratios):
            raise ValueError("compress_ratios must be >= 0 (0: sliding window only)")
        return self


class LinearAttentionSpec(Strict):
    """Linear-attention layers of a hybrid: a fixed-size state per sequence instead of a KV cache.

    Gated DeltaNet (Qwen3.5: `linear_num_key_heads`, `linear_num_value_heads`, per-head scalar
    decay) and Kimi Delta Attention (Kimi-K3: per-channel decay through a low-rank gate). The
    state is key_head_dim x value_head_dim per value head, kept at `state_bytes_per_element`
    (FP32 in both reference implementations), plus a short causal convolution's last
    `conv_kernel - 1` inputs.
    """

    kind: Literal["gated_deltanet", "kda"]
    layers: tuple[int, ...] = Field(description="0-based indices of the linear-attention layers")
    num_key_heads: int = Field(ge=1, le=4096)
    num_value_heads: int = Field(ge=1, le=4096)
    key_head_dim: int = Field(ge=1, le=4096)
    value_head_dim: int = Field(ge=1, le=4096)
    conv_kernel: int = Field(default=4, ge=1, le=64)
    decay_gate_rank: int = Field(default=0, ge=0, description="0: one decay per head; >0: low-rank per channel")
    state_bytes_per_element: float = Field(default=4.0, gt=0)

    @model_validator(mode="after")
    def _heads_group(self) -> LinearAttentionSpec:
        if self.num_value_heads % self.num_key_heads:
            raise ValueError("linear attention needs num_value_heads to be a multiple of num_key_heads")
        if len(set(self.layers)) != len(self.layers) or any(i < 0 for i in self.layers):
            raise ValueError("linear attention layers must be distinct indices >= 0")
        return self

    def params(self, hidden: int) -> int:
        """Weights of one linear-attention layer: q/k/v, conv, beta, decay, output gate, output."""
        qk = self.num_key_heads * self.key_head_dim
        v = self.num_value_heads * self.value_head_dim
        qkv = hidden * (2 * qk + v)
        conv = (2 * qk + v) * self.conv_kernel
        beta = hidden * self.num_value_heads
        if self.decay_gate_rank:
            decay = hidden * self.decay_gate_rank + self.decay_gate_rank * self.num_value_heads * self.key_head_dim
        else:
            decay = hidden * self.num_value_heads
        gate = hidden * v
        return qkv + conv + beta + decay + gate + v * hidden

    def state_elements(self) -> int:
        """Recurrent state of one sequence in one layer (all heads)."""
        return self.num_value_heads * self.key_head_dim * self.value_head_dim

    def conv_state_elements(self) -> int:
        """Short-convolution history of one sequence in one layer."""
        return (2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim) * max(
            0, self.conv_kernel - 1
        )


class AttentionSpec(Strict):
    """Attention of the model's layers.

    `kind` is the full-attention kind: MLA (DeepSeek's multi-head latent attention), GQA
    (grouped query) or `compressed` (DeepSeek-V4: one shared KV head, compressed per layer, see
    `compressed`). `indexer` makes MLA layers DSA sparse attention (top-k of the indexer) and
    gives V4's CSA layers their selection. `linear` turns the listed layers into linear
    attention (hybrids). `output_gate`: a sigmoid gate of full width on the attention output
    (Qwen3.5's `attn_output_gate`, Kimi-K3's `mla_use_output_gate`). `qk_norm_across_heads`:
    the query and key RMSNorms of GQA layers span all heads' width, not one head's (MiniMax-M2's
    `qk_norm_type: per_layer`), so heads split over a TP group need the group's sums of squares.
    """

    kind: AttentionKind
    num_heads: int = Field(ge=1, le=4096)
    num_kv_heads: int = Field(default=0, ge=0, le=4096, description="GQA; compressed: 1")
    head_dim: int = Field(default=0, ge=0, le=4096, description="GQA and compressed")
    q_lora_rank: int | None = Field(default=None, ge=1, le=65536, description="MLA/compressed; None: no q LoRA")
    kv_lora_rank: int = Field(default=0, ge=0, le=65536, description="MLA only")
    qk_nope_head_dim: int = Field(default=0, ge=0, le=4096)
    qk_rope_head_dim: int = Field(default=0, ge=0, le=4096)
    v_head_dim: int = Field(default=0, ge=0, le=4096)
    output_gate: bool = False
    qk_norm_across_heads: bool = False
    indexer: IndexerSpec | None = None
    compressed: CompressedAttentionSpec | None = None
    linear: LinearAttentionSpec | None = None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> AttentionSpec:
        if self.kind == "mla":
            for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, name) < 1:
                    raise ValueError(f"MLA attention needs {name} >= 1")
        elif self.kind == "compressed":
            if self.compressed is None or self.head_dim < 1 or self.num_kv_heads != 1:
                raise ValueError("compressed attention needs compressed, head_dim >= 1 and num_kv_heads == 1")
            if any(0 < r <= self.compressed.sparse_max_ratio for r in self.compressed.compress_ratios) and (
                self.indexer is None
            ):
                raise ValueError("compressed attention with sparse (CSA) layers needs an indexer")
        else:
            if self.num_kv_heads < 1 or self.head_dim < 1:
                raise ValueError("GQA attention needs num_kv_heads >= 1 and head_dim >= 1")
            if self.num_heads % self.num_kv_heads:
                raise ValueError("GQA attention needs num_heads to be a multiple of num_kv_heads")
        if self.kind != "compressed" and self.compressed is not None:
            raise ValueError("compressed is only for kind: compressed")
        if self.qk_norm_across_heads and self.kind != "gqa":
            raise ValueError("qk_norm_across_heads is only for kind: gqa")
        return self


class MoESpec(Strict):
    """The mixture-of-experts FFN of the sparse layers.

    `latent_size`: Kimi-K3's latent MoE: the token is projected down to this width before the
    routed experts and back up after them (the experts' hidden width; shared experts stay full
    width). `hash_layers`: DeepSeek-V4's first MoE layers route by a hash of the token id (no
    router GEMM). `shared_expert_intermediate_size`: per shared expert, if it differs.
    """

    routed_experts: int = Field(ge=1, le=65536)
    experts_per_token: int = Field(ge=1, le=1024)
    shared_experts: int = Field(default=0, ge=0, le=64)
    expert_intermediate_size: int = Field(ge=1, le=1_000_000)
    shared_expert_intermediate_size: int | None = Field(default=None, ge=1, le=1_000_000)
    latent_size: int | None = Field(default=None, ge=1, le=1_000_000)
    hash_layers: int = Field(default=0, ge=0, le=10_000)
    n_group: int = Field(default=1, ge=1)
    topk_group: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _routing_fits(self) -> MoESpec:
        if self.experts_per_token > self.routed_experts:
            raise ValueError("experts_per_token cannot exceed routed_experts")
        if self.routed_experts % self.n_group:
            raise ValueError("routed_experts must be a multiple of n_group")
        if self.topk_group > self.n_group:
            raise ValueError("topk_group cannot exceed n_group")
        return self


class ModelSpec(Strict):
    """A transformer decoder, dense or mixture-of-experts."""

    schema_version: int = Field(default=1, ge=1, le=1)
    name: str = Field(min_length=1)
    hidden_size: int = Field(ge=1, le=1_000_000)
    num_layers: int = Field(ge=1, le=10_000)
    num_dense_layers: int = Field(ge=0, le=10_000, description="dense FFN layers (the first ones)")
    dense_intermediate_size: int = Field(default=0, ge=0, le=10_000_000)
    attention: AttentionSpec
    moe: MoESpec | None = None
    vocab_size: int = Field(ge=1, le=100_000_000)
    tie_word_embeddings: bool = False
    mtp_layers: int = Field(default=0, ge=0, le=16)
    max_context_tokens: int = Field(ge=1, le=1_000_000_000)
    expert_weight_format: str | None = Field(
        default=None, description="the checkpoint's routed-expert format, e.g. mxfp4 (from quantization_config)"
    )
    expert_weight_bits: float | None = Field(
        default=None, gt=0, le=32, description="bits per routed-expert weight in the checkpoint, scales included"
    )
    architectures: tuple[str, ...] = Field(
        default=(),
        description="the checkpoint's model classes (config.json 'architectures'): what an engine registers a model by",
    )
    draft: DraftSpec | None = Field(
        default=None,
        description="a separate draft model (EAGLE-3 head) drafting the decode's tokens instead of MTP layers",
    )
    residual_streams: int = Field(
        default=1,
        ge=1,
        le=64,
        description=(
            "residual streams a token carries between layers: 1 is a plain residual add; DeepSeek-V4's "
            "manifold-constrained hyper-connections keep hc_mult of them (config.json 'hc_mult')"
        ),
    )

    @model_validator(mode="after")
    def _layers_consistent(self) -> ModelSpec:
        if self.num_dense_layers > self.num_layers:
            raise ValueError("num_dense_layers cannot exceed num_layers")
        if self.moe is None and self.num_dense_layers != self.num_layers:
            raise ValueError("a model without moe must have num_dense_layers == num_layers")
        if self.num_dense_layers > 0 and self.dense_intermediate_size < 1:
            raise ValueError("dense layers need dense_intermediate_size >= 1")
        if self.moe is not None and self.num_dense_layers == self.num_layers:
            raise ValueError("moe is set but every layer is dense; set num_dense_layers lower")
        a = self.attention
        if a.compressed is not None and len(a.compressed.compress_ratios) not in (
            self.num_layers,
            self.num_layers + self.mtp_layers,
        ):
            raise ValueError("attention.compressed.compress_ratios needs one ratio per layer (main, then MTP)")
        if a.linear is not None:
            if any(i >= self.num_layers for i in a.linear.layers):
                raise ValueError("attention.linear.layers holds an index beyond num_layers")
            if len(a.linear.layers) == self.num_layers:
                raise ValueError("attention.linear.layers covers every layer; a hybrid keeps full-attention layers")
        if a.indexer is not None and a.indexer.shared_layers:
            if a.kind != "mla":
                raise ValueError("attention.indexer.shared_layers is modelled on MLA (DSA) layers only")
            if max(a.indexer.shared_layers) >= self.num_layers:
                raise ValueError("attention.indexer.shared_layers holds an index beyond num_layers")
        if self.moe is not None and self.moe.hash_layers > self.num_moe_layers:
            raise ValueError("moe.hash_layers cannot exceed the MoE layers")
        return self

    @property
    def speculates(self) -> bool:
        """True when decode can draft tokens: the model's own MTP layers or a draft model beside it."""
        return self.mtp_layers > 0 or self.draft is not None

    # ---- layer counts -------------------------------------------------------------------------
    @property
    def num_moe_layers(self) -> int:
        """Sparse (MoE) layers of the main model."""
        return self.num_layers - self.num_dense_layers

    # ---- attention kinds by layer --------------------------------------------------------------
    def layer_kind(self, index: int) -> LayerKind:
        """Attention kind of layer `index` (main layers 0..L-1, then MTP layers L..)."""
        a = self.attention
        if a.linear is not None and index in a.linear.layers:
            return "linear"
        if a.kind == "compressed":
            assert a.compressed is not None
            ratios = a.compressed.compress_ratios
            r = ratios[index] if index < len(ratios) else ratios[-1]
            if r == 0:
                return "swa"
            return "csa" if r <= a.compressed.sparse_max_ratio else "hca"
        if a.kind == "mla" and a.indexer is not None:
            return "dsa_shared" if index in a.indexer.shared_layers else "dsa"
        return a.kind

    def compress_ratio(self, index: int) -> int:
        """Compression ratio of layer `index` (1: uncompressed; 0: sliding window only)."""
        c = self.attention.compressed
        if c is None:
            return 1
        return c.compress_ratios[index] if index < len(c.compress_ratios) else c.compress_ratios[-1]

    def attention_groups(self, mtp: bool = False) -> list[tuple[LayerKind, int, int]]:
        """(kind, compress ratio, layer count) of the main layers (or of one MTP layer), in order of appearance."""
        return list(_attention_groups(self, mtp))

    # ---- parameter counts (elements, not bytes) -----------------------------------------------
    def attention_params_per_layer(
        self, kind: LayerKind | AttentionKind | None = None, ratio: int = 1
    ) -> dict[str, int]:
        """Attention weights of one layer of `kind` (default: the full-attention kind) by projection."""
        a, h = self.attention, self.hidden_size
        kind = kind or a.kind
        if kind == "linear":
            assert a.linear is not None
            return {"linear": a.linear.params(h)}
        idx = a.indexer
        if kind in ("swa", "csa", "hca", "compressed"):
            assert a.compressed is not None
            c = a.compressed
            q_in = a.q_lora_rank or h
            out = {
                "q": (h * a.q_lora_rank if a.q_lora_rank else 0) + q_in * a.num_heads * a.head_dim,
                "kv": h * a.head_dim,
                "o": a.num_heads * a.head_dim * c.o_lora_rank + c.o_groups * c.o_lora_rank * h,
            }
            if kind in ("csa", "hca"):
                overlap = 2 if kind == "csa" else 1
                out["compressor"] = 2 * h * a.head_dim * overlap
            if kind == "csa" and idx is not None:
                out["indexer"] = q_in * idx.num_heads * idx.head_dim + h * idx.num_heads + 2 * h * idx.head_dim * 2
            return out
        gate = 0
        if kind in MLA_KINDS:
            qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
            q = (
                (h * a.q_lora_rank + a.q_lora_rank * a.num_heads * qk_head)
                if a.q_lora_rank
                else (h * a.num_heads * qk_head)
            )
            out = {
                "q": q,
                "kv_a": h * (a.kv_lora_rank + a.qk_rope_head_dim),
                "kv_b": a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim),
                "o": a.num_heads * a.v_head_dim * h,
            }
            if a.output_gate:
                out["gate"] = h * a.num_heads * a.v_head_dim
            if kind == "dsa" and idx is not None:
                q_in = a.q_lora_rank or h
                out["indexer"] = q_in * idx.num_heads * idx.head_dim + h * idx.head_dim + h * idx.num_heads
            return out
        if a.output_gate:
            gate = h * a.num_heads * a.head_dim
        out = {
            "q": h * a.num_heads * a.head_dim,
            "kv": 2 * h * a.num_kv_heads * a.head_dim,
            "o": a.num_heads * a.head_dim * h,
        }
        if gate:
            out["gate"] = gate
        return out

    def attention_params_main(self) -> int:
        """Attention weights of all main layers (every kind)."""
        return sum(
            n * sum(self.attention_params_per_layer(kind, ratio).values()) for kind, ratio, n in self.attention_groups()
        )

    def attention_params_mtp_layer(self) -> int:
        """Attention weights of one MTP layer."""
        return sum(
            n * sum(self.attention_params_per_layer(kind, ratio).values())
            for kind, ratio, n in self.attention_groups(mtp=True)
        )

    def attention_params_all(self) -> int:
        """Attention weights of main and MTP layers."""
        return self.attention_params_main() + self.mtp_layers * self.attention_params_mtp_layer()

    def dense_ffn_params(self) -> int:
        """Weights of one dense (SwiGLU) FFN: gate, up and down projections."""
        return 3 * self.hidden_size * self.dense_intermediate_size

    def expert_params(self) -> int:
        """Weights of one routed expert: gate, up and down projections (at the latent width if any)."""
        if self.moe is None:
            return 0
        return 3 * (self.moe.latent_size or self.hidden_size) * self.moe.expert_intermediate_size

    def shared_expert_params(self) -> int:
        """Weights of one shared expert (full hidden width)."""
        if self.moe is None:
            return 0
        inter = self.moe.shared_expert_intermediate_size or self.moe.expert_intermediate_size
        return 3 * self.hidden_size * inter

    def expert_token_width(self) -> int:
        """Width of a token as the routed experts see it (and as dispatch moves it)."""
        if self.moe is None:
            return self.hidden_size
        return self.moe.latent_size or self.hidden_size

    def router_params(self) -> int:
        """Weights of one MoE layer's router (gate), plus a latent MoE's down/up projections."""
        if self.moe is None:
            return 0
        latent = 2 * self.hidden_size * self.moe.latent_size if self.moe.latent_size else 0
        return self.hidden_size * self.moe.routed_experts + latent

    def vocab_params(self) -> int:
        """Weights of the embedding table (the LM head has as many, unless tied)."""
        return self.vocab_size * self.hidden_size

    def mtp_extra_params(self) -> int:
        """Weights an MTP module adds besides its transformer layer: the 2h->h projection."""
        return 2 * self.hidden_size * self.hidden_size

    def moe_layer_params(self) -> int:
        """All weights of one MoE FFN: routed and shared experts, router (and latent projections)."""
        if self.moe is None:
            return 0
        return (
            self.moe.routed_experts * self.expert_params()
            + self.moe.shared_experts * self.shared_expert_params()
            + self.router_params()
        )

    def total_params(self) -> int:
        """All weights of the main model and its MTP layers, in elements."""
        return self.main_params() + self.mtp_params()

    def main_params(self) -> int:
        """Weights of the main model (the figure model cards publish; MTP layers excluded)."""
        dense = self.num_dense_layers * self.dense_ffn_params()
        experts = self.num_moe_layers * self.moe_layer_params()
        vocab = self.vocab_params() * (1 if self.tie_word_embeddings else 2)
        return self.attention_params_main() + dense + experts + vocab

    def mtp_params(self) -> int:
        """Weights of the MTP layers (each a transformer layer with an MoE FFN and the 2h->h projection)."""
        if not self.mtp_layers:
            return 0
        ffn = self.moe_layer_params() if self.moe is not None else self.dense_ffn_params()
        return self.mtp_layers * (self.attention_params_mtp_layer() + ffn + self.mtp_extra_params())

    def active_params(self, embedding: bool = False, lm_head: bool = True) -> int:
        """Weights one token computes with in the main model: attention, dense FFN, its top-k and
        shared experts, routers and the LM head (plus the embedding table with `embedding`).

        Model cards differ on whether embedding and LM head count as active; `embedding` and
        `lm_head` give either convention."""
        dense = self.num_dense_layers * self.dense_ffn_params()
        experts = 0
        if self.moe is not None:
            per_layer = (
                self.moe.experts_per_token * self.expert_params()
                + self.moe.shared_experts * self.shared_expert_params()
                + self.router_params()
            )
            experts = self.num_moe_layers * per_layer
        copies = (1 if lm_head else 0) + (1 if embedding and not (self.tie_word_embeddings and lm_head) else 0)
        return self.attention_params_main() + dense + experts + self.vocab_params() * copies

    # ---- KV cache -------------------------------------------------------------------------------
    def kv_elements_per_token_per_layer(self) -> int:
        """KV-cache elements one token stores in one full-attention layer (all heads)."""
        a = self.attention
        if a.kind == "mla":
            return a.kv_lora_rank + a.qk_rope_head_dim
        if a.kind == "compressed":
            return a.head_dim
        return 2 * a.num_kv_heads * a.head_dim

    def kv_layers(self) -> int:
        """Layers that hold attention weights: every main layer and every MTP layer."""
        return self.num_layers + self.mtp_layers

    def kv_cache_bytes(
        self, context_tokens: float, kv_bytes_per_element: float, tp: int = 1, include_mtp: bool = True
    ) -> tuple[float, float]:
        """Cache of one sequence at `context_tokens`, all layers: (bytes growing with the context, fixed bytes).

        Per layer kind: MLA keeps its latent and RoPE key (replicated over TP), DSA also the
        indexer's key; GQA K and V of the KV heads (split over TP up to the KV head count);
        DeepSeek-V4 one entry of `head_dim` per `ratio` tokens (CSA also the indexer key per
        entry) plus the sliding window of uncompressed entries and the compressor's pending
        block; linear attention its recurrent state and convolution history (split over TP by
        head), independent of the context. `tp` is the attention core's TP (bytes per device).
        """
        a = self.attention
        kvb = kv_bytes_per_element
        layers = self.num_layers + (self.mtp_layers if include_mtp else 0)
        growing = fixed = 0.0
        for i in range(layers):
            kind, r = self.layer_kind(i), self.compress_ratio(i)
            if kind in MLA_KINDS:
                elems = a.kv_lora_rank + a.qk_rope_head_dim + (a.indexer.head_dim if kind == "dsa" and a.indexer else 0)
                growing += elems * kvb
            elif kind == "gqa":
                growing += 2 * a.head_dim * max(1.0, a.num_kv_heads / tp) * kvb
            elif kind == "linear":
                assert a.linear is not None
                share = 1.0 / min(tp, a.linear.num_key_heads)
                fixed += a.linear.state_elements() * a.linear.state_bytes_per_element * share
                fixed += a.linear.conv_state_elements() * kvb * share
            else:
                assert a.compressed is not None
                window = min(context_tokens, a.compressed.sliding_window)
                fixed += window * a.head_dim * kvb
                if r > 0:
                    idx = a.indexer.head_dim if kind == "csa" and a.indexer else 0
                    growing += (a.head_dim + idx) * kvb / r
                    # the block being compressed: r (2r with overlap) tokens' entries and scores
                    overlap = 2 if kind == "csa" else 1
                    fixed += min(context_tokens, overlap * r) * 2 * a.head_dim * kvb
        return growing * context_tokens, fixed

    def kv_bytes_per_token(
        self, context_tokens: float, kv_bytes_per_element: float = 2.0, include_mtp: bool = True
    ) -> float:
        """Cache bytes of one sequence of `context_tokens` tokens, divided by its length."""
        growing, fixed = self.kv_cache_bytes(context_tokens, kv_bytes_per_element, include_mtp=include_mtp)
        return (growing + fixed) / max(context_tokens, 1.0)

    def attention_flops_per_token(self, context_tokens: float, include_mtp: bool = False) -> float:
        """Attention-core FLOPs of one new token at `context_tokens` (scores, values, indexer; decode,
        MLA absorbed), all layers. Projections are in `active_params`."""
        layers = self.num_layers + (self.mtp_layers if include_mtp else 0)
        total = 0.0
        for i in range(layers):
            kind, r = self.layer_kind(i), self.compress_ratio(i)
            total += layer_attention_flops(self, kind, r, context_tokens)
        return total

    def flops_per_token(self, context_tokens: float) -> float:
        """FLOPs of one decoded token at `context_tokens`: 2 per active weight plus the attention core."""
        return 2.0 * self.active_params() + self.attention_flops_per_token(context_tokens)

    def attention_tp_divisor(self) -> int:
        """Attention TP degrees must divide this: the heads, V4's output groups, the linear layers' key heads."""
        a = self.attention
        d = a.num_heads
        if a.compressed is not None:
            d = gcd(d, a.compressed.o_groups)
        if a.linear is not None:
            d = gcd(d, a.linear.num_key_heads)
        return d

    def is_plain(self) -> bool:
        """True for models of one full-attention kind in every layer (MLA or GQA, no indexer)."""
        a = self.attention
        return a.kind != "compressed" and a.indexer is None and a.linear is None


def attended_entries(model: ModelSpec, kind: LayerKind, ratio: int, context_tokens: float) -> float:
    """KV entries one query token at position `context_tokens` attends to in a layer of `kind`."""
    a = model.attention
    L = float(context_tokens)
    if kind == "linear":
        return 0.0
    if kind in ("mla", "gqa"):
        return L
    if kind in DSA_KINDS:
        assert a.indexer is not None
        return min(L, float(a.indexer.top_k))
    assert a.compressed is not None
    window = min(L, float(a.compressed.sliding_window))
    if kind == "swa":
        return window
    compressed = L / ratio
    if kind == "csa" and a.indexer is not None:
        compressed = min(compressed, float(a.indexer.top_k))
    return window + compressed


def indexed_entries(model: ModelSpec, kind: LayerKind, ratio: int, context_tokens: float) -> float:
    """Positions the indexer scores for one query token (0 for layers without an indexer)."""
    if kind == "dsa":
        return float(context_tokens)
    if kind == "csa":
        return float(context_tokens) / ratio
    return 0.0


def layer_attention_flops(model: ModelSpec, kind: LayerKind, ratio: int, context_tokens: float) -> float:
    """Attention-core FLOPs of one query token in one layer (decode; MLA absorbed)."""
    a = model.attention
    if kind == "linear":
        assert a.linear is not None
        lin = a.linear
        # state decay/update (k v^T, the delta-rule correction) and the read-out q^T S: ~6 dk dv per head
        return 6.0 * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim
    if kind in MLA_KINDS:
        score, value = a.kv_lora_rank + a.qk_rope_head_dim, a.kv_lora_rank
    elif kind == "gqa":
        score = value = a.head_dim
    else:
        score = value = a.head_dim
    flops = 2.0 * a.num_heads * attended_entries(model, kind, ratio, context_tokens) * (score + value)
    if a.indexer is not None:
        flops += 2.0 * a.indexer.num_heads * a.indexer.head_dim * indexed_entries(model, kind, ratio, context_tokens)
    return flops


@lru_cache(maxsize=256)
def _attention_groups(model: ModelSpec, mtp: bool) -> tuple[tuple[LayerKind, int, int], ...]:
    indices = [model.num_layers] if mtp else range(model.num_layers)
    counts: dict[tuple[LayerKind, int], int] = {}
    for i in indices:
        key = (model.layer_kind(i), model.compress_ratio(i))
        counts[key] = counts.get(key, 0) + 1
    return tuple((kind, ratio, n) for (kind, ratio), n in counts.items())


class DraftSpec(Strict):
    """An EAGLE-3 draft head: one decoder layer that runs beside the target model and drafts tokens.

    EAGLE-3 (Li et al., arXiv 2503.01840, section 3) feeds the draft layer the target's hidden
    states of `aux_hidden_states` layers, fused by one `aux_hidden_states x h -> h` projection (the
    `fc`), concatenated with the token embedding, so the layer's Q, K and V projections take 2h
    inputs; its LM head covers a reduced draft vocabulary (`draft_vocab_size`) mapped back to the
    target's. `layer` is that decoder layer as a one-layer dense model (its LM head over the draft
    vocabulary); `extra_params()` is what the layer holds beyond it (the fc and the wider Q/K/V
    inputs). The embedding table is the target's size (`embedding_vocab`).
    """

    name: str = Field(min_length=1)
    method: Literal["eagle3"] = "eagle3"
    target: str = Field(min_length=1, description="the catalog model the head was trained for")
    checkpoint: str = Field(min_length=1, description="the checkpoint an engine loads (hub id or path)")
    layer: ModelSpec
    aux_hidden_states: int = Field(ge=1, le=16, description="target layers whose hidden states the fc fuses")
    embedding_vocab: int = Field(ge=1, le=100_000_000)

    def extra_params(self) -> int:
        """The fc (aux x h -> h) and the Q/K/V projections' second h inputs (the embedding half)."""
        h = self.layer.hidden_size
        a = self.layer.attention
        qkv_out = a.num_heads * a.head_dim + 2 * a.num_kv_heads * a.head_dim
        return self.aux_hidden_states * h * h + h * qkv_out

    def params(self) -> int:
        """Every weight of the head: its layer, LM head, fc, wider inputs and embedding table."""
        layer = self.layer.attention_params_per_layer()
        body = sum(layer.values()) + self.layer.dense_ffn_params()
        return body + self.extra_params() + self.layer.vocab_params() + self.embedding_vocab * self.layer.hidden_size


ModelSpec.model_rebuild()
