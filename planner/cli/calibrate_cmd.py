"""`moeplan calibrate MEASUREMENTS.csv --hardware a2 --out my-a2.yaml`: fit a machine to measurements."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import check_output, console, err_console, run_guarded, write_text_atomic
from planner.costmodel.calibration import calibrate, hardware_yaml, read_measurements
from planner.errors import BadInputError
from planner.report.calibrate_report import calibration_tables, calibration_warnings
from planner.specs.catalog import load_hardware


def calibrate_cmd(
    measurements: Annotated[Path, typer.Argument(help="CSV with columns plan,metric,value (plans relative to it).")],
    hardware: Annotated[str, typer.Option("--hardware", help="Catalog name or path of the machine to fit.")],
    out: Annotated[Path, typer.Option("--out", help="Write the calibrated hardware YAML here.")],
    factors: Annotated[
        str | None,
        typer.Option(
            "--factors",
            help="Comma-separated factors to fit, e.g. 'efficiency.matmul,fixed_costs.collective' (default: all).",
        ),
    ] = None,
) -> None:
    """Fit the machine's efficiency, fixed-cost and overlap factors to measured figures (bounded least
    squares), print each factor with its interval and each row's residual, and write a hardware YAML."""

    def body() -> None:
        check_output("--out", out)  # before the fit: a path it cannot write fails at once
        hw = load_hardware(hardware)
        names = [f.strip() for f in factors.split(",") if f.strip()] if factors else None
        if factors is not None and not names:
            raise BadInputError("--factors is empty; name factors such as 'efficiency.matmul' or leave it out.")
        data = read_measurements(measurements, hw)
        result = calibrate(data, hw, names, new_name=out.stem)
        for table in calibration_tables(result, hw):
            console.print(table)
        for line in calibration_warnings(result):
            err_console.print(f"[yellow]warning:[/] {line}")
        header = (
            f"{result.hw.name}: {hw.name} calibrated by `moeplan calibrate` from {measurements.name} "
            f"({result.rows} rows).\nUse it with --hardware {out}."
        )
        write_text_atomic(out, hardware_yaml(result.hw, header))
        console.print(f"wrote {out} (use it with --hardware {out})")

    run_guarded(body)
