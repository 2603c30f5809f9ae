"""AFD decode instances as candidates: every A:F split, micro-batch count, layout and MTP depth, each
at its best concurrency.

The space (every restriction named; `AFD_SPACE` says it in one line for the search's verdict):

- FFN devices F: the instance sizes of `planner.candidates.space` (sub-node powers of two, whole
  nodes) whose expert slots fit the FFN devices' HBM, at most the routed experts (plus dedicated
  shared-expert devices);
- attention devices A = r F with r = 1..MAX_RATIO: each FFN device serves a whole group of r
  attention devices (the afd-plugin's CAMP2P mapping; MegaScale-Infer's ratios stay within it),
  and A + F within the card budget and the machine's instance limit;
- micro-batches M: 1..4, or the engine's counts;
- per side, the layouts of `planner.candidates.space` over its devices: attention and LM head over
  the A devices, the MoE options (EP over the F devices, base to base + 4 slots, both dispatch
  schemes, the shared expert replicated or on dedicated FFN devices) and the dense FFN over the
  side it runs on; the dense FFN and the shared expert on the FFN side or the attention side (the
  engine's sides when it has an engine);
- MTP depths: the request's (`SpaceLimits.mtp_tokens`; the engine's maximum);
- concurrency B per attention device: every whole value from M to the HBM ceiling of the attention
  side (at most `MAX_CONCURRENCY`), and from M to `FRACTIONAL_BELOW` every whole number of sequences
  per attention TP group of the power-of-two TPs (as the decode axis,
  planner.search.candidate_spaces.concurrency_axis; an attention layout runs only the values that put
  whole sequences on its group): the best is found by evaluating all of them, not sampled.

Every configuration's step comes from `planner.costmodel.afd`, evaluated per option over all B at
once (the pipeline's max couples the sides, so the options are combined by broadcasting, not
summed). A configuration is feasible when both sides fit HBM, TPOT <= the SLO and the step (the
gap between two tokens) <= the ITL limit. For each (F, r) the `keep` best configurations by output
tokens/s per device (both sides) are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from planner.candidates.phase_candidates import undominated
from planner.candidates.space import (
    MoEOption,
    SpaceLimits,
    attention_options,
    instance_sizes,
    moe_options,
    parallel_options,
)
from planner.candidates.tables import FRACTIONAL_BELOW, UNRUNNABLE_BYTES, steps_per_group_sequence, whole_sequences
from planner.costmodel.afd import AFD_ACTIVATION_BYTES, pipeline_layer_s
from planner.costmodel.attention_kinds import layers_cost
from planner.costmodel.context import CostContext
from planner.costmodel.decode import emitted_tokens_per_step, hash_routed_saving, mtp_projection_s
from planner.costmodel.memory import (
    attention_hbm,
    dense_ffn_hbm,
    embedding_hbm,
    fixed_hbm,
    kv_tokens_in_use,
    lm_head_hbm,
    moe_hbm,
    most_sequences_fitting,
)
from planner.costmodel.modules import (
    dense_ffn_cost,
    embedding_cost,
    lm_head_cost,
    moe_cost,
    shared_expert_fixed_s,
    shared_expert_s,
)
from planner.specs.plan import (
    AFD_MAX_MICRO_BATCHES,
    AfdPlan,
    AttentionLayout,
    ParallelLayout,
    SharedExpertLayout,
    attention_embedding_layout,
    integral_as_int,
)

MAX_RATIO = 8
MAX_CONCURRENCY = 2048
AFD_SPACE = (
    "AFD: attention devices a whole multiple (1-8x) of the FFN devices, FFN devices a sub-node power of two or whole "
    "nodes, 1-4 micro-batches, the decode layouts per side, every concurrency to the HBM ceiling"
)
SIDES = ("ffn", "attention")


@dataclass(frozen=True)
class AfdCandidate:
    """One AFD decode instance, fully specified, with its figures at its concurrency."""

    section: AfdPlan
    step_s: float
    tpot_s: float
    tokens_per_s: float  # output tokens/s of one instance
    attention_hbm_bytes: float
    ffn_hbm_bytes: float

    @property
    def devices(self) -> int:
        return self.section.devices

    @property
    def tokens_per_s_per_device(self) -> float:
        return self.tokens_per_s / self.devices

    def requests_per_s(self, output_tokens: int) -> float:
        """Requests one instance finishes per second at the workload's output length."""
        return self.tokens_per_s / output_tokens


