"""Translate a HuggingFace `config.json` into `ModelSpec` fields, refusing what moeplan does not model.

Families read (each config as published, unchanged):
- DeepSeek-V2/V3/R1, Kimi-K2/K2.5 (`deepseek_v2`, `deepseek_v3`, `kimi_k2`, `kimi_k25`): MLA + MoE;
- DeepSeek-V3.2 (`deepseek_v32`) and GLM-5/5.1/5.2 (`glm_moe_dsa`): MLA + DSA's lightning indexer
  (`index_n_heads`, `index_head_dim`, `index_topk`); GLM-5.2's IndexShare (`indexer_types`: layers
  that reuse the last full layer's top-k; `index_share_for_mtp_iteration`: MTP drafts reuse the
  first draft's);
- DeepSeek-V4 (`deepseek_v4`, or `DeepseekV4ForCausalLM` under another model_type):
  `compress_ratios` per layer, `sliding_window`, one KV head of `head_dim`, grouped low-rank
  output (`o_lora_rank`, `o_groups`), `num_hash_layers` hash-routed MoE layers, FP4 experts
  (`expert_dtype`), `hc_mult` residual streams (manifold-constrained hyper-connections);
- Qwen3.5 (`qwen3_5_moe`): Gated DeltaNet layers and full GQA layers by `layer_types`;
- Kimi-K3 (`kimi_k3` / `kimi_linear`): KDA layers and MLA layers by `linear_attn_config`,
  latent MoE (`routed_expert_hidden_size`);
- MiniMax-M2/M2.5 (`minimax_m2`; `qk_norm_type: per_layer`, q and k norms across heads), Qwen3-MoE, Mixtral
  and dense Llama/Qwen style configs: GQA.

A field that shapes attention or the MoE and that moeplan does not model is refused with its
name (`UnmodelledFieldError`, a ValueError the catalog turns into exit 2): planning it as an
older model without a word would give wrong figures. Fields that do not change cost or memory
(norm epsilons, RoPE settings, routing score functions, generation defaults) are accepted.
"""

from __future__ import annotations

import re
from typing import Any

KNOWN_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "qwen2_moe",
        "qwen3_moe",
        "mixtral",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "deepseek_v4",
        "kimi_k2",
        "kimi_k25",
        "kimi_k3",
        "kimi_linear",
        "glm_moe_dsa",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "minimax_m2",
    }
)
# model_type strings seen on re-publications of a known architecture (e.g. sgl-project's
# DeepSeek-V4-Flash-FP8 says "deepseek_ref"): accepted when `architectures` names a known class.
KNOWN_ARCHITECTURES = {"DeepseekV4ForCausalLM": "deepseek_v4"}

# model_types known to be mixture-of-experts, and the config.json keys their experts need (each a
# tuple of accepted spellings): a missing or misspelled one must not turn the model dense.
# The shared-expert count and the number of leading dense layers are read as 0 when absent, which
# changes the model (DeepSeek-V3 without `first_k_dense_replace`: 61 MoE layers, 704 B parameters
# instead of 671 B; transformers' own defaults differ again), so the families whose every public
# config.json holds them must hold them. DeepSeek-V4 has no dense layers (hash-routed ones instead).
_DEEPSEEK_MOE_KEYS = (
    ("n_routed_experts",),
    ("num_experts_per_tok",),
    ("moe_intermediate_size",),
    ("n_shared_experts",),
    ("first_k_dense_replace",),
)
_QWEN_MOE_KEYS = (("num_experts",), ("num_experts_per_tok",), ("moe_intermediate_size",))
_KIMI_LINEAR_KEYS = (
    ("num_experts",),
    ("num_experts_per_token", "num_experts_per_tok"),
    ("num_shared_experts", "n_shared_experts"),
    ("first_k_dense_replace",),
)
MOE_MODEL_TYPES: dict[str, tuple[tuple[str, ...], ...]] = {
    "deepseek_v2": _DEEPSEEK_MOE_KEYS,
    "deepseek_v3": _DEEPSEEK_MOE_KEYS,
    "deepseek_v32": _DEEPSEEK_MOE_KEYS,
    "deepseek_v4": _DEEPSEEK_MOE_KEYS[:4],
    "kimi_k2": _DEEPSEEK_MOE_KEYS,
    "kimi_k25": _DEEPSEEK_MOE_KEYS,
    "glm_moe_dsa": _DEEPSEEK_MOE_KEYS,
    "kimi_linear": _KIMI_LINEAR_KEYS,
    "kimi_k3": _KIMI_LINEAR_KEYS,
    "qwen2_moe": _QWEN_MOE_KEYS + (("shared_expert_intermediate_size",),),
    "qwen3_moe": _QWEN_MOE_KEYS,  # (no shared expert)
    "qwen3_5_moe": _QWEN_MOE_KEYS + (("shared_expert_intermediate_size",),),
    "qwen3_5_moe_text": _QWEN_MOE_KEYS + (("shared_expert_intermediate_size",),),
    "mixtral": (("num_local_experts",), ("num_experts_per_tok",), ("intermediate_size",)),
    "minimax_m2": (("num_local_experts",), ("num_experts_per_tok",), ("intermediate_size",)),
}


