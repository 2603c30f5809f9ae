"""What every command shares: the console, error handling with exit codes, atomic file writes."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from planner.errors import PlannerError

T = TypeVar("T")

# Tables are wide: when the output is not a terminal (a file, a pipe, CI), lay them out at 140
# columns instead of rich's default 80.
console = Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(exc: PlannerError) -> typer.Exit:
    """Print a user error (no traceback) and return the Exit carrying its code."""
    label = "infeasible" if exc.exit_code == 1 else "error"
    err_console.print(f"[bold red]{label}:[/] {escape(str(exc))}", markup=True, highlight=False)
    return typer.Exit(code=exc.exit_code)


MALLOC_KEEP_BYTES = 1 << 30
INTERRUPTED_EXIT_CODE = 130


def run_guarded(action: Callable[[], T]) -> T:
    """Run a command body; PlannerErrors become a message and their exit code, an interrupt
    (Ctrl-C, or SIGTERM turned into one) exit code 130."""
    try:
        return action()
    except PlannerError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt:
        err_console.print("interrupted before any result was found; nothing was written.")
        raise typer.Exit(code=INTERRUPTED_EXIT_CODE) from None


@contextmanager
def atomic_writer(path: Path, mode: str = "w") -> Iterator[object]:
    """Write to a temporary file beside `path`, then rename: readers never see a partial file."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise PlannerError(f"cannot write '{path}': folder '{directory}' does not exist.")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes the file private (0600); give it the mode a plain open() would have
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` atomically (stdout when path is '-')."""
    if str(path) == "-":
        sys.stdout.write(text)
        if not text.endswith("\n"):
            sys.stdout.write("\n")
        return
    try:
        with atomic_writer(path) as handle:
            handle.write(text)  # type: ignore[attr-defined]
    except OSError as exc:
        raise PlannerError(f"cannot write '{path}': {exc.strerror}.") from None


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    try:
        with atomic_writer(path, "wb") as handle:
            handle.write(data)  # type: ignore[attr-defined]
    except OSError as exc:
        raise PlannerError(f"cannot write '{path}': {exc.strerror}.") from None


def keep_freed_memory() -> None:
    """Ask glibc to keep freed memory for reuse instead of returning it to the system at once.

    Every point of a sweep evaluates candidate tables as numpy temporaries of tens of MB. glibc
    serves blocks that large with mmap and unmaps them when freed, so the next point page-faults
    fresh zeroed pages again: on a 2-core machine that system time was ~40% of a sweep. Raising
    the mmap and trim thresholds makes freed blocks reusable. Best effort: elsewhere (macOS,
    musl) it does nothing.
    """
    import ctypes

    try:
        # the symbols the process already has (libc among them): no ctypes.util.find_library, which
        # runs `ldconfig -p` in a subprocess on Linux
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, MALLOC_KEEP_BYTES)
    mallopt(m_trim_threshold, MALLOC_KEEP_BYTES)
