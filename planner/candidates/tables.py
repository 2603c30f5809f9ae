"""Cost tables of every candidate: float seconds and bytes from the cost model, then integers.

For one instance size of one phase, every module's layout option is costed over the whole range
of the phase's free integer (decode: concurrency per device B, for each MTP depth k; prefill:
requests per forward R, for each micro-batch count). The step is a sum of module terms, so the
tables are per module: `time[o, k, x]` and `hbm[o, k, x]` for option o.

`to_integer_tables` is the one place where floats become the solver's integers: microseconds
and MiB, both rounded up, so that anything the solver accepts also fits and meets the SLO when
evaluated in floating point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.candidates.space import MoEOption, SizeOptions
from planner.costmodel.attention_kinds import layers_cost
from planner.costmodel.context import CostContext
from planner.costmodel.decode import emitted_tokens_per_step, hash_routed_saving
from planner.costmodel.draft import draft_context, draft_projections_s
from planner.costmodel.memory import (
    attention_hbm,
    dense_ffn_hbm,
    embedding_hbm,
    fixed_hbm,
    kv_tokens_in_use,
    lm_head_hbm,
    moe_hbm,
    prefill_kv_tokens,
    rank_prompt_kv_tokens,
)
from planner.costmodel.modules import (
    ModuleCost,
    dense_ffn_cost,
    embedding_cost,
    lm_head_cost,
    moe_cost,
)
from planner.costmodel.prefill import forwards_per_prompt, kv_transfer_s
from planner.specs.plan import ParallelLayout, attention_embedding_layout, holds_whole_sequences

MODULES = ("attention", "dense_ffn", "moe", "lm_head")
MAX_CONCURRENCY = 2048
# Below this many sequences per device the decode concurrency axis also steps by one sequence per
# attention TP group (1/tp a device, for a TP that is a power of two); from it on, by one per device
FRACTIONAL_BELOW = 4
# HBM an attention option is given where its TP group would hold a fraction of a sequence: no
# device has it, so no search and no bound ever runs the option there (1 PiB)
UNRUNNABLE_BYTES = float(2**50)
MAX_REQUESTS_PER_FORWARD = 256
MIB = 1024.0 * 1024.0


@dataclass
class PhaseTables:
    """Float tables of one instance size of one phase.

    decode: axis 1 is the MTP depth (k_values), axis 2 the concurrency per device (x_values);
    prefill: axis 1 is the micro-batch count (k_values), axis 2 requests per forward (x_values).
    `time_s[m]` is the module's time per step (decode) or its compute part (prefill);
    `comm_s[m]` its communication part (prefill; decode with two micro-batches: the main
    layers' communication that the other micro-batch's compute can hide), `fixed_s[m]` its launch
    costs per micro-batch (prefill only). `cover_s[m]` (decode with two micro-batches) is the
    main layers' compute that hides it; `micro_batches` the decode micro-batch count of the table.
    """

    phase: str
    devices: int
    options: SizeOptions
    k_values: list[int]
    x_values: np.ndarray
    time_s: dict[str, np.ndarray]
    comm_s: dict[str, np.ndarray]
    fixed_s: dict[str, np.ndarray]
    const_s: np.ndarray
    hbm_bytes: dict[str, np.ndarray]
    hbm_fixed_bytes: float
    emitted: np.ndarray
    micro_batches: int = 1
    cover_s: dict[str, np.ndarray] = field(default_factory=dict)
    # prefill: forwards the TTFT-percentile prompt takes on its attention DP rank, per attention option
    # and batch ({"attention": [A, X]}; planner.costmodel.prefill.forwards_per_prompt)
    forwards: dict[str, np.ndarray] = field(default_factory=dict)
    # derived arrays later stages compute from these tables and may reuse (they live as long as
    # the tables, e.g. across the points of a sweep that shares a TableCache)
    memo: dict = field(default_factory=dict, repr=False, compare=False)
    # the tables' key in the on-disk store (planner.candidates.table_store), if they have one
    store_key: str | None = field(default=None, repr=False, compare=False)

    def n_options(self, module: str) -> int:
        """Options of the module (a module the model does not have counts one, as in the tables)."""
        lists: dict[str, list | None] = {
            "attention": self.options.attention,
            "dense_ffn": self.options.dense_ffn,
            "moe": self.options.moe,
            "lm_head": self.options.lm_head,
        }
        return max(1, len(lists[module] or []))


@dataclass
class IntTables:
    """The solver's integers: microseconds and MiB (rounded up)."""

    time_us: dict[str, np.ndarray]
    comm_us: dict[str, np.ndarray]
    fixed_us: dict[str, np.ndarray]
    const_us: np.ndarray
    hbm_mib: dict[str, np.ndarray]
    hbm_capacity_mib: int
    cover_us: dict[str, np.ndarray] = field(default_factory=dict)
    forwards: dict[str, np.ndarray] = field(default_factory=dict)  # as PhaseTables.forwards