@dataclass(frozen=True)
class AfdLimits:
    """What the search may pick: budget, SLOs, and the engine's AFD capability (None: anything)."""

    max_devices: int
    tpot_s: float | None
    max_itl_s: float | None
    micro_batches: tuple[int, ...] = tuple(range(1, AFD_MAX_MICRO_BATCHES + 1))
    dense_sides: tuple[str, ...] = SIDES
    shared_sides: tuple[str, ...] = SIDES
    shared_placements: tuple[str, ...] = ("replicated", "dedicated")
    mtp_tokens: tuple[int, ...] = (0,)
    keep: int = 3
    max_ratio: int = MAX_RATIO
    engine: str | None = None  # restrict to what this engine's AFD runs (planner.engines.profiles)
    devices: int | None = None  # an instance of exactly this many devices, both sides (--decode-devices)
    # (depth, TPOT of the SLO-percentile request over the mean) when tpot_s holds that request's TPOT
    # (planner.costmodel.acceptance_spread); empty: tpot_s holds the mean
    tpot_factor_by_k: tuple[tuple[int, float], ...] = ()

    def for_engine(self, ctx: CostContext) -> AfdLimits | None:
        """These limits narrowed to the engine's AFD capability; None when it runs no AFD of this model
        on this machine (no engine: unchanged)."""
        if self.engine is None:
            return self
        from planner.engines.profiles import afd_refusal, load_profile

        cap = load_profile(self.engine).capabilities.afd
        if cap is None or afd_refusal(cap, ctx.hw.name, ctx.model.architectures) is not None:
            return None
        return replace(
            self,
            micro_batches=tuple(x for x in self.micro_batches if x in cap.micro_batches),
            dense_sides=tuple(x for x in self.dense_sides if x in cap.dense_ffn_on),
            shared_sides=tuple(x for x in self.shared_sides if x in cap.shared_expert_on),
            shared_placements=tuple(x for x in self.shared_placements if x in cap.shared_expert),
            mtp_tokens=tuple(x for x in self.mtp_tokens if x <= cap.mtp_tokens_max),
        )


def _link(ctx: CostContext, a: int, f: int):
    from planner.specs.plan import afd_auto_link_level

    probe = AfdPlan(
        attention_devices=a,
        ffn_devices=f,
        attention=AttentionLayout(dp=a, tp=1),
        concurrency_per_device=4,
        micro_batches=1,
    )
    return ctx.hw.levels[afd_auto_link_level(ctx.hw, probe)]


def _transfer_s(ctx: CostContext, a: int, f: int, tokens: np.ndarray) -> np.ndarray:
    """One A<->F transfer (as planner.costmodel.afd.transfer_s, on the level the devices span)."""
    link = _link(ctx, a, f)
    per_ffn = max(a / f, 1.0) * tokens * ctx.model.hidden_size * AFD_ACTIVATION_BYTES
    bw = link.bandwidth_bytes_per_s * ctx.hw.efficiency.link_bandwidth.value
    return per_ffn / bw + link.latency_s + ctx.hw.fixed_costs.collective.value