def _check_moe_keys(cfg: dict[str, Any], model_type: str | None) -> None:
    """For a model_type known to be MoE, every expert key must be there (ValueError naming it)."""
    for spellings in MOE_MODEL_TYPES.get(model_type or "", ()):
        if all(cfg.get(k) is None for k in spellings):
            raise ValueError(
                f"model_type '{model_type}' is a mixture-of-experts model but config.json lacks "
                f"'{spellings[0]}'; add it (check its spelling): without it the model would be read "
                "wrongly (as dense, or without its shared experts or dense layers)"
            )


# Keys whose names say they shape attention, the MoE or the layer stack.
_STRUCTURAL = re.compile(
    r"attn|attention|expert|moe|rout|kv_|lora|index|compress|window|linear|heads|head_dim|topk|shared|"
    r"mtp|nextn|hash|ssm|conv|delta|sparse|layer_types|_layers|group|latent|dense|^hc_"
)
# Structural keys moeplan reads (below) or knows to be irrelevant to time and memory.
_HANDLED = frozenset(
    {
        # read
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "qk_head_dim",
        "index_n_heads",
        "index_head_dim",
        "index_topk",
        "indexer_types",
        "index_share_for_mtp_iteration",
        # GLM-5.2's rule that derives indexer_types; read only beside indexer_types (below)
        "index_topk_freq",
        "index_skip_topk_offset",
        "index_topk_pattern",
        "compress_ratios",
        "sliding_window",
        "use_sliding_window",
        "o_lora_rank",
        "o_groups",
        "num_hash_layers",
        "hc_mult",
        "n_routed_experts",
        "num_experts",
        "num_local_experts",
        "num_experts_per_tok",
        "num_experts_per_token",
        "moe_topk",
        "n_shared_experts",
        "num_shared_experts",
        "shared_expert_intermediate_size",
        "shared_intermediate_size",
        "moe_intermediate_size",
        "routed_expert_hidden_size",
        "first_k_dense_replace",
        "moe_layer_freq",
        "decoder_sparse_step",
        "mlp_only_layers",
        "n_group",
        "num_expert_group",
        "topk_group",
        "num_nextn_predict_layers",
        "mtp_num_hidden_layers",
        "num_mtp_modules",
        "mtp_transformer_layers",
        "use_mtp",
        "num_hidden_layers",
        "layer_types",
        "full_attention_interval",
        "linear_conv_kernel_dim",
        "linear_key_head_dim",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_value_head_dim",
        "linear_attn_config",
        "attn_output_gate",
        "mla_use_output_gate",
        "attn_type_list",
        "expert_dtype",
        "mamba_ssm_dtype",
        # no effect on time or memory: routing scores, norms, positions, training-only settings
        "attention_bias",
        "attention_dropout",
        "topk_method",
        "norm_topk_prob",
        "routed_scaling_factor",
        "router_aux_loss_coef",
        "aux_loss_alpha",
        "seq_aux",
        "ep_size",
        "output_router_logits",
        "router_jitter_noise",
        "use_routing_bias",
        "moe_renormalize",
        "moe_router_activation_func",
        "use_grouped_topk",
        "latent_moe_use_norm",
        "mla_use_nope",
        "indexer_rope_interleave",
        "compress_rope_theta",
        "mtp_use_dedicated_embeddings",
        "max_window_layers",
        "num_beam_groups",
        "output_attentions",
        "add_cross_attention",
        "cross_attention_hidden_size",
        "pruned_heads",
        "chunk_size_feed_forward",
        "_attn_implementation",
        # DeepSeek-V4's hyper-connections: the Sinkhorn iterations and epsilon of the 4 x 4 stream mix, a
        # few hundred operations per token inside the fused hc_pre kernel (hc_mult, read, sets its bytes)
        "hc_sinkhorn_iters",
        "hc_eps",
        # Kimi-K3's attention residuals: a softmax mix of block snapshots of the hidden state,
        # a few hidden-width vectors per layer (negligible next to attention and MoE)
        "attn_res_block_size",
        # training-only or activation-shape settings that happen to match the pattern
        "ignore_index",
        "activation_situ_beta",
        "activation_situ_linear_beta",
    }
)


