"""`moeplan calibrate MEASUREMENTS.csv --hardware a2 --out my-a2.yaml`: fit a machine to measurements;
`moeplan calibrate --bench PLAN=RESULT [PLAN=RESULT ...]`: to benchmark result files of its plans."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import check_output, console, err_console, run_guarded, write_text_atomic
from planner.costmodel.calibration import calibrate, hardware_yaml, read_bench, read_measurements
from planner.errors import BadInputError
from planner.report.calibrate_report import calibration_tables, calibration_warnings
from planner.specs.catalog import load_hardware


def calibrate_cmd(
    inputs: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="MEASUREMENTS",
            help="CSV with columns plan,metric,value (plans relative to it); with --bench, more PLAN=RESULT pairs.",
            show_default=False,
        ),
    ] = None,
    hardware: Annotated[str, typer.Option("--hardware", help="Catalog name or path of the machine to fit.")] = "",
    out: Annotated[Path | None, typer.Option("--out", help="Write the calibrated hardware YAML here.")] = None,
    bench: Annotated[
        list[str] | None,
        typer.Option(
            "--bench",
            metavar="PLAN=RESULT",
            help="A plan file (or plan --json export) and the benchmark result that measured it: vllm bench serve "
            "--save-result JSON, SGLang bench_serving JSONL or AISBench performances CSV. Repeat, or list more "
            "after it.",
        ),
    ] = None,
    factors: Annotated[
        str | None,
        typer.Option(
            "--factors",
            help="Comma-separated factors to fit, e.g. 'efficiency.matmul,fixed_costs.collective' (default: all).",
        ),
    ] = None,
) -> None:
    """Fit the machine's efficiency, fixed-cost and overlap factors to measured figures (bounded least
    squares), print each factor with its interval and each row's residual, and write a hardware YAML.
    The figures come from a CSV (plan,metric,value) or, with --bench, from benchmark clients' result files
    paired with the plans they measured (the bench/ commands `--emit` writes)."""

    def body() -> None:
        items = list(inputs or [])
        if not hardware:
            raise BadInputError("--hardware is required: the catalog name or file of the machine to fit (e.g. a2).")
        if out is None:
            raise BadInputError("--out is required: the hardware YAML to write (e.g. my-a2.yaml).")
        if bench:
            stray = [i for i in items if "=" not in i]
            if stray:
                raise BadInputError(
                    f"with --bench, every input is PLAN=RESULT; {stray[0]!r} is not (a measurements CSV goes alone)."
                )
        elif len(items) != 1:
            raise BadInputError(
                "give one measurements CSV (plan,metric,value) or --bench PLAN=RESULT [PLAN=RESULT ...]."
            )
        # before the fit: a path it cannot write fails at once; the file is a machine that --hardware
        # reads back by its path, so not stdout
        check_output("--out", out, stdout_ok=False)
        hw = load_hardware(hardware)
        names = [f.strip() for f in factors.split(",") if f.strip()] if factors else None
        if factors is not None and not names:
            raise BadInputError("--factors is empty; name factors such as 'efficiency.matmul' or leave it out.")
        data = read_bench([*bench, *items], hw) if bench else read_measurements(Path(items[0]), hw)
        result = calibrate(data, hw, names, new_name=out.stem)
        for table in calibration_tables(result, hw):
            console.print(table)
        for line in calibration_warnings(result):
            err_console.print(f"[yellow]warning:[/] {line}")
        header = (
            f"{result.hw.name}: {hw.name} calibrated by `moeplan calibrate` from {data.path.name} "
            f"({result.rows} row{'s' if result.rows != 1 else ''}).\nUse it with --hardware {out}."
        )
        write_text_atomic(out, hardware_yaml(result.hw, header), "--out")
        console.print(f"wrote {out} (use it with --hardware {out})")

    run_guarded(body)
