"""The `moeplan` command: one typer app; each command lives in its own module and stays thin."""

from __future__ import annotations

import os
import signal
import sys
import threading

import typer

from planner import __version__
from planner.cli import (
    calibrate_cmd,
    catalog_cmd,
    evaluate_cmd,
    experts_cmd,
    fidelity_cmd,
    plan_cmd,
    schema_cmd,
    sweep_cmd,
    whatif_cmd,
)
from planner.cli.common import keep_freed_memory
from planner.cli.metavars import MetavarCommand

app = typer.Typer(
    name="moeplan",
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


app.add_typer(catalog_cmd.hardware_app, name="hardware")
app.add_typer(catalog_cmd.models_app, name="models")
app.command("plan", cls=MetavarCommand)(plan_cmd.plan)
app.command("evaluate", cls=MetavarCommand)(evaluate_cmd.evaluate)
app.command("schema", cls=MetavarCommand)(schema_cmd.schema)
app.command("fidelity", cls=MetavarCommand)(fidelity_cmd.fidelity)
app.command("calibrate", cls=MetavarCommand)(calibrate_cmd.calibrate_cmd)
app.command("whatif", cls=MetavarCommand)(whatif_cmd.whatif)
app.command("sweep", cls=MetavarCommand)(sweep_cmd.sweep)
experts_cmd.register(app)


def _terminate(signum: int, frame: object) -> None:
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
    keep_freed_memory()
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted before any plan was found; nothing written\n")
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