def to_integer_tables(tables: PhaseTables, hbm_capacity_bytes: float) -> IntTables:
    """Seconds -> microseconds and bytes -> MiB, rounded up (the solver sees only these)."""

    def us(a: np.ndarray) -> np.ndarray:
        return np.ceil(np.asarray(a) * 1e6 - 1e-9).astype(np.int64)

    def mib(a: np.ndarray) -> np.ndarray:
        return np.ceil(np.asarray(a) / MIB - 1e-9).astype(np.int64)

    fixed_mib = int(math.ceil(tables.hbm_fixed_bytes / MIB))
    return IntTables(
        time_us={m: us(v) for m, v in tables.time_s.items()},
        comm_us={m: us(v) for m, v in tables.comm_s.items()},
        fixed_us={m: us(v) for m, v in tables.fixed_s.items()},
        const_us=us(tables.const_s),
        hbm_mib={m: mib(v) for m, v in tables.hbm_bytes.items()},
        hbm_capacity_mib=int(math.floor(hbm_capacity_bytes / MIB)) - fixed_mib,
        cover_us={m: us(v) for m, v in tables.cover_s.items()},
        forwards={m: np.asarray(v, dtype=np.int64) for m, v in tables.forwards.items()},
    )


def steps_per_group_sequence(tp: int) -> bool:
    """Whether the decode axis steps by one sequence per attention TP group of `tp` below
    FRACTIONAL_BELOW: a TP above 1 that is a power of two (1/tp is then a short decimal a plan states)."""
    return tp > 1 and tp & (tp - 1) == 0


def whole_sequences(concurrency_per_device: np.ndarray, tp: int) -> np.ndarray:
    """Where an attention TP group of `tp` devices holds a whole number of sequences (and at least one):
    the plan's own test (planner.specs.plan.holds_whole_sequences) at each concurrency."""
    values, at = np.unique(np.ravel(concurrency_per_device), return_inverse=True)  # the grids repeat their axis
    runs = np.array([holds_whole_sequences(float(x), tp) for x in values], dtype=bool)
    return runs[at]


def _sum_parts(parts: dict[str, np.ndarray]) -> np.ndarray:
    return sum(parts.values())  # type: ignore[return-value]


# ---- decode ------------------------------------------------------------------------------------


def _decode_pass_tokens(b: np.ndarray, k: int) -> list[np.ndarray]:
    """Tokens per device of each MTP pass: the first on every position, later ones on one."""
    return [b * (1 + k)] + [b] * max(0, k - 1)


def decode_tables(
    ctx: CostContext, opts: SizeOptions, k_values: list[int], b_values: np.ndarray, micro_batches: int = 1
) -> PhaseTables:
    """Float tables of a decode instance of `opts.devices` devices (`decode_tables_by_micro_batches`
    for one micro-batch count)."""
    return decode_tables_by_micro_batches(ctx, opts, k_values, b_values, (micro_batches,))[0]


