"""Why nothing is feasible: the constraint that binds, and the nearest feasible point.

The nearest point is found by asking the search again with one flag changed (planner.search.
nearest, with the search's own feasibility check passed in as `feasible`); the smallest budget
that works by costing instance sizes in increasing order (`smallest_deployment_devices`).
"""

from __future__ import annotations

import math
from dataclasses import replace

from planner.candidates.phase_candidates import lowest_latency_us
from planner.candidates.space import (
    DENSE_NODE_COUNTS,
    attention_options,
    instance_sizes,
    min_devices_for_weights,
    moe_options,
)
from planner.costmodel.context import DEFAULT_HBM_UTILIZATION, CostContext
from planner.costmodel.memory import request_kv_bytes_per_device
from planner.search.candidate_spaces import (
    PhaseSpace,
    build_phase_space,
    colocated_space,
    request_limits,
    weights_bytes,
)
from planner.search.contexts import PhaseContexts
from planner.search.nearest import (
    Feasible,
    Nearest,
    largest_rate,
    smallest_cards,
    smallest_slo,
    tenths,
    thousandths,
    with_slo,
)
from planner.search.request import ITL_TPOT_MULTIPLE, MAX_CARDS, PlanRequest
from planner.search.table_cache import TableCache


def _lowest(ctx: CostContext, space: PhaseSpace) -> tuple[int | None, int | None]:
    """(lowest latency in us, at which instance size) over the sizes of a phase."""
    best, at = None, None
    for n, (t, ints) in space.tables.items():
        v = lowest_latency_us(t, ints, ctx.model.num_layers, ctx.hw.overlap.prefill_micro_batch_efficiency.value)
        if v is not None and (best is None or v < best):
            best, at = v, n
    return best, at


def diagnose_infeasible(
    ctx: CostContext,
    request: PlanRequest,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    budget_devices: int,
    feasible: Feasible,
) -> str:
    """A sentence naming the binding constraint and the nearest feasible point.

    `feasible` (the search's feasibility check, planner.search.plan_search.is_feasible) finds the
    value of the binding flag that works (planner.search.nearest)."""
    hw, m = ctx.hw, ctx.model
    where = f"{m.name} on {hw.name} with <= {request.max_cards:g} cards"
    if request.afd and not request.disaggregated and not request.colocated and request.rate_per_s is None:
        # the decode and prefill spaces are not deployments of their own here: judge the AFD ones
        return _afd_only_message(request, where, feasible)
    for space, slo_name, flag, value in (
        (dspace, "TPOT", "--tpot-ms", request.slo.tpot_ms),
        (pspace, "TTFT", "--ttft-ms", request.slo.ttft_ms),
    ):
        if space is None or space.candidates:
            continue
        if not space.sizes:
            return f"card budget: no {space.phase} instance size fits {where}; raise --max-cards."
        if not space.tables and space.no_expert_layout:
            return no_expert_layout_message(ctx, request, space, where, feasible)
        lowest, at = _lowest(ctx, space)
        pinned = request.decode_devices if space.phase == "decode" else request.prefill_devices
        if lowest is None and pinned is not None:
            too_few = _pinned_too_small(ctx, request, space.phase, pinned, budget_devices, feasible)
            if too_few:
                return too_few
        if lowest is None:
            context = _context_binds(ctx, space.phase, max(space.sizes))
            if context:
                return context
            hbm = (
                f"HBM: no {space.phase} configuration of {where} fits in "
                f"{ctx.hbm_capacity_bytes / 2**30:.1f} GiB per device ({ctx.hbm_utilization:g} of "
                f"{hw.hbm_bytes / 2**30:.0f} GiB; tried instance sizes {sorted(space.tables)})"
            )
            cards = smallest_cards(request, feasible)
            if cards is None:
                return f"{hbm}; raise --hbm-utilization or use a smaller quantization."
            return f"{hbm}. {_raise_cards(cards)}, or raise --hbm-utilization, or use a smaller quantization."
        reason = _slo_message(request, space.phase, slo_name, flag, value, lowest, at, where, feasible)
        if " to at least " in reason:
            return reason
        if space is dspace and pspace is not None and not pspace.candidates:
            both = _both_slos(ctx, request, lowest, pspace, feasible)
            if both:
                return f"{reason} {both}"
        cards = smallest_cards(request, feasible)  # no value of the SLO flags alone: the budget
        return reason if cards is None else f"{reason} {_raise_cards(cards)}."
    if request.rate_per_s is not None:
        return _rate_message(request, where, feasible)
    smallest = []
    for space in (dspace, pspace):
        if space is not None and space.candidates:
            smallest.append(min(c.devices for c in space.candidates))
    need = sum(smallest)
    return (
        f"card budget: the smallest deployment that meets the SLOs needs {need} devices "
        f"({math.ceil(need / hw.devices_per_card)} cards) but --max-cards {request.max_cards:g} allows "
        f"{budget_devices} devices; raise --max-cards."
    )


