"""Prefill on one machine, decode on another: phases costed on their own hardware, counted apart.

`moeplan plan --prefill-hardware a2 --decode-hardware cm384` (or per-phase budgets, or a cost
budget) comes here instead of the single-machine search:

1. Each phase is costed on its own machine (its own peaks, links, HBM and efficiencies) by the
   same tables and candidates as the single-machine search (`build_phase_space`). The KV cache
   moves from prefill to decode over a stated link: `--kv-transfer-gbps`, else the slower of the
   two machines' `kv_transfer_bandwidth_bytes_per_s`; its time adds to the TTFT.
2. Budgets are in cards of each kind (`--max-prefill-cards`, `--max-decode-cards`), or in cost
   units (`--max-cost`) when both YAMLs carry `price_per_card`; without either, `--max-cards`
   caps the sum of the cards of both kinds.
3. The deployment (one decode and one prefill candidate, n and m instances) maximises requests/s
   per cost unit (per card without prices), or with `--rate` reaches the rate at the least cost.
   For a candidate pair the best m given n is one of the two integers around n * r_d / r_p
   (below: prefill binds and the ratio still rises with m; above: decode binds and it falls), so
   the enumeration over every pair and every n up to `MAX_ENUMERATED_INSTANCES` decode
   instances is exhaustive within that cap; beyond it, rounding can gain less than
   1 / MAX_ENUMERATED_INSTANCES of the ratio. Equal ratios go to the larger deployment.

Colocated instances need one machine, so they are not considered here.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from planner.candidates.phase_candidates import EMITTED_SCALE, PhaseCandidate
from planner.candidates.space import SpaceLimits
from planner.costmodel.context import CostContext
from planner.errors import BadInputError, InfeasibleError
from planner.search.plan_search import (
    Progress,
    SearchOutcome,
    TableCache,
    _phase_sizes,
    build_phase_space,
    candidate_phase_plan,
    make_context,
)
from planner.search.request import MAX_CARDS, PlanRequest
from planner.specs.plan import Plan

MAX_ENUMERATED_INSTANCES = 2048


@dataclass(frozen=True)
class MixedDeployment:
    """Chosen candidates (indices), instance counts, and what they serve and cost."""

    decode: int | None
    decode_instances: int
    prefill: int | None
    prefill_instances: int
    requests_per_s: float
    cost: float


def phase_contexts(request: PlanRequest) -> tuple[CostContext, CostContext]:
    """(decode, prefill) cost contexts, each on its own machine, sharing the KV link between them."""
    d_ctx = make_context(dataclasses.replace(request, hardware=request.decode_hw_name))
    p_ctx = make_context(dataclasses.replace(request, hardware=request.prefill_hw_name))
    kv = request.kv_transfer_bytes_per_s or min(
        d_ctx.hw.kv_transfer_bandwidth_bytes_per_s, p_ctx.hw.kv_transfer_bandwidth_bytes_per_s
    )
    return dataclasses.replace(d_ctx, kv_transfer_bytes_per_s=kv), dataclasses.replace(
        p_ctx, kv_transfer_bytes_per_s=kv
    )


def _budget_devices(cards: float | None, flag: str, ctx: CostContext) -> int | None:
    if cards is None:
        return None
    if not (math.isfinite(cards) and 0 < cards <= MAX_CARDS):
        raise BadInputError(f"{flag} must be between 0 and {MAX_CARDS:,} cards.")
    devices = int(math.floor(cards * ctx.hw.devices_per_card + 1e-9))
    if devices < 1:
        raise BadInputError(f"{flag} {cards:g} allows no {ctx.hw.name} device; raise it.")
    return devices


def _unit_costs(request: PlanRequest, d_ctx: CostContext, p_ctx: CostContext) -> tuple[float, float, str]:
    """Cost of one device of each phase's machine, and the unit ('card' or 'cost unit')."""
    priced = d_ctx.hw.price_per_card is not None and p_ctx.hw.price_per_card is not None
    if request.max_cost is not None and not priced:
        missing = d_ctx.hw.name if d_ctx.hw.price_per_card is None else p_ctx.hw.name
        raise BadInputError(
            f"--max-cost needs price_per_card in both hardware YAMLs; '{missing}' has none. Add "
            "price_per_card: {value: ..., source: ...} to it, or budget in cards (--max-prefill-cards, "
            "--max-decode-cards)."
        )
    if not priced:
        return 1.0 / d_ctx.hw.devices_per_card, 1.0 / p_ctx.hw.devices_per_card, "card"
    assert d_ctx.hw.price_per_card is not None and p_ctx.hw.price_per_card is not None
    return (
        d_ctx.hw.price_per_card.value / d_ctx.hw.devices_per_card,
        p_ctx.hw.price_per_card.value / p_ctx.hw.devices_per_card,
        "cost unit",
    )


