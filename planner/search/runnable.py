"""`moeplan plan`'s default: only plans that at least one serving engine runs (`--engine auto`).

The engines' capabilities differ (planner/engines/data): a plan is runnable when one engine runs
every field of it. The search over what some engine runs is the union of the engines' own
searches: each engine's search is proven best over what that engine runs (CP-SAT), so the best of
their best plans is the best runnable plan, and the K best runnable plans are the K best of their
K best lists (a plan two engines run appears in both: once here). Every plan carries which
engines run it; the free search's best plan (`--engine none`) is looked up too, and when no engine
runs it, it is kept to be shown below the list, priced against rank 1.
"""

from __future__ import annotations

import dataclasses
import math
import time

from planner.engines.profiles import ENGINES, engine_refusal, model_engines_that_run
from planner.errors import InfeasibleError
from planner.search.alternatives import NO_AFD_FITS, NO_ENGINE_RUNS_AFD
from planner.search.candidate_spaces import PhaseSpace, PinnedSizeRefused, Progress
from planner.search.deployment import Deployment, Objective, counts_key
from planner.search.forked import can_fork, end_pool, flush_table_store, fork_pool
from planner.search.plan_files import plan_signature
from planner.search.plan_search import Alternative, SearchOutcome, run_search
from planner.search.request import PlanRequest
from planner.search.table_cache import TableCache
from planner.specs.plan import Plan

AUTO = "auto"
NONE = "none"


def engine_problems(plan: Plan, outcome: SearchOutcome) -> dict[str, list[str]]:
    """For every engine, what it cannot run of `plan` (empty: it runs the plan), the model's
    architectures included (an engine's AFD registers some model classes only), as the engines line,
    whatif's row and --emit check it."""
    return model_engines_that_run(plan, outcome.hw, outcome.model)


def engines_refused(request: PlanRequest) -> dict[str, str]:
    """The engines that run no plan at all on the request's machines in its number format, each with why
    (planner.engines.profiles.engine_refusal): their searches are skipped."""
    from planner.specs.catalog import load_hardware

    machines = [load_hardware(name) for name in sorted({request.decode_hw_name, request.prefill_hw_name})]
    out = {}
    for engine in ENGINES:
        why = engine_refusal(engine, machines, request.quantization)
        if why is not None:
            out[engine] = why
    return out


def _rank_key(dep: Deployment | None, request: PlanRequest) -> tuple:
    """The search's own sort key of a plan's deployment (planner.search.deployment.counts_key: the
    budget's weights and the objective are the request's, whatever the engine), so the merged list
    is in the order each engine's search proved."""
    if dep is None:
        return (math.inf,)
    objective = Objective.for_rate(request.rate_per_s, request.objective == "total")
    return counts_key(dep.rate_milli, dep.weight, objective, 0)


