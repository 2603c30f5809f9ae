"""Cost tables kept across searches, in memory (`TableCache`) and on disk (the table store).

A phase's tables of one instance size depend on the model, machine, scheme, workload, skew model,
HBM share, MTP depths and layout limits, never on the SLOs, the card budget or the rate: a sweep
over those (or a what-if that changes only them) costs each size once. `table_key` is everything
they depend on, as values that mean the same in every process (no object address: the on-disk
store, planner.candidates.table_store, files a table under its key's text).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.candidates.space import MAX_REDUNDANCY, SpaceLimits
from planner.candidates.tables import IntTables, PhaseTables
from planner.costmodel.context import CostContext
from planner.search.request import PlanRequest

Tables = tuple[PhaseTables, IntTables]


@dataclass
class TableCache:
    """Cost tables kept across searches that share model, machine, scheme, workload and skew.

    Entries are keyed by everything the tables depend on (`table_key`), so one cache can serve
    any mix of requests.
    """

    entries: dict[tuple, Tables] = field(default_factory=dict)
    # other SLO-free costings kept for the searches that follow (the AFD splits' two sides,
    # planner.search.candidate_spaces.afd_space), by a key of the same kind
    derived: dict[tuple, Any] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0  # ... of which `loaded` were read from the on-disk store, the rest built
    loaded: int = 0

    def get(self, key: tuple, build: Callable[[], Tables]) -> Tables:
        if key in self.entries:
            self.hits += 1
        else:
            self.misses += 1
            self.entries[key] = build()
        return self.entries[key]


def imbalance_identity(model: object) -> object:
    """A key for a skew model: its `cache_key()` when it has one (a digest of a measured trace),
    else the model itself (a frozen dataclass of numbers: equal models share tables). A model that
    is neither is refused: an object address would be a key no other process can read, and one a
    later object could reuse."""
    key = getattr(model, "cache_key", None)
    if callable(key):
        return (type(model).__name__, key())
    try:
        hash(model)
    except TypeError:
        raise TypeError(f"{type(model).__name__} is not hashable and has no cache_key(): no table key") from None
    return model


def table_key(ctx: CostContext, request: PlanRequest, limits: SpaceLimits) -> tuple:
    """What a phase's cost tables depend on (not the SLOs, the budget or the rate)."""
    return (
        ctx.model.model_dump_json(),
        ctx.hw.model_dump_json(),
        ctx.quant.name,
        ctx.workload.model_dump_json(),
        ctx.kv_transfer_bytes_per_s,
        ctx.imbalance.describe(),
        imbalance_identity(ctx.imbalance),
        ctx.hbm_utilization,
        ctx.decode_attention_kv_split,
        request.mtp_tokens,
        limits.max_extra_slots,
        limits.max_redundant_experts,
        limits.engine,
        *(() if limits.max_redundancy == MAX_REDUNDANCY else ("max_redundancy", limits.max_redundancy)),
        *(("any_tp",) if limits.any_tp else ()),
    )


def cached_tables(cache: TableCache | None, key: tuple, build: Callable[[], Tables]) -> Tables:
    """A size's tables: from `cache`, else from the on-disk store (planner.candidates.table_store),
    else built (and kept in both)."""
    from planner.candidates.table_store import stable_key, table_store

    def load_or_build() -> Tables:
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
