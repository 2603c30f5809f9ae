"""Help that names what an option takes (`--max-cards CARDS`), not typer's type labels (`<float>`).

Every command is registered with `MetavarCommand`, which gives each option that has no metavar of
its own one from `METAVARS` (by flag), else one from its type.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand

METAVARS = {
    "--model": "MODEL",
    "--hardware": "MACHINE",
    "--quantization": "SCHEME",
    "--input-tokens": "TOKENS",
    "--output-tokens": "TOKENS",
    "--mtp-acceptance": "FRACTION",
    "--tpot-ms": "MS",
    "--ttft-ms": "MS",
    "--max-itl-ms": "MS",
    "--max-cards": "CARDS",
    "--phase": "PHASE",
    "--decode-devices": "DEVICES",
    "--prefill-devices": "DEVICES",
    "--devices": "DEVICES",
    "--rate": "REQ_PER_S",
    "--top": "K",
    "--rank": "N",
    "--mtp": "DEPTHS",
    "--json": "FILE",
    "--csv": "FILE",
    "--plot": "FILE",
    "--out": "FILE",
    "--loads": "FILE",
    "--emit": "ENGINE DIR",
    "--engine": "ENGINE",
    "--prefill-hardware": "MACHINE",
    "--decode-hardware": "MACHINE",
    "--kv-transfer-gbps": "GB_PER_S",
    "--max-prefill-cards": "CARDS",
    "--max-decode-cards": "CARDS",
    "--max-cost": "COST",
    "--workload": "FILE",
    "--prefix-hit-rate": "FRACTION",
    "--slo-percentile": "PERCENTILE",
    "--skew-sigma": "SIGMA",
    "--acceptance-spread": "TAU",
    "--max-redundant-experts": "COPIES",
    "--time-limit": "SECONDS",
    "--workers": "THREADS",
    "--jobs": "PROCESSES",
    "--hbm-utilization": "FRACTION",
    "--seed": "SEED",
    "--synthetic": "KIND:PARAM",
    "--context": "TOKENS",
}
# `sweep` takes a value, a list or a range where the other commands take one value
SWEPT = {"--tpot-ms", "--ttft-ms", "--input-tokens", "--output-tokens", "--mtp-acceptance", "--max-cards", "--rate"}
# by the option's Python type (typer's `bare_type`)
BY_TYPE = {"int": "N", "float": "X", "str": "TEXT", "Path": "FILE"}


def metavar_for(option: Any) -> str:
    """The metavar an option (a click Option) is shown with."""
    flag = max(option.opts, key=len)
    bare = getattr(option, "bare_type", None)
    type_name = bare() if callable(bare) else ""
    if flag in SWEPT and type_name == "str":
        return "VALUES"
    if flag in METAVARS:
        return METAVARS[flag]
    return BY_TYPE.get(type_name, flag.lstrip("-").upper().replace("-", "_"))


def _no_type(ctx: Any = None) -> None:
    return None


# options that name a catalog entry or a file ('' would read as the current folder)
NAME_OPTIONS = ("model", "hardware", "prefill_hardware", "decode_hardware", "draft_model")


def _refusing_empty_paths(param: Any, advice: str = "the path is empty; give a file name.") -> Any:
    """`param.process_value` that refuses an empty path or name ('' would read as '.', the current folder)."""
    process = param.process_value

    def process_value(ctx: Any, value: Any) -> Any:
        from planner.cli.common import flag_given

        if value == "" and flag_given(ctx, param.name):  # given, not a default (calibrate's --hardware is '')
            from planner.cli.usage_errors import click_exceptions

            raise click_exceptions.BadParameter(advice, ctx=ctx, param=param)
        return process(ctx, value)

    return process_value


def _usage_pieces(argument: Any) -> Any:
    def pieces(ctx: Any = None) -> list[str]:
        name = argument.metavar if argument.required else f"[{argument.metavar}]"
        return [name + ("..." if argument.nargs != 1 else "")]

    return pieces


class MetavarCommand(TyperCommand):
    """A typer command whose options all show a metavar naming what they take, and whose path
    options and arguments refuse an empty path by name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            is_option = getattr(param, "param_type_name", "") == "option"
            if is_option and not param.is_flag and not param.count and param.metavar is None:  # type: ignore[attr-defined]
                param.metavar = metavar_for(param)
            bare = getattr(param, "bare_type", None)
            if callable(bare) and bare() == "Path":
                setattr(param, "process_value", _refusing_empty_paths(param))  # noqa: B010
            elif param.name in NAME_OPTIONS or getattr(param, "param_type_name", "") == "argument":
                advice = "it is empty; give a catalog name or a file."
                setattr(param, "process_value", _refusing_empty_paths(param, advice))  # noqa: B010
            if getattr(param, "param_type_name", "") == "argument":
                # an argument's name (PLAN, BASE_PLAN) says what it takes; no "<str>" after it, and
                # the usage line shows it as PLAN (required) or [PLAN], not typer's {PLAN}
                if param.metavar is None:
                    param.metavar = (param.name or "value").upper()
                setattr(param, "display_type_rich", _no_type)  # noqa: B010
                setattr(param, "get_usage_pieces", _usage_pieces(param))  # noqa: B010