def decode_tables_by_micro_batches(
    ctx: CostContext, opts: SizeOptions, k_values: list[int], b_values: np.ndarray, micro_batches: tuple[int, ...]
) -> list[PhaseTables]:
    """Float tables of a decode instance of `opts.devices` devices, one per micro-batch count.

    Every MTP depth and micro-batch count is costed in one vectorised call per option: the tokens
    of all depths are laid end to end (B * (1 + k) for each k, B / mb for each count) and the
    result is cut back into [k, B] per count. With two micro-batches every module is costed on
    half the sequences and counted twice, and the main layers' communication and compute go to
    `comm_s` / `cover_s` for the overlap term (planner.costmodel.decode). HBM holds every sequence
    of the step whatever the micro-batch count: one HBM table serves every count.
    """
    m, n = ctx.model, opts.devices
    mbs = np.array(micro_batches, dtype=float)
    nb0 = b_values.size
    b = (b_values.astype(float)[None, :] / mbs[:, None]).reshape(-1)  # [count, B] end to end
    per_b = np.repeat(mbs, nb0)  # each position's micro-batch count
    nk, nb = len(k_values), b.size
    ks = np.array(k_values, dtype=float)
    overlap = ctx.hw.overlap.decode_shared_expert_with_dispatch
    tokens_all = (b[None, :] * (1 + ks[:, None])).reshape(-1)
    seqs_all = np.tile(b, nk)
    first = (ks >= 1).astype(float)[:, None]
    later = np.maximum(ks - 1, 0)[:, None]
    comm_tables: dict[str, np.ndarray] = {}
    cover_tables: dict[str, np.ndarray] = {}

    def stack(fn, options, main_layers: int, mtp_fn, name: str, main_fn=None) -> np.ndarray:
        """Main layers (`main_fn`, or `fn` times `main_layers`) plus the draft passes (`mtp_fn`: the MTP
        layer's or the draft head's share of this module; None: none); the main layers' communication
        and compute also go to `comm_tables` / `cover_tables`."""
        size = max(1, len(options))
        out = np.zeros((size, nk, nb))
        comm_out, cover_out = np.zeros((size, nk, nb)), np.zeros((size, nk, nb))

        def shaped(v) -> np.ndarray:
            return np.broadcast_to(np.asarray(v, dtype=float), tokens_all.shape).reshape(nk, nb)

        for i, opt in enumerate(options):
            per_k = fn(opt, tokens_all, seqs_all)
            main = per_k if main_fn is None else main_fn(opt, tokens_all, seqs_all)
            scale = main_layers if main_fn is None else 1
            total = shaped(main.total_s) * scale
            if mtp_fn is not None and ks.max() >= 1:
                total = total + first * shaped(mtp_fn(opt, tokens_all, seqs_all).total_s)
                if ks.max() >= 2:
                    total = total + later * mtp_fn(opt, b, b).total_s[None, :]
            out[i] = total * per_b
            comm_out[i] = shaped(main.comm_s) * scale * per_b
            cover_out[i] = shaped(main.compute_s) * scale * per_b
        comm_tables[name], cover_tables[name] = comm_out, cover_out
        return out

    def moe_main(o, t, q) -> ModuleCost:
        c = moe_cost(ctx, n, o.moe, o.shared, t, overlap, t / np.maximum(q, 1e-12))
        layers = m.num_moe_layers
        return ModuleCost(
            c.compute_s * layers - hash_routed_saving(ctx, c.router_s), c.comm_s * layers, c.fixed_s * layers
        )

    def moe_pass(o, t, q) -> ModuleCost:
        return moe_cost(ctx, n, o.moe, o.shared, t, overlap, t / np.maximum(q, 1e-12))

    def dense_pass(o, t, q) -> ModuleCost:
        return dense_ffn_cost(ctx, o, t)

    # the draft passes of each module: the MTP layer's (attention, MoE or dense FFN, LM head), or an
    # EAGLE-3 head's (its attention, its FFN, its LM head; planner.costmodel.draft) in their place
    dctx = draft_context(ctx) if m.draft is not None else None
    if dctx is None:
        mtp_attention = lambda o, t, q: layers_cost(ctx, o, t, q, decode=True, mtp=True)  # noqa: E731
        mtp_dense = dense_pass if m.moe is None else None
        mtp_moe = moe_pass
        mtp_head = lambda o, t, q: _head(ctx, o, t)  # noqa: E731
    else:
        draft_layers = dctx.model.num_dense_layers
        mtp_attention = lambda o, t, q: layers_cost(dctx, o, t, q, decode=True)  # noqa: E731
        mtp_dense = lambda o, t, q: _scaled(dense_ffn_cost(dctx, o, t), draft_layers)  # noqa: E731
        mtp_moe = None
        mtp_head = lambda o, t, q: _head(dctx, o, t)  # noqa: E731
    time_s = {
        "attention": stack(
            lambda o, t, q: layers_cost(ctx, o, t, q, decode=True, mtp=True),
            opts.attention,
            m.num_layers,
            mtp_attention,
            "attention",
            main_fn=lambda o, t, q: layers_cost(ctx, o, t, q, decode=True),
        ),
        "dense_ffn": stack(dense_pass, opts.dense_ffn, m.num_dense_layers, mtp_dense, "dense_ffn"),
        "moe": stack(moe_pass, opts.moe, m.num_moe_layers, mtp_moe, "moe", main_fn=moe_main),
        "lm_head": stack(lambda o, t, q: _head(ctx, o, t), opts.lm_head, 1, mtp_head, "lm_head"),
    }
    # an untied model's embedding lookup, over each attention option's TP group (main and draft passes;
    # outside the micro-batch overlap like the LM head: costmodel.decode)
    pass_ctx = ctx if dctx is None else dctx
    time_s["attention"] = time_s["attention"] + stack(
        lambda o, t, q: _attention_embedding(ctx, o, t),
        opts.attention,
        1,
        lambda o, t, q: _attention_embedding(pass_ctx, o, t),
        "embedding",
    )
    del comm_tables["embedding"], cover_tables["embedding"]
    comm_tables["lm_head"] = np.zeros_like(comm_tables["lm_head"])
    cover_tables["lm_head"] = np.zeros_like(cover_tables["lm_head"])
    const = np.zeros((nk, nb))
    proj = 2 * m.hidden_size * m.hidden_size
    for j, k in enumerate(k_values):
        if k:
            eh = np.zeros_like(b)
            for i, t in enumerate(_decode_pass_tokens(b, k)):
                if dctx is None:  # the MTP module's 2h -> h projection
                    lin = ctx.linear_flops_per_s
                    eh = eh + ctx.roofline_s(2 * t * proj, proj * ctx.quant.linear_weight_bytes, lin)
                    continue
                # the head's fc and wider Q/K/V inputs; its FFN when the plan has no dense-FFN layout
                eh = eh + draft_projections_s(ctx, t, first=i == 0)
                if not opts.dense_ffn:
                    ffn = dense_ffn_cost(dctx, ParallelLayout(dp=n, tp=1), t).total_s
                    eh = eh + ffn * dctx.model.num_dense_layers
            const[j] = eh * per_b + ctx.hw.fixed_costs.mtp_framework_per_step.value * per_b

    # HBM holds every sequence of the step, whatever the micro-batch count
    b_full = b_values.astype(float)
    tokens_full = (b_full[None, :] * (1 + ks[:, None])).reshape(-1)
    seqs_full = np.tile(b_full, nk)
    hbm = {mod: np.zeros((time_s[mod].shape[0], nk, nb0)) for mod in MODULES}
    tied = m.tie_word_embeddings
    for i, att_lay in enumerate(opts.attention):
        kv_all = np.concatenate([kv_tokens_in_use(ctx, b_full, k, att_lay.tp) for k in k_values])
        hbm["attention"][i] = _sum_parts(attention_hbm(ctx, att_lay, tokens_full, kv_all, seqs_full)).reshape(nk, nb0)
        if not tied:  # the input embedding over the attention's TP group (planner.specs.plan.embedding_layout)
            hbm["attention"][i] += _sum_parts(embedding_hbm(ctx, attention_embedding_layout(att_lay)))
        # a concurrency that puts a fraction of a sequence on the option's TP group is not a layout
        hbm["attention"][i][:, ~whole_sequences(b_full, att_lay.tp)] = UNRUNNABLE_BYTES
    if m.num_dense_layers:
        for i, lay in enumerate(opts.dense_ffn):
            hbm["dense_ffn"][i] = _sum_parts(dense_ffn_hbm(ctx, lay, tokens_full)).reshape(nk, nb0)
    for i, opt in enumerate(opts.moe):
        hbm["moe"][i] = _sum_parts(moe_hbm(ctx, n, opt.moe, opt.shared, tokens_full)[0]).reshape(nk, nb0)
    for i, lay in enumerate(opts.lm_head):
        hbm["lm_head"][i] = _sum_parts(lm_head_hbm(ctx, lay, tokens_full)).reshape(nk, nb0)
    zeros = {mod: np.zeros((1, 1, 1)) for mod in MODULES}
    hbm_fixed = sum(fixed_hbm(ctx).values())
    emitted = np.array([emitted_tokens_per_step(k, ctx.workload.mtp_acceptance) for k in k_values])
    out = []
    for c, mb in enumerate(micro_batches):
        cut = slice(c * nb0, (c + 1) * nb0)
        out.append(
            PhaseTables(
                phase="decode",
                devices=n,
                options=opts,
                k_values=list(k_values),
                x_values=b_values,
                time_s={mod: v[:, :, cut].copy() for mod, v in time_s.items()},
                comm_s={mod: v[:, :, cut].copy() for mod, v in comm_tables.items()} if mb > 1 else zeros,
                fixed_s=zeros,
                const_s=const[:, cut].copy(),
                hbm_bytes=hbm if c == 0 else {mod: v.copy() for mod, v in hbm.items()},
                hbm_fixed_bytes=hbm_fixed,
                emitted=emitted,
                micro_batches=mb,
                cover_s={mod: v[:, :, cut].copy() for mod, v in cover_tables.items()} if mb > 1 else {},
            )
        )
    return out


