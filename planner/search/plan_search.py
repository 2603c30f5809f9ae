"""`moeplan plan` end to end: candidates per instance size, the CP-SAT deployment model, plans.

1. Instance sizes per phase (planner.candidates.space), pinned ones if the user gave them.
2. For every size: the module layout options, their cost tables (float, then the integer tables
   of `to_integer_tables`), and the phase candidates (best configurations per size).
3. The CP-SAT deployment model chooses candidates and instance counts (planner.search.
   deployment_model); its status says whether the answer is proven best under the model.
4. Each chosen deployment becomes a Plan, scored by `evaluate_plan` and checked by the
   validator (planner.search.validate), which does not use the solver.

When nothing is feasible, `diagnose_infeasible` names the constraint that binds and the nearest
feasible point, which it finds by re-checking the request with one flag changed (`is_feasible`:
the steps 1-2 above and the exact enumeration of deployments, planner.search.nearest).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from planner.candidates.colocated_candidates import (
    ColocatedCandidate,
    colocated_candidates,
    colocated_size_bound,
    colocated_upper_bounds,
)
from planner.candidates.phase_candidates import (
    EMITTED_SCALE,
    PhaseCandidate,
    decode_candidates,
    decode_micro_batch_factor,
    prefill_candidates,
)
from planner.candidates.space import (
    DENSE_NODE_COUNTS,
    SpaceLimits,
    instance_sizes,
    min_devices_for_weights,
    size_options,
)
from planner.candidates.tables import (
    MAX_CONCURRENCY,
    MAX_REQUESTS_PER_FORWARD,
    IntTables,
    PhaseTables,
    decode_tables_by_micro_batches,
    prefill_tables,
    to_integer_tables,
)
from planner.costmodel.context import CostContext
from planner.costmodel.imbalance import default_imbalance_model
from planner.costmodel.memory import kv_tokens_in_use
from planner.errors import BadInputError, InfeasibleError
from planner.search.deployment_model import RATE_SCALE, Deployment, DeploymentModel
from planner.search.diagnose import diagnose_infeasible
from planner.search.phase_space import PhaseSpace
from planner.search.phase_space import weights_bytes as _weights_bytes
from planner.search.ranking_enum import Choice, choice_of, rank_deployments, sort_key
from planner.search.request import MAX_CARDS, PlanRequest
from planner.search.validate import score_and_validate
from planner.specs.catalog import load_hardware, load_model
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import COLOCATED_SHARED_FIELDS, ColocatedPlan, DecodePlan, Plan, PrefillPlan
from planner.specs.quantization import get_quantization

KEEP_PER_SIZE = 3
Progress = Callable[[str, float], None]


@dataclass
class TableCache:
    """Cost tables kept across searches that share model, machine, scheme, workload and skew.

    Tables do not depend on SLOs, the card budget or the rate, so a sweep over those (or a
    what-if that changes only them) costs each instance size once. Entries are keyed by
    everything the tables do depend on, so one cache can serve any mix of requests.
    """

    entries: dict[tuple, tuple[PhaseTables, IntTables]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0  # ... of which `loaded` were read from the on-disk store, the rest built
    loaded: int = 0

    def get(self, key: tuple, build: Callable[[], tuple[PhaseTables, IntTables]]) -> tuple[PhaseTables, IntTables]:
        if key in self.entries:
            self.hits += 1
        else:
            self.misses += 1
            self.entries[key] = build()
        return self.entries[key]


@dataclass
class SearchOutcome:
    """Ranked plans (best first) and how the search went."""

    plans: list[Plan]
    status: str
    optimal: bool
    seconds: float
    solver_seconds: float
    solves: int
    decode_space: PhaseSpace | None
    prefill_space: PhaseSpace | None
    request: PlanRequest
    model: ModelSpec
    hw: HardwareSpec
    deployments: list[Deployment] = field(default_factory=list)  # the solver's choices, as ranked
    colocated: list[ColocatedCandidate] = field(default_factory=list)  # candidates `deployments` index
    exhausted: bool = False  # fewer than `top` distinct deployments exist (the list is all of them)
    alternatives: list[Alternative] = field(default_factory=list)  # best plan of each other structure


@dataclass
class Alternative:
    """The best plan of another structure than rank 1's (e.g. disaggregated instead of colocated)."""

    label: str
    plan: Plan | None  # None: no deployment of that structure fits (`reason` says what)
    rank: int | None  # its rank in the list above, if it is there
    reason: str | None = None


def _grid(cap: int, every_upto: int, step: float) -> np.ndarray:
    """Every integer up to `every_upto`, then geometric steps of `step` up to `cap`."""
    vals = set(range(1, min(cap, every_upto) + 1))
    v = float(every_upto)
    while v < cap:
        v *= 1.0 + step
        vals.add(min(cap, int(round(v))))
    return np.array(sorted(vals), dtype=np.int64)


DENSE_GRID_CONCURRENCY = 256  # every concurrency up to here, then steps of CONCURRENCY_GRID_STEP
CONCURRENCY_GRID_STEP = 0.02
DENSE_GRID_REQUESTS = 64  # every batch (requests per forward) up to here, then REQUESTS_GRID_STEP
REQUESTS_GRID_STEP = 0.05