def run_runnable(
    request: PlanRequest,
    fetch: int,
    progress: Progress | None = None,
    cache: TableCache | None = None,
    jobs: int = 1,
) -> SearchOutcome:
    """The `fetch` best plans some engine runs (module docstring), with `runs_on` for each, and the
    free search's best plan in `beyond` when no engine runs it. InfeasibleError when no engine's
    search finds a deployment (the first engine's diagnosis, with each engine's reason). `jobs`: the
    searches run at once (`searched`); the result does not depend on it."""
    start = time.perf_counter()
    cache = cache if cache is not None else TableCache()
    outcomes: dict[str, SearchOutcome] = {}
    refused = engines_refused(request)
    failures = dict(refused)
    running = tuple(e for e in ENGINES if e not in refused)  # the engines searched below
    if not running:
        # no engine runs anything on these machines in this format: the free search, each plan's row
        # saying that no engine runs it and each engine's line why
        unrestricted = run_search(dataclasses.replace(request, engine=None, top=fetch), progress, cache)
        return dataclasses.replace(
            unrestricted,
            request=request,
            runs_on=[engine_problems(p, unrestricted) for p in unrestricted.plans],
            engine_mode=AUTO,
            engine_failures=failures,
            seconds=time.perf_counter() - start,
        )
    interrupted = False
    pins: dict[str, PinnedSizeRefused] = {}  # engines whose rules refuse a pinned size (no layout runs it)
    free_request = dataclasses.replace(request, engine=None, top=1, alternatives=False)
    searches = [dataclasses.replace(request, engine=engine, top=fetch) for engine in running]
    results = searched([*searches, free_request], progress, cache, jobs, widest=len(searches))
    for engine, result in zip(running, results, strict=False):
        if result is None:  # interrupted before this engine's search ended (searched in parallel)
            interrupted = True
            break
        if isinstance(result, PinnedSizeRefused):
            pins[engine], failures[engine] = result, str(result).rstrip(".")
            continue
        if isinstance(result, InfeasibleError):
            failures[engine] = f"no feasible plan it runs ({str(result).rstrip('.')})"
            continue
        outcomes[engine] = result
        if result.status == "INTERRUPTED":  # Ctrl-C: the best so far, no further search
            interrupted = True
            break
    if interrupted and not outcomes:
        raise KeyboardInterrupt  # no engine's search had ended: nothing to show
    if not outcomes and len(pins) == len(running):
        # every engine that runs here refuses the pinned size: that, not the budget or the SLOs, is why
        first = next(iter(pins.values()))
        raise InfeasibleError(
            f"no serving engine runs {first.pin} ({'; '.join(exc.why for exc in pins.values())}); pin a size they "
            "run, or plan with --engine none."
        )
    if not outcomes:
        # infeasible for every engine: if the free search is infeasible too, its diagnosis is the
        # answer (the request, not the engines, is the problem); else the engines lack what it needs
        # (its diagnosis names the values at which some engine runs a plan: what --engine auto admits)
        free_outcome = results[-1]
        if not isinstance(free_outcome, SearchOutcome):  # its diagnosis names the values some engine runs
            free_outcome = run_search(free_request, None, cache, diagnose_engines=running)
        problems = engine_problems(free_outcome.plans[0], free_outcome)
        # (each problem's own advice, re-plan with --engine E, does not apply here: E runs none of it)
        lacks = "; ".join(f"{e}: {p[0].split('; re-plan')[0].rstrip('.')}" for e, p in problems.items() if p)
        raise InfeasibleError(
            "no serving engine runs a feasible plan: the best plan under these limits needs what every engine "
            f"lacks ({lacks}); --engine none lists it."
        )
    merged: list[tuple[tuple, str, Plan, Deployment]] = []
    seen: set[str] = set()
    for engine, outcome in outcomes.items():
        for i, plan in enumerate(outcome.plans):
            sig = plan_signature(plan)
            if sig in seen:
                continue
            seen.add(sig)
            merged.append((_rank_key(outcome.deployments[i], request), engine, plan, outcome.deployments[i]))
    merged.sort(key=lambda item: item[0])
    best_engine = merged[0][1]
    lead = outcomes[best_engine]
    plans = [p.model_copy(update={"rank": i}) for i, (_, _, p, _) in enumerate(merged[:fetch], start=1)]
    runs_on = [engine_problems(p, lead) for p in plans]
    beyond: Plan | None = None
    beyond_problems: dict[str, list[str]] = {}
    free: Plan | None = None
    if not interrupted and isinstance(results[-1], SearchOutcome):
        free = results[-1].plans[0]
    if free is not None:
        problems = engine_problems(free, lead)
        if all(problems.values()):
            beyond, beyond_problems = free, problems
    return dataclasses.replace(
        lead,
        request=request,  # as asked (the engines' searches each had their engine and a wider top)
        plans=plans,
        alternatives=_best_alternatives(lead, outcomes, plans, [e for e in failures if e not in refused]),
        optimal=not interrupted and all(o.optimal for o in outcomes.values()),
        # proven only when every engine's search is: else a plan was found, not proven best (FEASIBLE), even
        # where the lead engine's own search was proven
        status="INTERRUPTED"
        if interrupted
        else ("OPTIMAL" if all(o.optimal for o in outcomes.values()) else "FEASIBLE"),
        seconds=time.perf_counter() - start,
        solves=sum(o.solves for o in outcomes.values()),
        deployments=[dep for _, _, _, dep in merged[:fetch]],
        exhausted=all(o.exhausted for o in outcomes.values()) and len(plans) < fetch,
        runs_on=runs_on,
        beyond=beyond,
        beyond_problems=beyond_problems,
        engine_mode=AUTO,
        engine_failures=failures,
    )


def _best_alternatives(
    lead: SearchOutcome, outcomes: dict[str, SearchOutcome], plans: list[Plan], infeasible: list[str]
) -> list[Alternative]:
    """Rank 1's alternatives (the lead engine's labels, in its order), each the best plan of that label
    over every engine's search: the lead engine may not run a structure another engine runs (MindIE
    has no AFD: its "best AFD" is empty while vLLM-Ascend's is not), and a plan of the label from one
    engine is no worse an answer than the lead's. A label no engine fills keeps the lead's reason.
    `infeasible`: the engines whose search found no plan at all (their AFD was searched if they run it)."""
    best: dict[str, tuple[Alternative, SearchOutcome]] = {}
    for outcome in [lead, *(o for o in outcomes.values() if o is not lead)]:
        for alt in outcome.alternatives:
            held = best.get(alt.label)
            if (
                held is None
                or (alt.plan is not None and held[0].plan is None)
                or (
                    alt.plan is not None
                    and held[0].plan is not None
                    and _rank_key(alt.deployment, outcome.request) < _rank_key(held[0].deployment, held[1].request)
                )
            ):
                best[alt.label] = (alt, outcome)
    signatures = [plan_signature(p) for p in plans]
    out = []
    for alt in lead.alternatives:
        chosen = best[alt.label][0]
        if chosen.plan is None and chosen.label == "best AFD":
            chosen = _no_afd_alternative(chosen, outcomes, _afd_runners(lead.request, infeasible))
        rank = None
        if chosen.plan is not None and (sig := plan_signature(chosen.plan)) in signatures:
            rank = signatures.index(sig) + 1
        out.append(dataclasses.replace(chosen, rank=rank))
    return out


