"""Rich tables for the hardware and model catalogs."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table

from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec

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
        factors.add_row(name, f"{f.value:.3g}", f.source)
    fc = h.fixed_costs
    for name, s in (
        ("matrix op launch", fc.matrix_op),
        ("vector op launch", fc.vector_op),
        ("collective launch", fc.collective),
        ("MTP framework per step", fc.mtp_framework_per_step),
    ):
        factors.add_row(name, f"{s.value * 1e6:.3g} us", s.source)
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


def model_list_table(specs: list[ModelSpec]) -> Table:
    """One row per model."""
    table = Table(title="Model catalog")
    table.add_column("name", no_wrap=True)
    for col in (
        "params",
        "layers (dense+MoE)",
        "attention",
        "experts (routed/top-k/shared)",
        "MTP",
        "context",
    ):
        table.add_column(col)
    for m in specs:
        moe = m.moe
        table.add_row(
            m.name,
            f"{m.total_params() / 1e9:.1f} B",
            f"{m.num_layers} ({m.num_dense_layers}+{m.num_moe_layers})",
            f"{m.attention.kind.upper()} {m.attention.num_heads} heads",
            f"{moe.routed_experts}/{moe.experts_per_token}/{moe.shared_experts}" if moe else "dense",
            str(m.mtp_layers),
            str(m.max_context_tokens),
        )
    return table


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
    if a.kind == "mla":
        table.add_row(
            "attention",
            f"MLA, {a.num_heads} heads, q_lora {a.q_lora_rank}, kv_lora "
            f"{a.kv_lora_rank}, qk {a.qk_nope_head_dim}+{a.qk_rope_head_dim}, v {a.v_head_dim}",
        )
    else:
        table.add_row(
            "attention",
            f"GQA, {a.num_heads} query heads, {a.num_kv_heads} KV heads, head dim {a.head_dim}",
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
    table.add_row("vocab", f"{m.vocab_size}" + (" (tied)" if m.tie_word_embeddings else ""))
    table.add_row("total params", f"{m.total_params() / 1e9:.1f} B")
    kv = m.kv_elements_per_token_per_layer() * m.kv_layers() * 2
    table.add_row("KV cache per token (BF16)", f"{kv / 1024:.1f} KiB over {m.kv_layers()} layers")
    table.add_row("max context", str(m.max_context_tokens))
    return [table]