def decode_requests_per_s(c: PhaseCandidate, output_tokens: float) -> float:
    """Requests/s one decode instance finishes."""
    return c.devices * c.num / EMITTED_SCALE / c.den * 1e6 / output_tokens


def prefill_requests_per_s(c: PhaseCandidate) -> float:
    """Requests/s one prefill instance takes in."""
    return c.num / c.den * 1e6


def choose_deployments(
    d_rate: np.ndarray,
    p_rate: np.ndarray,
    d_cost: np.ndarray,
    p_cost: np.ndarray,
    d_max: np.ndarray,
    p_max: np.ndarray,
    cost_max: float | None,
    target_rate: float | None,
) -> list[tuple[float, float, int, int, int, int]]:
    """For every (decode i, prefill j) pair its best deployment: (score, rate, i, n, j, m), best first.

    Score: requests/s per cost (or, with a target rate, minus the cost). `d_max`/`p_max`: most
    instances of each candidate; `cost_max`: a cap on the total cost (None: none).
    """
    out: list[tuple[float, float, int, int, int, int]] = []
    n_top = int(min(MAX_ENUMERATED_INSTANCES, max(1, d_max.max(initial=1))))
    n = np.arange(1, n_top + 1, dtype=float)
    for i in range(d_rate.size):
        if d_rate[i] <= 0:
            continue
        n_i = n[n <= d_max[i]]
        if n_i.size == 0:
            continue
        for j in range(p_rate.size):
            if p_rate[j] <= 0 or p_max[j] < 1:
                continue
            balance = n_i * d_rate[i] / p_rate[j]
            best: tuple[float, float, int, int] | None = None
            for m in (np.floor(balance), np.ceil(balance)):
                m = np.clip(m, 1, p_max[j])
                rate = np.minimum(n_i * d_rate[i], m * p_rate[j])
                cost = n_i * d_cost[i] + m * p_cost[j]
                ok = np.ones_like(rate, dtype=bool) if cost_max is None else cost <= cost_max * (1 + 1e-12)
                if target_rate is not None:
                    ok &= rate >= target_rate * (1 - 1e-12)
                if not ok.any():
                    continue
                # with a target rate: least cost; otherwise: most requests/s per cost
                score = np.where(ok, -cost if target_rate is not None else rate / cost, -np.inf)
                # equal scores (to 1e-12 relative): the larger deployment serves more
                top = score.max()
                tied = ok & (score >= top - abs(top) * 1e-12)
                k = int(np.flatnonzero(tied)[np.argmax(rate[tied])])
                cand = (float(score[k]), float(rate[k]), int(n_i[k]), int(m[k]))
                if best is None or (cand[0], cand[1]) > (best[0], best[1]):
                    best = cand
            if best is not None:
                out.append((best[0], best[1], i, best[2], j, best[3]))
    out.sort(key=lambda r: (-r[0], -r[1], r[2], r[4]))
    return out