def _afd_runners(request: PlanRequest, engines: list[str]) -> list[str]:
    """Those of `engines` that run AFD of the request's model on its machine (each searched it)."""
    from planner.engines.profiles import afd_refusal, load_profile
    from planner.specs.catalog import load_hardware, load_model

    if not engines or request.decode_hardware is not None or request.prefill_hardware is not None:
        return []  # two machines: AFD is not searched
    hw, model = load_hardware(request.hardware), load_model(request.model)
    return [e for e in engines if afd_refusal(load_profile(e).capabilities.afd, hw.name, model.architectures) is None]


def _no_afd_alternative(empty: Alternative, outcomes: dict[str, SearchOutcome], runners: list[str]) -> Alternative:
    """The "best AFD" row when no engine's search found an AFD plan: none of the engines runs AFD here
    (`unsearched`), or one that does (`runners`: those whose whole search found nothing) found none
    that meets the SLOs and HBM."""
    rows = [a for o in outcomes.values() for a in o.alternatives if a.label == "best AFD"]
    if rows and all(a.unsearched for a in rows) and not runners:
        return dataclasses.replace(empty, reason=NO_ENGINE_RUNS_AFD, unsearched=True)
    return dataclasses.replace(empty, reason=NO_AFD_FITS, unsearched=False)


Searched = SearchOutcome | InfeasibleError | None

# What forked workers inherit from the parent: the requests and the cost tables (copy-on-write: nothing
# is pickled on the way in). Set just before the workers are forked.
_FORKED: tuple[list[PlanRequest], TableCache] | None = None


def searched(
    requests: list[PlanRequest], progress: Progress | None, cache: TableCache, jobs: int = 1, widest: int | None = None
) -> list[Searched]:
    """Each request's search (`run_search`), in order: its outcome, or the InfeasibleError it raised
    (PinnedSizeRefused included); None for the requests not searched after an interrupt. One at a time,
    an interrupted search (Ctrl-C in CP-SAT: its best so far) ends the rest, as it ends `moeplan plan`.
    With `jobs` > 1, where fork is safe (planner.search.forked), the searches run in forked worker
    processes, `jobs` at a time, each with the parent's cost tables and on-disk store; Ctrl-C stops them
    all, and the searches that had ended are kept (the rest None). Each search is the same in a worker
    as in the parent, so the results do not depend on `jobs`. `widest`: the request whose space holds the
    others' (the free search's), started first by the workers: on a cold cache it takes the longest."""
    global _FORKED
    if jobs <= 1 or len(requests) < 2 or not can_fork():
        out: list[Searched] = []
        stopped = False
        for req in requests:
            out.append(None if stopped else _search_one(req, progress, cache))
            stopped = stopped or (isinstance(out[-1], SearchOutcome) and out[-1].status == "INTERRUPTED")
        return out
    results: list[Searched] = [None] * len(requests)
    flush_table_store()  # written once here, not again by every worker
    _FORKED = (requests, cache)
    processes = min(jobs, len(requests))
    pool = None
    completed = False
    try:
        pool = fork_pool(processes)
        if progress:
            progress(f"searching {len(requests)} spaces in {processes} processes", 0.0)
        order = list(range(len(requests)))
        if widest is not None:
            order.insert(0, order.pop(widest))
        for done, (i, result) in enumerate(pool.imap_unordered(_forked_search, order), start=1):
            results[i] = result
            if progress:
                progress(f"searched {done} of {len(requests)} spaces ({processes} processes)", done / len(requests))
        completed = True
    except KeyboardInterrupt:
        pass  # the searches that ended are kept, in order up to the first that did not
    finally:
        _FORKED = None
        if pool is not None:
            end_pool(pool, completed)
    if not completed:
        first_missing = next((i for i, r in enumerate(results) if r is None), len(results))
        results[first_missing:] = [None] * (len(results) - first_missing)
    return results


def _search_one(request: PlanRequest, progress: Progress | None, cache: TableCache) -> Searched:
    """The search's outcome without its spaces' cost tables (kept in `cache`; nothing after the search
    reads them from the outcome, and pickled back from a worker they would weigh 50-170 MB), or the
    InfeasibleError it raised."""
    try:
        outcome = run_search(request, progress, cache)
    except InfeasibleError as exc:
        return exc
    return dataclasses.replace(
        outcome,
        decode_space=_without_tables(outcome.decode_space),
        prefill_space=_without_tables(outcome.prefill_space),
    )


def _without_tables(space: PhaseSpace | None) -> PhaseSpace | None:
    return None if space is None else dataclasses.replace(space, tables={})


def _forked_search(i: int) -> tuple[int, Searched]:
    """Search request i in a forked worker: (i, its outcome or the InfeasibleError it raised)."""
    assert _FORKED is not None
    requests, cache = _FORKED
    result = _search_one(requests[i], None, cache)
    flush_table_store()  # a pool worker ends without running exit handlers
    return i, result