def ffn_sizes(ctx: CostContext, limits: AfdLimits) -> list[int]:
    """FFN device counts whose fewest expert slots fit a device's HBM (with the runtime reserve and
    buffers), up to the routed experts (plus room for dedicated shared-expert devices)."""
    m = ctx.model
    assert m.moe is not None
    slot = (m.num_moe_layers + m.mtp_layers) * m.expert_params() * ctx.routed_expert_weight_bytes
    fixed = ctx.hw.memory.runtime_reserve.value + ctx.hw.memory.comm_buffers.value
    out = []
    for f in instance_sizes(ctx.hw, max(1, limits.max_devices // 2), 1):
        if f > m.moe.routed_experts + f // 2:
            continue
        if -(-m.moe.routed_experts // f) * slot + fixed <= ctx.hbm_capacity_bytes:
            out.append(f)
    return out


@dataclass
class _Grid:
    """Every (micro-batches, MTP depth, concurrency) point of one attention size, flattened: the
    cost functions are called once per option over all of them."""

    mb: np.ndarray
    k: np.ndarray
    b: np.ndarray
    slices: dict[tuple[int, int], slice]
    pad_index: np.ndarray = field(init=False)
    pad_valid: np.ndarray = field(init=False)

    @property
    def seqs(self) -> np.ndarray:
        return self.b / self.mb

    @property
    def keys(self) -> list[tuple[int, int]]:
        """(micro-batches, MTP depth) of each block, in grid order."""
        return list(self.slices)

    def __post_init__(self) -> None:
        # [block, longest block]: the grid index of each block's points (padding repeats the block's
        # last point; `pad_valid` marks the real ones)
        width = max((sl.stop - sl.start for sl in self.slices.values()), default=0)
        sls = list(self.slices.values())
        self.pad_index = (
            np.stack([np.minimum(np.arange(sl.start, sl.start + width), sl.stop - 1) for sl in sls])
            if sls
            else np.zeros((0, 0), dtype=int)
        )
        self.pad_valid = (
            np.stack([np.arange(width) < sl.stop - sl.start for sl in sls]) if sls else np.zeros((0, 0), dtype=bool)
        )

    @property
    def block_starts(self) -> np.ndarray:
        """First grid index of each (micro-batches, MTP depth) block, in `keys` order."""
        return np.array([sl.start for sl in self.slices.values()], dtype=np.int64)

    @property
    def block_stops(self) -> np.ndarray:
        """One past the last grid index of each block."""
        return np.array([sl.stop for sl in self.slices.values()], dtype=np.int64)

    def subset(self, keep: np.ndarray) -> tuple[_Grid, np.ndarray]:
        """The points where `keep` holds (each (M, k) block stays contiguous), and their indices."""
        index = np.nonzero(keep)[0]
        slices, at = {}, 0
        for key, sl in self.slices.items():
            n = int(keep[sl].sum())
            if n:
                slices[key] = slice(at, at + n)
                at += n
        return _Grid(self.mb[index], self.k[index], self.b[index], slices), index

    @property
    def tokens(self) -> np.ndarray:
        return self.seqs * (1 + self.k)


def _emitted(ctx: CostContext, k: np.ndarray) -> np.ndarray:
    """Tokens one sequence emits per step at each point's MTP depth."""
    per_k = {int(x): emitted_tokens_per_step(int(x), ctx.workload.mtp_acceptance) for x in np.unique(k)}
    return np.array([per_k[int(x)] for x in k]) if len(k) else np.zeros(0)


def _slo_emitted(limits: AfdLimits, k: np.ndarray, emitted: np.ndarray) -> np.ndarray:
    """Tokens per step as the TPOT limit counts them: `emitted` (`_emitted` at the points' depths `k`)
    over each depth's factor of the SLO-percentile request (`limits.tpot_factor_by_k`; none: the mean's)."""
    if not limits.tpot_factor_by_k or not len(k):
        return emitted
    factor = dict(limits.tpot_factor_by_k)
    out: np.ndarray = emitted / np.array([factor.get(int(x), 1.0) for x in k])
    return out


def _grid(limits: AfdLimits, b_max: float, has_mtp: bool, tps: Sequence[int] = ()) -> _Grid:
    """Every (M, k, B) point up to `b_max` sequences per attention device: B whole from M on, and the
    fractions from M to FRACTIONAL_BELOW that put whole sequences on a TP group of `tps`."""
    steps = {tp for tp in tps if steps_per_group_sequence(tp)}
    fractions = sorted({j / tp for tp in steps for j in range(1, FRACTIONAL_BELOW * tp) if j % tp and j / tp <= b_max})
    mbs, ks, bs, slices, at = [], [], [], {}, 0
    for mb in limits.micro_batches:
        for k in limits.mtp_tokens:
            whole = np.arange(mb, int(b_max) + 1, dtype=float)
            b = np.union1d(whole, np.array([x for x in fractions if x >= mb], dtype=float))
            if (k and not has_mtp) or not len(b):
                continue
            slices[(mb, k)] = slice(at, at + len(b))
            at += len(b)
            mbs.append(np.full_like(b, mb))
            ks.append(np.full_like(b, k))
            bs.append(b)
    if not bs:
        empty = np.zeros(0)
        return _Grid(empty, empty, empty, {})
    return _Grid(np.concatenate(mbs), np.concatenate(ks), np.concatenate(bs), slices)


def _attention_ceiling(ctx: CostContext, a: int, att_opts: list[AttentionLayout], k_max: int) -> float:
    """Most sequences per attention device any attention layout holds (DP LM head, nothing else on
    the side), in steps of one sequence per its TP group: no configuration of `a` attention devices
    can run more."""
    head = ParallelLayout(dp=a, tp=1)
    fixed = sum(fixed_hbm(ctx).values())

    def total(b: np.ndarray, lay: AttentionLayout) -> np.ndarray:
        kv = kv_tokens_in_use(ctx, b, k_max, lay.tp)
        t = b * (1 + k_max)
        parts = [*attention_hbm(ctx, lay, t, kv, b).values(), *lm_head_hbm(ctx, head, t).values()]
        if not ctx.model.tie_word_embeddings:  # the embedding over the attention's TP group
            parts += list(embedding_hbm(ctx, attention_embedding_layout(lay)).values())
        return np.asarray(sum(parts), dtype=float) + fixed

    cap = ctx.hbm_capacity_bytes
    best = max(most_sequences_fitting(partial(total, lay=lay), cap, lay.tp) for lay in att_opts)
    return min(best, MAX_CONCURRENCY)


@dataclass
class AfdSize:
    """One (attention, FFN) device split with what its candidates are made from, and an upper bound
    on the output tokens/s per device any of its configurations reaches (`bound`)."""

    a: int
    f: int
    attention: tuple
    ffn: dict[str, tuple]
    bound: float

    @property
    def devices(self) -> int:
        return self.a + self.f


def afd_sizes(
    ctx: CostContext, space: SpaceLimits, limits: AfdLimits, only: tuple[int, int] | None = None
) -> list[AfdSize]:
    """Every (A, F) split of the space (module docstring) with its per-side cost arrays and its
    bound, best bound first; empty when the engine runs no AFD of this model on this machine.
    `only=(A, F)`: that split alone (the same arrays as among all of them)."""
    m = ctx.model
    narrowed = limits.for_engine(ctx)
    if m.moe is None or narrowed is None:
        return []
    limits = narrowed
    hw = ctx.hw
    out: list[AfdSize] = []
    att_cache: dict[int, tuple] = {}
    for f in ffn_sizes(ctx, limits):
        if only is not None and f != only[1]:
            continue
        moe_opts = [o for o in moe_options(m, f, space) if o.shared.placement in limits.shared_placements]
        if limits.engine is not None:
            from planner.engines.profiles import load_profile, moe_ok

            profile = load_profile(limits.engine)
            moe_opts = [o for o in moe_opts if moe_ok(profile, hw, o.moe, o.shared, m.moe.routed_experts)]
        if not moe_opts:
            continue
        ratios = []
        for r in range(1, limits.max_ratio + 1):
            a = r * f
            if a + f > limits.max_devices or (hw.max_devices is not None and a + f > hw.max_devices):
                break
            if (limits.devices is not None and a + f != limits.devices) or (only is not None and a != only[0]):
                continue
            if a not in att_cache:
                att_cache[a] = _attention_side(ctx, limits, a)
            if att_cache[a][3] is not None:
                ratios.append(r)
        if not ratios:
            continue
        ffn = _ffn_side(ctx, limits, f, moe_opts, [(r, att_cache[r * f][2]) for r in ratios])
        for r in ratios:
            per_side = {side: v[r] for side, v in ffn.items()}
            bound = _size_bound(ctx, limits, r * f, f, att_cache[r * f], per_side)
            if bound > 0:
                out.append(AfdSize(r * f, f, att_cache[r * f], per_side, bound))
    out.sort(key=lambda z: (-z.bound, z.devices))
    return out


def with_bounds(ctx: CostContext, limits: AfdLimits, sizes: list[AfdSize]) -> list[AfdSize]:
    """`sizes` (costed without an SLO: `afd_sizes` with `tpot_s` and `max_itl_s` None) bounded under
    the SLOs of `limits`, best bound first; the splits no configuration of which meets them left out.
    The same splits and bounds as `afd_sizes(..., limits)`: the SLO prunes grid points only where
    the bound already breaks it."""
    narrowed = limits.for_engine(ctx)
    if narrowed is None:
        return []
    out = []
    for z in sizes:
        bound = _size_bound(ctx, narrowed, z.a, z.f, z.attention, z.ffn)
        if bound > 0:
            out.append(replace(z, bound=bound))
    out.sort(key=lambda z: (-z.bound, z.devices))
    return out


def size_candidates(ctx: CostContext, limits: AfdLimits, size: AfdSize) -> list[AfdCandidate]:
    """The `keep` best configurations of one split (exact: every option combination at its best
    concurrency)."""
    narrowed = limits.for_engine(ctx)
    if narrowed is None:
        return []
    return _best_of_size(ctx, narrowed, size.a, size.f, size.attention, size.ffn)


def afd_candidates(ctx: CostContext, space: SpaceLimits, limits: AfdLimits) -> list[AfdCandidate]:
    """The best AFD decode instances of every (F, A) the space holds (module docstring)."""
    out: list[AfdCandidate] = []
    for size in afd_sizes(ctx, space, limits):
        out += size_candidates(ctx, limits, size)
    out.sort(key=lambda c: (-c.tokens_per_s_per_device, c.devices))
    return out


def _size_bound(ctx: CostContext, limits: AfdLimits, a: int, f: int, attention: tuple, ffn: dict[str, tuple]) -> float:
    """An upper bound on the output tokens/s per device (both sides) of every configuration of the
    split: at every grid point the step is at least the MoE layers' periods with each side at its
    fastest option (P >= M max(a, f)), the dense layers' attention and the fastest LM head; a point
    whose bound already breaks the TPOT or ITL limit, or whose lightest FFN side overflows HBM,
    counts for nothing."""
    m = ctx.model
    _, _, g, arrays = attention
    if arrays is None:
        return 0.0
    a_time, _, lm_time, _, _, _, _, _ = arrays
    fastest_ffn = [v[1][0].min(axis=0) for v in ffn.values() if v[1] is not None]
    lightest_ffn = [v[1][1].min(axis=0) for v in ffn.values() if v[1] is not None]
    if not fastest_ffn:
        return 0.0
    f_min = np.minimum.reduce(fastest_ffn)
    fixed = fixed_hbm(ctx)
    f_fixed = sum(fixed.values()) - fixed.get("mtp_projection_weights", 0.0)
    fits = np.minimum.reduce(lightest_ffn) + f_fixed <= ctx.hbm_capacity_bytes
    a_min = a_time.min(axis=0)
    lower = g.mb * (m.num_moe_layers * np.maximum(a_min, f_min) + m.num_dense_layers * a_min) + lm_time.min(axis=0)
    emitted = _emitted(ctx, g.k)
    ok = fits.copy()
    if limits.tpot_s is not None:
        ok &= lower / _slo_emitted(limits, g.k, emitted) <= limits.tpot_s
    if limits.max_itl_s is not None:
        ok &= lower <= limits.max_itl_s
    if not ok.any():
        return 0.0
    return float(np.max(np.where(ok, a * g.b * emitted / lower, 0.0))) / (a + f)


def _ffn_side(
    ctx: CostContext, limits: AfdLimits, f: int, moe_opts: list[MoEOption], grids: list[tuple[int, _Grid]]
) -> dict[str, dict[int, tuple]]:
    """Per shared-expert side and attention:FFN ratio r, the FFN side of `f` devices over r's grid:
    (MoE options, time per layer and micro-batch [opt, grid], HBM [opt, grid], each MTP pass's time,
    the shared expert's weights when it moves to the attention side). Each option is costed once
    over every ratio's grid (the ratios' grids concatenated)."""
    m = ctx.model
    assert m.moe is not None
    overlap = ctx.hw.overlap.decode_shared_expert_with_dispatch
    shared_sides = limits.shared_sides if m.moe.shared_experts else ("ffn",)
    bounds = np.cumsum([0] + [len(g.b) for _, g in grids])
    t_f = np.concatenate([g.tokens * r for r, g in grids])
    seqs_f = np.concatenate([g.seqs * r for r, g in grids])
    ks = np.concatenate([g.k for _, g in grids])
    all_f = np.concatenate([g.b * (1 + g.k) * r for r, g in grids])  # buffers hold every micro-batch
    k_max = int(ks.max()) if len(ks) else 0
    out: dict[str, dict[int, tuple]] = {}
    for shared_on in shared_sides:
        opts = [o for o in moe_opts if not (shared_on == "attention" and o.shared.placement == "dedicated")]
        times: list[np.ndarray] = []
        hbms: list[np.ndarray] = []
        passes: list[list[np.ndarray]] = [[] for _ in range(k_max)]
        shared_w = 0.0
        for o in opts:
            shared = o.shared if shared_on == "ffn" else SharedExpertLayout()
            cost = moe_cost(ctx, f, o.moe, shared, t_f, overlap, 1.0 + ks, include_shared=shared_on == "ffn")
            times.append(cost.total_s - hash_routed_saving(ctx, cost.router_s) / max(m.num_moe_layers, 1))
            parts, _ = moe_hbm(ctx, f, o.moe, shared, all_f)
            if shared_on == "attention":
                shared_w = float(np.max(parts.pop("shared_expert_weights")))
            hbms.append(np.sum(list(parts.values()), axis=0))
            for i_pass in range(k_max):
                x = t_f if i_pass == 0 else seqs_f
                per_request = 1.0 + ks if i_pass == 0 else 1.0
                mc = moe_cost(ctx, f, o.moe, shared, x, overlap, per_request, include_shared=shared_on == "ffn")
                passes[i_pass].append(mc.total_s)
        out[shared_on] = {}
        for n, (r, _) in enumerate(grids):
            sl = slice(bounds[n], bounds[n + 1])
            per_pass = [np.stack([x[sl] for x in p]) for p in passes] if opts else []
            arrays = (np.stack([x[sl] for x in times]), np.stack([x[sl] for x in hbms]), per_pass) if opts else None
            out[shared_on][r] = (opts, arrays, shared_w)
    return out


def _attention_side(ctx: CostContext, limits: AfdLimits, a: int) -> tuple:
    """Per attention layout and LM head layout, over the size's grid: time and HBM of the
    attention side (and the dense FFN options there)."""
    m = ctx.model
    hw = ctx.hw
    att_opts = attention_options(m, hw, a, "decode")
    lm_opts = parallel_options(hw, a, None)
    pair_ok = np.ones((len(att_opts), len(lm_opts)), dtype=bool)
    if limits.engine is not None:
        from planner.engines.profiles import attention_ok, combo_ok, load_profile

        profile = load_profile(limits.engine)
        att_opts = [x for x in att_opts if attention_ok(profile, x)]
        pair_ok = np.array(
            [[combo_ok(profile, hw, a, x, None, h) for h in lm_opts] for x in att_opts], dtype=bool
        ).reshape(len(att_opts), len(lm_opts))
    if not att_opts or not pair_ok.any():
        return att_opts, lm_opts, None, None
    k_max = max(limits.mtp_tokens) if m.mtp_layers and limits.mtp_tokens else 0
    g = _grid(limits, _attention_ceiling(ctx, a, att_opts, k_max), m.mtp_layers > 0, [x.tp for x in att_opts])
    if not g.slices:
        return att_opts, lm_opts, g, None
    t, seqs = g.tokens, g.seqs
    all_tokens = g.b * (1 + g.k)

    def kv_at(tp: int) -> np.ndarray:
        return np.concatenate([kv_tokens_in_use(ctx, g.b[sl], k, tp) for (mb, k), sl in g.slices.items()])

    a_time = np.stack([layers_cost(ctx, lay, t, seqs, decode=True).total_s / m.num_layers for lay in att_opts])
    a_hbm = np.stack([sum(attention_hbm(ctx, lay, all_tokens, kv_at(lay.tp), g.b).values()) for lay in att_opts])
    # a concurrency that puts a fraction of a sequence on the layout's TP group is not a layout
    for i, att in enumerate(att_opts):
        a_hbm[i, ~whole_sequences(g.b, att.tp)] = UNRUNNABLE_BYTES
    tied = m.tie_word_embeddings

    def embedding_time(lay: ParallelLayout) -> np.ndarray:
        """The embedding in every micro-batch's forward and in each MTP pass's (planner.costmodel.afd):
        the first pass on every token, later ones on one per sequence (where k > i_pass)."""
        per_mb = embedding_cost(ctx, lay, t).total_s
        for i_pass in range(int(k_max)):
            x = t if i_pass == 0 else seqs
            per_mb = per_mb + np.where(g.k > i_pass, embedding_cost(ctx, lay, x).total_s, 0.0)
        return g.mb * per_mb

    lm_time = []
    for lay in lm_opts:
        # the LM head once on the micro-batches' merged output, each MTP pass's per micro-batch; a tied
        # model's embedding with it (one table), an untied one's over the attention's TP group (emb_time)
        head = 0.0 * t
        for i_pass in range(int(k_max)):
            x = t if i_pass == 0 else seqs
            head = head + np.where(g.k > i_pass, lm_head_cost(ctx, lay, x).total_s, 0.0)
        lm_time.append(g.mb * head + lm_head_cost(ctx, lay, t * g.mb).total_s + (embedding_time(lay) if tied else 0.0))
    emb_time = np.stack(
        [0.0 * t if tied else embedding_time(attention_embedding_layout(lay)) for lay in att_opts]
    )  # [att, grid]
    if not tied:
        a_hbm = (
            a_hbm
            + np.array([sum(embedding_hbm(ctx, attention_embedding_layout(lay)).values()) for lay in att_opts])[:, None]
        )
    lm_hbm = np.stack([sum(lm_head_hbm(ctx, lay, all_tokens).values()) for lay in lm_opts])
    mtp_att = []
    for i_pass in range(int(k_max)):
        x = t if i_pass == 0 else seqs
        mtp_att.append(np.stack([layers_cost(ctx, lay, x, seqs, decode=True, mtp=True).total_s for lay in att_opts]))
    # no step is shorter than every layer's attention for every micro-batch plus the LM head: grid
    # points whose lower bound already breaks the TPOT or ITL limit are dropped (exact)
    lower = m.num_layers * g.mb * a_time.min(axis=0) + np.stack(lm_time).min(axis=0)
    keep = np.ones(len(g.b), dtype=bool)
    if limits.tpot_s is not None:
        keep &= lower / _slo_emitted(limits, g.k, _emitted(ctx, g.k)) <= limits.tpot_s
    if limits.max_itl_s is not None:
        keep &= lower <= limits.max_itl_s
    if not keep.all():
        g, index = g.subset(keep)
        t, seqs, all_tokens = t[index], seqs[index], all_tokens[index]
        a_time, a_hbm, emb_time = a_time[:, index], a_hbm[:, index], emb_time[:, index]
        lm_time = [x[index] for x in lm_time]
        lm_hbm = lm_hbm[:, index]
        mtp_att = [x[:, index] for x in mtp_att]
        if not g.slices:
            return att_opts, lm_opts, g, None
    dense = {}
    if m.num_dense_layers and "attention" in limits.dense_sides:
        for lay in parallel_options(hw, a, m.dense_intermediate_size):
            dense[lay] = (dense_ffn_cost(ctx, lay, t).total_s, sum(dense_ffn_hbm(ctx, lay, all_tokens).values()))
    if limits.engine is None:
        # an attention layout slower and fuller than another everywhere never wins (exact)
        kept = undominated([a_time, a_hbm, emb_time, *mtp_att])
        att_opts = [att_opts[i] for i in kept]
        a_time, a_hbm, emb_time, mtp_att = a_time[kept], a_hbm[kept], emb_time[kept], [x[kept] for x in mtp_att]
        pair_ok = pair_ok[kept]
    arrays = (a_time, a_hbm, np.stack(lm_time), lm_hbm, mtp_att, dense, pair_ok, emb_time)
    return att_opts, lm_opts, g, arrays


def _runnable_at_or_below(g: _Grid, att_opts: list[AttentionLayout]) -> np.ndarray:
    """[attention option, grid point]: the largest point of the same (M, k) block at or below it whose
    concurrency puts whole sequences on the option's TP group (-1: none)."""
    out = np.full((len(att_opts), len(g.b)), -1, dtype=np.int64)
    for i, lay in enumerate(att_opts):
        runs = np.where(whole_sequences(g.b, lay.tp), np.arange(len(g.b)), -1)
        for sl in g.slices.values():
            out[i, sl] = np.maximum.accumulate(runs[sl])
    return out


def _best_of_size(
    ctx: CostContext, limits: AfdLimits, a: int, f: int, attention: tuple, ffn: dict[str, tuple]
) -> list[AfdCandidate]:
    """The best configuration of every option combination of one (A, F), per (M, k, sides)."""
    m = ctx.model
    assert m.moe is not None
    att_opts, lm_opts, g, arrays = attention
    if arrays is None:
        return []
    a_time, a_hbm, lm_time, lm_hbm, mtp_att, dense_a, pair_ok, emb_time = arrays
    hw = ctx.hw
    cap = ctx.hbm_capacity_bytes
    t, seqs = g.tokens, g.seqs
    r = a / f
    t_f = t * r
    ffn_all = g.b * (1 + g.k) * r  # the FFN side's buffers hold every micro-batch (as afd_hbm)
    c = _transfer_s(ctx, a, f, t)
    fixed = fixed_hbm(ctx)
    a_fixed = sum(fixed.values())
    f_fixed = a_fixed - fixed.get("mtp_projection_weights", 0.0)
    emitted = _emitted(ctx, g.k)
    slo_emitted = _slo_emitted(limits, g.k, emitted)
    k_max = int(g.k.max()) if len(g.k) else 0
    shared_sides = limits.shared_sides if m.moe.shared_experts else ("ffn",)
    dense_sides = limits.dense_sides if m.num_dense_layers else ("ffn",)
    prev = _runnable_at_or_below(g, att_opts)
    results: list[tuple] = []
    for shared_on in shared_sides:
        opts, ffn_arrays, shared_w = ffn[shared_on]
        if ffn_arrays is None:
            continue
        f_time_a, f_hbm_a, mtp_f = ffn_arrays
        # an expert layout slower and fuller than another everywhere never wins (exact)
        kept = undominated([f_time_a, f_hbm_a, *mtp_f])
        opts = [opts[i] for i in kept]
        f_time_a, f_hbm_a = f_time_a[kept], f_hbm_a[kept]
        mtp_f = [x[kept] for x in mtp_f]
        shared_a = shared_expert_s(ctx, t) + shared_expert_fixed_s(ctx) if shared_on == "attention" else 0.0 * t
        a_moe = a_time + shared_a  # [att, grid]
        # the MTP passes (their LM heads are in lm_time): per pass [att, grid], [moe, grid], [grid] x 2
        passes = []
        for i_pass in range(k_max):
            x = t if i_pass == 0 else seqs
            extra = shared_expert_s(ctx, x) + shared_expert_fixed_s(ctx) if shared_on == "attention" else 0.0 * x
            passes.append((mtp_att[i_pass] + extra, mtp_f[i_pass], _transfer_s(ctx, a, f, x), mtp_projection_s(ctx, x)))
        framework = np.where(g.k > 0, hw.fixed_costs.mtp_framework_per_step.value, 0.0)
        for dense_on in dense_sides:
            if dense_on == "attention":
                dense_opts = list(dense_a.items()) or [(None, (0.0 * t, 0.0 * t))]
            elif m.num_dense_layers:
                dense_opts = [
                    (lay, (dense_ffn_cost(ctx, lay, t_f).total_s, sum(dense_ffn_hbm(ctx, lay, ffn_all).values())))
                    for lay in parallel_options(hw, f, m.dense_intermediate_size)
                ]
            else:
                dense_opts = [(None, (0.0 * t, 0.0 * t))]
            for dense, (d_time, d_hbm) in dense_opts:
                # the LM head adds to the step and to the attention side's HBM alone: at every point the
                # fastest LM head that fits the room left is the best one (exact), [att, grid]
                room = cap - (a_hbm + a_fixed + shared_w + (d_hbm if dense_on == "attention" else 0.0))
                fits = (lm_hbm[None, :, :] <= room[:, None, :]) & pair_ok[:, :, None]
                lm_masked = np.where(fits, lm_time[None, :, :], np.inf)
                lm_pick = np.argmin(lm_masked, axis=1)
                lm_best = np.take_along_axis(lm_masked, lm_pick[:, None, :], axis=1)[:, 0, :] + emb_time
                picked = np.take_along_axis(np.broadcast_to(lm_hbm[None], lm_masked.shape), lm_pick[:, None, :], axis=1)
                att_side = (cap - room) + picked[:, 0, :]  # [att, grid]
                ffn_side = f_hbm_a + f_fixed + (0.0 if dense_on == "attention" else d_hbm)  # [moe, grid]

                def step_at(
                    i: np.ndarray,
                    p: np.ndarray,
                    x: np.ndarray,
                    dense_on: str = dense_on,
                    d_time: np.ndarray = d_time,
                    lm_best: np.ndarray = lm_best,
                    a_moe: np.ndarray = a_moe,
                    f_time: np.ndarray = f_time_a,
                    passes: list = passes,
                    framework: np.ndarray = framework,
                ) -> np.ndarray:
                    """The step of attention option i, MoE option p at grid point x (planner.costmodel.afd)."""
                    mb = g.mb[x]
                    period, fill = pipeline_layer_s(a_moe[i, x], f_time[p, x], c[x], mb)
                    total = m.num_moe_layers * period + fill
                    if m.num_dense_layers:
                        if dense_on == "attention":
                            total = total + m.num_dense_layers * mb * (a_time[i, x] + d_time[x])
                        else:
                            total = total + m.num_dense_layers * pipeline_layer_s(a_time[i, x], d_time[x], c[x], mb)[0]
                    for n, (pa, pf, pc, proj) in enumerate(passes):
                        period, fill = pipeline_layer_s(pa[i, x], pf[p, x], pc[x], mb)
                        total = total + np.where(g.k[x] > n, period + fill + mb * proj[x], 0.0)
                    return total + framework[x] + lm_best[i, x]

                def ok_at(
                    i: np.ndarray, p: np.ndarray, y: np.ndarray, step_at=step_at, ffn_side=ffn_side, lm_best=lm_best
                ) -> np.ndarray:
                    """Whether attention option i's largest runnable point at or below y fits and meets the limits."""
                    x = np.maximum(prev[i, y], 0)
                    ok = (prev[i, y] >= 0) & np.isfinite(lm_best[i, x]) & (ffn_side[p, x] <= cap)
                    total = step_at(i, p, x)
                    if limits.tpot_s is not None:
                        ok &= total / slo_emitted[x] <= limits.tpot_s
                    if limits.max_itl_s is not None:
                        ok &= total <= limits.max_itl_s
                    return ok

                # throughput grows with the concurrency for fixed layouts (every term of the step costs
                # less per sequence as sequences are added) and HBM, TPOT and the gap only grow with it,
                # so each combination's best concurrency is the largest that meets them all: bisection
                # per (attention option, MoE option, block of the grid), all at once, over each grid
                # point's largest value the attention option runs (`prev`: monotone, so still exact)
                n_att, n_moe, starts = len(att_opts), len(opts), g.block_starts
                ii, pp, bb = np.meshgrid(np.arange(n_att), np.arange(n_moe), np.arange(len(starts)), indexing="ij")
                lo = starts[bb] - 1  # the largest known feasible point (the block's start - 1: none yet)
                hi = g.block_stops[bb]  # the smallest known infeasible point
                while True:
                    open_ = hi - lo > 1
                    if not open_.any():
                        break
                    mid = np.where(open_, (lo + hi) // 2, lo)
                    good = ok_at(ii[open_], pp[open_], mid[open_])
                    lo[open_] = np.where(good, mid[open_], lo[open_])
                    hi[open_] = np.where(good, hi[open_], mid[open_])
                feasible = lo >= starts[bb]
                if not feasible.any():
                    continue
                xs = np.where(feasible, prev[ii, np.maximum(lo, 0)], 0)
                totals = np.where(feasible, step_at(ii, pp, xs), np.inf)
                best = np.where(feasible, a * g.b[xs] * emitted[xs] / totals, -1.0)  # [att, moe, block]
                # only the `keep` best of these options become candidates (stable: among equals the first)
                order = np.argsort(-best, axis=None, kind="stable")[: limits.keep]
                for n in order:
                    if best.flat[n] <= 0:
                        break
                    i, p, blk = np.unravel_index(n, best.shape)
                    x = int(xs[i, p, blk])
                    mb, k = g.keys[blk]
                    fields = {
                        "micro_batches": mb,
                        "attention": att_opts[i],
                        "lm_head": lm_opts[int(lm_pick[i, x])],
                        "dense_ffn": dense,
                        "dense_ffn_on": dense_on,
                        "moe": opts[p].moe,
                        "shared_expert": opts[p].shared,
                        "shared_expert_on": shared_on,
                        "concurrency_per_device": integral_as_int(float(g.b[x])),
                        "mtp_tokens": k,
                    }
                    step = float(totals[i, p, blk])
                    figures = (
                        step,
                        step / float(emitted[x]),
                        float(best[i, p, blk]),
                        float(att_side[i, x]),
                        float(ffn_side[p, x]),
                    )
                    results.append((float(best[i, p, blk]), len(results), fields, figures))
    # only the size's `keep` best become candidates (stable: among equals the first found)
    results.sort(key=lambda r: (-r[0], r[1]))
    out = []
    for _, _, fields, (step, tpot, tps, att_bytes, ffn_bytes) in results[: limits.keep]:
        section = AfdPlan(attention_devices=a, ffn_devices=f, **fields)
        out.append(AfdCandidate(section, step, tpot, tps, att_bytes, ffn_bytes))
    return out
