"""`moeplan plan` end to end: the search's steps, called in order.

1. contexts: the cost context of each phase (one machine, or prefill on one and decode on
   another), planner.search.contexts;
2. budget: what a deployment may use and what one instance weighs, planner.search.budget;
3. candidate spaces: instance sizes, layouts, cost tables and the best configurations of every
   size, and colocated instances, planner.search.candidate_spaces;
4. the deployment: the structure, a candidate per role and the instance counts, proven best by
   the CP-SAT model (planner.search.cpsat_model) from the exact enumerator's best
   (planner.search.enumerate_deployments, which counts instances with planner.search.
   instance_counts);
5. runner-ups and the best plan of each other structure, planner.search.alternatives;
6. plan files scored by the cost model and validated without the solver, planner.search.
   plan_files.

When nothing is feasible, planner.search.diagnose names the constraint that binds and the nearest
feasible point, which it finds by re-checking the request with one flag changed (`is_feasible`:
steps 1-3 and the exact enumeration of deployments).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction

from planner.candidates.afd_candidates import AfdCandidate
from planner.candidates.colocated_candidates import ColocatedCandidate
from planner.candidates.restrictions import Restriction
from planner.errors import BadInputError, InfeasibleError
from planner.search.alternatives import Alternative, alternatives, distinct_plans
from planner.search.budget import Budget, request_budget
from planner.search.candidate_spaces import (
    PhaseSpace,
    Progress,
    afd_space,
    best_per_size,
    candidate_spaces,
    colocated_space,
    space_restrictions,
)
from planner.search.contexts import PhaseContexts, phase_contexts
from planner.search.cpsat_model import DeploymentModel
from planner.search.deployment import COLOCATED, Deployment, Objective, structures_for
from planner.search.diagnose import budget_message, why_infeasible
from planner.search.enumerate_deployments import Question, rank_deployments
from planner.search.instance_counts import most_rate_milli
from planner.search.plan_files import deployment_plan, scored_plan
from planner.search.request import PlanRequest
from planner.search.table_cache import TableCache
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

__all__ = ["Alternative", "SearchOutcome", "TableCache", "is_feasible", "run_search"]


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
    afd: list[AfdCandidate] = field(default_factory=list)  # AFD candidates `deployments` index
    exhausted: bool = False  # fewer than `top` distinct deployments exist (the list is all of them)
    alternatives: list[Alternative] = field(default_factory=list)  # best plan of each other structure
    # --engine auto (planner.search.runnable): per plan, what each engine cannot run of it (empty: runs it);
    # the free search's best plan when no engine runs it, with each engine's problems
    runs_on: list[dict[str, list[str]]] = field(default_factory=list)
    beyond: Plan | None = None
    beyond_problems: dict[str, list[str]] = field(default_factory=dict)
    engine_mode: str = "none"  # "auto", "none", or the engine searched
    engine_failures: dict[str, str] = field(default_factory=dict)  # --engine auto: engines with no feasible plan
    variants: list[list[Plan]] = field(default_factory=list)  # per plan: variants folded under it (ranking.rows)
    proven_first: Plan | None = None  # the search's best plan, when the near-tie order put another first
    space: list[Restriction] = field(default_factory=list)  # the named limits the search ran under
    near_tie_open: int = 0  # plan: plans fetched when more near-ties of the last row lay past them (0: none did)
    weight_unit: str = "device"  # what the objective weighs a device in (planner.search.budget.Budget.unit)


def question_of(request: PlanRequest, contexts: PhaseContexts, budget: Budget) -> Question:
    """The deployment question of a request: its structures (colocated instances need one
    machine), budget and objective."""
    structures = structures_for(
        request.phase,
        request.colocated and not contexts.mixed,
        request.disaggregated,
        request.afd and not contexts.mixed,
    )
    objective = Objective.for_rate(request.rate_per_s, request.objective == "total")
    return Question(structures, budget, objective, request.workload.output_tokens)


def refuse_engine(engine: str, contexts: PhaseContexts, quantization: str) -> None:
    """BadInputError (exit 2) when `engine` runs no plan on the request's machines in its number format:
    planning for it there could only list plans it cannot launch."""
    from planner.engines.profiles import engine_refusal

    why = engine_refusal(engine, [contexts.decode.hw, contexts.prefill.hw], quantization)
    if why is not None:
        raise BadInputError(
            f"--engine {engine}: {why}; plan for another engine, --engine none (every plan, whether an engine runs "
            "it or not), or another --hardware / --quantization."
        )


def run_search(
    request: PlanRequest,
    progress: Progress | None = None,
    cache: TableCache | None = None,
    diagnose_engines: tuple[str, ...] | None = None,
) -> SearchOutcome:
    """Plan a deployment for `request` (see the module docstring); `cache` reuses cost tables.
    `diagnose_engines` (--engine auto's free search): when nothing is feasible, the values the
    diagnosis names are those at which one of these engines runs a plan, not any plan."""
    start = time.perf_counter()
    contexts = phase_contexts(request)
    if request.engine is not None:
        refuse_engine(request.engine, contexts, request.quantization)
    budget = request_budget(request, contexts)
    question = question_of(request, contexts, budget)
    # the diagnosis of an infeasible request re-checks it with one flag changed: its tables are
    # these (a cache for this search when the caller gave none)
    cache = cache if cache is not None else TableCache()

    # the K best distinct deployments use at most K configurations of any one instance size
    spaces = candidate_spaces(contexts, request, budget, request.top, progress, cache)
    if spaces is None:
        raise InfeasibleError(budget_message(contexts.decode, request, budget.limits[0], cache, diagnose_engines))
    dspace, pspace = spaces

    def feasible(changed: PlanRequest) -> bool:
        if diagnose_engines is None:
            return is_feasible(changed, cache)
        return any(is_feasible(replace(changed, engine=engine), cache) for engine in diagnose_engines)

    def infeasible() -> InfeasibleError:
        return InfeasibleError(
            why_infeasible(contexts, request, dspace, pspace, budget.limits[0], cache, feasible, diagnose_engines)
        )

    d_cands = dspace.candidates if dspace else []
    p_cands = pspace.candidates if pspace else []

    # the AFD and the colocated floors both start from this ranking of every decode-prefill pair:
    # ranked once (the candidate lists do not change in between)
    @functools.cache
    def kth_without_others() -> Fraction:
        return question.kth_ratio(d_cands, p_cands, request.top)

    afd_cands: list[AfdCandidate] = []
    if any(s.roles[0] == "afd" for s in question.structures):
        afd_floor_of = afd_floor(question, p_cands, kth_without_others, request.alternatives)
        afd_cands = afd_space(contexts.decode, request, budget, request.top, afd_floor_of, cache)
    if (dspace and not d_cands and not afd_cands) or (pspace and not p_cands):
        raise infeasible()
    coloc: list[ColocatedCandidate] = []
    if dspace and pspace and COLOCATED in question.structures:
        # a colocated instance matters only if it reaches the `top`-th best deployment without
        # colocated ones; the alternatives need the best colocated plan whatever its value: the best
        # instance of each size searched on its own (keep 1, pruned by the best found so far), far
        # cheaper than the `top` best of every size
        coloc_floor = kth_without_others()
        coloc = colocated_space(contexts.decode, request, dspace, pspace, request.top, floor_per_device=coloc_floor)
        if request.alternatives:
            coloc = _joined(coloc, colocated_space(contexts.decode, request, dspace, pspace, 1))
    if question.objective.kind == "target" and not _rate_reachable(question, d_cands, p_cands, afd_cands):
        raise infeasible()

    # CP-SAT needs only the best configuration of each size (it dominates the others of that
    # size: same devices, more throughput); the others serve the exact runner-up enumeration
    d_pick, p_pick, c_pick = best_per_size(d_cands), best_per_size(p_cands), best_per_size(coloc)
    a_pick = best_per_size(afd_cands)
    offers = question.offers(
        [d_cands[i] for i in d_pick],
        [p_cands[i] for i in p_pick],
        [coloc[i] for i in c_pick],
        [afd_cands[i] for i in a_pick],
    )
    structures = list(question.structures)
    start_at = rank_deployments(structures, offers, budget, question.objective, 1)
    model = DeploymentModel(
        structures, offers, budget, question.objective, request.settings, start_at[0] if start_at else None
    )
    if progress:
        progress("CP-SAT: choosing configurations and instance counts", 1.0)
    # --time-limit bounds the solves together, from here: the cost tables built above are not limited by it
    deadline = time.perf_counter() + request.settings.time_limit_s
    result = model.solve(deadline)  # rank 1, proven by CP-SAT; the others enumerated exactly
    if result.deployment is None:
        if result.status == "UNKNOWN":
            raise InfeasibleError(
                f"no deployment found within the time limit ({request.settings.time_limit_s:g} s); raise --time-limit."
            )
        raise infeasible()
    first = result.deployment.remapped({"decode": d_pick, "prefill": p_pick, "colocated": c_pick, "afd": a_pick})

    if result.status == "INTERRUPTED" or not request.alternatives and request.top == 1:
        plans = [scored_plan(deployment_plan(request, contexts, first, dspace, pspace, 1, coloc, afd_cands), contexts)]
        deployments, exhausted, others = [first], False, []
    else:
        plans, deployments, exhausted = distinct_plans(
            request, contexts, question, first, dspace, pspace, coloc, afd_cands
        )
        others = (
            alternatives(request, contexts, question, deployments[0], dspace, pspace, coloc, plans, afd_cands)
            if request.alternatives
            else []
        )
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
        model=contexts.decode.model,
        hw=contexts.decode.hw if request.phase != "prefill" else contexts.prefill.hw,
        deployments=deployments,
        colocated=coloc,
        afd=afd_cands,
        exhausted=exhausted,
        alternatives=others,
        space=space_restrictions(request, contexts, dspace, pspace),
        weight_unit=budget.unit,
    )


def _joined(listed: list[ColocatedCandidate], best: list[ColocatedCandidate]) -> list[ColocatedCandidate]:
    """The colocated candidates of both searches, each once, in `colocated_space`'s order (by size, then rate)."""
    seen = {_colocated_key(c) for c in listed}
    out = listed + [c for c in best if _colocated_key(c) not in seen]
    return sorted(out, key=lambda c: (c.devices, -c.rate_milli, c.decode.key()))


def _colocated_key(c: ColocatedCandidate) -> tuple:
    return (c.devices, c.decode.key(), c.batch_requests, c.micro_batches, c.chunk_tokens, c.rate_milli)


def afd_floor(
    question: Question, p_cands: list, kth_without_afd: Callable[[], Fraction], alternatives: bool = True
) -> Callable[[list[AfdCandidate]], float] | None:
    """The output tokens/s per device an AFD instance must exceed to matter (planner.search.
    candidate_spaces.afd_space): to enter the `top` best deployments (the `top`-th without AFD, whose
    ratio `kth_without_afd()` gives: Question.kth_ratio of the decode and prefill candidates) or,
    with `alternatives`, to be the best AFD one (the alternatives show it), whichever is lower. A deployment of an AFD
    instance serving r requests/s per device and prefill instances cannot beat the matched
    fractional ratio 1 / (w / r + q), q the least weight per request/s of a prefill candidate (w the
    weight of a device): the floor is that bound solved for r. None (no pruning) with a target rate
    or --objective total, where deployments are not ranked by a ratio."""
    if question.objective.kind != "ratio":
        return None
    w = question.budget.weight_per_device[question.budget.pool("afd")]
    out_tokens = question.output_tokens
    offers = question.offers([], p_cands, [])["prefill"]
    q = min((Fraction(o.weight, o.rate_milli) for o in offers if o.rate_milli > 0), default=None)
    with_prefill = any(s.roles == ("afd", "prefill") for s in question.structures)
    if with_prefill and q is None:
        return None
    others = kth_without_afd()
    # `found` only grows (afd_space appends each split's candidates), and a deployment uses one
    # AFD candidate: the best over all of them is the best of the best over each addition
    counted = [0]  # candidates of `found` already ranked
    best = [Fraction(0)]  # the best AFD deployment's ratio among them

    def floor(found: list[AfdCandidate]) -> float:
        if not alternatives:
            return threshold(others)
        added = found[counted[0] :]
        counted[0] = len(found)
        best_added = question.ranked([], p_cands, [], 1, afd=added) if added else []
        if best_added:
            best[0] = max(best[0], Fraction(best_added[0].rate_milli, best_added[0].weight))
        return threshold(min(others, best[0]))

    def threshold(value: Fraction) -> float:
        """The tokens/s per device of an AFD instance whose deployment's ratio bound is `value`."""
        if value <= 0:
            return 0.0
        per_request = 1 / value - (q if with_prefill and q is not None else 0)  # weight per request/s of the AFD side
        if per_request <= 0:
            return 0.0
        # requests/s (thousandths) per device = w / per_request; tokens/s per device = that x output / 1000
        return float(w / per_request) * out_tokens / 1000.0

    return floor


def _rate_reachable(question: Question, d_cands: list, p_cands: list, afd_cands: list | None = None) -> bool:
    """False when no deployment within the budget could serve the target rate even with the whole
    budget on one phase (a quick bound: the diagnosis then names what works)."""
    offers = question.offers(d_cands, p_cands, [], afd_cands)
    decoding = offers["decode"] + offers["afd"]
    caps = [most_rate_milli(decoding, question.budget)] if decoding else []
    caps += [most_rate_milli(offers["prefill"], question.budget)] if p_cands else []
    assert question.objective.target_rate_milli is not None
    return bool(caps) and question.objective.target_rate_milli <= min(caps)


def is_feasible(request: PlanRequest, cache: TableCache | None = None) -> bool:
    """Whether `run_search` finds a deployment for `request`, without the solver or the plans:
    the same candidate spaces (one configuration per size is enough to exist) and the exact
    enumeration of deployments, which has a deployment exactly when the CP-SAT model has one.
    The diagnosis re-checks a request with one flag changed this way. AFD instances count when the
    request searches them (every split, no floor: one candidate of any is enough). Single-machine
    requests only (a mixed request's diagnosis names its budget instead)."""
    if request.is_mixed:
        raise ValueError("is_feasible: a mixed-hardware request is diagnosed by its budget")
    contexts = phase_contexts(request)
    budget = request_budget(request, contexts)
    question = question_of(request, contexts, budget)
    spaces = candidate_spaces(contexts, request, budget, 1, None, cache)
    if spaces is None:
        return False
    dspace, pspace = spaces
    if pspace and not pspace.candidates:
        return False
    d = dspace.candidates if dspace else []
    p = pspace.candidates if pspace else []
    if dspace is None or d:  # prefill-decode and colocated deployments need decode candidates when searched
        if question.ranked(d, p, [], 1):
            return True
        if dspace and pspace and COLOCATED in question.structures:
            coloc = colocated_space(contexts.decode, request, dspace, pspace, 1)
            if question.ranked([], [], coloc, 1):
                return True
    if not any(s.roles[0] == "afd" for s in question.structures):
        return False
    # AFD instances (with prefill instances feeding them), as run_search costs them, without its floor
    afd = afd_space(contexts.decode, request, budget, 1, None, cache)
    return bool(afd) and bool(question.ranked(d, p, [], 1, afd=afd))
