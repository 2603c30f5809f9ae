"""`moeplan sweep`: the best plan at every point of a grid of one or two swept parameters.

Parameters are the SLOs, the workload, the budget, the rate and the machine; values are given
as a range `a:b:step` (both ends included), a list `a,b,c`, or a single value. `--max-cards`
may also name a budget per machine (`a2=64,cm384=384`) when the machine is swept, because one
budget rarely suits two machines whose cards differ.

Every point is an ordinary search (`run_search`, top 1; the CLI's: rank 1 as `moeplan plan` lists
it). The cost tables depend on model, machine, scheme, workload and skew only, so one `TableCache`
serves the whole sweep: a sweep of an SLO, the budget or the rate costs each instance size once. An
infeasible point is a result (its message names the binding constraint), not an error.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

from planner.engines.profiles import running
from planner.errors import BadInputError, InfeasibleError
from planner.search.contexts import phase_contexts
from planner.search.forked import can_fork, end_pool, flush_table_store, fork_pool
from planner.search.plan_search import SearchOutcome, TableCache, run_search
from planner.search.request import PlanRequest
from planner.search.runnable import AUTO, run_runnable
from planner.search.table_cache import imbalance_identity
from planner.specs.plan import Plan

# flag -> value type; the order is the order of the table's columns
SWEEPABLE: dict[str, type] = {
    "hardware": str,
    "tpot-ms": float,
    "ttft-ms": float,
    "input-tokens": int,
    "output-tokens": int,
    "mtp-acceptance": float,
    "max-cards": float,
    "rate": float,
}
MAX_POINTS = 400  # a sweep beyond this is almost surely a typo in a step
MAX_AXES = 2
EXAMPLE = "a value (30), a list (10,20,30) or a range start:stop:step (10:150:10)"

Value = float | int | str


@dataclass(frozen=True)
class SweepAxis:
    """One swept flag and its values, in order."""

    flag: str
    values: tuple[Value, ...]


@dataclass
class SweepPoint:
    """The best plan at one point (None if infeasible) and what the search said."""

    values: dict[str, Value]
    request: PlanRequest
    plan: Plan | None
    status: str  # "ok" or "infeasible"
    message: str
    seconds: float
    solver_status: str = ""
    runs_on: str = ""  # --engine auto: the engines that run the plan, '+'-joined ("none": none does); else blank

    @property
    def binding_tag(self) -> str:
        """For infeasible points: the constraint the search's diagnosis names (text before ':')."""
        if self.status == "ok":
            return ""
        head = self.message.split(":", 1)[0].strip()
        return head if len(head) <= 24 else "infeasible"


@dataclass
class SweepResult:
    """Every point of a sweep, and what reusing cost tables saved."""

    axes: list[SweepAxis]
    points: list[SweepPoint]
    cache_hits: int
    cache_misses: int
    seconds: float
    fixed: dict[str, Value] = field(default_factory=dict)
    interrupted: bool = False
    cache_loaded: int = 0  # of `cache_misses`, tables read from the on-disk store (not built)

    @property
    def swept(self) -> list[str]:
        """The swept flags, in the order given."""
        return [a.flag for a in self.axes]


def _number(text: str, flag: str, kind: type) -> float | int:
    try:
        v = float(text)
    except ValueError:
        raise BadInputError(f"--{flag}: '{text}' is not a number; give {EXAMPLE}.") from None
    if not math.isfinite(v):
        raise BadInputError(f"--{flag}: '{text}' is not a finite number; give {EXAMPLE}.")
    if kind is int:
        if v != int(v):
            raise BadInputError(f"--{flag}: '{text}' is not a whole number of tokens.")
        return int(v)
    return v


def parse_values(text: str, flag: str) -> tuple[Value, ...]:
    """The values of one flag: a range a:b:step (inclusive), a list a,b,c, or one value."""
    kind = SWEEPABLE[flag]
    text = text.strip()
    if not text:
        raise BadInputError(f"--{flag}: empty value; give {EXAMPLE}.")
    if kind is str:
        if ":" in text and "," not in text and "/" not in text and "\\" not in text:
            raise BadInputError(f"--{flag}: ranges apply to numbers; list names instead, e.g. a2,cm384.")
        names = [p.strip() for p in text.split(",")]
        if any(not n for n in names):
            raise BadInputError(f"--{flag}: empty name in '{text}'; give a list like a2,cm384.")
        return tuple(dict.fromkeys(names))
    if ":" in text:
        parts = text.split(":")
        if len(parts) != 3:
            raise BadInputError(f"--{flag}: range '{text}' needs start:stop:step, e.g. 10:150:10.")
        start, stop, step = (_number(p, flag, float) for p in parts)
        if step <= 0:
            raise BadInputError(f"--{flag}: range '{text}' needs a step > 0, e.g. 10:150:10.")
        if stop < start:
            raise BadInputError(
                f"--{flag}: range '{text}' is empty: stop ({stop:g}) is below start ({start:g}); "
                f"give start <= stop, e.g. {stop:g}:{start:g}:{step:g}."
            )
        count = int(math.floor((stop - start) / step + 1e-9)) + 1
        if count > MAX_POINTS:
            raise BadInputError(f"--{flag}: range '{text}' has {count} values; at most {MAX_POINTS} per sweep.")
        raw = [round(start + i * step, 9) for i in range(count)]
        values = [_number(repr(v), flag, kind) for v in raw]
    else:
        values = [_number(p.strip(), flag, kind) for p in text.split(",")]
    return tuple(dict.fromkeys(values))