class UnmodelledFieldError(ValueError):
    """A config field that changes attention or the MoE in a way moeplan does not model."""


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def _max_context_tokens(cfg: dict[str, Any]) -> int:
    """The longest sequence the config serves, as vLLM derives it (vllm/config/model.py
    `_get_and_verify_max_len`): `max_position_embeddings`, unless RoPE scaling stretches it. A YaRN
    `rope_scaling` (or transformers 5's `rope_parameters`) gives `original_max_position_embeddings` x
    `factor` (Qwen3's model card: factor 4 over 32,768 for 131,072 tokens); other scalings with a factor
    (linear, dynamic) multiply `max_position_embeddings`; su, longrope and llama3 leave it. The catalog's
    DeepSeek and Kimi-K2.5 configs state their YaRN product as `max_position_embeddings` too;
    qwen3-235b-a22b-yarn (40,960 there) is the one it extends."""
    base = _get(cfg, "max_position_embeddings", "max_sequence_length", default=4096)
    scaling = _get(cfg, "rope_scaling", "rope_parameters")
    if not isinstance(scaling, dict):
        return int(base)
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    factor = scaling.get("factor")
    if kind in ("default", "su", "longrope", "llama3") or not isinstance(factor, int | float) or factor <= 0:
        return int(base)
    if kind == "yarn" and isinstance(scaling.get("original_max_position_embeddings"), int):
        base = scaling["original_max_position_embeddings"]
    return int(base * factor)


def _refuse(field: str, why: str) -> UnmodelledFieldError:
    return UnmodelledFieldError(f"field '{field}' {why}; moeplan would have to approximate it, so it refuses")


def _qk_norm_across_heads(cfg: dict[str, Any]) -> bool:
    """MiniMax-M2's `qk_norm_type`: `per_layer` normalises the query over all heads' width and the key
    over all KV heads' (vLLM's minimax_m2.py builds q_norm and k_norm as MiniMaxText01RMSNormTP of
    head_dim x heads, whose TP ranks all-reduce their sums of squares; vllm-ascend fb8e22ec00
    patch_minimax_m2_linear_attn.py does one all-reduce of both); `per_head` is one head's width, as
    Qwen3's q_norm and k_norm, which a TP split needs no collective for."""
    if not cfg.get("use_qk_norm", False):
        return False
    kind = cfg.get("qk_norm_type", "per_head")
    if kind not in ("per_layer", "per_head"):
        raise _refuse("qk_norm_type", f"= {kind!r} is neither per_layer nor per_head")
    return kind == "per_layer"


