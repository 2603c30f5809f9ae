"""Rich tables for the hardware and model catalogs."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table

from planner.specs.hardware import HardwareSpec
from planner.specs.model import DraftSpec, ModelSpec

GIB = 1024**3


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _best_peak(h: HardwareSpec) -> str:
    fmt, value = max(h.peak_flops_per_s.listed().items(), key=lambda kv: kv[1])
    return f"{_si(value, 'OP/s')} {fmt.upper()}"


def hardware_list_table(specs: list[HardwareSpec]) -> Table:
    """One row per machine."""
    table = Table(title="Hardware catalog")
    table.add_column("name", no_wrap=True)
    for col in (
        "device",
        "devices/card",
        "devices/node",
        "peak/device (best format)",
        "HBM/device",
        "status",
        "description",
    ):
        table.add_column(col)
    for h in specs:
        table.add_row(
            h.name,
            h.device_name,
            str(h.devices_per_card),
            str(h.devices_per_node),
            _best_peak(h),
            f"{h.hbm_bytes / GIB:.0f} GiB",
            h.status if not h.is_announced else f"announced ({h.status_source})",
            h.description,
        )
    return table


def hardware_detail(h: HardwareSpec) -> list[RenderableType]:
    """Peaks, memory, link levels and every named factor with its source."""
    main = Table(title=f"{h.name}: {h.description}", show_header=False)
    main.add_column("field")
    main.add_column("value")
    main.add_row("device (die)", h.device_name)
    main.add_row("card", f"{h.card_name} = {h.devices_per_card} device(s)")
    main.add_row("devices per node", str(h.devices_per_node))
    main.add_row("max devices per instance", "unbounded" if h.max_devices is None else str(h.max_devices))
    p = h.peak_flops_per_s
    main.add_row(
        "peak per device",
        ", ".join(f"{fmt.upper()} {_si(v, 'OP/s')}" for fmt, v in p.listed().items()),
    )
    main.add_row("  source", p.source)
    main.add_row(
        "HBM per device",
        f"{h.hbm_bytes / GIB:.1f} GiB at {_si(h.hbm_bandwidth_bytes_per_s, 'B/s')}",
    )
    main.add_row("  source", h.hbm_source)
    main.add_row("status", h.status + (f" ({h.status_source})" if h.status_source else ""))
    if h.price_per_card is not None:
        main.add_row("price per card", f"{h.price_per_card.value:g} cost units ({h.price_per_card.source})")
    if h.power_w_per_card is not None:
        pw = h.power_w_per_card
        main.add_row("power per card", f"{pw.value:g} W ({pw.basis})")
        main.add_row("  source", pw.source)
    else:
        main.add_row("power per card", "not given (no joules per token; add power_w_per_card to a copy of this file)")
    if h.node_power_w is not None:
        main.add_row("power per node besides cards", f"{h.node_power_w.value:g} W ({h.node_power_w.source})")
    if h.price_per_card_hour is not None:
        pr = h.price_per_card_hour
        main.add_row("price per card-hour", f"{pr.value:g} {pr.currency} ({pr.source})")
    else:
        main.add_row(
            "price per card-hour", "not given (yours: --price-per-card-hour, or price_per_card_hour in a copy)"
        )
    main.add_row("KV transfer (P->D)", f"{_si(h.kv_transfer_bandwidth_bytes_per_s, 'B/s')} per device")
    levels = Table(title="Interconnect levels (innermost first; per device, per direction)")
    for col in ("level", "devices per group", "bandwidth", "latency", "source"):
        levels.add_column(col)
    for lvl in h.levels:
        levels.add_row(
            lvl.name,
            "unbounded" if lvl.devices_per_group is None else str(lvl.devices_per_group),
            _si(lvl.bandwidth_bytes_per_s, "B/s"),
            f"{lvl.latency_s * 1e6:.2g} us",
            lvl.source,
        )
    factors = Table(title="Named factors")
    for col in ("factor", "value", "source"):
        factors.add_column(col)
    e = h.efficiency
    for name, f in (
        ("matmul efficiency", e.matmul),
        ("attention compute efficiency", e.attention_compute),
        ("HBM bandwidth efficiency", e.hbm_bandwidth),
        ("link bandwidth efficiency", e.link_bandwidth),
        ("prefill micro-batch overlap", h.overlap.prefill_micro_batch_efficiency),
    ):
        rng = f" ({f.range.low:.3g}-{f.range.high:.3g})" if f.range else ""
        factors.add_row(name, f"{f.value:.3g}{rng}", f.source + (f"; range: {f.range.derived}" if f.range else ""))
    fc = h.fixed_costs
    for name, s in (
        ("matrix op launch", fc.matrix_op),
        ("vector op launch", fc.vector_op),
        ("collective launch", fc.collective),
        ("MTP framework per step", fc.mtp_framework_per_step),
    ):
        rng = f" ({s.range.low * 1e6:.3g}-{s.range.high * 1e6:.3g})" if s.range else ""
        factors.add_row(
            name, f"{s.value * 1e6:.3g}{rng} us", s.source + (f"; range: {s.range.derived}" if s.range else "")
        )
    for name, b in (
        ("communication buffers", h.memory.comm_buffers),
        ("runtime reserve", h.memory.runtime_reserve),
    ):
        factors.add_row(name, f"{b.value / GIB:.2f} GiB", b.source)
    factors.add_row(
        "decode: shared expert overlaps dispatch",
        str(h.overlap.decode_shared_expert_with_dispatch),
        "the report (+15% decode)",
    )
    return [main, levels, factors]


def attention_summary(m: ModelSpec) -> str:
    """The layer kinds of a model, e.g. `CSA x30 + HCA x31` or `linear x45 + GQA x15`."""
    groups = m.attention_groups()
    linear = m.attention.linear
    names = {
        "dsa": "MLA+DSA",
        "dsa_shared": "MLA+DSA (shared top-k)",
        "linear": {"kda": "KDA", "gated_deltanet": "GatedDeltaNet"}[linear.kind] if linear else "",
    }
    if len(groups) == 1 and groups[0][0] in ("mla", "gqa"):
        return f"{m.attention.kind.upper()} {m.attention.num_heads} heads"
    return " + ".join(f"{names.get(kind, kind.upper())} x{n}" for kind, _, n in groups)


def model_list_table(specs: list[ModelSpec], sources: dict[str, str] | None = None) -> Table:
    """One row per model, with where its config.json comes from."""
    table = Table(title="Model catalog")
    table.add_column("name", no_wrap=True)
    for col in (
        "params (active)",
        "layers (dense+MoE)",
        "attention",
        "experts (routed/top-k/shared)",
        "MTP",
        "context",
        "source",
    ):
        table.add_column(col)
    for m in specs:
        moe = m.moe
        table.add_row(
            m.name,
            f"{m.main_params() / 1e9:.1f} B ({m.active_params() / 1e9:.1f} B)",
            f"{m.num_layers} ({m.num_dense_layers}+{m.num_moe_layers})",
            attention_summary(m),
            (f"{moe.routed_experts}/{moe.experts_per_token}/{moe.shared_experts}" if moe else "dense")
            + (f" {m.expert_weight_format}" if m.expert_weight_format else ""),
            str(m.mtp_layers),
            str(m.max_context_tokens),
            (sources or {}).get(m.name, "").split(" (")[0].removeprefix("https://"),
        )
    return table


def draft_list_table(drafts: list[DraftSpec], sources: dict[str, str]) -> Table:
    """One row per draft model (drafts/): what it serves, its size and where its config.json comes from."""
    table = Table(title="Draft models (--draft-model; a plan's draft_model)")
    for col in ("name", "method", "for model", "params", "draft vocabulary", "checkpoint", "source"):
        table.add_column(col, no_wrap=col == "name")
    for d in drafts:
        table.add_row(
            d.name,
            d.method,
            d.target,
            f"{d.params() / 1e9:.2f} B",
            str(d.layer.vocab_size),
            d.checkpoint,
            sources.get(d.name, "").split(" (")[0].removeprefix("https://"),
        )
    return table


def model_facts(m: ModelSpec, context_tokens: int, kv_bytes_per_element: float = 2.0) -> dict[str, object]:
    """Parameter counts, cache per token at `context_tokens` and layer kinds, as a JSON-ready mapping.

    `kv_bytes_per_token`: the cache of one sequence of `context_tokens` tokens (main layers, BF16
    entries unless the scheme says otherwise, FP32 linear states) divided by its length, so that
    compressed and linear attention, which do not grow linearly, compare with full attention.
    """
    return {
        "name": m.name,
        "params_total": m.main_params(),
        "params_mtp": m.mtp_params(),
        "params_active": m.active_params(),
        "params_active_with_embedding": m.active_params(embedding=True),
        "params_active_non_embedding": m.active_params(lm_head=False),
        "context_tokens": context_tokens,
        "kv_bytes_per_token": m.kv_bytes_per_token(context_tokens, kv_bytes_per_element, include_mtp=False),
        "kv_bytes_per_token_with_mtp": m.kv_bytes_per_token(context_tokens, kv_bytes_per_element),
        "kv_bytes_per_element": kv_bytes_per_element,
        "flops_per_token": m.flops_per_token(context_tokens),
        "attention_layers": [
            {"kind": kind, "compress_ratio": ratio, "layers": n} for kind, ratio, n in m.attention_groups()
        ],
        "expert_weight_format": m.expert_weight_format,
        "expert_weight_bits": m.expert_weight_bits,
    }


def model_detail(m: ModelSpec) -> list[RenderableType]:
    """Every field of a model plus derived sizes."""
    table = Table(title=f"{m.name}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    a = m.attention
    table.add_row("hidden size", str(m.hidden_size))
    table.add_row(
        "layers",
        f"{m.num_layers} ({m.num_dense_layers} dense, {m.num_moe_layers} MoE)"
        + (f" + {m.mtp_layers} MTP" if m.mtp_layers else ""),
    )
    table.add_row("attention layers", attention_summary(m))
    if a.kind == "mla":
        table.add_row(
            "attention",
            f"MLA, {a.num_heads} heads, q_lora {a.q_lora_rank}, kv_lora "
            f"{a.kv_lora_rank}, qk {a.qk_nope_head_dim}+{a.qk_rope_head_dim}, v {a.v_head_dim}",
        )
    elif a.kind == "compressed" and a.compressed is not None:
        table.add_row(
            "attention",
            f"compressed (DeepSeek-V4), {a.num_heads} query heads, 1 KV head of {a.head_dim}, "
            f"window {a.compressed.sliding_window}, o_lora {a.compressed.o_lora_rank} x {a.compressed.o_groups} groups",
        )
    else:
        table.add_row(
            "attention",
            f"GQA, {a.num_heads} query heads, {a.num_kv_heads} KV heads, head dim {a.head_dim}",
        )
    if a.indexer is not None:
        i = a.indexer
        table.add_row("indexer (DSA)", f"{i.num_heads} heads x {i.head_dim}, top-{i.top_k}")
    if a.linear is not None:
        li = a.linear
        table.add_row(
            "linear attention",
            f"{li.kind}, {len(li.layers)} layers, {li.num_key_heads} key / {li.num_value_heads} value heads, "
            f"dims {li.key_head_dim}/{li.value_head_dim}, state "
            f"{li.state_elements() * li.state_bytes_per_element / 2**20:.1f} MiB per sequence per layer",
        )
    if m.num_dense_layers:
        table.add_row("dense FFN intermediate", str(m.dense_intermediate_size))
    if m.moe:
        table.add_row(
            "experts",
            f"{m.moe.routed_experts} routed, top-{m.moe.experts_per_token}, "
            f"{m.moe.shared_experts} shared, intermediate {m.moe.expert_intermediate_size}, "
            f"groups {m.moe.n_group}/top {m.moe.topk_group}",
        )
        table.add_row("params per expert", f"{m.expert_params() / 1e6:.1f} M")
        if m.moe.latent_size:
            table.add_row("latent MoE", f"routed experts run at width {m.moe.latent_size}")
        if m.moe.hash_layers:
            table.add_row("hash-routed MoE layers", str(m.moe.hash_layers))
    if m.expert_weight_format:
        table.add_row(
            "expert weights (checkpoint)", f"{m.expert_weight_format}, {m.expert_weight_bits:g} bits per weight"
        )
    if m.residual_streams > 1:
        table.add_row(
            "residual streams", f"{m.residual_streams} (hyper-connections: hc_pre and hc_post each sub-layer)"
        )
    table.add_row("vocab", f"{m.vocab_size}" + (" (tied)" if m.tie_word_embeddings else ""))
    table.add_row("total params", f"{m.main_params() / 1e9:.1f} B (+{m.mtp_params() / 1e9:.1f} B MTP)")
    table.add_row("active params", f"{m.active_params() / 1e9:.1f} B (with the LM head, not the embedding)")
    for ctx in (4096, 131072, 1048576):
        if ctx <= max(m.max_context_tokens, 4096):
            kv = m.kv_bytes_per_token(ctx, include_mtp=False)
            table.add_row(f"cache per token at {ctx} (BF16)", f"{kv / 1024:.1f} KiB over {m.num_layers} layers")
    table.add_row("max context", str(m.max_context_tokens))
    return [table]