def parse_budgets(text: str, hardware: tuple[Value, ...]) -> dict[str, float]:
    """`--max-cards a2=64,cm384=384`: one budget per swept machine."""
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise BadInputError(
                f"--max-cards: '{part}' is not MACHINE=CARDS; give e.g. a2=64,cm384=384, or one number."
            )
        cards = _number(value.strip(), "max-cards", float)
        if not cards > 0:
            raise BadInputError(f"--max-cards: {name.strip()}={value.strip()} must be > 0 cards.")
        out[name.strip()] = float(cards)
    missing = [str(h) for h in hardware if str(h) not in out]
    if missing:
        raise BadInputError(f"--max-cards: no budget for {', '.join(missing)}; add {missing[0]}=CARDS.")
    extra = [k for k in out if k not in {str(h) for h in hardware}]
    if extra:
        raise BadInputError(f"--max-cards: '{extra[0]}' is not among the --hardware values.")
    return out


def parse_axes(flag_texts: dict[str, str | None]) -> tuple[list[SweepAxis], dict[str, Value]]:
    """Swept axes (flags with more than one value) and fixed values, from the raw flag texts.

    `--max-cards` given as MACHINE=CARDS pairs is kept out of both: the caller pairs it with
    the machine of each point (see `parse_budgets`).
    """
    axes: list[SweepAxis] = []
    fixed: dict[str, Value] = {}
    for flag, text in flag_texts.items():
        if text is None or (flag == "max-cards" and "=" in text):
            continue
        values = parse_values(text, flag)
        if len(values) > 1:
            axes.append(SweepAxis(flag, values))
        else:
            fixed[flag] = values[0]
    if len(axes) > MAX_AXES:
        names = ", ".join(f"--{a.flag}" for a in axes)
        raise BadInputError(f"sweep at most {MAX_AXES} parameters at once; {names} all have several values.")
    return axes, fixed


def grid(axes: list[SweepAxis]) -> list[dict[str, Value]]:
    """Every combination of the axes' values (the first axis varies slowest)."""
    if not axes:
        return [{}]
    return [
        dict(zip([a.flag for a in axes], combo, strict=True)) for combo in itertools.product(*(a.values for a in axes))
    ]


Progress = Callable[[int, int, dict[str, Value]], None]


@dataclass
class SharedTableCache(TableCache):
    """A TableCache several threads can use: one lookup (or build) at a time, exact counts."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get(self, key: tuple, build: Callable[[], tuple]) -> tuple:  # type: ignore[override]
        with self.lock:
            return super().get(key, build)


def table_group(request: PlanRequest) -> tuple:
    """What a request's cost tables depend on, but for the budget (see TableCache)."""
    imbalance = request.imbalance.describe() if request.imbalance is not None else ""
    return (
        request.model,
        request.hardware,
        request.quantization,
        request.workload,
        imbalance,
        None if request.imbalance is None else imbalance_identity(request.imbalance),
        request.mtp_tokens,
        request.max_redundant_experts,
        request.decode_devices,
        request.prefill_devices,
        request.phase,
        request.hbm_utilization,
        request.decode_attention_kv_split,
    )


def warm_first(points: list[tuple[dict[str, Value], PlanRequest]]) -> tuple[list[int], list[int]]:
    """(points to search first, one by one; the rest). The first are, per table group, the point
    with the largest budget: its instance sizes include every other point's, so once it is
    searched the rest of the group finds all its tables in the cache."""
    best: dict[tuple, int] = {}
    for i, (_, req) in enumerate(points):
        key = table_group(req)
        if key not in best or req.max_cards > points[best[key]][1].max_cards:
            best[key] = i
    first = sorted(best.values())
    return first, [i for i in range(len(points)) if i not in set(first)]


class _Interrupted(Exception):
    """A point's search was interrupted (its best-so-far is not an answer)."""


# A point's search: (request, cache) -> its outcome, rank 1 first. run_sweep's caller may give its own
# (the CLI's: rank 1 as `moeplan plan` orders near-ties); by default the search's best plan.
PointSearch = Callable[[PlanRequest, TableCache], SearchOutcome]