def _shared_indexer_layers(cfg: dict[str, Any], layers: Any) -> list[int]:
    """GLM-5.2's IndexShare: the main layers whose `indexer_types` entry is 'shared' (they reuse the top-k
    of the last 'full' layer). The rule that derives the list (`index_topk_freq`, `index_skip_topk_offset`,
    `index_topk_pattern`) is read only as the list itself: a config giving the rule alone is refused."""
    types = cfg.get("indexer_types")
    if types is None:
        for rule in ("index_topk_freq", "index_skip_topk_offset", "index_topk_pattern"):
            if cfg.get(rule) is not None:
                raise _refuse(rule, "sets a shared-indexer schedule without 'indexer_types'; write the schedule out")
        return []
    if not isinstance(types, list) or any(t not in ("full", "shared") for t in types):
        raise _refuse("indexer_types", "must be a list of 'full' and 'shared'")
    if len(types) != layers:
        raise _refuse("indexer_types", f"has {len(types)} entries for {layers} layers")
    if types and types[0] != "full":
        raise _refuse("indexer_types", "starts with 'shared': the first layer has no earlier top-k to reuse")
    return [i for i, t in enumerate(types) if t == "shared"]


def _check_fields(cfg: dict[str, Any]) -> None:
    unknown = sorted(k for k in cfg if _STRUCTURAL.search(k) and k not in _HANDLED)
    if unknown:
        raise UnmodelledFieldError(
            "config.json has attention/MoE fields moeplan does not model: "
            + ", ".join(unknown)
            + " (remove them only if they do not change the architecture)"
        )
    window = cfg.get("sliding_window")
    if window is not None and "compress_ratios" not in cfg and cfg.get("use_sliding_window", True):
        raise _refuse("sliding_window", f"= {window} asks for sliding-window attention outside DeepSeek-V4")
    attn_types = cfg.get("attn_type_list")
    if isinstance(attn_types, list) and any(t != 1 for t in attn_types):
        raise _refuse("attn_type_list", "has linear (lightning) attention layers (type 0)")
    if cfg.get("attention_bias"):
        raise _refuse("attention_bias", "= true adds biases moeplan does not count")


def _model_type(cfg: dict[str, Any], top: dict[str, Any]) -> str | None:
    kind = top.get("model_type") or cfg.get("model_type")
    archs = top.get("architectures") or cfg.get("architectures") or []
    for arch in archs if isinstance(archs, list) else []:
        if arch in KNOWN_ARCHITECTURES:
            return KNOWN_ARCHITECTURES[arch]
    if kind is None:
        return None
    if not isinstance(kind, str) or kind not in KNOWN_MODEL_TYPES:
        known = ", ".join(sorted(KNOWN_MODEL_TYPES))
        raise UnmodelledFieldError(f"model_type '{kind}' is not one moeplan models; known: {known}")
    return kind


