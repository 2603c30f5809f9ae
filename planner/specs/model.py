"""The model: attention (MLA or GQA), dense and MoE layers, shared experts, MTP layers.

`ModelSpec` is moeplan's own normalised description. It is built either from a YAML file in this
form or from a HuggingFace `config.json` (`from_hf_config`), the way the catalog stores models.
Parameter counts and per-token sizes are methods here so that every later module computes them
the same way.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from planner.specs.hardware import Strict


class AttentionSpec(Strict):
    """Attention of every layer. MLA: DeepSeek's multi-head latent attention; GQA: grouped query."""

    kind: Literal["mla", "gqa"]
    num_heads: int = Field(ge=1, le=4096)
    num_kv_heads: int = Field(default=0, ge=0, le=4096, description="GQA only")
    head_dim: int = Field(default=0, ge=0, le=4096, description="GQA only")
    q_lora_rank: int | None = Field(default=None, ge=1, le=65536, description="MLA; None: no q LoRA")
    kv_lora_rank: int = Field(default=0, ge=0, le=65536, description="MLA only")
    qk_nope_head_dim: int = Field(default=0, ge=0, le=4096)
    qk_rope_head_dim: int = Field(default=0, ge=0, le=4096)
    v_head_dim: int = Field(default=0, ge=0, le=4096)

    @model_validator(mode="after")
    def _fields_of_kind(self) -> AttentionSpec:
        if self.kind == "mla":
            for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, name) < 1:
                    raise ValueError(f"MLA attention needs {name} >= 1")
        else:
            if self.num_kv_heads < 1 or self.head_dim < 1:
                raise ValueError("GQA attention needs num_kv_heads >= 1 and head_dim >= 1")
            if self.num_heads % self.num_kv_heads:
                raise ValueError("GQA attention needs num_heads to be a multiple of num_kv_heads")
        return self


class MoESpec(Strict):
    """The mixture-of-experts FFN of the sparse layers."""

    routed_experts: int = Field(ge=1, le=65536)
    experts_per_token: int = Field(ge=1, le=1024)
    shared_experts: int = Field(default=0, ge=0, le=64)
    expert_intermediate_size: int = Field(ge=1, le=1_000_000)
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
        return self

    # ---- layer counts -------------------------------------------------------------------------
    @property
    def num_moe_layers(self) -> int:
        """Sparse (MoE) layers of the main model."""
        return self.num_layers - self.num_dense_layers

    # ---- parameter counts (elements, not bytes) -----------------------------------------------
    def attention_params_per_layer(self) -> dict[str, int]:
        """Attention weights of one layer by projection."""
        a, h = self.attention, self.hidden_size
        if a.kind == "mla":
            qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
            q = (
                (h * a.q_lora_rank + a.q_lora_rank * a.num_heads * qk_head)
                if a.q_lora_rank
                else (h * a.num_heads * qk_head)
            )
            return {
                "q": q,
                "kv_a": h * (a.kv_lora_rank + a.qk_rope_head_dim),
                "kv_b": a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim),
                "o": a.num_heads * a.v_head_dim * h,
            }
        return {
            "q": h * a.num_heads * a.head_dim,
            "kv": 2 * h * a.num_kv_heads * a.head_dim,
            "o": a.num_heads * a.head_dim * h,
        }

    def dense_ffn_params(self) -> int:
        """Weights of one dense (SwiGLU) FFN: gate, up and down projections."""
        return 3 * self.hidden_size * self.dense_intermediate_size

    def expert_params(self) -> int:
        """Weights of one routed (or shared) expert: gate, up and down projections."""
        if self.moe is None:
            return 0
        return 3 * self.hidden_size * self.moe.expert_intermediate_size

    def router_params(self) -> int:
        """Weights of one MoE layer's router (gate)."""
        return 0 if self.moe is None else self.hidden_size * self.moe.routed_experts

    def vocab_params(self) -> int:
        """Weights of the embedding table (the LM head has as many, unless tied)."""
        return self.vocab_size * self.hidden_size

    def mtp_extra_params(self) -> int:
        """Weights an MTP module adds besides its transformer layer: the 2h->h projection."""
        return 2 * self.hidden_size * self.hidden_size

    def total_params(self) -> int:
        """All weights of the main model and its MTP layers, in elements."""
        attn = sum(self.attention_params_per_layer().values())
        layers = self.num_layers + self.mtp_layers
        moe_layers = self.num_moe_layers + self.mtp_layers if self.moe else 0
        dense = self.num_dense_layers * self.dense_ffn_params()
        experts = 0
        if self.moe is not None:
            per_layer = (self.moe.routed_experts + self.moe.shared_experts) * self.expert_params()
            experts = moe_layers * (per_layer + self.router_params())
        vocab = self.vocab_params() * (1 if self.tie_word_embeddings else 2)
        return layers * attn + dense + experts + vocab + self.mtp_layers * self.mtp_extra_params()

    # ---- KV cache -------------------------------------------------------------------------------
    def kv_elements_per_token_per_layer(self) -> int:
        """KV-cache elements one token stores in one layer (all heads)."""
        a = self.attention
        if a.kind == "mla":
            return a.kv_lora_rank + a.qk_rope_head_dim
        return 2 * a.num_kv_heads * a.head_dim

    def kv_layers(self) -> int:
        """Layers that keep a KV cache: every main layer and every MTP layer."""
        return self.num_layers + self.mtp_layers


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


