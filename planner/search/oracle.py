"""Exhaustive enumerators: the oracles the CP-SAT model is checked against on small spaces.

`best_deployment` tries every structure, choice of candidates and instance count within the
budget's caps (one machine or two, any weights); `best_phase_ratio` tries every module-layout
combination, MTP depth or micro-batch count, and concurrency or batch of one instance size with
plain loops over the integer tables. Neither uses numpy broadcasting, the count solver or the
CP-SAT model, so they check all three.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

from planner.candidates.phase_candidates import (
    EMITTED_SCALE,
    TpotLimitUs,
    overlapped_step_us,
    prefill_forward_us,
    prefill_ttft_us,
    tpot_limit_at,
)
from planner.candidates.tables import MODULES, IntTables, PhaseTables
from planner.search.budget import Budget
from planner.search.deployment import Objective, Offer, Role, Structure


def best_deployment(
    structures: list[Structure],
    offers: dict[Role, list[Offer]],
    budget: Budget,
    objective: Objective,
) -> Fraction | None:
    """The best value over every structure, choice of candidates and instance counts within the
    budget's caps: the most requests/s per weight, or with a target rate the least weight that
    serves it (as a Fraction; None if nothing fits)."""
    best: Fraction | None = None
    for s in structures:
        lists = [offers.get(r, []) for r in s.roles]
        for choice in itertools.product(*lists):
            ranges = [range(1, max(0, budget.most_instances(o)) + 1) for o in choice]
            for counts in itertools.product(*ranges):
                if any(
                    sum(n * o.uses[k] for n, o in zip(counts, choice, strict=True)) > limit
                    for k, limit in enumerate(budget.limits)
                ):
                    continue
                rate = min(n * o.rate_milli for n, o in zip(counts, choice, strict=True))
                weight = sum(n * o.weight for n, o in zip(counts, choice, strict=True))
                if rate <= 0 or weight <= 0:
                    continue
                if objective.kind == "target":
                    assert objective.target_rate_milli is not None
                    if rate >= objective.target_rate_milli and (best is None or weight < best):
                        best = Fraction(weight)
                elif objective.kind == "total":
                    if best is None or rate > best:
                        best = Fraction(rate)
                elif best is None or Fraction(rate, weight) > best:
                    best = Fraction(rate, weight)
    return best


def best_phase_ratio(
    t: PhaseTables,
    ints: IntTables,
    slo_us: TpotLimitUs,
    layers: int = 1,
    overlap_efficiency: float = 1.0,
    overlap_factor: int = 0,
    max_step_us: int | None = None,
) -> Fraction:
    """Best throughput ratio (num/den as in planner.candidates) of one instance size, by loops.
    Decode tables of two micro-batches hide `overlap_factor` millionths of the shorter of their
    communication and compute (planner.candidates.phase_candidates.overlapped_step_us), and hold
    at least one sequence a device per micro-batch (planner.specs.plan.fits_micro_batches);
    `max_step_us` bounds the decode step (the ITL limit)."""
    best = Fraction(0)
    ranges = [range(t.n_options(mod)) for mod in MODULES]
    runnable = t.options.combo_ok  # pairs that cannot run together (a split shared expert, an engine)
    for combo in itertools.product(*ranges):
        if runnable is not None and not runnable[combo]:
            continue
        for j, k in enumerate(t.k_values):
            for xi, x in enumerate(t.x_values.tolist()):
                hbm = sum(int(ints.hbm_mib[mod][o, j, xi]) for mod, o in zip(MODULES, combo, strict=True))
                if hbm > ints.hbm_capacity_mib:
                    continue
                if t.phase == "decode":
                    e = int(t.emitted[j] * EMITTED_SCALE + 1e-9)
                    step = sum(int(ints.time_us[mod][o, j, xi]) for mod, o in zip(MODULES, combo, strict=True))
                    step += int(ints.const_us[j, xi])
                    if t.micro_batches > 1 and overlap_factor and ints.cover_us:
                        comm = sum(int(ints.comm_us[mod][o, j, xi]) for mod, o in zip(MODULES, combo, strict=True))
                        cover = sum(int(ints.cover_us[mod][o, j, xi]) for mod, o in zip(MODULES, combo, strict=True))
                        step = int(overlapped_step_us(step, comm, cover, overlap_factor))
                    if (t.micro_batches > 1 and x < t.micro_batches) or (
                        max_step_us is not None and step > max_step_us
                    ):
                        continue
                    limit = tpot_limit_at(slo_us, j)
                    if limit is not None and step * EMITTED_SCALE > limit * e:
                        continue
                    best = max(best, Fraction(x) * e / step)  # x: whole, or k/tp with tp a power of two
                else:
                    c = sum(int(ints.time_us[mod][o, 0, xi]) for mod, o in zip(MODULES, combo, strict=True))
                    mm = sum(int(ints.comm_us[mod][o, 0, xi]) for mod, o in zip(MODULES, combo, strict=True))
                    f = sum(int(ints.fixed_us[mod][o, 0, 0]) for mod, o in zip(MODULES, combo, strict=True))
                    forward = int(prefill_forward_us(c, mm, f, k, layers, overlap_efficiency))
                    kv = int(ints.const_us.reshape(-1)[0])
                    own = int(ints.forwards["attention"][combo[0], xi]) if ints.forwards else 1
                    if slo_us is not None and prefill_ttft_us(forward, kv, own) > slo_us:
                        continue
                    if own > 1 and not t.options.prompt_over_forwards:
                        continue  # the engine prefills a prompt whole on its rank
                    best = max(best, Fraction(x, forward))
    return best