def _afd_only_message(request: PlanRequest, where: str, feasible: Feasible) -> str:
    """Why a request for attention-FFN disaggregated deployments alone (--structure afd) has none: the
    smallest budget at which one works, else the smallest TPOT, else TTFT SLO, each found by the search
    itself with only that flag changed."""
    head = f"AFD: no attention-FFN disaggregated deployment of {where} fits HBM and meets the SLOs"
    cards = smallest_cards(request, feasible)
    if cards is not None:
        return f"{head}. {_raise_cards(cards)}."
    for flag in ("--tpot-ms", "--ttft-ms"):
        near = smallest_slo(request, flag, feasible)
        if near is not None:
            return f"{head}. Relax {flag} to at least {tenths(near.value)}{_still(near)}"
    return (
        f"{head}, and no --max-cards, --tpot-ms or --ttft-ms alone changes that; plan with --structure pd or "
        "colocated, relax both SLOs, or plan for another --engine."
    )


def _slo_message(
    request: PlanRequest,
    phase: str,
    slo_name: str,
    flag: str,
    value: float | None,
    lowest: int,
    at: int | None,
    where: str,
    feasible: Feasible,
) -> str:
    """No instance of a phase meets its SLO: the value of the SLO flag (or of the ITL limit) from
    which a whole deployment within the budget works, checked."""
    mean = (
        " (a mean TPOT; the SLO holds the percentile request's)"
        if slo_name == "TPOT" and request.slo.tpot_at_percentile
        else ""
    )
    alone = f"one {phase} instance alone reaches {lowest / 1000:.1f} ms{mean}, with {at} devices"
    asks = "no limit" if value is None else f"{value:g} ms"
    head = f"{slo_name}: the SLO asks for {asks}; {alone}"
    near = smallest_slo(request, flag, feasible, lowest) if value is not None else None
    if near is not None:
        notes = []
        if flag == "--tpot-ms" and request.itl_from_tpot and request.slo.max_itl_ms is not None:
            notes.append(f"the ITL limit at its default, {ITL_TPOT_MULTIPLE:g}x TPOT")
        if math.ceil(lowest / 100) / 10 < near.value:  # the phase's own bound is not the deployment's
            notes.append(f"{alone}, but no deployment within the budget does")
        note = f" ({'; '.join(notes)})" if notes else ""
        return (
            f"{slo_name}: the lowest {slo_name} reachable for {where} is {tenths(near.value)} ms, rounded up to "
            f"0.1 ms{note}; the SLO asks for {asks}. Relax {flag} to at least {tenths(near.value)}" + _still(near)
        )
    itl = request.slo.max_itl_ms
    if phase == "decode" and itl is not None and not request.itl_from_tpot:
        near = smallest_slo(request, "--max-itl-ms", feasible)
        if near is not None:
            relax = "" if value is None else f" (no --tpot-ms alone makes {where} feasible)"
            return (
                f"ITL: the lowest ITL limit a deployment of {where} meets is {tenths(near.value)} ms, rounded up to "
                f"0.1 ms; --max-itl-ms asks for {itl:g} ms{relax}. Relax --max-itl-ms to at least "
                f"{tenths(near.value)}" + _still(near)
            )
    return f"{head}; no {flag} alone makes a deployment of {where} feasible."