# model_types known to be mixture-of-experts, and the config.json keys their experts need (each
# a tuple of accepted spellings): a missing or misspelled one must not turn the model dense.
MOE_MODEL_TYPES: dict[str, tuple[tuple[str, ...], ...]] = {
    "deepseek_v2": (("n_routed_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",)),
    "deepseek_v3": (("n_routed_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",)),
    "kimi_k2": (("n_routed_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",)),
    "qwen2_moe": (("num_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",)),
    "qwen3_moe": (("num_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",)),
    "mixtral": (("num_local_experts",), ("num_experts_per_tok",), ("intermediate_size",)),
}


def _check_moe_keys(cfg: dict[str, Any]) -> None:
    """For a model_type known to be MoE, every expert key must be there (ValueError naming it)."""
    model_type = cfg.get("model_type")
    required = MOE_MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    for spellings in required or ():
        if all(cfg.get(k) is None for k in spellings):
            raise ValueError(
                f"model_type '{model_type}' is a mixture-of-experts model but config.json lacks "
                f"'{spellings[0]}'; add it (check its spelling) or the model would be read as dense"
            )


def from_hf_config(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Translate a HuggingFace config.json mapping into ModelSpec fields (validated by the caller).

    Understands DeepSeek-V2/V3 and Kimi-K2 (MLA, `n_routed_experts`), Qwen3-MoE / Mixtral style
    (`num_experts` / `num_local_experts`), and dense Llama/Qwen style configs.
    """
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):
        cfg = {**cfg, **cfg["text_config"]}
    _check_moe_keys(cfg)
    hidden = _get(cfg, "hidden_size")
    layers = _get(cfg, "num_hidden_layers")
    heads = _get(cfg, "num_attention_heads")
    missing = [
        n
        for n, v in (
            ("hidden_size", hidden),
            ("num_hidden_layers", layers),
            ("num_attention_heads", heads),
            ("vocab_size", _get(cfg, "vocab_size")),
        )
        if v is None
    ]
    if missing:
        raise ValueError("config.json lacks " + ", ".join(missing))
    attention: dict[str, Any]
    if _get(cfg, "kv_lora_rank") is not None:
        attention = {
            "kind": "mla",
            "num_heads": heads,
            "q_lora_rank": _get(cfg, "q_lora_rank"),
            "kv_lora_rank": cfg["kv_lora_rank"],
            "qk_nope_head_dim": _get(cfg, "qk_nope_head_dim", default=128),
            "qk_rope_head_dim": _get(cfg, "qk_rope_head_dim", default=64),
            "v_head_dim": _get(cfg, "v_head_dim", default=128),
        }
    else:
        head_dim = _get(cfg, "head_dim")
        if head_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
            head_dim = hidden // heads
        attention = {
            "kind": "gqa",
            "num_heads": heads,
            "num_kv_heads": _get(cfg, "num_key_value_heads", default=heads),
            "head_dim": head_dim,
        }
    routed = _get(cfg, "n_routed_experts", "num_experts", "num_local_experts", default=0) or 0
    moe: dict[str, Any] | None = None
    dense_layers = layers
    if routed:
        moe = {
            "routed_experts": routed,
            "experts_per_token": _get(cfg, "num_experts_per_tok", "moe_topk", default=1),
            "shared_experts": _get(cfg, "n_shared_experts", default=0)
            or (1 if _get(cfg, "shared_expert_intermediate_size") else 0),
            "expert_intermediate_size": _get(cfg, "moe_intermediate_size", "intermediate_size"),
            "n_group": _get(cfg, "n_group", default=1),
            "topk_group": _get(cfg, "topk_group", default=1),
        }
        dense_layers = _get(cfg, "first_k_dense_replace", default=0)
        sparse_step = _get(cfg, "decoder_sparse_step", "moe_layer_freq", default=1)
        if isinstance(sparse_step, int) and sparse_step > 1 and isinstance(layers, int):
            # Only every sparse_step-th layer is MoE; count the others as dense.
            dense_layers = layers - layers // sparse_step
        mlp_only = _get(cfg, "mlp_only_layers", default=[]) or []
        if isinstance(mlp_only, list):
            dense_layers += len(mlp_only)
    return {
        "name": name,
        "hidden_size": hidden,
        "num_layers": layers,
        "num_dense_layers": dense_layers,
        "dense_intermediate_size": _get(cfg, "intermediate_size", default=0) if dense_layers else 0,
        "attention": attention,
        "moe": moe,
        "vocab_size": cfg.get("vocab_size"),
        "tie_word_embeddings": bool(_get(cfg, "tie_word_embeddings", default=False)),
        "mtp_layers": _get(cfg, "num_nextn_predict_layers", default=0),
        "max_context_tokens": _get(cfg, "max_position_embeddings", "max_sequence_length", default=4096),
    }


def looks_like_hf_config(data: dict[str, Any]) -> bool:
    """True when a mapping is a HuggingFace config.json rather than a ModelSpec."""
    return "num_hidden_layers" in data or "architectures" in data or "model_type" in data