def _single_phase(
    cands: list[PhaseCandidate],
    rates: list[float],
    unit: float,
    max_devices: int,
    cost_max: float | None,
    target_rate: float | None = None,
) -> list[tuple[float, float, int, int]]:
    """One phase only: (score, rate, candidate, instances), best first: the best ratio filling the
    budget, or with a target rate the least cost reaching it."""
    out = []
    for i, c in enumerate(cands):
        n = max_devices // c.devices
        if cost_max is not None:
            n = min(n, int(cost_max // (c.devices * unit)))
        if target_rate is not None and rates[i] > 0:
            need = math.ceil(target_rate / rates[i] - 1e-12)
            if need <= n:
                out.append((-need * c.devices * unit, rates[i] * need, i, need))
            continue
        if n >= 1 and rates[i] > 0:
            out.append((rates[i] / (c.devices * unit), rates[i] * n, i, n))
    out.sort(key=lambda r: (-r[0], -r[1], r[2]))
    return out


def run_mixed_search(
    request: PlanRequest, progress: Progress | None = None, cache: TableCache | None = None
) -> SearchOutcome:
    """Plan prefill and decode on their own machines (see the module docstring)."""
    from planner.search.validate import score_mixed_and_validate

    start = time.perf_counter()
    d_ctx, p_ctx = phase_contexts(request)
    want_decode = request.phase in ("both", "decode")
    want_prefill = request.phase in ("both", "prefill")
    d_unit, p_unit, unit_name = _unit_costs(request, d_ctx, p_ctx)
    per_phase = request.max_prefill_cards is not None or request.max_decode_cards is not None
    # without per-phase or cost budgets, --max-cards caps the cards of both kinds together
    cost_max = request.max_cost
    if cost_max is None and not per_phase:
        cost_max = request.max_cards if unit_name == "card" else None
    d_budget = _budget_devices(request.max_decode_cards, "--max-decode-cards", d_ctx)
    p_budget = _budget_devices(request.max_prefill_cards, "--max-prefill-cards", p_ctx)
    if d_budget is None:
        d_budget = int(math.floor((cost_max if cost_max is not None else request.max_cards) / d_unit + 1e-9))
    if p_budget is None:
        p_budget = int(math.floor((cost_max if cost_max is not None else request.max_cards) / p_unit + 1e-9))
    d_budget, p_budget = max(1, min(d_budget, 10**7)), max(1, min(p_budget, 10**7))

    dspace = pspace = None
    d_sizes = _phase_sizes(d_ctx, d_budget, request.decode_devices, 0, "decode") if want_decode else []
    p_sizes = _phase_sizes(p_ctx, p_budget, request.prefill_devices, 0, "prefill") if want_prefill else []
    # runner-up plans differ in instance sizes when there are enough sizes, else in configurations
    keep = 1 if max(1, len(d_sizes)) * max(1, len(p_sizes)) >= request.top else request.top
    if want_decode:
        limits = SpaceLimits(max_devices=d_budget, max_redundant_experts=request.max_redundant_experts)
        dspace = build_phase_space(d_ctx, "decode", d_sizes, request, limits, progress, keep, cache)
    if want_prefill:
        limits = SpaceLimits(max_devices=p_budget, max_redundant_experts=request.max_redundant_experts)
        pspace = build_phase_space(p_ctx, "prefill", p_sizes, request, limits, progress, keep, cache)
    for space, ctx, label, slo in (
        (dspace, d_ctx, "decode", f"TPOT <= {request.slo.tpot_ms} ms"),
        (pspace, p_ctx, "prefill", f"TTFT <= {request.slo.ttft_ms} ms"),
    ):
        if space is not None and not space.candidates:
            raise InfeasibleError(
                f"{label} on {ctx.hw.name}: no instance of up to {max(space.sizes, default=0)} devices fits HBM "
                f"and meets {slo}; raise --max-{label}-cards, relax the SLO, or choose another --{label}-hardware."
            )
    if progress:
        progress("choosing configurations and instance counts", 1.0)

    out_tokens = request.workload.output_tokens
    d_cands = dspace.candidates if dspace else []
    p_cands = pspace.candidates if pspace else []
    d_rates = [decode_requests_per_s(c, out_tokens) for c in d_cands]
    p_rates = [prefill_requests_per_s(c) for c in p_cands]
    deployments: list[MixedDeployment] = []
    if d_cands and p_cands:
        ranked = choose_deployments(
            np.array(d_rates),
            np.array(p_rates),
            np.array([c.devices * d_unit for c in d_cands]),
            np.array([c.devices * p_unit for c in p_cands]),
            np.array([d_budget // c.devices for c in d_cands], dtype=float),
            np.array([p_budget // c.devices for c in p_cands], dtype=float),
            cost_max,
            request.rate_per_s,
        )
        seen: set[tuple[int, int]] = set()
        for _, rate, i, n, j, m in ranked:
            sizes_key = (d_cands[i].devices, p_cands[j].devices)
            if sizes_key in seen:
                continue
            seen.add(sizes_key)
            cost = n * d_cands[i].devices * d_unit + m * p_cands[j].devices * p_unit
            deployments.append(MixedDeployment(i, n, j, m, rate, cost))
            if len(deployments) == request.top:
                break
    else:
        cands, rates, unit, budget = (
            (d_cands, d_rates, d_unit, d_budget) if d_cands else (p_cands, p_rates, p_unit, p_budget)
        )
        for _, rate, i, n in _single_phase(cands, rates, unit, budget, cost_max, request.rate_per_s)[: request.top]:
            cost = n * cands[i].devices * unit
            if d_cands:
                deployments.append(MixedDeployment(i, n, None, 0, rate, cost))
            else:
                deployments.append(MixedDeployment(None, 0, i, n, rate, cost))
    if not deployments:
        limit = (
            f"--max-cost {cost_max:g}" if request.max_cost is not None else f"{cost_max or request.max_cards:g} cards"
        )
        want = f" at {request.rate_per_s:g} requests/s" if request.rate_per_s is not None else ""
        raise InfeasibleError(
            f"budget: no deployment of decode on {d_ctx.hw.name} and prefill on {p_ctx.hw.name} fits {limit}{want}; "
            "raise the budget (--max-cards, --max-decode-cards, --max-prefill-cards or --max-cost) or lower --rate."
        )

    plans = []
    for rank, dep in enumerate(deployments, start=1):
        plan = mixed_plan(request, d_ctx, p_ctx, dep, d_cands, p_cands, rank)
        plans.append(score_mixed_and_validate(plan, d_ctx, p_ctx))
    return SearchOutcome(
        plans=plans,
        status="OPTIMAL",
        optimal=True,
        seconds=time.perf_counter() - start,
        solver_seconds=0.0,
        solves=0,
        decode_space=dspace,
        prefill_space=pspace,
        request=request,
        model=d_ctx.model,
        hw=d_ctx.hw if want_decode else p_ctx.hw,
    )


def mixed_plan(
    request: PlanRequest,
    d_ctx: CostContext,
    p_ctx: CostContext,
    dep: MixedDeployment,
    d_cands: list[PhaseCandidate],
    p_cands: list[PhaseCandidate],
    rank: int,
) -> Plan:
    """The plan file of a mixed deployment: each phase names its machine when it is not the plan's."""
    top = request.hardware
    decode = prefill = None
    n_in = request.workload.input_tokens
    if dep.decode is not None:
        decode = candidate_phase_plan(d_cands[dep.decode], dep.decode_instances, n_in)
        if request.decode_hw_name != top:
            decode = decode.model_copy(update={"hardware": request.decode_hw_name})
    if dep.prefill is not None:
        prefill = candidate_phase_plan(p_cands[dep.prefill], dep.prefill_instances, n_in)
        update: dict[str, object] = {}
        if request.prefill_hw_name != top:
            update["hardware"] = request.prefill_hw_name
        if request.kv_transfer_bytes_per_s is not None:
            update["kv_transfer_bytes_per_s"] = request.kv_transfer_bytes_per_s
        prefill = prefill.model_copy(update=update)
    return Plan(
        model=request.model,
        hardware=top,
        quantization=request.quantization,
        workload=request.workload,
        slo=request.slo,
        decode=decode,  # type: ignore[arg-type]
        prefill=prefill,  # type: ignore[arg-type]
        hbm_utilization=request.hbm_utilization,
        rank=rank,
    )
