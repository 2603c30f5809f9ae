"""Which instance sizes and layouts are candidates, costed: a phase's space, and colocated instances.

1. Instance sizes per phase (planner.candidates.space), the pinned one if the user gave it: from
   the smallest that holds the weights to what the budget allows (less the smallest instance of
   the other phase, which a disaggregated deployment also needs).
2. For every size: the module layout options, their cost tables (float, then the integer tables
   of `to_integer_tables`; from the table cache when it has them, planner.search.table_cache),
   and the phase candidates: the best configurations of the size (planner.candidates.
   phase_candidates), each at its best concurrency or batch. The tables hold every integer
   concurrency and batch from the smallest to past what HBM allows (`concurrency_axis`,
   `batch_axis`, checked on the tables): no value between two others is skipped.
3. Colocated candidates for the sizes both phases were costed at (planner.candidates.
   colocated_candidates), on one machine only.
4. The named limits of that space that apply to the request (`space_restrictions`,
   planner.candidates.restrictions): what the verdict's proof holds over.

The candidates depend on the SLOs and the number kept per size, never on the card budget or the
rate: what a deployment of them can reach is the next steps' question.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np

from planner.candidates import restrictions as rules
from planner.candidates.afd_candidates import AfdCandidate
from planner.candidates.colocated_candidates import (
    ColocatedCandidate,
    colocated_candidates,
    colocated_size_bound,
    colocated_upper_bounds,
)
from planner.candidates.phase_candidates import (
    EMITTED_SCALE,
    PhaseCandidate,
    TpotLimitUs,
    decode_candidates,
    decode_micro_batch_factor,
    least_forwards,
    overlapped_step_us,
    prefill_candidates,
    prefill_forward_us,
    prefill_ttft_us,
)
from planner.candidates.restrictions import DEFAULT_DRAFT_DEPTHS, DEFAULT_MTP_DEPTHS
from planner.candidates.space import SizeOptions, SpaceLimits, instance_sizes, min_devices_for_weights, size_options
from planner.candidates.tables import (
    FRACTIONAL_BELOW,
    MAX_CONCURRENCY,
    MAX_REQUESTS_PER_FORWARD,
    MODULES,
    IntTables,
    PhaseTables,
    decode_tables_by_micro_batches,
    prefill_tables,
    steps_per_group_sequence,
    to_integer_tables,
)
from planner.costmodel.acceptance_spread import slo_tpot_factor
from planner.costmodel.context import CostContext
from planner.costmodel.memory import fixed_hbm
from planner.costmodel.prefill import least_requests_per_forward
from planner.errors import BadInputError, InfeasibleError
from planner.search.budget import Budget
from planner.search.contexts import PhaseContexts
from planner.search.request import PlanRequest
from planner.search.table_cache import TableCache, cached_tables, table_key

KEEP_PER_SIZE = 3
Progress = Callable[[str, float], None]


def tpot_limit_us(ctx: CostContext, request: PlanRequest, k_values: Sequence[int]) -> TpotLimitUs:
    """The limit on the mean step over the tokens it emits, in us, for tables of these MTP depths: the
    TPOT SLO, or with `slo.tpot_at_percentile` per depth the SLO over that depth's factor of the
    SLO-percentile request's TPOT (planner.costmodel.acceptance_spread.slo_tpot_factor)."""
    slo = request.slo
    if slo.tpot_ms is None:
        return None
    if not slo.tpot_at_percentile:
        return int(math.floor(slo.tpot_ms * 1000))
    return tuple(int(math.floor(slo.tpot_ms * 1000 / slo_tpot_factor(slo, ctx.workload, k))) for k in k_values)


@dataclass
class PhaseSpace:
    """A phase's candidates over all its instance sizes, and what was evaluated."""

    phase: str
    sizes: list[int]
    candidates: list[PhaseCandidate]
    points_evaluated: int
    tables: dict[int, tuple[PhaseTables, IntTables]] = field(default_factory=dict)
    # sizes left out because no expert layout of them meets the layout limits (--max-redundant-experts,
    # the engine's): a MoE model's instance needs one, and costing the size without would drop its experts
    no_expert_layout: list[int] = field(default_factory=list)


def weights_bytes(ctx: CostContext) -> tuple[float, float]:
    """(routed and shared expert weights, all other weights) of the model, bytes per instance."""
    m, q = ctx.model, ctx.quant
    experts = 0.0
    if m.moe is not None:
        layers = m.num_moe_layers + m.mtp_layers
        experts = layers * (
            m.moe.routed_experts * m.expert_params() * ctx.routed_expert_weight_bytes
            + m.moe.shared_experts * m.shared_expert_params() * q.shared_expert_weight_bytes
        )
    attn = m.attention_params_all() * q.linear_weight_bytes
    dense = m.num_dense_layers * m.dense_ffn_params() * q.dense_weight_bytes
    vocab = (1 if m.tie_word_embeddings else 2) * m.vocab_params() * q.vocab_weight_bytes
    return experts, attn + dense + vocab