def _expert_format(cfg: dict[str, Any]) -> tuple[str | None, float | None]:
    """The routed experts' stored format and bits per weight (scales included), if narrower than BF16."""
    if cfg.get("expert_dtype") is not None:
        dtype = cfg["expert_dtype"]
        if dtype == "fp4":
            # DeepSeek-V4 model card: FP4 (e2m1) MoE experts, one 8-bit power-of-two scale per 32
            return "fp4 (e2m1, 8-bit scale per 32)", 4.0 + 8.0 / 32
        if dtype == "fp8":
            return "fp8 (e4m3)", 8.0
        raise _refuse("expert_dtype", f"= {dtype!r} is not fp4 or fp8")
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None, None
    method = q.get("quant_method")
    if method == "fp8":
        # 128x128 blocks, one scale each: 8 bits + negligible
        return "fp8 (e4m3, 128x128 block scales)", 8.0
    if method == "modelopt":
        algo = q.get("quant_algo")
        if algo == "NVFP4":
            # NVFP4: e2m1 values, one FP8 (e4m3) scale per 16
            return "nvfp4 (e2m1, fp8 scale per 16)", 4.0 + 8.0 / 16
        if algo == "FP8":
            return "fp8 (e4m3)", 8.0
        raise _refuse("quantization_config.quant_algo", f"= {algo!r} is not NVFP4 or FP8")
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        if not isinstance(groups, dict) or len(groups) != 1:
            raise _refuse("quantization_config.config_groups", "does not hold exactly one group")
        (group,) = groups.values()
        w = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(w, dict):
            raise _refuse("quantization_config.config_groups.*.weights", "is not a mapping")
        bits, size, kind = w.get("num_bits"), w.get("group_size"), w.get("type")
        if not isinstance(bits, int) or not isinstance(size, int) or size < 1 or bits < 1:
            raise _refuse("quantization_config.config_groups.*.weights", "lacks num_bits/group_size")
        ignore = " ".join(str(x) for x in q.get("ignore") or [])
        if "self_attn" not in ignore:
            raise _refuse("quantization_config.ignore", "does not keep attention unquantised (only experts are read)")
        scale_bits = 8 if "uint8" in str(w.get("scale_dtype")) else 16
        prefix = "mxfp" if scale_bits == 8 and kind == "float" else str(kind)
        name = f"{prefix}{bits}, group {size}"
        return name, bits + scale_bits / size
    raise _refuse("quantization_config.quant_method", f"= {method!r} is not fp8, modelopt or compressed-tensors")


def _linear_layers_qwen(cfg: dict[str, Any], layers: int) -> list[int] | None:
    types = cfg.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != layers:
        raise _refuse("layer_types", f"must list one type per layer ({layers})")
    bad = sorted({t for t in types if t not in ("linear_attention", "full_attention")})
    if bad:
        raise _refuse("layer_types", f"holds layer types {bad}")
    return [i for i, t in enumerate(types) if t == "linear_attention"]


def _linear_kimi(cfg: dict[str, Any], layers: int) -> dict[str, Any] | None:
    lin = cfg.get("linear_attn_config")
    if lin is None:
        return None
    if not isinstance(lin, dict):
        raise _refuse("linear_attn_config", "is not a mapping")
    kda, full = lin.get("kda_layers") or [], lin.get("full_attn_layers") or []
    # 1-based layer numbers in Kimi Linear / K3 configs
    if sorted(list(kda) + list(full)) != list(range(1, layers + 1)):
        raise _refuse("linear_attn_config.kda_layers", f"and full_attn_layers must number layers 1..{layers} once each")
    known = {
        "full_attn_layers",
        "kda_layers",
        "num_heads",
        "head_dim",
        "short_conv_kernel_size",
        "use_full_rank_gate",
        "gate_lower_bound",
    }
    extra = sorted(set(lin) - known)
    if extra:
        raise _refuse(f"linear_attn_config.{extra[0]}", "is not a KDA field moeplan models")
    if not lin.get("use_full_rank_gate", False):
        raise _refuse("linear_attn_config.use_full_rank_gate", "is not true (low-rank output gates are not modelled)")
    heads, dim = lin.get("num_heads"), lin.get("head_dim")
    return {
        "kind": "kda",
        "layers": [i - 1 for i in kda],
        "num_key_heads": heads,
        "num_value_heads": heads,
        "key_head_dim": dim,
        "value_head_dim": dim,
        "conv_kernel": lin.get("short_conv_kernel_size", 4),
        # KDA's per-channel decay through a low-rank gate of rank head_dim (Kimi Linear, f_a/f_b)
        "decay_gate_rank": dim,
        "state_bytes_per_element": 4.0,
    }


