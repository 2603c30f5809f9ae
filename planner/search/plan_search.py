"""`moeplan plan` end to end: candidates per instance size, the CP-SAT deployment model, plans.

1. Instance sizes per phase (planner.candidates.space), pinned ones if the user gave them.
2. For every size: the module layout options, their cost tables (float, then the integer tables
   of `to_integer_tables`), and the phase candidates (best configurations per size).
3. The CP-SAT deployment model chooses candidates and instance counts (planner.search.
   deployment_model); its status says whether the answer is proven best under the model.
4. Each chosen deployment becomes a Plan, scored by `evaluate_plan` and checked by the
   validator (planner.search.validate), which does not use the solver.

When nothing is feasible, `diagnose_infeasible` names the constraint that binds and the nearest
feasible point.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.candidates.colocated_candidates import ColocatedCandidate, colocated_candidates
from planner.candidates.phase_candidates import (
    EMITTED_SCALE,
    PhaseCandidate,
    decode_candidates,
    decode_micro_batch_factor,
    prefill_candidates,
)
from planner.candidates.space import (
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
    decode_tables,
    prefill_tables,
    to_integer_tables,
)
from planner.costmodel.context import CostContext
from planner.costmodel.imbalance import default_imbalance_model
from planner.costmodel.memory import kv_tokens_in_use
from planner.errors import BadInputError, InfeasibleError
from planner.search.deployment_model import RATE_SCALE, Deployment, DeploymentModel
from planner.search.request import MAX_CARDS, PlanRequest
from planner.specs.catalog import load_hardware, load_model
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import COLOCATED_SHARED_FIELDS, ColocatedPlan, DecodePlan, Plan, PrefillPlan
from planner.specs.quantization import get_quantization

KEEP_PER_SIZE = 3
COLOCATED_SIZE_CUTOFF = 0.9
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
    misses: int = 0

    def get(self, key: tuple, build: Callable[[], tuple[PhaseTables, IntTables]]) -> tuple[PhaseTables, IntTables]:
        if key in self.entries:
            self.hits += 1
        else:
            self.misses += 1
            self.entries[key] = build()
        return self.entries[key]


@dataclass
class PhaseSpace:
    """A phase's candidates over all its instance sizes, and what was evaluated."""

    phase: str
    sizes: list[int]
    candidates: list[PhaseCandidate]
    points_evaluated: int
    tables: dict[int, tuple[PhaseTables, IntTables]] = field(default_factory=dict)


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


def _weights_bytes(ctx: CostContext) -> tuple[float, float]:
    m, q = ctx.model, ctx.quant
    experts = 0.0
    if m.moe is not None:
        layers = m.num_moe_layers + m.mtp_layers
        experts = layers * (
            m.moe.routed_experts * m.expert_params() * ctx.routed_expert_weight_bytes
            + m.moe.shared_experts * m.shared_expert_params() * q.expert_weight_bytes
        )
    attn = m.attention_params_all() * q.linear_weight_bytes
    dense = m.num_dense_layers * m.dense_ffn_params() * q.dense_weight_bytes
    vocab = (1 if m.tie_word_embeddings else 2) * m.vocab_params() * q.vocab_weight_bytes
    return experts, attn + dense + vocab


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
            first_tables = None
            mbs = request.decode_micro_batches
            if limits.engine is not None:  # decode micro-batch counts the engine runs
                mbs = tuple(mb for mb in mbs if mb in engine_decode_micro_batches(limits.engine)) or (1,)
            for mb in mbs:

                def build_decode(opts=opts, ks=ks, xs=xs, mb=mb):
                    t = decode_tables(ctx, opts, ks, xs, mb)
                    return t, to_integer_tables(t, ctx.hbm_capacity_bytes)

                mb_key = key if mb == 1 else (*key, "micro_batches", mb)
                t, ints = cache.get(mb_key, build_decode) if cache else build_decode()
                first_tables = first_tables or (t, ints)
                found.extend(decode_candidates(t, ints, slo_us, keep, itl_us, factor))  # type: ignore[arg-type]
            # the best `keep` over the micro-batch counts (deterministic order among equals)
            found = sorted(found, key=lambda c: (-c.score, c.key()))[:keep]
            t, ints = first_tables  # type: ignore[misc]
        else:
            xs = request_values(_max_requests_guess(ctx, n))
            xs = _whole_slo_prompt(ctx, xs)

            def build_prefill(opts=opts, xs=xs):
                t = prefill_tables(ctx, opts, list(opts.prefill_micro_batches), xs)
                return t, to_integer_tables(t, ctx.hbm_capacity_bytes)

            t, ints = cache.get(key, build_prefill) if cache else build_prefill()  # type: ignore[assignment]
            slo_us = None if slo.ttft_ms is None else int(math.floor(slo.ttft_ms * 1000))
            found = prefill_candidates(
                t,
                ints,
                slo_us,
                keep,
                m.num_layers,
                ctx.hw.overlap.prefill_micro_batch_efficiency.value,  # type: ignore[arg-type]
            )
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