def _fixed_and_kv(ctx: CostContext) -> tuple[float, float, float]:
    """(HBM a plan may fill per device less what no layout changes, KV bytes of one decoding
    sequence at the mean context, KV bytes of one prompt), without MTP draft positions."""
    m, q = ctx.model, ctx.quant
    usable = ctx.hbm_capacity_bytes - sum(fixed_hbm(ctx).values())

    def sequence_bytes(tokens: float) -> float:
        if m.is_plain():
            return tokens * m.kv_elements_per_token_per_layer() * m.kv_layers() * q.kv_bytes_per_element
        growing, fixed = m.kv_cache_bytes(tokens, q.kv_bytes_per_element, 1)
        return growing + fixed

    return usable, sequence_bytes(ctx.mean_decode_context_tokens), sequence_bytes(float(ctx.workload.input_tokens))


def concurrency_axis(ctx: CostContext, cap: int | None = None, tps: Sequence[int] = ()) -> np.ndarray:
    """Every decode concurrency per device the search costs: each whole number from 1 to the most any
    layout can hold (`cap`, else HBM over one sequence's KV at the mean context, without weights:
    every layout holds at least the whole KV of B sequences per device, since tensor parallelism over
    t devices splits a sequence's heads but serves t times the sequences, and MLA's latent is not
    split at all), at most MAX_CONCURRENCY (a named limit of the space); and below FRACTIONAL_BELOW
    every whole number of sequences per attention TP group of the sizes `tps` that are powers of two
    (1/16, 2/16, ... a device for TP16), which only the layouts of such a TP run (the tables give the
    others no HBM there). `build_phase_space` checks the bound on the tables and extends the axis if
    a layout still fits at its end."""
    if cap is None:
        usable, per_sequence, _ = _fixed_and_kv(ctx)
        cap = int(usable // max(per_sequence, 1.0)) + 1
    whole = np.arange(1, max(1, min(MAX_CONCURRENCY, cap)) + 1, dtype=float)
    steps = {tp for tp in tps if steps_per_group_sequence(tp)}
    fractions = {k / tp for tp in steps for k in range(1, FRACTIONAL_BELOW * tp) if k % tp}
    return np.union1d(whole, np.array(sorted(fractions), dtype=float))


def batch_axis(ctx: CostContext, devices: int, cap: int | None = None) -> np.ndarray:
    """Every prefill batch (requests per forward) the search costs: from the fewest that hold the
    TTFT-percentile prompt whole to the most the instance can hold (`cap`, else every device's
    HBM over one prompt's KV, without weights and activations: the instance holds the KV of every
    prompt of the forward), and at most MAX_REQUESTS_PER_FORWARD (a named limit of the space).
    `build_phase_space` checks the bound on the tables as for concurrency."""
    if cap is None:
        usable, _, per_prompt = _fixed_and_kv(ctx)
        cap = int(usable * devices // max(per_prompt, 1.0)) + 1
    lo = least_requests_per_forward(ctx)
    return np.arange(lo, max(lo, min(MAX_REQUESTS_PER_FORWARD, cap)) + 1, dtype=np.int64)


def _axis_covers(t: PhaseTables, ints: IntTables, cap_limit: int) -> bool:
    """Whether the tables' axis holds every value any layout could run: at its last value even
    every module at its least HBM overflows (and the least HBM never falls along the axis, so
    nothing beyond fits either), or the axis reaches the space's limit."""
    return int(t.x_values[-1]) >= cap_limit or not _may_fit_beyond(t, ints)


def _may_fit_beyond(t: PhaseTables, ints: IntTables) -> bool:
    """Whether some layout might fit HBM beyond the axis's last value: one fits at it, or the least
    HBM over the layouts falls somewhere along the axis's whole numbers (so it is no bound; between
    them, where only some TPs run, the least may dip). Memoised with the tables (every search of a
    sweep or of --engine auto asks again; it reads the tables alone)."""
    key = ("may_fit_beyond",)
    if key not in t.memo:
        whole = np.flatnonzero(np.abs(t.x_values - np.round(t.x_values)) < 1e-9)
        t.memo[key] = any(
            bool(np.any(np.diff(least) < 0) or least[-1] <= ints.hbm_capacity_mib)
            for least in (
                sum(ints.hbm_mib[mod][:, j, whole].min(axis=0) for mod in MODULES) for j in range(len(t.k_values))
            )
        )
    return bool(t.memo[key])


def engine_decode_micro_batches(engine: str) -> tuple[int, ...]:
    """Decode micro-batch counts the engine runs (planner.engines profile)."""
    from planner.engines.profiles import decode_micro_batches, load_profile

    return decode_micro_batches(load_profile(engine))


def mtp_tokens_max(engine: str) -> int:
    """Deepest MTP the engine runs (planner.engines profile)."""
    from planner.engines.profiles import load_profile

    return load_profile(engine).capabilities.mtp_tokens_max


def _decode_tables(
    ctx: CostContext, opts: SizeOptions, ks: list[int], mbs: tuple[int, ...], key: tuple, cache: TableCache | None
) -> list[tuple[PhaseTables, IntTables]]:
    """A decode size's tables, one per micro-batch count (costed in one pass), over the whole
    concurrency axis: extended while a layout still fits HBM at its end."""
    tps = sorted({a.tp for a in opts.attention})
    xs = concurrency_axis(ctx, tps=tps)
    while True:
        joint: dict[int, tuple[PhaseTables, IntTables]] = {}

        def build(mb: int, xs: np.ndarray = xs, joint: dict = joint) -> tuple[PhaseTables, IntTables]:
            if not joint:  # every micro-batch count in one pass (planner.candidates.tables)
                built = decode_tables_by_micro_batches(ctx, opts, ks, xs, mbs)
                for count, t in zip(mbs, built, strict=True):
                    joint[count] = (t, to_integer_tables(t, ctx.hbm_capacity_bytes))
            return joint[mb]

        extended = () if xs[-1] == concurrency_axis(ctx, tps=tps)[-1] else ("concurrency_to", int(xs[-1]))
        out = [
            cached_tables(
                cache, (*key, *extended) if mb == 1 else (*key, "micro_batches", mb, *extended), partial(build, mb)
            )
            for mb in mbs
        ]
        if _axis_covers(*out[0], MAX_CONCURRENCY):
            return out
        xs = concurrency_axis(ctx, 2 * int(xs[-1]), tps)


def _prefill_tables(
    ctx: CostContext, opts: SizeOptions, key: tuple, cache: TableCache | None
) -> tuple[PhaseTables, IntTables]:
    """A prefill size's tables over the whole batch axis, extended while a layout still fits HBM
    at its end."""
    xs = batch_axis(ctx, opts.devices)
    while True:

        def build(xs: np.ndarray = xs) -> tuple[PhaseTables, IntTables]:
            t = prefill_tables(ctx, opts, list(opts.prefill_micro_batches), xs)
            return t, to_integer_tables(t, ctx.hbm_capacity_bytes)

        extended = () if xs[-1] == batch_axis(ctx, opts.devices)[-1] else ("batch_to", int(xs[-1]))
        t, ints = cached_tables(cache, (*key, *extended), build)
        if _axis_covers(t, ints, MAX_REQUESTS_PER_FORWARD):
            return t, ints
        xs = batch_axis(ctx, opts.devices, 2 * int(xs[-1]))


def _size_options(
    ctx: CostContext, devices: int, phase: str, limits: SpaceLimits, fingerprint: tuple, cache: TableCache | None
) -> SizeOptions:
    """`size_options`, kept in `cache` (a sweep's points and `--engine auto`'s searches ask again; building
    them is about a millisecond a size, mostly layout objects)."""
    key = ("size_options", phase, devices, repr(limits), fingerprint)
    found = cache.derived.get(key) if cache is not None else None
    if found is None:
        found = size_options(ctx.model, ctx.hw, devices, phase, limits)  # type: ignore[arg-type]
        if cache is not None:
            cache.derived[key] = found
    return found


def build_phase_space(
    ctx: CostContext,
    phase: str,
    sizes: list[int],
    request: PlanRequest,
    limits: SpaceLimits,
    progress: Progress | None = None,
    keep: int = KEEP_PER_SIZE,
    cache: TableCache | None = None,
) -> PhaseSpace:
    """Tables and candidates of every instance size of one phase (tables from `cache` if given)."""
    m = ctx.model
    cands: list[PhaseCandidate] = []
    tables_by_size: dict[int, tuple[PhaseTables, IntTables]] = {}
    no_expert_layout: list[int] = []
    points = 0
    slo = request.slo
    fingerprint = table_key(ctx, request, limits)  # what the tables depend on
    for i, n in enumerate(sizes):
        if progress:
            progress(f"costing {phase} instances of {n} devices", (i + 1) / max(1, len(sizes)))
        opts = _size_options(ctx, n, phase, limits, fingerprint, cache)
        if m.moe is not None and not opts.moe:
            no_expert_layout.append(n)
            continue
        key = (phase, n, fingerprint)
        if phase == "decode":
            default = DEFAULT_DRAFT_DEPTHS if m.draft is not None else DEFAULT_MTP_DEPTHS
            ks = list(request.mtp_tokens) if request.mtp_tokens is not None else list(default)
            ks = ks if m.speculates or request.mtp_tokens is not None else [0]
            if m.draft is not None:  # a draft model is loaded to run: every decode candidate drafts
                ks = [k for k in ks if k > 0] or [1]
            if limits.engine is not None:  # MTP depths the engine runs
                ks = [k for k in ks if k <= mtp_tokens_max(limits.engine)] or [0]
            itl_us = None if slo.max_itl_ms is None else int(math.floor(slo.max_itl_ms * 1000))
            factor = decode_micro_batch_factor(m.num_layers, ctx.hw.overlap.decode_micro_batch_efficiency.value)
            mbs = request.decode_micro_batches
            if limits.engine is not None:  # decode micro-batch counts the engine runs
                mbs = tuple(mb for mb in mbs if mb in engine_decode_micro_batches(limits.engine)) or (1,)
            by_micro_batches = _decode_tables(ctx, opts, ks, mbs, key, cache)
            found = []
            for t, ints in by_micro_batches:
                slo_us = tpot_limit_us(ctx, request, t.k_values)
                memo_key = ("decode_candidates", slo_us, itl_us, keep, factor)
                if memo_key not in t.memo:  # candidates depend on the SLOs and `keep`, never on the budget
                    t.memo[memo_key] = decode_candidates(t, ints, slo_us, keep, itl_us, factor)  # type: ignore[arg-type]
                found.extend(t.memo[memo_key])
            # the best `keep` over the micro-batch counts (deterministic order among equals)
            found = sorted(found, key=lambda c: (-c.score, c.key()))[:keep]
            t, ints = by_micro_batches[0]
            t.memo["decode_micro_batch_tables"] = (factor, by_micro_batches)  # for the MTP alternative
        else:
            t, ints = _prefill_tables(ctx, opts, key, cache)
            slo_us = None if slo.ttft_ms is None else int(math.floor(slo.ttft_ms * 1000))
            memo_key = ("prefill_candidates", slo_us, None, keep, 0)
            if memo_key not in t.memo:
                t.memo[memo_key] = prefill_candidates(
                    t,
                    ints,
                    slo_us,
                    keep,
                    m.num_layers,
                    ctx.hw.overlap.prefill_micro_batch_efficiency.value,  # type: ignore[arg-type]
                )
            found = t.memo[memo_key]
        micro_batch_counts = len(request.decode_micro_batches) if phase == "decode" else 1
        points += opts.count * len(t.k_values) * len(t.x_values) * micro_batch_counts
        tables_by_size[n] = (t, ints)  # type: ignore[assignment]
        cands.extend(found)
    return PhaseSpace(phase, sizes, cands, points, tables_by_size, no_expert_layout)


def phase_sizes(ctx: CostContext, budget_devices: int, pinned: int | None, other_min: int, label: str) -> list[int]:
    """A phase's instance sizes: the pinned one (checked against the budget and the machine), or
    every size planner.candidates.space allows from the smallest that holds the weights to the
    budget less `other_min` devices (the other phase's smallest instance)."""
    experts, other = weights_bytes(ctx)
    min_dev = min_devices_for_weights(ctx.model, ctx.hw, experts, other, ctx.hbm_utilization)
    if pinned is not None:
        if pinned < 1:
            raise BadInputError(f"--{label}-devices must be >= 1.")
        if pinned > budget_devices:
            raise BadInputError(
                f"--{label}-devices {pinned} exceeds the {budget_devices} devices --max-cards allows; "
                "raise --max-cards or pin a smaller instance."
            )
        if ctx.hw.max_devices is not None and pinned > ctx.hw.max_devices:
            raise BadInputError(
                f"--{label}-devices {pinned} exceeds the {ctx.hw.max_devices} devices one {ctx.hw.name} "
                "instance can span."
            )
        return [pinned]
    return instance_sizes(ctx.hw, max(0, budget_devices - other_min), min_dev)


class PinnedSizeRefused(InfeasibleError):
    """The request's engine runs no layout of a pinned instance size (--decode-devices, --prefill-devices):
    `pin` the flag and its value, `why` the engine's rule."""

    def __init__(self, pin: str, why: str) -> None:
        super().__init__(f"{pin}: {why}; pin a size it runs or drop the pin.")
        self.pin, self.why = pin, why

    def __reduce__(self) -> tuple:
        # rebuilt from its two fields (a forked search's result is pickled back: planner.search.runnable)
        return (type(self), (self.pin, self.why))


def refuse_pinned_size_the_engine_cannot_run(request: PlanRequest, ctx: CostContext, label: str) -> None:
    """A pinned instance size (--decode-devices / --prefill-devices) the request's engine runs in no layout:
    InfeasibleError naming the pin and the engine's rule, rather than plans the engine cannot run (the
    free sizes are whole nodes past one already: planner.candidates.space.instance_sizes)."""
    pinned = request.decode_devices if label == "decode" else request.prefill_devices
    if request.engine is None or pinned is None:
        return
    from planner.engines.profiles import load_profile, size_refusal

    why = size_refusal(load_profile(request.engine), pinned, ctx.hw.devices_per_node)
    if why is not None:
        raise PinnedSizeRefused(f"--{label}-devices {pinned}", why)


def request_limits(request: PlanRequest, max_devices: int) -> SpaceLimits:
    """The layout limits of a request: its engine, its cap on redundant copies, and the named
    limits it lifts (--max-extra-slots drops the 50% redundancy cap too; --any-tp)."""
    limits = SpaceLimits(
        max_devices=max_devices,
        max_redundant_experts=request.max_redundant_experts,
        engine=request.engine,
        any_tp=request.any_tp,
    )
    if request.max_extra_slots is not None:
        limits = replace(limits, max_extra_slots=request.max_extra_slots, max_redundancy=None)
    return limits


def candidate_spaces(
    contexts: PhaseContexts,
    request: PlanRequest,
    budget: Budget,
    keep: int,
    progress: Progress | None,
    cache: TableCache | None,
) -> tuple[PhaseSpace | None, PhaseSpace | None] | None:
    """The decode and prefill spaces of the phases searched (None for a phase not searched), with
    `keep` candidates per size; None when the budget cannot hold the weights of the instances the
    request needs (one machine; with two, each phase's sizes are what its pool allows)."""
    want_decode = request.phase in ("both", "decode")
    want_prefill = request.phase in ("both", "prefill")
    d_ctx, p_ctx = contexts.decode, contexts.prefill
    other_min_d = other_min_p = 0
    if not contexts.mixed:
        experts, other = weights_bytes(d_ctx)
        min_dev = min_devices_for_weights(d_ctx.model, d_ctx.hw, experts, other, d_ctx.hbm_utilization)
        # a colocated instance serves both phases alone: every size up to the whole budget is one
        coloc_ok = want_decode and want_prefill and request.colocated
        need = min_dev if coloc_ok else min_dev * (int(want_decode) + int(want_prefill))
        if need > budget.pool_devices[0]:
            return None
        other_min_d = min_dev if want_prefill and not coloc_ok else 0
        other_min_p = min_dev if want_decode and not coloc_ok else 0
    d_devices, p_devices = budget.pool_devices[budget.pool("decode")], budget.pool_devices[budget.pool("prefill")]
    dspace = pspace = None
    if want_decode:
        refuse_pinned_size_the_engine_cannot_run(request, d_ctx, "decode")
        sizes = phase_sizes(d_ctx, d_devices, request.decode_devices, other_min_d, "decode")
        limits = request_limits(request, d_devices)
        dspace = build_phase_space(d_ctx, "decode", sizes, request, limits, progress, keep, cache)
    if want_prefill:
        refuse_pinned_size_the_engine_cannot_run(request, p_ctx, "prefill")
        sizes = phase_sizes(p_ctx, p_devices, request.prefill_devices, other_min_p, "prefill")
        limits = request_limits(request, p_devices)
        pspace = build_phase_space(p_ctx, "prefill", sizes, request, limits, progress, keep, cache)
    return dspace, pspace


def space_restrictions(
    request: PlanRequest, contexts: PhaseContexts, dspace: PhaseSpace | None, pspace: PhaseSpace | None
) -> list[rules.Restriction]:
    """The named limits of the space (planner.candidates.restrictions) that apply to this search:
    those the request did not lift, for what the model and the phases searched have."""
    m = contexts.decode.model
    out: list[rules.Restriction] = []
    if m.moe is not None:
        out.append(rules.EP_INSTANCE)
        if request.max_extra_slots is None:
            out.append(rules.EXTRA_SLOTS)
        if m.moe.shared_experts:
            out.append(rules.SHARED_COUNTS)
    if not request.any_tp:
        out.append(rules.TP_POWERS)
    pinned = [request.decode_devices if dspace else 1, request.prefill_devices if pspace else 1]
    if any(p is None for p in pinned):
        out.append(rules.INSTANCE_SIZES)
    if m.speculates and request.mtp_tokens is None and dspace is not None:
        out.append(rules.DRAFT_DEPTHS if m.draft is not None else rules.MTP_DEPTHS)
    out.append(rules.MICRO_BATCHES)
    if pspace is not None:
        out.append(rules.HYBRID_POST_TP)
    if dspace and pspace and request.colocated and not contexts.mixed:
        out += [rules.CHUNK_SIZES, rules.COLOCATED_MICRO_BATCH]
    if dspace is not None and any(
        a.tp > 1 for t, _ in dspace.tables.values() for a in t.options.attention
    ):  # a fraction of a sequence per device needs a TP group to hold whole ones
        out.append(rules.WHOLE_CONCURRENCY)
    caps = ((dspace, MAX_CONCURRENCY, rules.CONCURRENCY_CAP), (pspace, MAX_REQUESTS_PER_FORWARD, rules.BATCH_CAP))
    for space, cap, rule in caps:  # a cap is a limit only where HBM and the SLOs would allow more
        if space is not None and any(
            int(t.x_values[-1]) >= cap and _some_layout_runs_at_end(contexts.of(t.phase), request, t, ints)
            for t, ints in space.tables.values()
        ):
            out.append(rule)
    return out + user_restrictions(request, m.moe is not None, dspace is not None, pspace is not None)


def user_restrictions(request: PlanRequest, moe: bool, decode: bool, prefill: bool) -> list[rules.Restriction]:
    """The limits the request's own flags put on the space (pins and caps): a proof holds over them
    too, so the line under the verdict names them beside the built-in ones."""

    def yours(key: str, short: str, keeps_out: str, flag: str) -> rules.Restriction:
        return rules.Restriction(f"yours-{key}", short, keeps_out, f"yours: {flag}", f"drop or change {flag}")

    out: list[rules.Restriction] = []
    if moe and request.max_extra_slots is not None:
        n = request.max_extra_slots
        out.append(yours("extra-slots", f"<= {n} extra slots (yours)", f"more than {n} expert slots per device "
                         "beyond the fewest that hold every expert", "--max-extra-slots"))  # fmt: skip
    if moe and request.max_redundant_experts is not None:
        n = request.max_redundant_experts
        out.append(yours("redundant", f"<= {n} redundant copies (yours)", f"more than {n} redundant expert copies "
                         "per instance", "--max-redundant-experts"))  # fmt: skip
    for phase, devices, searched, flag in (
        ("decode", request.decode_devices, decode, "--decode-devices"),
        ("prefill", request.prefill_devices, prefill, "--prefill-devices"),
    ):
        if searched and devices is not None:
            out.append(yours(f"{phase}-devices", f"{phase} instances of {devices} devices (yours)",
                             f"{phase} instances of any other size", flag))  # fmt: skip
    if decode and request.mtp_tokens is not None:
        depths = ",".join(str(k) for k in request.mtp_tokens)
        what = "draft depths" if request.draft_model is not None else "MTP depths"
        out.append(yours("mtp", f"{what} {depths} (yours)", f"other {what}", "--mtp"))
    left_out = [name for name, on in (("pd", request.disaggregated), ("colocated", request.colocated)) if not on]
    if decode and prefill and left_out:
        names = " and ".join(left_out)
        out.append(yours("structure", f"no {names} (yours)", f"{names} deployments", "--structure"))
    return out


def _some_layout_runs_at_end(ctx: CostContext, request: PlanRequest, t: PhaseTables, ints: IntTables) -> bool:
    """Whether some layout might fit HBM and meet the SLOs at the axis's last value (every module at
    its least HBM and time: a bound below every layout's)."""
    slo = request.slo
    for j, k in enumerate(t.k_values):
        least_hbm = sum(int(ints.hbm_mib[mod][:, j, -1].min()) for mod in MODULES)
        if least_hbm > ints.hbm_capacity_mib:
            continue
        if t.phase == "decode":
            step = sum(int(ints.time_us[mod][:, j, -1].min()) for mod in MODULES) + int(ints.const_us[j, -1])
            if t.micro_batches > 1 and ints.cover_us:  # the most two micro-batches could hide
                comm = sum(int(ints.comm_us[mod][:, j, -1].max()) for mod in MODULES)
                cover = sum(int(ints.cover_us[mod][:, j, -1].max()) for mod in MODULES)
                factor = decode_micro_batch_factor(
                    ctx.model.num_layers, ctx.hw.overlap.decode_micro_batch_efficiency.value
                )
                step = int(overlapped_step_us(step, comm, cover, factor))
            e = float(t.emitted[j]) / slo_tpot_factor(slo, ctx.workload, k)
            if slo.tpot_ms is not None and step / e > slo.tpot_ms * 1000:
                continue
            if slo.max_itl_ms is not None and step > slo.max_itl_ms * 1000:
                continue
            return True
        comp, comm_, fixed = (
            sum(int(getattr(ints, n)[mod][:, 0, -1].min()) for mod in MODULES)
            for n in ("time_us", "comm_us", "fixed_us")
        )
        efficiency = ctx.hw.overlap.prefill_micro_batch_efficiency.value
        forward = int(prefill_forward_us(comp, comm_, fixed, k, ctx.model.num_layers, efficiency))
        own = int(np.asarray(least_forwards(ints)).reshape(-1)[-1])
        if (
            slo.ttft_ms is None
            or prefill_ttft_us(forward, int(ints.const_us.reshape(-1)[0]), own) <= slo.ttft_ms * 1000
        ):
            return True
    return False


def afd_space(
    ctx: CostContext,
    request: PlanRequest,
    budget: Budget,
    keep: int,
    floor: Callable[[list[AfdCandidate]], float] | None = None,
    cache: TableCache | None = None,
) -> list[AfdCandidate]:
    """AFD decode instances (planner.candidates.afd_candidates) of every split the decode machine's
    pool allows, less the smallest prefill instance when prefill instances feed them; the `keep`
    best of each split, under the request's SLOs, MTP depths and engine.

    `floor(found)`: the output tokens/s per device an AFD instance must exceed to matter, given the
    candidates found so far (planner.search.plan_search derives it from the deployments it must
    rank). Splits are visited best bound first (each split's bound is on tokens/s per device, over
    every configuration: afd_candidates.afd_sizes) and the visit stops at the first whose bound
    does not exceed it: exact, as no configuration of those splits reaches it."""
    from planner.candidates.afd_candidates import AfdLimits, AfdSize, afd_sizes, size_candidates, with_bounds
    from planner.candidates.table_store import table_store

    if ctx.model.draft is not None:  # a draft model's place in an AFD split is not modelled (specs.plan.check_afd)
        return []
    devices = budget.pool_devices[budget.pool("afd")]
    if request.phase == "both" and not budget.mixed:
        experts, other = weights_bytes(ctx)
        devices -= min_devices_for_weights(ctx.model, ctx.hw, experts, other, ctx.hbm_utilization)
    if devices < 2:
        return []
    slo = request.slo
    mtp = request.mtp_tokens if request.mtp_tokens is not None else ((0, 1, 2) if ctx.model.mtp_layers else (0,))
    limits = AfdLimits(
        max_devices=devices,
        tpot_s=None if slo.tpot_ms is None else slo.tpot_ms / 1000,
        max_itl_s=None if slo.max_itl_ms is None else slo.max_itl_ms / 1000,
        mtp_tokens=tuple(mtp),
        keep=keep,
        engine=request.engine,
        devices=request.decode_devices,
        tpot_factor_by_k=tuple((int(k), slo_tpot_factor(slo, ctx.workload, int(k))) for k in mtp)
        if slo.tpot_at_percentile
        else (),
    )
    space = SpaceLimits(max_devices=devices, max_redundant_experts=request.max_redundant_experts, engine=request.engine)
    # the splits' bounds and each visited split's candidates are pure functions of the tables' key
    # and the limits: kept on disk (planner.candidates.table_store), a second run skips costing
    # them (the bounds cost every split's both sides: about a second of a supernode search)
    store = table_store()
    key = ("afd", table_key(ctx, request, space), repr(limits))
    record = store.record(key) if store is not None else None
    full: dict[tuple[int, int], AfdSize] = {}
    changed = False
    if record is None or "splits" not in record:
        # both sides costed without the SLOs (kept in `cache` for the searches that follow, say a
        # sweep's other TPOT points), then bounded under them
        free = replace(limits, tpot_s=None, max_itl_s=None, tpot_factor_by_k=())
        free_key = ("afd", table_key(ctx, request, space), repr(free))
        unbounded = cache.derived.get(free_key) if cache is not None else None
        if unbounded is None:
            unbounded = afd_sizes(ctx, space, free)
            if cache is not None:
                cache.derived[free_key] = unbounded
        sizes = with_bounds(ctx, limits, unbounded)
        full = {(z.a, z.f): z for z in sizes}
        splits = [(z.a, z.f, z.bound) for z in sizes]
        if record is not None:
            record["splits"], changed = splits, True
    else:
        splits = record["splits"]
    out: list[AfdCandidate] = []
    for a, f, bound in splits:
        if floor is not None and out and bound * (1 + 1e-9) <= floor(out):
            break  # (splits come best bound first: no later one reaches the floor either)
        found = record.get((a, f)) if record is not None else None
        if found is None:
            size = full.get((a, f)) or with_bounds(ctx, limits, afd_sizes(ctx, space, limits, only=(a, f)))[0]
            found = size_candidates(ctx, limits, size)
            if record is not None:
                record[(a, f)], changed = found, True
        out += found
    if store is not None and changed:
        store.touch(key)
    return sorted(out, key=lambda c: (-c.tokens_per_s_per_device, c.devices))


def colocated_space(
    ctx: CostContext,
    request: PlanRequest,
    dspace: PhaseSpace,
    pspace: PhaseSpace,
    keep: int,
    mtp: bool | None = None,
    floor_per_device: Fraction = Fraction(0),
    ep_not: int | None = None,
) -> list[ColocatedCandidate]:
    """Colocated candidates for the sizes both phases were costed at: per size the `keep` best
    (exact, planner.candidates.colocated_candidates; `mtp` and `ep_not` filter as there). When the
    objective is a ratio (tokens/s per card, per cost, per watt), sizes are visited best bound per
    device first, and a size whose bound per device cannot reach the `keep`-th best found is
    skipped: that is exact too, and depends on no budget.
    `floor_per_device` (requests/s in thousandths per device) is what a colocated instance must
    reach to matter at all (the `top`-th best deployment without colocated ones): sizes and
    combinations whose bound is below it are not costed, and those kept all reach it."""
    slo = request.slo
    ttft = None if slo.ttft_ms is None else int(math.floor(slo.ttft_ms * 1000))
    itl = None if slo.max_itl_ms is None else int(math.floor(slo.max_itl_ms * 1000))
    sizes = sorted(set(dspace.tables) & set(pspace.tables))
    # a first bound per size, free: a colocated instance serves fewer requests/s than the size's
    # best pure-decode instance (same layouts, HBM, SLO, ITL and engine rules, and it also prefills,
    # whole forwards or chunks: planner.candidates.colocated_candidates)
    out_tokens = ctx.workload.output_tokens
    rough = {n: 0.0 for n in sizes}
    # colocated instances decode with the micro-batch count of the size's first tables: when the
    # kept candidates hold one with that count, the best of them is among those kept (they are
    # the size's best), else every kept one is at least as good as it
    same = {n: 0.0 for n in sizes}
    for c in dspace.candidates:
        if c.devices in rough:
            rate = c.devices * c.num / c.den * 1e6 / EMITTED_SCALE / out_tokens
            rough[c.devices] = max(rough[c.devices], rate)
            if c.micro_batches == dspace.tables[c.devices][0].micro_batches:
                same[c.devices] = max(same[c.devices], rate)
    rough = {n: same[n] if same[n] > 0 else rough[n] for n in sizes}
    # with a target rate every size's best counts, and with --objective total too: the most tokens/s within
    # a budget may take instances of a size with less per device that pack the budget better (2 x 4
    # devices and 5 x 2 in 11 cards); the per-device order and skip are exact only for a ratio objective
    per_device = request.rate_per_s is None and request.objective != "total"
    if per_device:
        # a second bound per size, a few hundredths of the combinations' bound's cost: the same
        # conditions per attention layout, with every other figure at its least over the other
        # modules' layouts (colocated_size_bound)
        for n in sizes:
            if rough[n] > 0:
                (dt, di), (pt, pi) = dspace.tables[n], pspace.tables[n]
                tpot = tpot_limit_us(ctx, request, dt.k_values)
                rough[n] = min(rough[n], colocated_size_bound(ctx, dt, di, pt, pi, tpot, ttft, itl, mtp))
    order = sorted(sizes, key=lambda n: (-rough[n] / n, n)) if per_device else sizes
    out: list[ColocatedCandidate] = []
    for n in order:
        if rough[n] <= 0:
            continue  # no decode configuration of this size meets the SLO
        (dt, di), (pt, pi) = dspace.tables[n], pspace.tables[n]
        tpot = tpot_limit_us(ctx, request, dt.k_values)
        floor = float(floor_per_device) / 1000 * n
        if per_device and len(out) >= keep:
            floor = max(floor, sorted((c.rate_milli / 1000 / c.devices for c in out), reverse=True)[keep - 1] * n)
        if per_device and floor > 0:
            if rough[n] * (1 + 1e-9) < floor:  # (ties are costed: the order among equals is by key)
                continue
            bound = colocated_upper_bounds(ctx, dt, di, pt, pi, tpot, ttft, itl)[0]
            if mtp is not None:
                bound = bound[[j for j, k in enumerate(dt.k_values) if (k > 0) == mtp]]
            if ep_not is not None and dt.options.moe:
                bound = bound[:, :, :, [i for i, o in enumerate(dt.options.moe) if o.moe.ep != ep_not]]
            if float(bound.max(initial=0.0)) * (1 + 1e-9) < floor:
                continue
        least_milli = math.ceil(floor_per_device * n) if per_device else 0
        key = ("colocated_candidates", tpot, ttft, itl, keep, mtp, least_milli, ep_not)
        if key not in pt.memo:  # the same for every budget: kept with the tables
            pt.memo[key] = colocated_candidates(
                ctx,
                dt,
                di,
                pt,
                pi,
                tpot,
                ttft,
                keep,
                mtp=mtp,
                max_itl_us=itl,
                least_rate_milli=least_milli,
                ep_not=ep_not,
            )
        out.extend(pt.memo[key])
    return sorted(out, key=lambda c: (c.devices, -c.rate_milli, c.decode.key()))


def decode_pool(ctx: CostContext, request: PlanRequest, dspace: PhaseSpace, drawn: dict) -> list[PhaseCandidate]:
    """The best decode candidate of each size and micro-batch count among those `drawn` allows
    (`decode_candidates`' filters `mtp`, `ep_not`), from the tables again."""
    itl_us = None if request.slo.max_itl_ms is None else int(math.floor(request.slo.max_itl_ms * 1000))
    pool: list[PhaseCandidate] = []
    for t0, ints0 in dspace.tables.values():
        # every decode micro-batch count's tables of the size (build_phase_space keeps them)
        factor, tables = t0.memo.get("decode_micro_batch_tables", (0, [(t0, ints0)]))
        for t, ints in tables:
            slo_us = tpot_limit_us(ctx, request, t.k_values)
            pool.extend(decode_candidates(t, ints, slo_us, 1, itl_us, factor, **drawn))
    return pool


def best_per_size(cands: list[Any]) -> list[int]:
    """Index of the best candidate of each instance size (most requests/s per instance; the
    first of equals), in the order of the list."""
    best: dict[int, int] = {}
    for i, c in enumerate(cands):
        j = best.get(c.devices)
        if j is None or _rate_of(c) > _rate_of(cands[j]):
            best[c.devices] = i
    return sorted(best.values())


def _rate_of(c: Any) -> Fraction:
    if isinstance(c, ColocatedCandidate):
        return Fraction(c.rate_milli)
    if isinstance(c, AfdCandidate):
        return Fraction(c.tokens_per_s)
    return Fraction(c.num, c.den)