def from_hf_config(top: dict[str, Any], name: str) -> dict[str, Any]:
    """Translate a HuggingFace config.json mapping into ModelSpec fields (validated by the caller).

    Raises ValueError (UnmodelledFieldError for fields moeplan does not model).
    """
    cfg = top
    if "text_config" in top and isinstance(top["text_config"], dict):
        cfg = {**top, **top["text_config"]}
    _check_moe_keys(cfg, _model_type(cfg, top))
    _check_fields(cfg)
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
    if not isinstance(layers, int) or not isinstance(hidden, int) or not isinstance(heads, int):
        raise ValueError("hidden_size, num_hidden_layers and num_attention_heads must be integers")

    indexer = None
    if _get(cfg, "index_topk") is not None:
        indexer = {
            "num_heads": _get(cfg, "index_n_heads"),
            "head_dim": _get(cfg, "index_head_dim"),
            "top_k": cfg["index_topk"],
            "shared_layers": _shared_indexer_layers(cfg, layers),
            "mtp_reuses_top_k": bool(_get(cfg, "index_share_for_mtp_iteration", default=False)),
        }
    attention: dict[str, Any]
    if _get(cfg, "compress_ratios") is not None:
        attention = {
            "kind": "compressed",
            "num_heads": heads,
            "num_kv_heads": _get(cfg, "num_key_value_heads", default=1),
            "head_dim": _get(cfg, "head_dim"),
            "q_lora_rank": _get(cfg, "q_lora_rank"),
            "qk_rope_head_dim": _get(cfg, "qk_rope_head_dim", default=0),
            "compressed": {
                "compress_ratios": cfg["compress_ratios"],
                "sliding_window": _get(cfg, "sliding_window"),
                "o_lora_rank": _get(cfg, "o_lora_rank"),
                "o_groups": _get(cfg, "o_groups", default=1),
            },
            "indexer": indexer,
        }
    elif _get(cfg, "kv_lora_rank") is not None:
        nope = _get(cfg, "qk_nope_head_dim", default=128)
        rope = _get(cfg, "qk_rope_head_dim", default=64)
        qk_head = cfg.get("qk_head_dim")
        if qk_head is not None and isinstance(nope, int) and isinstance(rope, int) and qk_head != nope + rope:
            raise _refuse("qk_head_dim", f"= {qk_head} differs from qk_nope_head_dim + qk_rope_head_dim")
        attention = {
            "kind": "mla",
            "num_heads": heads,
            "q_lora_rank": _get(cfg, "q_lora_rank"),
            "kv_lora_rank": cfg["kv_lora_rank"],
            "qk_nope_head_dim": nope,
            "qk_rope_head_dim": rope,
            "v_head_dim": _get(cfg, "v_head_dim", default=128),
            "output_gate": bool(_get(cfg, "mla_use_output_gate", default=False)),
            "indexer": indexer,
        }
    else:
        if indexer is not None:
            raise _refuse("index_topk", "on GQA attention (DSA is modelled on MLA and DeepSeek-V4 only)")
        head_dim = _get(cfg, "head_dim")
        if head_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads > 0:
            head_dim = hidden // heads
        attention = {
            "kind": "gqa",
            "num_heads": heads,
            "num_kv_heads": _get(cfg, "num_key_value_heads", default=heads),
            "head_dim": head_dim,
            "output_gate": bool(_get(cfg, "attn_output_gate", default=False)),
            "qk_norm_across_heads": _qk_norm_across_heads(cfg),
        }

    linear_layers = _linear_layers_qwen(cfg, layers)
    if linear_layers is not None and linear_layers:
        dtype = str(_get(cfg, "mamba_ssm_dtype", default="float32"))
        attention["linear"] = {
            "kind": "gated_deltanet",
            "layers": linear_layers,
            "num_key_heads": _get(cfg, "linear_num_key_heads"),
            "num_value_heads": _get(cfg, "linear_num_value_heads"),
            "key_head_dim": _get(cfg, "linear_key_head_dim"),
            "value_head_dim": _get(cfg, "linear_value_head_dim"),
            "conv_kernel": _get(cfg, "linear_conv_kernel_dim", default=4),
            "decay_gate_rank": 0,
            "state_bytes_per_element": 4.0 if "32" in dtype else 2.0,
        }
    kimi_linear = _linear_kimi(cfg, layers)
    if kimi_linear is not None and kimi_linear["layers"]:
        attention["linear"] = kimi_linear

    routed = _get(cfg, "n_routed_experts", "num_experts", "num_local_experts", default=0) or 0
    moe: dict[str, Any] | None = None
    dense_layers = layers
    if routed:
        shared_inter = _get(cfg, "shared_expert_intermediate_size", "shared_intermediate_size", default=0) or 0
        n_shared = _get(cfg, "n_shared_experts", "num_shared_experts", default=0) or (1 if shared_inter else 0)
        moe = {
            "routed_experts": routed,
            "experts_per_token": _get(cfg, "num_experts_per_tok", "num_experts_per_token", "moe_topk", default=1),
            "shared_experts": n_shared,
            "expert_intermediate_size": _get(cfg, "moe_intermediate_size", "intermediate_size"),
            "shared_expert_intermediate_size": shared_inter or None,
            "latent_size": _get(cfg, "routed_expert_hidden_size"),
            "hash_layers": _get(cfg, "num_hash_layers", default=0),
            "n_group": _get(cfg, "n_group", "num_expert_group", default=1),
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
    mtp = _get(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0)
    if _get(cfg, "use_mtp", default=False):
        mtp = _get(cfg, "num_mtp_modules", default=1) * _get(cfg, "mtp_transformer_layers", default=1)
    fmt, bits = _expert_format(cfg)
    if routed == 0:
        fmt, bits = None, None
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
        "mtp_layers": mtp,
        "max_context_tokens": _max_context_tokens(cfg),
        "expert_weight_format": fmt,
        "expert_weight_bits": bits if bits is not None and bits < 16 else None,
        "architectures": [a for a in (top.get("architectures") or []) if isinstance(a, str)],
        "residual_streams": _get(cfg, "hc_mult", default=1),
    }