def concurrency_values(cap: int) -> np.ndarray:
    """The search's concurrency grid up to `cap`."""
    return _grid(cap, DENSE_GRID_CONCURRENCY, CONCURRENCY_GRID_STEP)


def request_values(cap: int) -> np.ndarray:
    """The search's requests-per-forward grid up to `cap`."""
    return _grid(cap, DENSE_GRID_REQUESTS, REQUESTS_GRID_STEP)


def _max_concurrency_guess(ctx: CostContext, devices: int) -> int:
    """Upper bound on decode concurrency per device: HBM over one sequence's KV (no weights)."""
    m = ctx.model
    a = m.attention
    tokens = float(kv_tokens_in_use(ctx, [1.0], 0)[0])
    if m.is_plain():
        elems = (
            (a.kv_lora_rank + a.qk_rope_head_dim)
            if a.kind == "mla"
            else 2 * a.head_dim * max(1, a.num_kv_heads // max(1, min(devices, a.num_kv_heads)))
        )
        per_seq = tokens * elems * m.kv_layers() * ctx.quant.kv_bytes_per_element
    else:
        growing, fixed = m.kv_cache_bytes(tokens, ctx.quant.kv_bytes_per_element, min(devices, a.num_heads))
        per_seq = growing + fixed
    return int(max(1, min(MAX_CONCURRENCY, ctx.hw.hbm_bytes // max(per_seq, 1.0))))


def _max_requests_guess(ctx: CostContext, devices: int) -> int:
    """Upper bound on requests per forward: HBM over one prompt's KV and hidden states."""
    m = ctx.model
    if m.is_plain():
        kv_per_token = m.kv_elements_per_token_per_layer() * m.kv_layers() * ctx.quant.kv_bytes_per_element
    else:
        # the cache of a prompt, per token (linear states and windows amortised over the prompt)
        kv_per_token = m.kv_bytes_per_token(float(ctx.workload.input_tokens), ctx.quant.kv_bytes_per_element)
    per_token = kv_per_token + m.hidden_size * 2 * 8
    fit_tokens = ctx.hw.hbm_bytes * devices / per_token
    return int(max(1, min(MAX_REQUESTS_PER_FORWARD, fit_tokens // ctx.workload.input_tokens)))


def min_requests_per_forward(ctx: CostContext) -> int:
    """Fewest requests per prefill forward whose tokens hold the TTFT-percentile prompt whole."""
    w = ctx.workload
    need = ctx.ttft_input_tokens * (1.0 - w.hit_rate)
    return max(1, math.ceil(need / ctx.prefill_tokens_per_request - 1e-9))


def _whole_slo_prompt(ctx: CostContext, xs: np.ndarray) -> np.ndarray:
    """The requests-per-forward grid from the smallest batch that holds the TTFT-percentile prompt."""
    lo = min_requests_per_forward(ctx)
    if lo <= 1:
        return xs
    kept = xs[xs >= lo]
    return kept if kept.size else np.array([lo], dtype=np.int64)


def _identity(obj: object) -> object:
    """The object itself if it is hashable (equal skew models share tables), else its id."""
    try:
        hash(obj)
        return obj
    except TypeError:
        return id(obj)


def engine_decode_micro_batches(engine: str) -> tuple[int, ...]:
    """Decode micro-batch counts the engine runs (planner.engines profile)."""
    from planner.engines.profiles import decode_micro_batches, load_profile

    return decode_micro_batches(load_profile(engine))


def mtp_tokens_max(engine: str) -> int:
    """Deepest MTP the engine runs (planner.engines profile)."""
    from planner.engines.profiles import load_profile

    return load_profile(engine).capabilities.mtp_tokens_max


def _tables(
    cache: TableCache | None, key: tuple, build: Callable[[], tuple[PhaseTables, IntTables]]
) -> tuple[PhaseTables, IntTables]:
    """A size's tables: from `cache`, else from the on-disk store (planner.candidates.table_store),
    else built (and kept in both)."""
    from planner.candidates.table_store import stable_key, table_store

    def load_or_build() -> tuple[PhaseTables, IntTables]:
        store = table_store()
        found = store.get(key) if store is not None else None
        if found is not None and cache is not None:
            cache.loaded += 1
        if found is None:
            found = build()
            if store is not None:
                store.put(key, found)
        if store is not None:  # what is derived from the tables alone is kept too
            found[0].store_key = stable_key(key)
        return found

    return cache.get(key, load_or_build) if cache else load_or_build()


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
    points = 0
    slo = request.slo
    # what the tables depend on (not the SLOs, the budget or the rate)
    fingerprint = (
        m.model_dump_json(),
        ctx.hw.model_dump_json(),
        ctx.quant.name,
        ctx.workload.model_dump_json(),
        ctx.kv_transfer_bytes_per_s,
        ctx.imbalance.describe(),
        _identity(ctx.imbalance),
        ctx.hbm_utilization,
        request.mtp_tokens,
        limits.max_extra_slots,
        limits.max_redundant_experts,
        limits.engine,
    )
    for i, n in enumerate(sizes):
        if progress:
            progress(f"costing {phase} instances of {n} devices", (i + 1) / max(1, len(sizes)))
        opts = size_options(m, ctx.hw, n, phase, limits)  # type: ignore[arg-type]
        key = (phase, n, fingerprint)
        if phase == "decode":
            ks = list(request.mtp_tokens) if request.mtp_tokens is not None else ([0, 1, 2] if m.mtp_layers else [0])
            if limits.engine is not None:  # MTP depths the engine runs
                ks = [k for k in ks if k <= mtp_tokens_max(limits.engine)] or [0]
            xs = concurrency_values(_max_concurrency_guess(ctx, n))

            slo_us = None if slo.tpot_ms is None else int(math.floor(slo.tpot_ms * 1000))
            itl_us = None if slo.max_itl_ms is None else int(math.floor(slo.max_itl_ms * 1000))
            factor = decode_micro_batch_factor(m.num_layers, ctx.hw.overlap.decode_micro_batch_efficiency.value)
            found = []
            by_micro_batches = []
            mbs = request.decode_micro_batches
            if limits.engine is not None:  # decode micro-batch counts the engine runs
                mbs = tuple(mb for mb in mbs if mb in engine_decode_micro_batches(limits.engine)) or (1,)
            joint: dict[int, tuple[PhaseTables, IntTables]] = {}
            for mb in mbs:

                def build_decode(opts=opts, ks=ks, xs=xs, mb=mb, joint=joint, mbs=mbs):
                    if not joint:  # every micro-batch count in one pass (planner.candidates.tables)
                        built = decode_tables_by_micro_batches(ctx, opts, ks, xs, mbs)
                        for count, t in zip(mbs, built, strict=True):
                            joint[count] = (t, to_integer_tables(t, ctx.hbm_capacity_bytes))
                    return joint[mb]

                mb_key = key if mb == 1 else (*key, "micro_batches", mb)
                t, ints = _tables(cache, mb_key, build_decode)
                by_micro_batches.append((t, ints))
                memo_key = ("decode_candidates", slo_us, itl_us, keep, factor)
                if memo_key not in t.memo:  # candidates depend on the SLOs and `keep`, never on the budget
                    t.memo[memo_key] = decode_candidates(t, ints, slo_us, keep, itl_us, factor)  # type: ignore[arg-type]
                found.extend(t.memo[memo_key])
            # the best `keep` over the micro-batch counts (deterministic order among equals)
            found = sorted(found, key=lambda c: (-c.score, c.key()))[:keep]
            t, ints = by_micro_batches[0]
            t.memo["decode_micro_batch_tables"] = (factor, by_micro_batches)  # for the MTP alternative
        else:
            xs = request_values(_max_requests_guess(ctx, n))
            xs = _whole_slo_prompt(ctx, xs)

            def build_prefill(opts=opts, xs=xs):
                t = prefill_tables(ctx, opts, list(opts.prefill_micro_batches), xs)
                return t, to_integer_tables(t, ctx.hbm_capacity_bytes)

            t, ints = _tables(cache, key, build_prefill)  # type: ignore[arg-type]
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
        points += (
            opts.count * len(t.k_values) * len(xs) * (len(request.decode_micro_batches) if phase == "decode" else 1)
        )
        tables_by_size[n] = (t, ints)  # type: ignore[assignment]
        cands.extend(found)
    return PhaseSpace(phase, sizes, cands, points, tables_by_size)


def _phase_sizes(ctx: CostContext, budget_devices: int, pinned: int | None, other_min: int, label: str) -> list[int]:
    experts, other = _weights_bytes(ctx)
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


def _decode_rate_milli(c: PhaseCandidate, output_tokens: int) -> int:
    """Requests/s (thousandths) one decode instance finishes: tokens/s per instance / output length."""
    tokens_per_s = c.devices * c.num / EMITTED_SCALE / c.den * 1e6
    return int(math.floor(tokens_per_s / output_tokens * RATE_SCALE))


def _prefill_rate_milli(c: PhaseCandidate) -> int:
    return int(math.floor(c.num / c.den * 1e6 * RATE_SCALE))


def _rate_reachable(
    request: PlanRequest,
    d_cands: list[PhaseCandidate],
    p_cands: list[PhaseCandidate],
    budget_devices: int,
    output_tokens: int,
) -> bool:
    """False when no deployment within the budget could serve --rate even with every device on
    one phase (a quick bound: the diagnosis then names what works)."""
    caps = []
    if d_cands:
        caps.append(max(_decode_rate_milli(c, output_tokens) * (budget_devices // c.devices) for c in d_cands))
    if p_cands:
        caps.append(max(_prefill_rate_milli(c) * (budget_devices // c.devices) for c in p_cands))
    most = min(caps) / RATE_SCALE if caps else 0.0
    assert request.rate_per_s is not None
    return request.rate_per_s <= most


def _budget_devices(request: PlanRequest, hw: HardwareSpec) -> int:
    """Devices --max-cards allows (refusing budgets out of range)."""
    if not (math.isfinite(request.max_cards) and 0 < request.max_cards <= MAX_CARDS):
        raise BadInputError(f"--max-cards must be between 0 and {MAX_CARDS:,}.")
    budget_devices = int(math.floor(request.max_cards * hw.devices_per_card + 1e-9))
    if budget_devices < 1:
        raise BadInputError("--max-cards must allow at least one device.")
    return budget_devices


def _candidate_spaces(
    ctx: CostContext,
    request: PlanRequest,
    budget_devices: int,
    keep: int,
    progress: Progress | None,
    cache: TableCache | None,
) -> tuple[PhaseSpace | None, PhaseSpace | None] | None:
    """The decode and prefill spaces of the phases searched (None for a phase not searched), with
    `keep` candidates per size; None when the budget cannot hold the weights of the instances the
    request needs."""
    limits = SpaceLimits(
        max_devices=budget_devices, max_redundant_experts=request.max_redundant_experts, engine=request.engine
    )
    want_decode = request.phase in ("both", "decode")
    want_prefill = request.phase in ("both", "prefill")
    experts, other = _weights_bytes(ctx)
    min_dev = min_devices_for_weights(ctx.model, ctx.hw, experts, other, ctx.hbm_utilization)
    # a colocated instance serves both phases alone: every size up to the whole budget is one
    coloc_ok = want_decode and want_prefill and request.colocated
    need = min_dev if coloc_ok else min_dev * (int(want_decode) + int(want_prefill))
    if need > budget_devices:
        return None
    other_min_d = min_dev if want_prefill and not coloc_ok else 0
    other_min_p = min_dev if want_decode and not coloc_ok else 0
    dspace = pspace = None
    d_sizes = _phase_sizes(ctx, budget_devices, request.decode_devices, other_min_d, "decode") if want_decode else []
    p_sizes = _phase_sizes(ctx, budget_devices, request.prefill_devices, other_min_p, "prefill") if want_prefill else []
    if want_decode:
        dspace = build_phase_space(ctx, "decode", d_sizes, request, limits, progress, keep, cache)
    if want_prefill:
        pspace = build_phase_space(ctx, "prefill", p_sizes, request, limits, progress, keep, cache)
    return dspace, pspace


def is_feasible(request: PlanRequest, cache: TableCache | None = None) -> bool:
    """Whether `run_search` finds a deployment for `request`, without the solver or the plans:
    the same candidate spaces (one configuration per size is enough to exist) and the exact
    enumeration of deployments (planner.search.ranking_enum), which has a deployment exactly when
    the CP-SAT model has one. The diagnosis re-checks a request with one flag changed this way.
    Single-machine requests only (a mixed request's search is planner.search.mixed_search)."""
    if request.is_mixed:
        raise ValueError("is_feasible: a mixed-hardware request is searched by planner.search.mixed_search")
    ctx = make_context(request)
    budget_devices = _budget_devices(request, ctx.hw)
    spaces = _candidate_spaces(ctx, request, budget_devices, 1, None, cache)
    if spaces is None:
        return False
    dspace, pspace = spaces
    if (dspace and not dspace.candidates) or (pspace and not pspace.candidates):
        return False
    d = dspace.candidates if dspace else []
    p = pspace.candidates if pspace else []
    if _ranked(request, ctx, d, p, [], 1):
        return True
    if not (dspace and pspace and request.colocated):
        return False
    return bool(_ranked(request, ctx, [], [], _colocated(ctx, request, dspace, pspace, 1), 1))


def make_context(request: PlanRequest) -> CostContext:
    """Specs loaded and the cost context built for a request."""
    model = load_model(request.model)
    hw = load_hardware(request.hardware)
    imbalance = request.imbalance or default_imbalance_model()
    if request.pessimistic_factors:
        from planner.costmodel.uncertainty import corner, imbalance_corner

        hw = corner(hw, slow=True)
        imbalance = imbalance_corner(imbalance, slow=True) or imbalance
    quant = get_quantization(request.quantization)
    w = request.workload
    if w.longest_context_tokens > model.max_context_tokens:
        raise BadInputError(
            f"--input-tokens + --output-tokens = {w.longest_context_tokens} (the longest request) exceeds the model's "
            f"context of {model.max_context_tokens} tokens."
        )
    if request.mtp_tokens and max(request.mtp_tokens) > 0 and model.mtp_layers == 0:
        raise BadInputError(f"--mtp: model '{model.name}' has no MTP layers; use --mtp 0.")
    return CostContext(model, hw, quant, w, imbalance, request.hbm_utilization)


def candidate_phase_plan(c: PhaseCandidate, instances: int, input_tokens: int) -> DecodePlan | PrefillPlan:
    """A phase section of the plan format from a candidate."""
    common: dict[str, Any] = {
        "devices": c.devices,
        "instances": instances,
        "attention": c.attention,
        "dense_ffn": c.dense_ffn,
        "moe": c.moe.moe if c.moe else None,
        "shared_expert": c.moe.shared if c.moe else None,
        "lm_head": c.lm_head,
    }
    common = {k: v for k, v in common.items() if v is not None}
    if c.phase == "decode":
        return DecodePlan(concurrency_per_device=c.x, mtp_tokens=c.k, micro_batches=c.micro_batches, **common)  # type: ignore[arg-type]
    return PrefillPlan(batch_tokens=c.x * input_tokens, micro_batches=c.k, **common)


def _colocated(
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
    objective is tokens/s per card, sizes are visited best bound per device first, and a size
    whose bound per device cannot reach the `keep`-th best found is skipped: that is exact too,
    and depends on no budget.
    `floor_per_device` (requests/s in thousandths per device) is what a colocated instance must
    reach to matter at all (the `top`-th best deployment without colocated ones): sizes and
    combinations whose bound is below it are not costed, and those kept all reach it."""
    slo = request.slo
    tpot = None if slo.tpot_ms is None else int(math.floor(slo.tpot_ms * 1000))
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
    per_device = request.rate_per_s is None  # with a target rate every size's best counts
    if per_device:
        # a second bound per size, a few thousandths of the combinations' bound: the same
        # conditions with every figure at its least over the layouts (colocated_size_bound)
        for n in sizes:
            if rough[n] > 0:
                (dt, di), (pt, pi) = dspace.tables[n], pspace.tables[n]
                rough[n] = min(rough[n], colocated_size_bound(ctx, dt, di, pt, pi, tpot, ttft, itl, mtp))
    order = sorted(sizes, key=lambda n: (-rough[n] / n, n)) if per_device else sizes
    out: list[ColocatedCandidate] = []
    for n in order:
        if rough[n] <= 0:
            continue  # no decode configuration of this size meets the SLO
        (dt, di), (pt, pi) = dspace.tables[n], pspace.tables[n]
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


def deployment_plan(
    request: PlanRequest,
    ctx: CostContext,
    dep: Deployment,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    rank: int,
    coloc: list[ColocatedCandidate] | None = None,
) -> Plan:
    """The plan file of one deployment (without `predicted`)."""
    decode: DecodePlan | PrefillPlan | None = None
    prefill: DecodePlan | PrefillPlan | None = None
    colocated: ColocatedPlan | None = None
    n_in = ctx.prefill_tokens_per_request
    if dep.colocated is not None and coloc:
        c = coloc[dep.colocated]
        d = candidate_phase_plan(c.decode, dep.colocated_instances, n_in)
        assert isinstance(d, DecodePlan)
        shared = d.model_dump(include=set(COLOCATED_SHARED_FIELDS))
        colocated = ColocatedPlan(
            **shared,
            concurrency_per_device=d.concurrency_per_device,
            mtp_tokens=d.mtp_tokens,
            decode_micro_batches=d.micro_batches,
            prefill_batch_tokens=c.chunk_tokens if c.chunk_tokens is not None else c.batch_requests * n_in,
            prefill_micro_batches=c.micro_batches,
            chunk_tokens=c.chunk_tokens,
        )
    else:
        if dep.decode is not None and dspace is not None:
            decode = candidate_phase_plan(dspace.candidates[dep.decode], dep.decode_instances, n_in)
        if dep.prefill is not None and pspace is not None:
            prefill = candidate_phase_plan(pspace.candidates[dep.prefill], dep.prefill_instances, n_in)
    return Plan(
        model=request.model,
        hardware=request.hardware,
        quantization=request.quantization,
        workload=request.workload,
        slo=request.slo,
        decode=decode,  # type: ignore[arg-type]
        prefill=prefill,  # type: ignore[arg-type]
        colocated=colocated,
        hbm_utilization=request.hbm_utilization,
        rank=rank,
    )


def smallest_deployment_devices(ctx: CostContext, request: PlanRequest, cache: TableCache | None = None) -> int | None:
    """Fewest devices of any deployment that fits HBM and meets the SLOs, whatever the budget
    (None if no instance size up to the largest one the machine allows works). Sizes are costed
    in increasing order, as in the search, until no larger one can give fewer devices."""
    experts, other = _weights_bytes(ctx)
    min_dev = min_devices_for_weights(ctx.model, ctx.hw, experts, other, ctx.hbm_utilization)
    hw = ctx.hw
    largest = hw.max_devices if hw.max_devices is not None else DENSE_NODE_COUNTS * hw.devices_per_node
    want_decode = request.phase in ("both", "decode")
    want_prefill = request.phase in ("both", "prefill")
    coloc_ok = want_decode and want_prefill and request.colocated
    limits = SpaceLimits(
        max_devices=largest, max_redundant_experts=request.max_redundant_experts, engine=request.engine
    )
    sizes = set(instance_sizes(hw, largest, min_dev))
    for pinned in (request.decode_devices, request.prefill_devices):
        if pinned is not None:
            sizes.add(pinned)
    best: int | None = None
    smallest: dict[str, int] = {}
    for n in sorted(sizes):
        if best is not None and n >= best:
            break
        spaces = {}
        for phase, want, pinned in (
            ("decode", want_decode, request.decode_devices),
            ("prefill", want_prefill, request.prefill_devices),
        ):
            if want and (pinned is None or pinned == n):
                spaces[phase] = build_phase_space(ctx, phase, [n], request, limits, keep=1, cache=cache)
                if spaces[phase].candidates and phase not in smallest:
                    smallest[phase] = n
        if coloc_ok and len(spaces) == 2 and _colocated(ctx, request, spaces["decode"], spaces["prefill"], 1):
            best = n if best is None else min(best, n)
        wanted = [p for p, w in (("decode", want_decode), ("prefill", want_prefill)) if w]
        if all(p in smallest for p in wanted):
            total = sum(smallest[p] for p in wanted)
            best = total if best is None else min(best, total)
    return best


def _budget_message(ctx: CostContext, request: PlanRequest, budget_devices: int, cache: TableCache | None) -> str:
    """Why the budget is too small, naming the smallest budget that works (found by costing)."""
    hw = ctx.hw
    smallest = smallest_deployment_devices(ctx, request, cache)
    where = f"{ctx.model.name} on {hw.name}"
    if smallest is None:
        return (
            f"card budget: no deployment of {where} fits HBM and meets the SLOs at any instance size up to "
            f"{DENSE_NODE_COUNTS} nodes; relax --tpot-ms/--ttft-ms or use a smaller quantization."
        )
    cards = math.ceil(smallest / hw.devices_per_card - 1e-9)
    return (
        f"card budget: the smallest deployment of {where} that fits HBM and meets the SLOs needs "
        f"{smallest} devices ({cards} cards); --max-cards {request.max_cards:g} allows {budget_devices} "
        f"devices. Raise --max-cards to at least {cards}."
    )


def _diagnose(
    ctx: CostContext,
    request: PlanRequest,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    budget_devices: int,
    cache: TableCache | None,
) -> str:
    """`diagnose_infeasible` (which re-checks the request with one flag changed, with the tables of
    `cache`), with the card-budget case naming the smallest budget that works."""
    reason = diagnose_infeasible(
        ctx, request, dspace, pspace, budget_devices, lambda changed: is_feasible(changed, cache)
    )
    if reason.startswith("card budget") and request.rate_per_s is None:
        return _budget_message(ctx, request, budget_devices, cache)
    return reason


def _plan_signature(plan: Plan) -> str:
    """What tells two plans apart for a user: every predicted figure and the deployment's size.
    Plans equal in these differ only in fields with no effect on the prediction: one plan."""
    import json

    return json.dumps([plan.total_devices, plan.predicted], sort_keys=True, default=str)


def _best_per_size(cands: list[Any]) -> list[int]:
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
    return Fraction(c.num, c.den)


def _ranked(
    request: PlanRequest,
    ctx: CostContext,
    d: list[PhaseCandidate],
    p: list[PhaseCandidate],
    cc: list[ColocatedCandidate],
    k: int,
    exclude: frozenset[Choice] = frozenset(),
) -> list[Deployment]:
    """The k best distinct deployments of these candidates, exactly, without the solver."""
    out = request.workload.output_tokens
    return rank_deployments(
        [c.devices for c in d],
        [_decode_rate_milli(c, out) for c in d],
        [c.devices for c in p],
        [_prefill_rate_milli(c) for c in p],
        [c.devices for c in cc],
        [c.rate_milli for c in cc],
        int(math.floor(request.max_cards * ctx.hw.devices_per_card + 1e-9)),
        k,
        None if request.rate_per_s is None else int(math.ceil(request.rate_per_s * RATE_SCALE)),
        exclude,
    )


def _distinct_plans(
    request: PlanRequest,
    ctx: CostContext,
    first: Deployment,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    coloc: list[ColocatedCandidate],
) -> tuple[list[Plan], list[Deployment], bool]:
    """The `top` best distinct plans in order: rank 1 as CP-SAT chose and proved it, the rest by
    exact enumeration (planner.search.ranking_enum) without rank 1's choice; plans that predict
    the same are one. Also whether fewer than `top` exist."""
    d = dspace.candidates if dspace else []
    p = pspace.candidates if pspace else []
    want = 2 * request.top
    while True:
        rest = _ranked(request, ctx, d, p, coloc, want, frozenset({choice_of(first)}))
        plans: list[Plan] = []
        deps: list[Deployment] = []
        seen: set[str] = set()
        # rank 1 is CP-SAT's; if it stopped short of a proof (time limit), an enumerated deployment
        # that beats it goes first (stable: among equals CP-SAT's choice stays first)
        target = None if request.rate_per_s is None else int(math.ceil(request.rate_per_s * RATE_SCALE))
        for dep in sorted([first, *rest], key=lambda dp: sort_key(dp, target, 0)):
            plan = score_and_validate(deployment_plan(request, ctx, dep, dspace, pspace, len(plans) + 1, coloc), ctx)
            sig = _plan_signature(plan)
            if sig in seen:
                continue
            seen.add(sig)
            plans.append(plan)
            deps.append(dep)
            if len(plans) == request.top:
                return plans, deps, False
        if len(rest) < want:
            return plans, deps, True
        want *= 2


def _colocated_floor(
    request: PlanRequest, ctx: CostContext, d: list[PhaseCandidate], p: list[PhaseCandidate], k: int
) -> Fraction:
    """Requests/s (thousandths) per device of the k-th best deployment of these disaggregated
    candidates: below it a colocated instance cannot enter the k best (0 when fewer than k exist,
    or with a target rate, where deployments are ranked by devices)."""
    if request.rate_per_s is not None:
        return Fraction(0)
    found = _ranked(request, ctx, d, p, [], k)
    return Fraction(found[-1].rate_milli, found[-1].devices) if len(found) >= k else Fraction(0)


def _decode_pool(request: PlanRequest, dspace: PhaseSpace, drawn: dict) -> list[PhaseCandidate]:
    """The best decode candidate of each size and micro-batch count among those `drawn` allows
    (`decode_candidates`' filters `mtp`, `ep_not`), from the tables again."""
    slo_us = None if request.slo.tpot_ms is None else int(math.floor(request.slo.tpot_ms * 1000))
    itl_us = None if request.slo.max_itl_ms is None else int(math.floor(request.slo.max_itl_ms * 1000))
    pool: list[PhaseCandidate] = []
    for t0, ints0 in dspace.tables.values():
        # every decode micro-batch count's tables of the size (build_phase_space keeps them)
        factor, tables = t0.memo.get("decode_micro_batch_tables", (0, [(t0, ints0)]))
        for t, ints in tables:
            pool.extend(decode_candidates(t, ints, slo_us, 1, itl_us, factor, **drawn))
    return pool


def _alternatives(
    request: PlanRequest,
    ctx: CostContext,
    best_dep: Deployment,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    coloc: list[ColocatedCandidate],
) -> list[Alternative]:
    """The best plan of each structure rank 1 does not have: disaggregated vs colocated, MTP on vs
    off, another EP size of the decode instances (each exact over its candidates, same budget)."""
    d_all = dspace.candidates if dspace else []
    p_all = pspace.candidates if pspace else []
    head: PhaseCandidate | None = None
    if best_dep.colocated is not None:
        head = coloc[best_dep.colocated].decode
    elif best_dep.decode is not None:
        head = d_all[best_dep.decode]

    def anything(c: PhaseCandidate) -> bool:
        return True

    # (label, which decode candidates belong, disaggregated plans?, colocated ones?, and for a
    # structure the kept candidates may not hold the best of (the best of each size is kept over
    # every MTP depth and EP size): the filter to draw its candidates from the tables again)
    structures: list[tuple[str, Callable[[PhaseCandidate], bool], bool, bool, dict | None]] = []
    if dspace and pspace and (coloc or request.colocated):
        if best_dep.colocated is not None:
            structures.append(("disaggregated", anything, True, False, None))
        else:
            structures.append(("colocated", anything, False, True, None))
    depths = request.mtp_tokens if request.mtp_tokens is not None else (0, 1)
    if head is not None and ctx.model.mtp_layers and any((k > 0) != (head.k > 0) for k in depths):
        mtp_alternative = not head.k > 0

        def other_mtp(c: PhaseCandidate, mtp: bool = mtp_alternative) -> bool:
            return (c.k > 0) == mtp

        label = "with MTP" if mtp_alternative else "without MTP"
        structures.append((label, other_mtp, True, True, {"mtp": mtp_alternative}))
    if head is not None and head.moe is not None:
        ep = head.moe.moe.ep

        def other_ep(c: PhaseCandidate, ep: int = ep) -> bool:
            return c.moe is not None and c.moe.moe.ep != ep

        structures.append((f"decode EP other than {ep}", other_ep, True, True, {"ep_not": ep}))
    out: list[Alternative] = []
    for label, keep_decode, disagg, colocated, drawn in structures:
        d_pool, c_pool = d_all, coloc
        if drawn is not None and dspace is not None:
            d_pool = _decode_pool(request, dspace, drawn)
            if coloc and pspace is not None:
                # (the size bounds then come from the decode candidates of the same structure);
                # a colocated instance is the answer only if it reaches the best disaggregated one
                floor = _colocated_floor(request, ctx, [c for c in d_pool if keep_decode(c)], p_all, 1)
                c_pool = _colocated(
                    ctx, request, replace(dspace, candidates=d_pool), pspace, 1, floor_per_device=floor, **drawn
                )
        d = [c for c in d_pool if keep_decode(c)] if disagg else []
        p = list(p_all) if disagg else []
        cc = [c for c in c_pool if keep_decode(c.decode)] if colocated else []
        none_fits = "none fits: no configuration of it meets the SLOs and HBM"
        if (dspace and not d and not cc) or (pspace and not p and not cc):
            out.append(Alternative(label, None, None, none_fits))
            continue
        found = _ranked(request, ctx, d, p, cc, 1)
        if not found:
            out.append(Alternative(label, None, None, "none fits: no deployment of it within the card budget"))
            continue
        ds = replace(dspace, candidates=d) if dspace else None
        ps = replace(pspace, candidates=p) if pspace else None
        plan = score_and_validate(deployment_plan(request, ctx, found[0], ds, ps, 1, cc), ctx)
        out.append(Alternative(label, plan, None))
    return out


def _rank_in(plans: list[Plan], plan: Plan) -> int | None:
    sig = _plan_signature(plan)
    return next((i + 1 for i, p in enumerate(plans) if _plan_signature(p) == sig), None)


def run_search(
    request: PlanRequest, progress: Progress | None = None, cache: TableCache | None = None
) -> SearchOutcome:
    """Plan a deployment for `request` (see the module docstring); `cache` reuses cost tables."""

    if request.is_mixed:
        from planner.search.mixed_search import run_mixed_search

        return run_mixed_search(request, progress, cache)
    start = time.perf_counter()
    deadline = start + request.settings.time_limit_s
    ctx = make_context(request)
    hw = ctx.hw
    budget_devices = _budget_devices(request, hw)
    # the diagnosis of an infeasible request re-checks it with one flag changed: its tables are
    # these (a cache for this search when the caller gave none)
    cache = cache if cache is not None else TableCache()
    # the K best distinct deployments use at most K configurations of any one instance size
    spaces = _candidate_spaces(ctx, request, budget_devices, request.top, progress, cache)
    if spaces is None:
        raise InfeasibleError(_budget_message(ctx, request, budget_devices, cache))
    dspace, pspace = spaces
    if (dspace and not dspace.candidates) or (pspace and not pspace.candidates):
        raise InfeasibleError(_diagnose(ctx, request, dspace, pspace, budget_devices, cache))

    d_cands = dspace.candidates if dspace else []
    p_cands = pspace.candidates if pspace else []
    coloc: list[ColocatedCandidate] = []
    if dspace and pspace and request.colocated:
        # a colocated instance matters only if it reaches the `top`-th best deployment without
        # colocated ones (the alternatives need the best colocated plan whatever its value)
        floor = Fraction(0) if request.alternatives else _colocated_floor(request, ctx, d_cands, p_cands, request.top)
        coloc = _colocated(ctx, request, dspace, pspace, request.top, floor_per_device=floor)
    out = request.workload.output_tokens
    if request.rate_per_s is not None and not _rate_reachable(request, d_cands, p_cands, budget_devices, out):
        raise InfeasibleError(_diagnose(ctx, request, dspace, pspace, budget_devices, cache))
    # CP-SAT needs only the best configuration of each size (it dominates the others of that
    # size: same devices, more throughput); the others serve the exact runner-up enumeration
    d_pick, p_pick, c_pick = _best_per_size(d_cands), _best_per_size(p_cands), _best_per_size(coloc)
    d1, p1, c1 = [d_cands[i] for i in d_pick], [p_cands[i] for i in p_pick], [coloc[i] for i in c_pick]
    model = DeploymentModel(
        d1,
        p1,
        [_decode_rate_milli(c, out) for c in d1],
        [_prefill_rate_milli(c) for c in p1],
        budget_devices,
        request.settings,
        tpot_slo_us=None if request.slo.tpot_ms is None else int(math.floor(request.slo.tpot_ms * 1000)),
        ttft_slo_us=None if request.slo.ttft_ms is None else int(math.floor(request.slo.ttft_ms * 1000)),
        target_rate_milli=None if request.rate_per_s is None else int(math.ceil(request.rate_per_s * RATE_SCALE)),
        distinct_sizes=False,
        colocated=c1,
    )
    if progress:
        progress("CP-SAT: choosing configurations and instance counts", 1.0)
    result = model.solve_top(1, deadline)  # rank 1, proven by CP-SAT; the others enumerated exactly
    if not result.deployments:
        if result.status == "UNKNOWN":
            raise InfeasibleError(
                f"no deployment found within the time limit ({request.settings.time_limit_s:g} s); raise --time-limit."
            )
        raise InfeasibleError(_diagnose(ctx, request, dspace, pspace, budget_devices, cache))
    first = replace(
        result.deployments[0],
        decode=None if result.deployments[0].decode is None else d_pick[result.deployments[0].decode],
        prefill=None if result.deployments[0].prefill is None else p_pick[result.deployments[0].prefill],
        colocated=None if result.deployments[0].colocated is None else c_pick[result.deployments[0].colocated],
    )
    if result.status == "INTERRUPTED" or not request.alternatives and request.top == 1:
        plans = [score_and_validate(deployment_plan(request, ctx, first, dspace, pspace, 1, coloc), ctx)]
        deployments, exhausted, alternatives = [first], False, []
    else:
        plans, deployments, exhausted = _distinct_plans(request, ctx, first, dspace, pspace, coloc)
        alternatives = (
            _alternatives(request, ctx, deployments[0], dspace, pspace, coloc) if request.alternatives else []
        )
        for alt in alternatives:
            alt.rank = None if alt.plan is None else _rank_in(plans, alt.plan)
    return SearchOutcome(
        plans=plans,
        status=result.status,
        optimal=result.optimal,
        seconds=time.perf_counter() - start,
        solver_seconds=result.seconds,
        solves=result.solves,
        decode_space=dspace,
        prefill_space=pspace,
        request=request,
        model=ctx.model,
        hw=hw,
        deployments=deployments,
        colocated=coloc,
        exhausted=exhausted,
        alternatives=alternatives,
    )
