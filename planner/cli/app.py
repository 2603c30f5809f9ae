"""The `moeplan` command: one typer app; each command lives in its own module and stays thin."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from typing import Any

import typer
from typer.core import TyperGroup

from planner import __version__
from planner.cli.common import keep_freed_memory
from planner.cli.metavars import MetavarCommand

# Each command's module is imported only when that command runs (or help lists it): `moeplan
# --version` and `moeplan evaluate` never import the solver, `moeplan experts` never the cost
# tables. name -> (module, attribute: a command function or a sub-app)
COMMANDS: dict[str, tuple[str, str]] = {
    "hardware": ("planner.cli.catalog_cmd", "hardware_app"),
    "models": ("planner.cli.catalog_cmd", "models_app"),
    "plan": ("planner.cli.plan_cmd", "plan"),
    "evaluate": ("planner.cli.evaluate_cmd", "evaluate"),
    "schema": ("planner.cli.schema_cmd", "schema"),
    "fidelity": ("planner.cli.fidelity_cmd", "fidelity"),
    "calibrate": ("planner.cli.calibrate_cmd", "calibrate_cmd"),
    "whatif": ("planner.cli.whatif_cmd", "whatif"),
    "sweep": ("planner.cli.sweep_cmd", "sweep"),
    "experts": ("planner.cli.experts_cmd", "experts"),
    "simulate": ("planner.cli.simulate_cmd", "simulate"),
}


INTERRUPTED_EARLY = "interrupted before any plan was found; nothing written\n"


def _sub_typer() -> typer.Typer:
    return typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


def load_command(name: str) -> Any:
    """The click command of `name`, its module imported now."""
    import importlib

    module, attr = COMMANDS[name]
    try:
        target = getattr(importlib.import_module(module), attr)
        sub = _sub_typer()
        if isinstance(target, typer.Typer):
            sub.add_typer(target, name=name)
            sub.callback()(lambda: None)
            command = typer.main.get_command(sub).commands[name]  # type: ignore[attr-defined]
        else:
            # help names what each option takes; a command may take its own click context settings
            # (`simulate` takes vLLM's `--goodput ttft:2000 tpot:100`, several values after one flag)
            settings = getattr(target, "context_settings", None)
            sub.command(name, cls=MetavarCommand, context_settings=settings)(target)
            command = typer.main.get_command(sub)
    except KeyboardInterrupt:  # Ctrl-C while the command loads: typer would exit 130 silently
        sys.stderr.write(INTERRUPTED_EARLY)
        raise SystemExit(130) from None
    _LOADED["command"] = True  # from here SIGTERM interrupts the command (see main)
    if _LOADED["main"]:
        # moeplan's own process: what the imports made lives until it ends. Frozen, it is left out
        # of the full garbage collections the command's allocations trigger (~20 ms each). (Not
        # when the app runs inside another program, e.g. a test: its objects are not ours to freeze.)
        gc.freeze()
    return command


class LazyGroup(TyperGroup):
    """A typer group whose commands are imported on first use (see COMMANDS)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(super().list_commands(ctx)) + [n for n in COMMANDS if n not in self.commands]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = load_command(cmd_name)
        return super().get_command(ctx, cmd_name)

    # Parsing the command line (the root's options here, a command's inside `invoke`) is where click
    # raises its usage errors: each becomes one line naming the flag and the fix (planner.cli.usage_errors).
    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except Exception as exc:
            _raise_one_line(exc, "moeplan")
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            _raise_one_line(exc, " ".join(["moeplan", *filter(None, [ctx.invoked_subcommand])]))
            raise


def _raise_one_line(exc: Exception, command: str) -> None:
    """Raise the one-line form of a click usage error (`command`: the command being parsed, when
    the error does not say); return for anything else."""
    if type(exc).__name__ in ("Exit", "NoArgsIsHelpError") or not hasattr(exc, "format_message"):
        return  # not a usage error: no import on the common path (a command's exit code)
    from planner.cli.usage_errors import one_line

    short = one_line(exc, command)
    if short is not None:
        raise short from None


app = typer.Typer(
    name="moeplan",
    cls=LazyGroup,
    help="Plan deployments of large mixture-of-experts models on Huawei Ascend clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"moeplan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """Plan deployments of large mixture-of-experts models on Huawei Ascend clusters."""


_LOADED = {"command": False, "main": False}


def _terminate(signum: int, frame: object) -> None:
    if not _LOADED["command"]:
        # still importing (typer, pydantic, the command's modules): nothing to keep or clean up,
        # and an exception raised inside library imports may never reach main's handler
        sys.stderr.write(INTERRUPTED_EARLY)
        sys.stderr.flush()
        os._exit(130)
    raise KeyboardInterrupt


def main() -> None:
    """Console-script entry point: run the app; never let a traceback reach the user.

    SIGTERM is turned into KeyboardInterrupt so that both it and Ctrl-C stop a search the same
    way: the best plan found so far is printed, no file is left half-written, exit code 130.
    SIGPIPE gets its default action back: a closed pipe ends moeplan quietly.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
        if hasattr(signal, "SIGPIPE"):
            # `moeplan plan | head`: when the reader goes away, stop as `cat` does (killed by
            # SIGPIPE, status 141 in the shell), with no message, instead of an error exit
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _LOADED["main"] = True
    try:
        keep_freed_memory()  # (inside: it may take a moment, and SIGTERM is already caught)
        app()
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED_EARLY)
        raise SystemExit(130) from None
    except SystemExit:
        raise
    except Exception as exc:  # a bug: say so plainly, keep the traceback for MOEPLAN_DEBUG=1
        if os.environ.get("MOEPLAN_DEBUG"):
            raise
        sys.stderr.write(
            f"internal error (a bug in moeplan, please report it): {type(exc).__name__}: {exc}\n"
            "rerun with MOEPLAN_DEBUG=1 to see the traceback\n"
        )
        raise SystemExit(70) from None
    finally:
        # The process ends next, and every object alive now ends with it. Frozen, they are left out
        # of the garbage collections of the interpreter's shutdown, which would otherwise walk every
        # object the imports made (~60 ms of `moeplan evaluate`'s 0.4 s). Module teardown, atexit
        # handlers (the disk memo's flush) and the closing of files run as before.
        gc.freeze()