def _both_slos(
    ctx: CostContext, request: PlanRequest, lowest_tpot_us: int, pspace: PhaseSpace, feasible: Feasible
) -> str:
    """TTFT binds too (neither SLO alone can be relaxed into a deployment): a pair of values that
    works, checked, each the smallest given the other (the TPOT with no TTFT limit, then the TTFT
    at that TPOT)."""
    lowest, at = _lowest(ctx, pspace)
    if lowest is None or request.slo.ttft_ms is None:
        return ""
    tpot = smallest_slo(with_slo(request, "--ttft-ms", None), "--tpot-ms", feasible, lowest_tpot_us)
    if tpot is None:
        return ""
    ttft = smallest_slo(with_slo(request, "--tpot-ms", tpot.value), "--ttft-ms", feasible, lowest)
    if ttft is None:
        return ""
    below = "" if ttft.next_value is None else f"; with --ttft-ms {tenths(ttft.next_value)} it does not"
    return (
        f"TTFT binds too: the SLO asks for {request.slo.ttft_ms:g} ms; one prefill instance alone reaches "
        f"{lowest / 1000:.1f} ms, with {at} devices. Together: --tpot-ms {tenths(tpot.value)} with --ttft-ms "
        f"{tenths(ttft.value)} works{below}."
    )


def _raise_cards(cards: Nearest) -> str:
    """Advice naming the smallest budget that works (one card fewer checked infeasible)."""
    return f"Raise --max-cards to at least {cards.value:.0f} ({cards.next_value:.0f} cards are still infeasible)"


def _still(near: Nearest) -> str:
    """The end of an advice: the value one step below, checked infeasible."""
    if near.next_value is None:
        return "."
    return f" ({tenths(near.next_value)} is still infeasible)."


def _rate_message(request: PlanRequest, where: str, feasible: Feasible) -> str:
    """--rate is more than the budget serves: the smallest budget that serves it and the largest
    rate the budget serves, each checked."""
    assert request.rate_per_s is not None
    # the search counts a deployment's rate as the sum of its instances' requests/s, each rounded
    # down to the thousandth (planner.search.deployment.rate_milli_of): a plan's detail prints the
    # unrounded figure, a little higher, so the message says which one it holds to
    head = (
        f"rate: {where} cannot serve {request.rate_per_s:g} requests/s under the SLOs as the search counts "
        "a deployment's rate (each instance's requests/s rounded down to 0.001, then summed; a plan's detail "
        "prints the unrounded figure, which can be a little higher)"
    )
    cards = smallest_cards(request, feasible)
    rate = largest_rate(request, feasible)
    if rate is not None:
        more = "" if rate.next_value is None else f"; {thousandths(rate.next_value)} is too many"
        head += f" (the most it serves so counted is {thousandths(rate.value)} requests/s{more})"
    advice = []
    if cards is not None:
        advice.append(_raise_cards(cards))
    if rate is not None:
        advice.append(f"lower --rate to at most {thousandths(rate.value)}")
    if not advice:
        return f"{head}, and no budget up to {MAX_CARDS:,} cards does."
    advice[0] = advice[0][0].upper() + advice[0][1:]
    return f"{head}. " + " or ".join(advice) + "."


def _pinned_too_small(
    ctx: CostContext, request: PlanRequest, phase: str, devices: int, budget_devices: int, feasible: Feasible
) -> str | None:
    """The instance size the user pinned cannot hold the weights once (with the reserves and the
    --hbm-utilization share), whatever the KV cache: the fix is a larger size, not a shorter
    context. The smallest larger size of the search's own that makes the request feasible (checked)
    is named when there is one within the budget."""
    experts, other = weights_bytes(ctx)
    need = min_devices_for_weights(ctx.model, ctx.hw, experts, other, ctx.hbm_utilization)
    if devices >= need:
        return None
    head = (
        f"HBM: the {phase} instance size pinned by --{phase}-devices ({devices} devices) cannot hold "
        f"{ctx.model.name}'s weights ({(experts + other) / 2**30:,.0f} GiB) in "
        f"{ctx.hbm_capacity_bytes / 2**30:.1f} GiB per device less the reserves: one instance needs at least "
        f"{need} devices for them alone."
    )
    for n in instance_sizes(ctx.hw, budget_devices, need):
        pinned = replace(request, decode_devices=n) if phase == "decode" else replace(request, prefill_devices=n)
        if feasible(pinned):
            return (
                f"{head} Pin --{phase}-devices {n} (checked: the smallest of the search's instance sizes "
                f"from {need} devices up that works), or leave the size to the search."
            )
    return f"{head} No larger {phase} instance size works within the budget: leave the size to the search."