def _check_rate_reachable(
    request: PlanRequest,
    d_cands: list[PhaseCandidate],
    p_cands: list[PhaseCandidate],
    budget_devices: int,
    output_tokens: int,
) -> None:
    """Refuse a --rate that no deployment within the budget could serve (names the most)."""
    caps = []
    if d_cands:
        caps.append(max(_decode_rate_milli(c, output_tokens) * (budget_devices // c.devices) for c in d_cands))
    if p_cands:
        caps.append(max(_prefill_rate_milli(c) * (budget_devices // c.devices) for c in p_cands))
    most = min(caps) / RATE_SCALE if caps else 0.0
    assert request.rate_per_s is not None
    if request.rate_per_s > most:
        raise InfeasibleError(
            f"rate: {request.rate_per_s:g} requests/s is more than {request.max_cards:g} cards can serve under "
            f"the SLOs (at most {most:.3g} requests/s even with every card on one phase); raise --max-cards or "
            "lower --rate."
        )


def make_context(request: PlanRequest) -> CostContext:
    """Specs loaded and the cost context built for a request."""
    model = load_model(request.model)
    hw = load_hardware(request.hardware)
    if request.pessimistic_factors:
        from planner.costmodel.uncertainty import corner

        hw = corner(hw, slow=True)
    quant = get_quantization(request.quantization)
    w = request.workload
    if w.longest_context_tokens > model.max_context_tokens:
        raise BadInputError(
            f"--input-tokens + --output-tokens = {w.longest_context_tokens} (the longest request) exceeds the model's "
            f"context of {model.max_context_tokens} tokens."
        )
    if request.mtp_tokens and max(request.mtp_tokens) > 0 and model.mtp_layers == 0:
        raise BadInputError(f"--mtp: model '{model.name}' has no MTP layers; use --mtp 0.")
    return CostContext(model, hw, quant, w, request.imbalance or default_imbalance_model(), request.hbm_utilization)


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
    ctx: CostContext, request: PlanRequest, dspace: PhaseSpace, pspace: PhaseSpace, keep: int
) -> list[ColocatedCandidate]:
    """Colocated candidates for the sizes both phases were costed at."""
    slo = request.slo
    tpot = None if slo.tpot_ms is None else int(math.floor(slo.tpot_ms * 1000))
    ttft = None if slo.ttft_ms is None else int(math.floor(slo.ttft_ms * 1000))
    itl = None if slo.max_itl_ms is None else int(math.floor(slo.max_itl_ms * 1000))
    out: list[ColocatedCandidate] = []
    # colocated instances spend most of their time decoding: only sizes whose best decode
    # instance is within 10% (per device) of the best size's are worth costing
    best_ratio: dict[int, float] = {}
    for c in dspace.candidates:
        best_ratio[c.devices] = max(best_ratio.get(c.devices, 0.0), c.num / c.den)
    top = max(best_ratio.values(), default=0.0)
    competitive = {n for n, r in best_ratio.items() if r >= COLOCATED_SIZE_CUTOFF * top}
    if request.rate_per_s is not None:
        # fewest cards for a rate: a small instance that is less efficient per device may still
        # be the cheapest way to serve it, so every size is costed
        competitive = set(best_ratio)
    for n in sorted(set(dspace.tables) & set(pspace.tables) & competitive):
        (dt, di), (pt, pi) = dspace.tables[n], pspace.tables[n]
        out.extend(colocated_candidates(ctx, dt, di, pt, pi, tpot, ttft, keep, max_itl_us=itl))
    return out


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


def run_search(
    request: PlanRequest, progress: Progress | None = None, cache: TableCache | None = None
) -> SearchOutcome:
    """Plan a deployment for `request` (see the module docstring); `cache` reuses cost tables."""
    from planner.search.diagnose import diagnose_infeasible
    from planner.search.validate import score_and_validate

    if request.is_mixed:
        from planner.search.mixed_search import run_mixed_search

        return run_mixed_search(request, progress, cache)
    start = time.perf_counter()
    deadline = start + request.settings.time_limit_s
    ctx = make_context(request)
    hw = ctx.hw
    if not (math.isfinite(request.max_cards) and 0 < request.max_cards <= MAX_CARDS):
        raise BadInputError(f"--max-cards must be between 0 and {MAX_CARDS:,}.")
    budget_devices = int(math.floor(request.max_cards * hw.devices_per_card + 1e-9))
    if budget_devices < 1:
        raise BadInputError("--max-cards must allow at least one device.")
    limits = SpaceLimits(
        max_devices=budget_devices, max_redundant_experts=request.max_redundant_experts, engine=request.engine
    )
    want_decode = request.phase in ("both", "decode")
    want_prefill = request.phase in ("both", "prefill")

    experts, other = _weights_bytes(ctx)
    min_dev = min_devices_for_weights(ctx.model, hw, experts, other, ctx.hbm_utilization)
    need = min_dev * (int(want_decode) + int(want_prefill))
    if need > budget_devices:
        cards = math.ceil(min_dev / hw.devices_per_card)
        raise InfeasibleError(
            f"HBM: {ctx.model.name} needs at least {min_dev} {hw.name} devices ({cards} cards) per instance "
            f"for its weights alone; --max-cards {request.max_cards:g} allows {budget_devices} devices "
            f"for {'both phases' if want_decode and want_prefill else 'one instance'}. Raise --max-cards "
            f"to at least {math.ceil(need / hw.devices_per_card)}."
        )
    other_min_d = min_dev if want_prefill else 0
    other_min_p = min_dev if want_decode else 0
    dspace = pspace = None
    d_sizes = _phase_sizes(ctx, budget_devices, request.decode_devices, other_min_d, "decode") if want_decode else []
    p_sizes = _phase_sizes(ctx, budget_devices, request.prefill_devices, other_min_p, "prefill") if want_prefill else []
    # runner-up plans differ in instance sizes when there are enough sizes, else in configurations
    pairs = max(1, len(d_sizes)) * max(1, len(p_sizes))
    distinct_sizes = pairs >= request.top
    keep = 1 if distinct_sizes else request.top
    if want_decode:
        dspace = build_phase_space(ctx, "decode", d_sizes, request, limits, progress, keep, cache)
    if want_prefill:
        pspace = build_phase_space(ctx, "prefill", p_sizes, request, limits, progress, keep, cache)
    if (dspace and not dspace.candidates) or (pspace and not pspace.candidates):
        raise InfeasibleError(diagnose_infeasible(ctx, request, dspace, pspace, budget_devices))

    d_cands = dspace.candidates if dspace else []
    p_cands = pspace.candidates if pspace else []
    coloc = _colocated(ctx, request, dspace, pspace, keep) if dspace and pspace and request.colocated else []
    out = request.workload.output_tokens
    if request.rate_per_s is not None:
        _check_rate_reachable(request, d_cands, p_cands, budget_devices, out)
    model = DeploymentModel(
        d_cands,
        p_cands,
        [_decode_rate_milli(c, out) for c in d_cands],
        [_prefill_rate_milli(c) for c in p_cands],
        budget_devices,
        request.settings,
        tpot_slo_us=None if request.slo.tpot_ms is None else int(math.floor(request.slo.tpot_ms * 1000)),
        ttft_slo_us=None if request.slo.ttft_ms is None else int(math.floor(request.slo.ttft_ms * 1000)),
        target_rate_milli=None if request.rate_per_s is None else int(math.ceil(request.rate_per_s * RATE_SCALE)),
        distinct_sizes=distinct_sizes,
        colocated=coloc,
    )
    if progress:
        progress("CP-SAT: choosing configurations and instance counts", 1.0)
    result = model.solve_top(request.top, deadline)
    if not result.deployments:
        if result.status == "UNKNOWN":
            raise InfeasibleError(
                f"no deployment found within the time limit ({request.settings.time_limit_s:g} s); raise --time-limit."
            )
        raise InfeasibleError(diagnose_infeasible(ctx, request, dspace, pspace, budget_devices))
    plans = []
    for rank, dep in enumerate(result.deployments, start=1):  # (also after an interrupt: best so far)
        plan = deployment_plan(request, ctx, dep, dspace, pspace, rank, coloc)
        plans.append(score_and_validate(plan, ctx))
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
    )
