"""What every command shares: the console, error handling with exit codes, atomic file writes."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from planner.errors import BadInputError, PlannerError

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


def write_text_atomic(path: Path, text: str, flag: str | None = None) -> None:
    """Write `text` to `path` atomically (stdout when path is '-'); a failed write names `flag`."""
    outputs = Outputs()
    outputs.text(path, text, flag)
    outputs.commit()


def check_output(flag: str, path: Path | None, stdout_ok: bool = True) -> None:
    """Refuse, before any work, a destination the command could not write.

    A file is written by renaming a temporary file beside it, so what matters is the folder: it
    must exist and take a new file (tried with a temporary file, removed at once: permissions alone
    do not tell, for root or a read-only or virtual file system); the path itself must not be a
    folder or a device ('-' is stdout where `stdout_ok`). The destination itself is not created.
    """
    if path is None:
        return
    if str(path) == "-":
        if not stdout_ok:
            raise BadInputError(f"{flag}: '-' (stdout) is not accepted here; give a file name.")
        return
    if path.is_dir():
        raise BadInputError(f"{flag}: '{path}' is a folder; give a file name (e.g. '{path / 'out'}').")
    if path.exists() and not path.is_file():
        advice = "give a file name ('-' for stdout)" if stdout_ok else "give a file name"
        raise BadInputError(f"{flag}: '{path}' is not a regular file; {advice}.")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        what = f"'{folder}' is a file, not a folder" if folder.exists() else f"folder '{folder}' does not exist"
        raise BadInputError(f"{flag}: {what}; create the folder first or write elsewhere.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInputError(f"{flag}: folder '{folder}' is not writable; write elsewhere.")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=folder)
    except OSError as exc:
        raise BadInputError(
            f"{flag}: cannot write '{path}' ({_refusal(folder, exc)}); give a path in an existing, writable folder."
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def _refusal(folder: Path, exc: OSError) -> str:
    """Why `folder` took no new file, in words."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"folder '{folder}' is not writable"
    if exc.errno == errno.EROFS:
        return f"folder '{folder}' is on a read-only file system"
    return f"creating a file in folder '{folder}' fails: {exc.strerror or exc}"


def check_outputs(destinations: dict[str, Path | None], no_stdout: tuple[str, ...] = ()) -> None:
    """`check_output` for every flag (those in `no_stdout` refuse '-'), and no two flags writing the
    same file or both to stdout."""
    seen: dict[str, str] = {}
    for flag, path in destinations.items():
        check_output(flag, path, stdout_ok=flag not in no_stdout)
        if path is None:
            continue
        key = "-" if str(path) == "-" else os.path.realpath(path)
        if key in seen:
            where = "stdout" if key == "-" else f"'{path}'"
            raise BadInputError(f"{seen[key]} and {flag} both write {where}; give each its own file.")
        seen[key] = flag


class Staged(Protocol):
    """An output written in two steps: `stage` beside its destination, then `commit` (rename)."""

    def stage(self) -> None: ...

    def commit(self) -> None: ...

    def discard(self) -> None: ...


class _StagedFile:
    """A file's contents, staged beside it as a hidden temporary file, then renamed into place."""

    def __init__(self, path: Path, data: str | bytes) -> None:
        self.path, self.data = path, data
        self.destination = path
        self._tmp: str | None = None

    def stage(self) -> None:
        directory = self.path.parent if str(self.path.parent) else Path(".")
        if not directory.is_dir():
            raise PlannerError(f"cannot write '{self.path}': folder '{directory}' does not exist.")
        fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        binary = isinstance(self.data, bytes)
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            handle.write(self.data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes the file private (0600); give it the mode a plain open() would have
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self._tmp, 0o666 & ~umask)

    def commit(self) -> None:
        assert self._tmp is not None, "stage() first"
        os.replace(self._tmp, self.path)
        self._tmp = None

    def discard(self) -> None:
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._tmp = None