# ModelSpec fields (as `from_hf_config` fills them) -> the config.json keys they are read from, so a
# config.json that does not validate is answered in its own field names
HF_FIELD_NAMES = {
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_dense_layers": "first_k_dense_replace",
    "dense_intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size",
    "tie_word_embeddings": "tie_word_embeddings",
    "mtp_layers": "num_nextn_predict_layers",
    "residual_streams": "hc_mult",
    "max_context_tokens": "max_position_embeddings",
    "attention.num_heads": "num_attention_heads",
    "attention.num_kv_heads": "num_key_value_heads",
    "attention.head_dim": "head_dim",
    "attention.q_lora_rank": "q_lora_rank",
    "attention.kv_lora_rank": "kv_lora_rank",
    "attention.qk_nope_head_dim": "qk_nope_head_dim",
    "attention.qk_rope_head_dim": "qk_rope_head_dim",
    "attention.v_head_dim": "v_head_dim",
    "moe.routed_experts": "n_routed_experts",
    "moe.experts_per_token": "num_experts_per_tok",
    "moe.shared_experts": "n_shared_experts",
    "moe.expert_intermediate_size": "moe_intermediate_size",
    "moe.shared_expert_intermediate_size": "shared_expert_intermediate_size",
    "moe.n_group": "n_group",
    "moe.topk_group": "topk_group",
}
_BARE_NAMES = {path.rsplit(".", 1)[-1]: hf for path, hf in HF_FIELD_NAMES.items() if path.rsplit(".", 1)[-1] != hf}


def in_hf_names(field: str, message: str) -> tuple[str, str]:
    """A ModelSpec validation problem (field path, message) in config.json's field names."""
    key = HF_FIELD_NAMES.get(field, field)
    for ours, theirs in sorted(_BARE_NAMES.items(), key=lambda kv: -len(kv[0])):
        message = re.sub(rf"\b{re.escape(ours)}\b", theirs, message)
    return key, message


def looks_like_hf_config(data: dict[str, Any]) -> bool:
    """True when a mapping is a HuggingFace config.json rather than a ModelSpec."""
    return "num_hidden_layers" in data or "architectures" in data or "model_type" in data
