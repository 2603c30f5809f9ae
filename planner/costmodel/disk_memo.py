"""A persistent memo of one pure, slow function: the default skew model's placement imbalance.

`SkewImbalance.static_factor(experts, ep, slots)` runs the expert-placement optimiser on a fixed
log-normal popularity (5-15 ms a call, hundreds of calls per `moeplan plan` on a supernode).
Its result depends only on its arguments and on moeplan's placement code, so it is kept in a
JSON file under the user's cache folder ($MOEPLAN_CACHE_DIR, else $XDG_CACHE_HOME/moeplan, else
~/.cache/moeplan) whose name carries a hash of that code: a change of the code starts a new
file, never a stale answer. Writes are atomic (temporary file, then rename), failures to read or
write are ignored (the value is computed again), and MOEPLAN_CACHE_DIR=off disables the file.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

# every module the memoised function runs, imported transitively from planner.costmodel.imbalance
# (tests/costmodel/test_disk_memo.py checks the list against the imports)
_SOURCES = (
    "costmodel/disk_memo.py",
    "costmodel/imbalance.py",
    "errors.py",
    "placement/__init__.py",
    "placement/eplb.py",
    "placement/expert_map.py",
    "placement/loads.py",
    "placement/metrics.py",
    "placement/model.py",
    "placement/optimize.py",
    "placement/replicas.py",
    "placement/synthetic.py",
    "specs/files.py",
)


def write_cache_file(path: Path, data: bytes) -> None:
    """Write a cache file atomically (a temporary file beside it, then a rename); a failure leaves
    no temporary file and is ignored: a read-only or full disk only costs the next run its speed."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def placement_code_digest() -> str | None:
    """A hash of the code the memoised values come from (None if a source cannot be read)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for rel in _SOURCES:
        try:
            digest.update((root / rel).read_bytes())
        except OSError:
            return None
    return digest.hexdigest()[:16]


def cache_folder() -> Path | None:
    """Where memo files live, or None when disabled."""
    env = os.environ.get("MOEPLAN_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moeplan"


class DiskMemo:
    """A str -> float memo kept in one JSON file (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._values: dict[str, float] | None = None
        self._dirty = False
        self._path: Path | None = None

    def _file(self) -> Path | None:
        folder = cache_folder()
        digest = placement_code_digest()
        if folder is None or digest is None:
            return None
        return folder / f"{self.name}-{digest}.json"

    def _load(self) -> dict[str, float]:
        if self._values is None:
            self._values = {}
            self._path = self._file()
            if self._path is not None:
                try:
                    data = json.loads(self._path.read_text())
                    self._values = {str(k): float(v) for k, v in data.items()}
                except (OSError, ValueError, AttributeError):
                    self._values = {}
        return self._values

    def get(self, key: str) -> float | None:
        return self._load().get(key)

    def put(self, key: str, value: float) -> None:
        values = self._load()
        values[key] = value
        if not self._dirty and self._path is not None:
            self._dirty = True
            atexit.register(self.flush)

    def flush(self) -> None:
        """Write the memo (merged with what another process may have written meanwhile)."""
        if not self._dirty or self._path is None or self._values is None:
            return
        self._dirty = False
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            merged: dict[str, float] = {}
            with contextlib.suppress(OSError, ValueError, AttributeError):
                merged = {str(k): float(v) for k, v in json.loads(self._path.read_text()).items()}
            merged.update(self._values)
        except OSError:
            return  # a read-only or full disk only costs the next run its speed
        write_cache_file(self._path, json.dumps(merged, sort_keys=True).encode())