def _search_point(
    values: dict[str, Value], request: PlanRequest, cache: TableCache, search: PointSearch | None = None
) -> SweepPoint:
    t0 = time.perf_counter()
    single = replace(request, alternatives=False)
    try:
        if search is not None:
            outcome = search(single, cache)
        elif request.engine_mode == AUTO:  # as `moeplan plan`: the best plan some engine runs
            outcome = run_runnable(single, 1, None, cache)
        else:
            outcome = run_search(single, cache=cache)
    except InfeasibleError as exc:
        return SweepPoint(values, request, None, "infeasible", str(exc), time.perf_counter() - t0)
    if outcome.status == "INTERRUPTED":
        raise _Interrupted
    engines = ""
    if outcome.runs_on:
        engines = running(outcome.runs_on[0], "+")
    return SweepPoint(values, request, outcome.plans[0], "ok", "", time.perf_counter() - t0, outcome.status, engines)


# What forked workers inherit from the parent: the points and the warmed cache (copy-on-write:
# the tables are not pickled). Set just before the workers are forked.
_FORKED: tuple[list[tuple[dict[str, Value], PlanRequest]], TableCache, PointSearch | None] | None = None


def _forked_point(i: int) -> tuple[int, SweepPoint, int, int, int]:
    """Search point i in a forked worker: (i, the point, cache hits, misses and loads it caused)."""
    assert _FORKED is not None
    points, cache, search = _FORKED
    hits, misses, loaded = cache.hits, cache.misses, cache.loaded
    point = _search_point(*points[i], cache, search)
    flush_table_store()  # a pool worker ends without running exit handlers
    return i, point, cache.hits - hits, cache.misses - misses, cache.loaded - loaded


def run_sweep(
    points: list[tuple[dict[str, Value], PlanRequest]],
    axes: list[SweepAxis],
    fixed: dict[str, Value] | None = None,
    progress: Progress | None = None,
    cache: TableCache | None = None,
    jobs: int = 1,
    search: PointSearch | None = None,
) -> SweepResult:
    """Search every point with one shared TableCache; infeasible points become rows.

    Every point's request is checked (specs load, context length) before the first search, so a
    bad value fails the sweep at once rather than after minutes of work.

    With `jobs` > 1, the first point of every table group is searched alone, which costs the
    group's tables once; then the other points are searched `jobs` at a time: by forked worker
    processes that inherit the warmed cache (Linux), else by threads sharing it (numpy and CP-SAT
    release the GIL, the rest of a search does not, so threads gain less). Results do not depend
    on `jobs`; `progress(done, total, values)` follows completion. `search`: how a point is searched
    (PointSearch; default the search's best plan).

    An interrupt (Ctrl-C, SIGTERM) stops the sweep: the points finished by then are returned, in
    order, with `interrupted` set.
    """
    global _FORKED
    start = time.perf_counter()
    for _, request in points:
        phase_contexts(request)
    cache = cache if cache is not None else SharedTableCache()
    results: list[SweepPoint | None] = [None] * len(points)
    first, rest = warm_first(points) if jobs > 1 else (list(range(len(points))), [])
    done = 0
    interrupted = False
    extra_hits = extra_misses = extra_loaded = 0

    def finished(i: int, point: SweepPoint) -> None:
        nonlocal done
        # a forked worker's point carries its own unpickled copy of the request: keep ours
        results[i] = replace(point, values=points[i][0], request=points[i][1])
        done += 1
        if progress:
            progress(done, len(points), point.values)

    pool: Any = None
    completed = False
    try:
        for i in first:
            finished(i, _search_point(*points[i], cache, search))
        if rest and can_fork():
            flush_table_store()  # written once here, not again by every worker
            _FORKED = (points, cache, search)
            pool = fork_pool(min(jobs, len(rest)))
            for i, point, hits, misses, loaded in pool.imap_unordered(_forked_point, rest):
                extra_hits, extra_misses, extra_loaded = extra_hits + hits, extra_misses + misses, extra_loaded + loaded
                finished(i, point)
        elif rest:
            pool = ThreadPoolExecutor(max_workers=jobs)
            futures = {pool.submit(_search_point, *points[i], cache, search): i for i in rest}
            for fut in as_completed(futures):
                finished(futures[fut], fut.result())
        completed = True
    except (KeyboardInterrupt, _Interrupted):
        interrupted = True
    finally:
        _FORKED = None
        if isinstance(pool, ThreadPoolExecutor):
            # stopped early: drop the queued points; the running ones end within a point's time
            pool.shutdown(wait=completed, cancel_futures=True)
        elif pool is not None:
            end_pool(pool, completed)
    return SweepResult(
        axes,
        [p for p in results if p is not None],
        cache.hits + extra_hits,
        cache.misses + extra_misses,
        time.perf_counter() - start,
        dict(fixed or {}),
        interrupted,
        cache.loaded + extra_loaded,
    )