class Outputs:
    """Every file (and launch folder) one command run writes, written together once all are ready.

    Each is first staged beside its destination; only when every one is staged are they renamed
    into place, and text for stdout ('-') is printed last. If anything fails first, the staged
    copies are removed and no destination is created or changed.
    """

    def __init__(self) -> None:
        self._items: list[tuple[Staged, str | None]] = []  # each with the flag that named it (for a write error)
        self._stdout: list[str] = []

    def text(self, path: Path, text: str, flag: str | None = None) -> None:
        """Write `text` to `path` ('-': stdout); `flag`: the option that named the path."""
        if str(path) == "-":
            self._stdout.append(text if text.endswith("\n") else text + "\n")
        else:
            self._items.append((_StagedFile(Path(path), text), flag))

    def data(self, path: Path, data: bytes, flag: str | None = None) -> None:
        """Write `data` to `path`."""
        self._items.append((_StagedFile(Path(path), data), flag))

    def folder(self, prepared: Staged, flag: str | None = None) -> None:
        """A folder with stage(), commit() and discard() (planner.report.launch.PreparedExport)."""
        self._items.append((prepared, flag))

    def commit(self) -> None:
        """Stage everything, then rename everything into place, then print what goes to stdout."""
        staged: list[Staged] = []
        renaming = False
        current: tuple[Staged, str | None] | None = None  # the item being staged or renamed, and its flag
        try:
            for current in self._items:
                staged.append(current[0])
                current[0].stage()
            renaming = True
            for current in self._items:
                current[0].commit()
        except OSError as exc:
            item, flag = current if current is not None else (None, None)
            where = getattr(item, "destination", "an output")
            done = "" if renaming else "; nothing was written"
            prefix = "" if flag is None else f"{flag}: "
            raise PlannerError(f"{prefix}cannot write '{where}': {exc.strerror or exc}{done}.") from None
        finally:
            for item in staged:
                item.discard()  # (a committed item has nothing left to discard)
        for text in self._stdout:
            sys.stdout.write(text)
        self._items, self._stdout = [], []


def flag_given(ctx: typer.Context, name: str) -> bool:
    """Whether the user set parameter `name` (on the command line or through the environment), not
    left it at its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def command_line(ctx: typer.Context, parsed: dict[str, object] | None = None) -> str:
    """The running command as a shell reads it back: `moeplan`, the subcommand, and every argument
    and option the user set (on the command line or through the environment; defaults left out).

    Built from the parsed parameters and where each came from, so `--tpot-ms=50` reads
    `--tpot-ms 50`; the HTML report prints it as the command that reproduces the page. `parsed`:
    a user-set parameter's value as the command understood it, where click parsed only part of
    it (simulate's `--goodput ttft:2000 tpot:100`: name -> value).
    """
    import shlex

    names: list[str] = []
    node: typer.Context | None = ctx
    while node is not None and node.parent is not None:
        names.append(node.info_name or "")
        node = node.parent  # type: ignore[assignment]
    words = ["moeplan", *reversed(names)]
    for param in ctx.command.params:
        if param.name is None:
            continue
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name not in ("COMMANDLINE", "ENVIRONMENT"):
            continue
        value = (parsed or {}).get(param.name, ctx.params.get(param.name))
        values = list(value) if isinstance(value, tuple | list) else [value]
        if param.param_type_name == "argument":
            words += [_word(v) for v in values]
            continue
        flag = max(param.opts, key=len)
        if getattr(param, "is_flag", False):
            if value:
                words.append(flag)
            elif param.secondary_opts:
                words.append(max(param.secondary_opts, key=len))
            continue
        if value is not None:
            words += [flag, *(_word(v) for v in values)]
    return shlex.join(words)


def _word(value: object) -> str:
    """A parameter value as the user would type it (whole floats without '.0')."""
    if isinstance(value, float):
        return format(value, ".15g")
    return str(value)


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
