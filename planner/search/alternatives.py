"""Runner-ups and alternatives: the next best distinct plans, and the best plan of each other
structure than rank 1's (disaggregated vs colocated, MTP on vs off, another decode EP size).

Rank 1 is the CP-SAT model's (planner.search.cpsat_model); every other plan comes from the exact
enumerator (planner.search.enumerate_deployments) over the same candidates, without rank 1's
choice. Plans that predict the same figures are one plan. An alternative whose candidates the
kept ones may not hold (the best of each size is kept over every MTP depth and EP size) draws
its candidates from the cost tables again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from planner.candidates.afd_candidates import AfdCandidate
from planner.candidates.colocated_candidates import ColocatedCandidate
from planner.candidates.phase_candidates import PhaseCandidate
from planner.search.candidate_spaces import PhaseSpace, colocated_space, decode_pool
from planner.search.contexts import PhaseContexts
from planner.search.deployment import Deployment, sort_key
from planner.search.enumerate_deployments import Question
from planner.search.plan_files import deployment_plan, plan_signature, scored_plan
from planner.search.request import PlanRequest
from planner.specs.plan import Plan


@dataclass
class Alternative:
    """The best plan of another structure than rank 1's (e.g. disaggregated instead of colocated)."""

    label: str
    plan: Plan | None  # None: no deployment of that structure fits (`reason` says what)
    rank: int | None  # its rank in the list above, if it is there
    reason: str | None = None
    unsearched: bool = False  # no plan because the search's engine does not run this structure here
    deployment: Deployment | None = None  # the search's choice behind `plan` (its objective's integers)


def distinct_plans(
    request: PlanRequest,
    contexts: PhaseContexts,
    question: Question,
    first: Deployment,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    coloc: list[ColocatedCandidate],
    afd: list[AfdCandidate] | None = None,
) -> tuple[list[Plan], list[Deployment], bool]:
    """The `top` best distinct plans in order: rank 1 as CP-SAT chose it, the rest by exact
    enumeration without rank 1's choice; plans that predict the same are one. Also whether fewer
    than `top` exist."""
    d = dspace.candidates if dspace else []
    p = pspace.candidates if pspace else []
    want = 2 * request.top
    while True:
        rest = question.ranked(d, p, coloc, want, frozenset({first.choice}), afd)
        plans: list[Plan] = []
        deps: list[Deployment] = []
        seen: set[str] = set()
        # rank 1 is CP-SAT's; if it stopped short of a proof (time limit), an enumerated deployment
        # that beats it goes first (stable: among equals CP-SAT's choice stays first)
        for dep in sorted([first, *rest], key=lambda dp: sort_key(dp, question.objective, 0)):
            plan = scored_plan(
                deployment_plan(request, contexts, dep, dspace, pspace, len(plans) + 1, coloc, afd), contexts
            )
            sig = plan_signature(plan)
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


def alternatives(
    request: PlanRequest,
    contexts: PhaseContexts,
    question: Question,
    best_dep: Deployment,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    coloc: list[ColocatedCandidate],
    plans: list[Plan],
    afd: list[AfdCandidate] | None = None,
) -> list[Alternative]:
    """The best plan of each structure rank 1 does not have: disaggregated vs colocated, AFD vs
    not, MTP on vs off, another EP size of the decode instances (each exact over its candidates,
    same budget), with its rank in `plans` if it is there."""
    ctx = contexts.decode
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
    if dspace and pspace and (coloc or (request.colocated and not contexts.mixed)):
        if best_dep.colocated is not None:
            if request.disaggregated:  # (--structure colocated leaves them out: no row, as --structure pd has none)
                structures.append(("disaggregated", anything, True, False, None))
        else:
            structures.append(("colocated", anything, False, True, None))
    depths = request.mtp_tokens if request.mtp_tokens is not None else (0, 1)
    if (
        head is not None
        and ctx.model.mtp_layers
        and ctx.model.draft is None
        and any((k > 0) != (head.k > 0) for k in depths)
    ):
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
    if any(s.roles[0] == "afd" for s in question.structures):
        out.append(_afd_alternative(request, contexts, question, best_dep, dspace, pspace, coloc, plans, afd or []))
    for label, keep_decode, disagg, colocated, drawn in structures:
        d_pool, c_pool = d_all, coloc
        if drawn is not None and dspace is not None:
            d_pool = decode_pool(ctx, request, dspace, drawn)
            if coloc and pspace is not None:
                # (the size bounds then come from the decode candidates of the same structure);
                # a colocated instance is the answer only if it reaches the best disaggregated one
                floor = question.kth_ratio([c for c in d_pool if keep_decode(c)], p_all, 1)
                c_pool = colocated_space(
                    ctx, request, replace(dspace, candidates=d_pool), pspace, 1, floor_per_device=floor, **drawn
                )
        d = [c for c in d_pool if keep_decode(c)] if disagg else []
        p = list(p_all) if disagg else []
        cc = [c for c in c_pool if keep_decode(c.decode)] if colocated else []
        none_fits = "none fits: no configuration of it meets the SLOs and HBM"
        if (dspace and not d and not cc) or (pspace and not p and not cc):
            out.append(Alternative(label, None, None, none_fits))
            continue
        found = question.ranked(d, p, cc, 1)
        if not found:
            out.append(Alternative(label, None, None, "none fits: no deployment of it within the card budget"))
            continue
        ds = replace(dspace, candidates=d) if dspace else None
        ps = replace(pspace, candidates=p) if pspace else None
        plan = scored_plan(deployment_plan(request, contexts, found[0], ds, ps, 1, cc), contexts)
        out.append(Alternative(label, plan, _rank_in(plans, plan), deployment=found[0]))
    return out