def no_expert_layout_message(
    ctx: CostContext, request: PlanRequest, space: PhaseSpace, where: str, feasible: Feasible
) -> str:
    """No instance size of a phase has an expert layout within the layout limits: the cap on
    redundant copies (--max-redundant-experts) or, without one, the engine's. With a cap, the
    smallest cap that makes the request feasible, checked (the cap one copy below it is not)."""
    sizes = space.no_expert_layout
    experts = ctx.model.moe.routed_experts if ctx.model.moe is not None else 0
    cap = request.max_redundant_experts
    if cap is None:
        return (
            f"experts: {request.engine} runs no expert layout of a {space.phase} instance of {sizes} devices of "
            f"{where}; pin another --{space.phase}-devices or plan for another --engine."
        )
    # the redundant copies a layout of these sizes can have (the cap lifted): the request's
    # feasibility changes only at these counts, and grows with the cap
    free = replace(request_limits(request, max(sizes)), max_redundant_experts=None)
    counts = sorted(
        {o.moe.ep * o.moe.slots_per_device - experts for n in sizes for o in moe_options(ctx.model, n, free)}
    )
    across = ", ".join(str(n) for n in sizes)
    head = (
        f"experts: no {space.phase} instance of {where} ({across} devices) holds {ctx.model.name}'s {experts} "
        f"routed experts with at most {cap} redundant copies (--max-redundant-experts {cap})"
    )
    if counts:
        head += f"; the fewest an instance of {across} devices can have is {counts[0]}"
    above = [c for c in counts if c > cap]

    def works(i: int) -> bool:
        return feasible(replace(request, max_redundant_experts=above[i]))

    if not above or not works(len(above) - 1):
        return f"{head}, and no cap on them makes the request feasible; pin another --{space.phase}-devices."
    lo, hi = -1, len(above) - 1  # above[lo] (or the request's cap) does not work; above[hi] does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if works(mid) else (mid, hi)
    below = cap if lo < 0 else above[lo]
    gap = f"; no layout of {across} devices has {below + 1} to {above[hi] - 1}" if above[hi] - 1 > below else ""
    return f"{head}. Raise --max-redundant-experts to at least {above[hi]} (checked: {below} is still infeasible{gap})."


