"""Cost tables kept on disk between runs, so a second `moeplan plan` on the same model, machine
and workload skips costing (about a second of a supernode search).

A phase's cost tables of one instance size depend only on the model, machine, scheme, workload,
skew model and limits (the key `build_phase_space` gives, which holds all of them as text) and
on moeplan's code and data. Each key is stored in one file, with what was derived from those
tables alone (`derived`: dominance sets, chunk-cost differences, the decode bound), under the cache folder
(planner.costmodel.disk_memo.cache_folder: $MOEPLAN_CACHE_DIR, else $XDG_CACHE_HOME/moeplan,
else ~/.cache/moeplan) whose name is a hash of the key and of every code and data file of the
package: a change of either starts a new file, never a stale answer (and the files of an older
version of the code are removed once a run has written new ones). What is kept is the
integer tables the search reads (as 32-bit integers when they fit; read back as 64-bit) and the
layout options, not the float tables they were rounded from. Files are written at exit (or
`flush`), one per table however many values were derived from it (on the 2-core VM creating a
file costs about 0.4 ms, and a cold supernode plan derives about 380 values from 150 tables),
atomically (temporary file, then rename); read errors count as a miss, the least recently used files go
once the folder's table files pass `STORE_LIMIT_BYTES`, and MOEPLAN_CACHE_DIR=off disables the
store. The files are Python pickles: the folder is the user's own, as for any cache.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import os
import pickle
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from planner.candidates.tables import IntTables, PhaseTables
from planner.costmodel.disk_memo import cache_folder, write_cache_file

STORE_LIMIT_BYTES = 512 * 1024 * 1024
FORMAT = 3  # bump when the stored layout changes
_PREFIX = "tables-"


@functools.cache
def code_digest() -> str:
    """A hash of every Python, YAML and JSON file of the package (the code the tables come from)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(str(FORMAT).encode())
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".yaml", ".yml", ".json") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode())
            with contextlib.suppress(OSError):
                digest.update(path.read_bytes())
    return digest.hexdigest()


def stable_key(key: tuple) -> str | None:
    """The key as text that means the same in every process, or None if part of it is an object
    known only by its identity (a skew model built from a user's trace, say)."""
    text = repr(key)
    return None if " at 0x" in text or "object at" in text else text


def _packed(a: np.ndarray) -> np.ndarray:
    if a.dtype == np.int64 and a.size and int(a.min()) >= -(2**31) and int(a.max()) < 2**31:
        return a.astype(np.int32)
    return a


def _unpacked(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) if a.dtype == np.int32 else a


def _map(ints: IntTables, fn) -> IntTables:
    def each(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: fn(v) for k, v in d.items()}

    return IntTables(
        time_us=each(ints.time_us),
        comm_us=each(ints.comm_us),
        fixed_us=each(ints.fixed_us),
        const_us=fn(ints.const_us),
        hbm_mib=each(ints.hbm_mib),
        hbm_capacity_mib=ints.hbm_capacity_mib,
        cover_us=each(ints.cover_us),
        forwards=each(ints.forwards),
    )