def _afd_alternative(
    request: PlanRequest,
    contexts: PhaseContexts,
    question: Question,
    best_dep: Deployment,
    dspace: PhaseSpace | None,
    pspace: PhaseSpace | None,
    coloc: list[ColocatedCandidate],
    plans: list[Plan],
    afd: list[AfdCandidate],
) -> Alternative:
    """The best AFD plan when rank 1 is not one, else the best plan without AFD (same budget)."""
    d = dspace.candidates if dspace else []
    p = pspace.candidates if pspace else []
    if best_dep.afd is None:
        label = "best AFD"
        if not afd:
            return no_afd_alternative(request, contexts)
        found = question.ranked([], p, [], 1, afd=afd)
        ds: PhaseSpace | None = replace(dspace, candidates=[]) if dspace else None
        dep_afd: list[AfdCandidate] | None = afd
        cc: list[ColocatedCandidate] = []
    else:
        label = "best non-AFD"
        if not request.disaggregated and not request.colocated:
            return Alternative(
                label, None, None, "not searched: --structure afd leaves out colocated and pd", unsearched=True
            )
        found = question.ranked(d, p, coloc, 1)
        ds, dep_afd, cc = dspace, None, coloc
    if not found:
        return Alternative(label, None, None, "none fits: no deployment of it within the card budget")
    plan = scored_plan(deployment_plan(request, contexts, found[0], ds, pspace, 1, cc, dep_afd), contexts)
    return Alternative(label, plan, _rank_in(plans, plan), deployment=found[0])


NO_AFD_FITS = "none fits: no AFD configuration meets the SLOs and HBM"
NO_ENGINE_RUNS_AFD = "none fits: no engine runs AFD of this model on this machine"


def no_afd_alternative(request: PlanRequest, contexts: PhaseContexts) -> Alternative:
    """The "best AFD" row of a search that found no AFD plan: its engine runs no AFD of this model on
    this machine (`unsearched`, with the engine's reason), or no AFD configuration meets the SLOs and HBM."""
    if request.engine is not None:
        from planner.engines.profiles import afd_refusal, load_profile

        ctx = contexts.decode
        why = afd_refusal(load_profile(request.engine).capabilities.afd, ctx.hw.name, ctx.model.architectures)
        if why is not None:
            return Alternative("best AFD", None, None, f"none fits: {request.engine}: {why}", unsearched=True)
    return Alternative("best AFD", None, None, NO_AFD_FITS)


def _rank_in(plans: list[Plan], plan: Plan) -> int | None:
    sig = plan_signature(plan)
    return next((i + 1 for i, p in enumerate(plans) if plan_signature(p) == sig), None)


def _structure(plan: Plan) -> dict[str, object]:
    """What the alternatives tell apart in a plan: colocated or not, AFD or not, and of its decode
    instances (colocated or disaggregated; none for AFD, as the search's) MTP on or off and the EP size."""
    head = None if plan.is_afd else plan.decode_phase
    return {
        "colocated": plan.is_colocated,
        "afd": plan.is_afd,
        "mtp": None if head is None else head.mtp_tokens > 0,
        "ep": None if head is None or head.moe is None else head.moe.ep,
    }


def _dimension(label: str) -> str | None:
    if label in ("colocated", "disaggregated"):
        return "colocated"
    if label in ("best AFD", "best non-AFD"):
        return "afd"
    if label in ("with MTP", "without MTP"):
        return "mtp"
    if label.startswith("decode EP other than "):
        return "ep"
    return None


def _label(dimension: str, leader: dict[str, object]) -> str | None:
    """The alternative's label for what the leader does not have along `dimension`."""
    if dimension == "colocated":
        return "disaggregated" if leader["colocated"] else "colocated"
    if dimension == "afd":
        return "best non-AFD" if leader["afd"] else "best AFD"
    if dimension == "mtp":
        return None if leader["mtp"] is None else ("without MTP" if leader["mtp"] else "with MTP")
    return None if leader["ep"] is None else f"decode EP other than {leader['ep']}"


def for_leader(alternatives: list[Alternative], leader: Plan, best: Plan, rows: list[Plan]) -> list[Alternative]:
    """The alternatives of the search's best plan `best` (each the best plan of a structure `best` does not
    have), made rank 1's when the near-tie order puts another plan, `leader`, first: where the two differ
    along a row's structure (MTP on or off, the decode EP size, colocated or not, AFD or not), the row is
    the leader's other structure, and its plan the first of `rows` (the list in its order, `best` among
    them) of that structure: `best` belongs to it, and the best plan of all is the best of every structure
    it belongs to, so none beyond its near-ties can be better. Where the two agree, the search's row
    stands (so with `leader` the search's best every row does). A row along which the leader has no value
    (MTP and EP rows for an AFD leader) is dropped."""
    mine, its = _structure(leader), _structure(best)
    out = []
    for alt in alternatives:
        dimension = _dimension(alt.label)
        if dimension is None or mine[dimension] == its[dimension]:
            out.append(alt)
            continue
        label = _label(dimension, mine)
        if label is not None:
            other = [p for p in rows if _structure(p)[dimension] not in (None, mine[dimension])]
            out.append(Alternative(label, other[0] if other else best, None))
    return out