def _context_binds(ctx: CostContext, phase: str, devices: int) -> str | None:
    """The long-context diagnosis: one request's KV cache alone does not fit next to the weights.

    A request's KV lives on its attention DP rank: tensor parallelism splits its KV heads over the
    TP group (GQA, up to one KV head a device; MLA's latent is not split), as the memory model
    charges it (planner.costmodel.memory.kv_tokens_in_use counts the group's sequences and one
    longest among them once). No layout fits a request whose KV on a device of the layout that
    splits it most exceeds what the device has left after its share of the weights and reserves.
    """
    m, hw, w = ctx.model, ctx.hw, ctx.workload
    a = m.attention
    tokens = w.longest_context_tokens if phase == "decode" else max(w.slo_input_tokens, w.input_tokens)
    tps = sorted({lay.tp for lay in attention_options(m, hw, devices, "decode")}) or [1]
    kv, tp = min((request_kv_bytes_per_device(ctx, float(tokens), t), t) for t in tps)
    per_token = (kv - request_kv_bytes_per_device(ctx, 0.0, tp)) / max(tokens, 1)
    experts, other = weights_bytes(ctx)
    reserve = hw.memory.comm_buffers.value + hw.memory.runtime_reserve.value
    free = hw.hbm_bytes - reserve - (experts + other) / max(1, devices)
    if kv <= 0.5 * max(free, 0.0):
        return None
    gib = 2.0**30
    fit = max(0, int(max(free, 0.0) // max(per_token, 1.0)))
    split = f"split over TP{tp}" if tp > 1 else "on one device"
    return (
        f"context: one {tokens:,}-token request needs {kv / gib:.1f} GiB of KV cache per device "
        f"({per_token / 1024:.1f} KiB per token, {a.kind.upper()}, {split}: the layout that splits it most), "
        f"but each {hw.name} device of the largest {phase} instance tried ({devices} devices) has at most "
        f"{max(free, 0.0) / gib:.1f} GiB left after weights and reserves (about {fit:,} tokens). Shorten the "
        "context, use a scheme with a smaller KV format (fp8-c8 or hif8 where the chip lists FP8/HiF8), or "
        "a machine with more HBM per device."
    )


def smallest_deployment_devices(ctx: CostContext, request: PlanRequest, cache: TableCache | None = None) -> int | None:
    """Fewest devices of any deployment that fits HBM and meets the SLOs, whatever the budget
    (None if no instance size up to the largest one the machine allows works). Sizes are costed
    in increasing order, as in the search, until no larger one can give fewer devices."""
    experts, other = weights_bytes(ctx)
    min_dev = min_devices_for_weights(ctx.model, ctx.hw, experts, other, ctx.hbm_utilization)
    hw = ctx.hw
    largest = hw.max_devices if hw.max_devices is not None else DENSE_NODE_COUNTS * hw.devices_per_node
    want_decode = request.phase in ("both", "decode")
    want_prefill = request.phase in ("both", "prefill")
    coloc_ok = want_decode and want_prefill and request.colocated
    limits = request_limits(request, largest)
    searched = set(instance_sizes(hw, largest, min_dev))
    # each phase at the sizes the search gives it: the pinned one, else the search's own (the other
    # phase's pinned size is not one of them, and no colocated instance has it unless both are)
    phase_sizes = {
        phase: searched if pinned is None else {pinned}
        for phase, pinned in (("decode", request.decode_devices), ("prefill", request.prefill_devices))
    }
    sizes = phase_sizes["decode"] | phase_sizes["prefill"]
    best: int | None = None
    smallest: dict[str, int] = {}
    for n in sorted(sizes):
        if best is not None and n >= best:
            break
        spaces = {}
        for phase, want in (("decode", want_decode), ("prefill", want_prefill)):
            if want and n in phase_sizes[phase]:
                spaces[phase] = build_phase_space(ctx, phase, [n], request, limits, keep=1, cache=cache)
                if spaces[phase].candidates and phase not in smallest:
                    smallest[phase] = n
        if coloc_ok and len(spaces) == 2 and colocated_space(ctx, request, spaces["decode"], spaces["prefill"], 1):
            best = n if best is None else min(best, n)
        wanted = [p for p, w in (("decode", want_decode), ("prefill", want_prefill)) if w]
        if all(p in smallest for p in wanted):
            total = sum(smallest[p] for p in wanted)
            best = total if best is None else min(best, total)
    return best


def budget_message(
    ctx: CostContext,
    request: PlanRequest,
    budget_devices: int,
    cache: TableCache | None,
    engines: tuple[str, ...] | None = None,
) -> str:
    """Why the budget is too small, naming the smallest budget that works (found by costing; with
    `engines`, the smallest at which one of them runs a deployment)."""
    hw = ctx.hw
    if engines is None:
        smallest = smallest_deployment_devices(ctx, request, cache)
    else:
        each = [smallest_deployment_devices(ctx, replace(request, engine=e), cache) for e in engines]
        smallest = min((n for n in each if n is not None), default=None)
    where = f"{ctx.model.name} on {hw.name}"
    if smallest is None:
        return _nothing_fits(ctx, where)
    cards = math.ceil(smallest / hw.devices_per_card - 1e-9)
    return _counted_over(
        f"card budget: the smallest deployment of {where} that fits HBM and meets the SLOs needs "
        f"{smallest} devices ({cards} cards); --max-cards {request.max_cards:g} allows {budget_devices} "
        f"devices. Raise --max-cards to at least {cards}.",
        engines,
    )


def _nothing_fits(ctx: CostContext, where: str) -> str:
    """No instance size works: HBM left no room at the request's --hbm-utilization, or the SLOs and HBM together."""
    gib = 2.0**30
    hw, util = ctx.hw, ctx.hbm_utilization
    reserved = hw.memory.runtime_reserve.value + hw.memory.comm_buffers.value
    if hw.hbm_bytes * util <= reserved:
        least = math.ceil(reserved / hw.hbm_bytes * 100 + 1e-9) / 100
        return (
            f"HBM: at --hbm-utilization {util:g} each {hw.name} device may fill {hw.hbm_bytes * util / gib:.1f} GiB, "
            f"no more than its runtime reserve and communication buffers ({reserved / gib:.2f} GiB): no room for "
            f"weights or KV cache at any instance size. Raise --hbm-utilization to at least {least:g} (default "
            f"{DEFAULT_HBM_UTILIZATION:g})."
        )
    raise_util = (
        f", raise --hbm-utilization (now {util:g}; default {DEFAULT_HBM_UTILIZATION:g})"
        if util < DEFAULT_HBM_UTILIZATION
        else ""
    )
    return (
        f"card budget: no deployment of {where} fits HBM and meets the SLOs at any instance size up to "
        f"{DENSE_NODE_COUNTS} nodes; relax --tpot-ms/--ttft-ms{raise_util} or use a smaller quantization."
    )


def why_infeasible(
    contexts: PhaseContexts,
    request: PlanRequest,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    budget_devices: int,
    cache: TableCache | None,
    feasible: Feasible,
    engines: tuple[str, ...] | None = None,
) -> str:
    """`diagnose_infeasible` (which re-checks the request with one flag changed through
    `feasible`, with the tables of `cache`), with the card-budget case naming the smallest budget
    that works (with `engines`, that one of them runs); for phases on two machines, what binds on which."""
    if contexts.mixed:
        return _mixed_message(contexts, request, dspace, pspace)
    ctx = contexts.decode
    reason = diagnose_infeasible(ctx, request, dspace, pspace, budget_devices, feasible)
    if reason.startswith("card budget") and request.rate_per_s is None:
        return budget_message(ctx, request, budget_devices, cache, engines)
    return _counted_over(reason, engines)


def _counted_over(reason: str, engines: tuple[str, ...] | None) -> str:
    """A diagnosis naming values (at least, at most) found over the plans `engines` run: says so."""
    if engines is None or (" at least " not in reason and " at most " not in reason):
        return reason
    return (
        f"{reason} (Values counted over the plans a serving engine runs, as --engine auto ranks; "
        "--engine none counts every plan.)"
    )


def _mixed_message(
    contexts: PhaseContexts, request: PlanRequest, dspace: PhaseSpace | None, pspace: PhaseSpace | None
) -> str:
    """Why no deployment of decode on one machine and prefill on another works."""
    for space, ctx, label, slo in (
        (dspace, contexts.decode, "decode", f"TPOT <= {request.slo.tpot_ms} ms"),
        (pspace, contexts.prefill, "prefill", f"TTFT <= {request.slo.ttft_ms} ms"),
    ):
        if space is not None and not space.candidates and not space.tables and space.no_expert_layout:
            return (
                f"{label} on {ctx.hw.name}: no instance of {', '.join(map(str, space.no_expert_layout))} devices has "
                f"an expert layout with at most {request.max_redundant_experts} redundant copies "
                "(--max-redundant-experts); raise --max-redundant-experts or pin another size."
                if request.max_redundant_experts is not None
                else f"{label} on {ctx.hw.name}: {request.engine} runs no expert layout of an instance of "
                f"{', '.join(map(str, space.no_expert_layout))} devices; pin another size or plan for another --engine."
            )
        if space is not None and not space.candidates:
            return (
                f"{label} on {ctx.hw.name}: no instance of up to {max(space.sizes, default=0)} devices fits HBM "
                f"and meets {slo}; raise --max-{label}-cards, relax the SLO, or choose another --{label}-hardware."
            )
    if request.max_cost is not None:
        limit = f"--max-cost {request.max_cost:g}"
    elif request.max_decode_cards is not None or request.max_prefill_cards is not None:
        parts = [
            f"{flag} {v:g}"
            for flag, v in (
                ("--max-decode-cards", request.max_decode_cards),
                ("--max-prefill-cards", request.max_prefill_cards),
            )
            if v is not None
        ]
        limit = " and ".join(parts)
    else:
        limit = f"{request.max_cards:g} cards"
    want = f" at {request.rate_per_s:g} requests/s" if request.rate_per_s is not None else ""
    return (
        f"budget: no deployment of decode on {contexts.decode.hw.name} and prefill on {contexts.prefill.hw.name} "
        f"fits {limit}{want}; raise the budget (--max-cards, --max-decode-cards, --max-prefill-cards or "
        "--max-cost) or lower --rate."
    )
