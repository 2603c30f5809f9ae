"""Click's usage errors (a flag value that does not parse, a missing option, an unknown flag) as
one line naming the flag and the fix, in the form every other error of moeplan takes.

Click would print the usage, a hint and the message of the validator behind the option (typer's
is pydantic: "Input should be greater than or equal to 1"); the commands' own errors are one line
(planner.cli.common.fail). Imported only when an error is being reported.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

try:  # typer >= 0.2x carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - typer with click as a dependency
    import click.exceptions as click_exceptions  # type: ignore[no-redef]

USAGE_EXIT_CODE = 2


class OneLineUsageError(click_exceptions.ClickException):
    """A usage error shown as `error: <message>` (exit code 2)."""

    exit_code = USAGE_EXIT_CODE

    def show(self, file: Any = None) -> None:
        from planner.cli.common import err_console

        err_console.print(f"[bold red]error:[/] {escape(self.message)}", markup=True, highlight=False)


def one_line(exc: BaseException, command: str = "moeplan") -> OneLineUsageError | None:
    """The one-line form of a click usage error; None for anything else (help pages included).
    `command` (e.g. `moeplan plan`) is the command being parsed, for errors that carry no context."""
    if not isinstance(exc, click_exceptions.UsageError) or isinstance(exc, click_exceptions.NoArgsIsHelpError):
        return None
    return OneLineUsageError(describe(exc, command))


def command_path(ctx: Any) -> str:
    """`moeplan hardware show`, whatever the program was started as (python -m planner, a test)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["moeplan", *reversed(names)])


def describe(exc: Any, command: str = "moeplan") -> str:
    """What went wrong, with the flag's name and what to give instead."""
    see = f"see '{command_path(exc.ctx) if exc.ctx is not None else command} --help'"
    param = getattr(exc, "param", None)
    if isinstance(exc, click_exceptions.MissingParameter) and param is not None:
        name = _name(param)
        if getattr(param, "param_type_name", "") == "argument":
            return f"missing {name}: {_sentence(param.help) or 'give it'}; {see}."
        return f"{name} is required: give {name} {param.metavar or 'VALUE'}; {see}."
    if isinstance(exc, click_exceptions.BadParameter) and param is not None:
        return f"{_name(param)}: {_bad_value(exc, param)}"
    text = exc.format_message().rstrip(".")
    return f"{text[:1].lower()}{text[1:]}; {see}."


def _name(param: Any) -> str:
    if getattr(param, "param_type_name", "") == "argument":
        return str(param.metavar or param.name.upper())
    return str(max(param.opts, key=len))


def _sentence(text: str | None) -> str:
    """The first sentence of a help text, without its full stop (and in lower case)."""
    if not text:
        return ""
    first = text.split(". ")[0].rstrip(".")
    return first[:1].lower() + first[1:]


def _kind(param: Any) -> str:
    bare = getattr(param, "bare_type", None)
    type_name = bare() if callable(bare) else ""
    return {"int": "a whole number", "float": "a number"}.get(type_name, "a value")


def _choices(param: Any) -> list[str]:
    """The values a choice option (an Enum) takes, as the user types them; [] for any other option."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or not getattr(descriptor, "is_choice", False) or not descriptor.choices:
        return []
    return [str(getattr(c, "value", c)) for c in descriptor.choices]


def _bound(value: float) -> str:
    """A bound as the user types it: whole numbers in full (4294967295, not 4.29497e+09)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _range(param: Any) -> str:
    lo, hi = getattr(param, "min", None), getattr(param, "max", None)
    if lo is not None and hi is not None:
        return f" from {_bound(lo)} to {_bound(hi)}"
    if lo is not None:
        return f" >= {_bound(lo)}"
    if hi is not None:
        return f" <= {_bound(hi)}"
    return ""


def _bad_value(exc: Any, param: Any) -> str:
    """The value given and the fix: the kind of value the flag takes, its range, an example."""
    cause = exc.__cause__
    errors = cause.errors() if hasattr(cause, "errors") else []
    if not errors:
        return f"{exc.message.rstrip('.')}."
    error = errors[0]
    given, kind, bounds = error.get("input"), _kind(param), _range(param)
    choices = _choices(param)
    if choices:
        return f"'{given}' is not one of {', '.join(choices)}; give one of them, e.g. {_name(param)} {choices[0]}."
    wanted = f"give {kind}{bounds}"
    default = getattr(param, "default", None)
    if isinstance(default, (int, float)) and not isinstance(default, bool) and not bounds:
        wanted += f", e.g. {_name(param)} {default:g}"
    if error.get("type", "").endswith("_parsing") or error.get("type") in ("int_from_float", "finite_number"):
        return f"'{given}' is not {kind}; {wanted}."
    if error.get("type") in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{given} is out of range; {wanted}."
    return f"'{given}': {str(error.get('msg', exc.message)).rstrip('.').lower()}; {wanted}."