def _scaled(cost: ModuleCost, times: float) -> ModuleCost:
    return ModuleCost(cost.compute_s * times, cost.comm_s * times, cost.fixed_s * times)


def _plus(a: ModuleCost, b: ModuleCost) -> ModuleCost:
    return ModuleCost(a.compute_s + b.compute_s, a.comm_s + b.comm_s, a.fixed_s + b.fixed_s)


def _head(ctx: CostContext, layout, tokens: np.ndarray) -> ModuleCost:
    """LM head, with the embedding lookup when the model ties the two (one table in one layout)."""
    head = lm_head_cost(ctx, layout, tokens)
    return _plus(head, embedding_cost(ctx, layout, tokens)) if ctx.model.tie_word_embeddings else head


def _attention_embedding(ctx: CostContext, attention, tokens: np.ndarray) -> ModuleCost:
    """The embedding lookup of an untied model, over the attention option's TP group (zero when tied: the
    LM head module carries it)."""
    if ctx.model.tie_word_embeddings:
        zero = np.zeros_like(np.asarray(tokens, dtype=float))
        return ModuleCost(zero, zero, 0.0)
    return embedding_cost(ctx, attention_embedding_layout(attention), tokens)


# ---- prefill -----------------------------------------------------------------------------------


def prefill_tables(ctx: CostContext, opts: SizeOptions, micro_batches: list[int], r_values: np.ndarray) -> PhaseTables:
    """Float tables of a prefill instance: compute, communication and launch cost per module."""
    m, n = ctx.model, opts.devices
    r = r_values.astype(float)
    bt = r * ctx.prefill_tokens_per_request
    t = bt / n
    requests_per_device = r / n

    def collect(fn, options, layers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size = max(1, len(options))
        comp, comm_, fixed = (
            np.zeros((size, 1, r.size)),
            np.zeros((size, 1, r.size)),
            np.zeros((size, 1, 1)),
        )
        for i, opt in enumerate(options):
            c = fn(opt)
            comp[i, 0] = c.compute_s * layers
            comm_[i, 0] = c.comm_s * layers
            fixed[i, 0, 0] = c.fixed_s * layers
        return comp, comm_, fixed

    parts = {
        "attention": collect(
            lambda o: _plus(layers_cost(ctx, o, t, requests_per_device, decode=False), _attention_embedding(ctx, o, t)),
            opts.attention,
            1,
        ),
        "dense_ffn": collect(lambda o: dense_ffn_cost(ctx, o, t), opts.dense_ffn, m.num_dense_layers),
        "moe": collect(lambda o: _prefill_moe(ctx, n, o, t), opts.moe, m.num_moe_layers),
        "lm_head": collect(lambda o: _prefill_head(ctx, o, t, requests_per_device), opts.lm_head, 1),
    }
    hbm = {mod: np.zeros((parts[mod][0].shape[0], len(micro_batches), r.size)) for mod in MODULES}
    prompt_kv = rank_prompt_kv_tokens(ctx, context_parallel=False)
    for j, mb in enumerate(micro_batches):
        in_flight = bt / mb * min(2, mb)
        tok = in_flight / n
        logits = in_flight / ctx.prefill_tokens_per_request / n
        for i, att_lay in enumerate(opts.attention):
            # cached prefixes occupy KV too: the KV of whole prompts
            kv = prefill_kv_tokens(bt * ctx.kv_tokens_per_computed_token, att_lay.dp, prompt_kv) / att_lay.tp
            hbm["attention"][i, j] = _sum_parts(attention_hbm(ctx, att_lay, tok, kv, kv / ctx.workload.input_tokens))
            if not m.tie_word_embeddings:
                hbm["attention"][i, j] += _sum_parts(embedding_hbm(ctx, attention_embedding_layout(att_lay)))
        for i, lay in enumerate(opts.dense_ffn):
            hbm["dense_ffn"][i, j] = _sum_parts(dense_ffn_hbm(ctx, lay, tok)) if m.num_dense_layers else 0
        for i, opt in enumerate(opts.moe):
            hbm["moe"][i, j] = _sum_parts(moe_hbm(ctx, n, opt.moe, opt.shared, tok)[0])
        for i, lay in enumerate(opts.lm_head):
            hbm["lm_head"][i, j] = _sum_parts(lm_head_hbm(ctx, lay, logits))
    return PhaseTables(
        phase="prefill",
        devices=n,
        options=opts,
        k_values=list(micro_batches),
        x_values=r_values,
        time_s={mod: p[0] for mod, p in parts.items()},
        comm_s={mod: p[1] for mod, p in parts.items()},
        fixed_s={mod: p[2] for mod, p in parts.items()},
        const_s=np.full((len(micro_batches), 1), kv_transfer_s(ctx)),
        hbm_bytes=hbm,
        hbm_fixed_bytes=sum(fixed_hbm(ctx).values()),
        emitted=np.ones(len(micro_batches)),
        forwards={
            "attention": np.array(
                [forwards_per_prompt(ctx, bt, lay.dp, False) for lay in opts.attention], dtype=np.int64
            ).reshape(len(opts.attention), r.size)
        },
    )


def _prefill_moe(ctx: CostContext, n: int, opt: MoEOption, t: np.ndarray) -> ModuleCost:
    c = moe_cost(ctx, n, opt.moe, opt.shared, t, False, float(ctx.workload.input_tokens), prefill=True)
    m = ctx.model
    if m.moe is None or not m.moe.hash_layers or not m.num_moe_layers:
        return c
    # per-layer view of the hash-routed layers' router saving (the caller multiplies by the MoE layers)
    saving = hash_routed_saving(ctx, c.router_s) / m.num_moe_layers
    return ModuleCost(c.compute_s - saving, c.comm_s, c.fixed_s)


def _prefill_head(ctx: CostContext, layout, t: np.ndarray, requests_per_device: np.ndarray) -> ModuleCost:
    head = lm_head_cost(ctx, layout, requests_per_device)
    return _plus(embedding_cost(ctx, layout, t), head) if ctx.model.tie_word_embeddings else head