class TableStore:
    """Tables on disk, one file per key, holding the tables and what was derived from them (see
    the module docstring). Writes wait for `flush` (at exit, or called): a table and every value
    derived from it in one run cost one file, not one each (creating a file is the slow part)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.hits = 0
        self.misses = 0
        # key text -> [lean tables, packed integer tables, {derived name: value}], for the tables
        # this process has read or built; `_dirty` holds the keys whose file is behind
        self._entries: dict[str, list] = {}
        self._dirty: set[str] = set()
        self._flush_at_exit = False

    def _path(self, text: str) -> Path:
        digest = hashlib.sha256((code_digest() + "\n" + text).encode()).hexdigest()[:32]
        return self.folder / f"{_PREFIX}{code_digest()[:12]}-{digest}.pkl"

    def get(self, key: tuple) -> tuple[PhaseTables, IntTables] | None:
        text = stable_key(key)
        entry = None if text is None else self._entry(text)
        if entry is None:
            return None
        tables, ints, _ = entry
        return replace(tables, memo={}), _map(ints, _unpacked)

    def put(self, key: tuple, value: tuple[PhaseTables, IntTables]) -> None:
        text = stable_key(key)
        if text is None:
            return
        tables, ints = value
        # the search reads the integer tables only: the float ones are not kept
        lean = replace(tables, time_s={}, comm_s={}, fixed_s={}, hbm_bytes={}, cover_s={}, memo={})
        self._entries[text] = [lean, _map(ints, _packed), {}]
        self._mark(text)

    @property
    def pending(self) -> int:
        """Tables whose file the next flush writes."""
        return len(self._dirty)

    def derived_value(self, text: str, name: tuple) -> Any:
        """The value derived under `name` from the tables stored as `text`, or None."""
        entry = self._entry(text)
        return None if entry is None else entry[2].get(name)

    def put_derived(self, text: str, name: tuple, value: Any) -> None:
        """Keep `value` with the tables stored as `text` (if this process read or built them)."""
        entry = self._entries.get(text)
        if entry is not None:
            entry[2][name] = value
            self._mark(text)

    def record(self, key: tuple) -> dict[Any, Any] | None:
        """Values kept under `key` on their own, with no tables (what a search derived from a
        pure function of the key): from the key's file, else a new empty record; None when the key
        has no stable text. Call `touch(key)` after adding to it, so the next flush writes it."""
        text = stable_key(key)
        if text is None:
            return None
        entry = self._entry(text)
        if entry is None:
            entry = self._entries[text] = [None, None, {}]
        return entry[2]

    def touch(self, key: tuple) -> None:
        """Write the record of `key` at the next flush."""
        text = stable_key(key)
        if text is not None and text in self._entries:
            self._mark(text)

    def _entry(self, text: str) -> list | None:
        if text in self._entries:
            return self._entries[text]
        path = self._path(text)
        try:
            with open(path, "rb") as fh:
                stored_key, value = pickle.load(fh)
            if stored_key != text:
                raise ValueError("another key")
            tables, ints, values = value
            if not isinstance(values, dict):
                raise TypeError("no derived values")
            os.utime(path)  # recently used
        except (OSError, ValueError, EOFError, pickle.UnpicklingError, AttributeError, TypeError, ImportError):
            self.misses += 1
            return None
        self.hits += 1
        entry = self._entries[text] = [tables, ints, values]
        return entry

    def _mark(self, text: str) -> None:
        self._dirty.add(text)
        if not self._flush_at_exit:
            self._flush_at_exit = True
            atexit.register(self.flush)

    def flush(self) -> None:
        """Write every table whose file is behind (built, or with new derived values), then evict."""
        dirty, self._dirty = sorted(self._dirty), set()
        if not dirty:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # a read-only or full disk only costs the next run its speed
        for text in dirty:
            data = pickle.dumps((text, tuple(self._entries[text])), protocol=pickle.HIGHEST_PROTOCOL)
            write_cache_file(self._path(text), data)
        self.evict()

    def evict(self, limit_bytes: int = STORE_LIMIT_BYTES) -> None:
        """Remove the files another version of the code wrote (they can never be read again),
        then the least recently used ones until the rest fit in `limit_bytes`."""
        current = f"{_PREFIX}{code_digest()[:12]}-"
        try:
            files = []
            for p in self.folder.glob(f"{_PREFIX}*.pkl"):
                if not p.name.startswith(current):
                    with contextlib.suppress(OSError):
                        p.unlink()
                    continue
                files.append((p.stat().st_mtime, p.stat().st_size, p))
        except OSError:
            return
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= limit_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size


def derived(t: PhaseTables, name: tuple, compute: Callable[[], Any]) -> Any:
    """`t.memo[name]` for something computed from the tables alone (no SLO, no budget): from the
    memo, else from the disk store's file of the tables when they have a store key, else computed
    and kept in both (written with the tables at the store's next flush)."""
    if name in t.memo:
        return t.memo[name]
    store = table_store()
    text = t.store_key if store is not None else None
    value = None if text is None or store is None else store.derived_value(text, name)
    if value is None:
        value = compute()
        if text is not None and store is not None:
            store.put_derived(text, name, value)
    t.memo[name] = value
    return value


@functools.cache
def table_store() -> TableStore | None:
    """The process's store (None when MOEPLAN_CACHE_DIR=off)."""
    folder = cache_folder()
    return None if folder is None else TableStore(folder)
