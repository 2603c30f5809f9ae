"""Tables for `moeplan calibrate`: fitted factors with intervals, and every row's residual."""

from __future__ import annotations

from rich.table import Table

from planner.costmodel.calibration import Calibration
from planner.costmodel.fitting import factor_value, is_efficiency
from planner.specs.hardware import HardwareSpec


def _fmt(hw: HardwareSpec, name: str, v: float) -> str:
    return f"{v:.4f}" if is_efficiency(hw, name) else f"{v * 1e6:.2f} us"


def calibration_tables(result: Calibration, before: HardwareSpec) -> list[Table]:
    """The factors (before, fitted, interval) and the rows (measured, predicted, residual)."""
    fit = result.fit
    ft = Table(title=f"Factors fitted to {result.rows} rows")
    for col in ("factor", "before", "fitted", "interval (2 s.e.)", "note"):
        ft.add_column(col, justify="right" if col in ("before", "fitted") else "left")
    for n in fit.names:
        lo, hi = fit.intervals[n]
        note = fit.undetermined.get(n, "")
        if n in fit.at_bound:
            note = (note + "; " if note else "") + "at its bound"
        ft.add_row(
            n,
            _fmt(before, n, factor_value(before, n)),
            _fmt(before, n, fit.values[n]),
            f"{_fmt(before, n, lo)} - {_fmt(before, n, hi)}",
            note,
        )
    for n in result.insensitive:
        v = factor_value(before, n)
        ft.add_row(n, _fmt(before, n, v), _fmt(before, n, v), "-", "not fitted: no row is sensitive to it")
    rt = Table(title="Rows: measured against the calibrated model")
    for col in ("row", "measured", "before", "calibrated", "residual"):
        rt.add_column(col, justify="left" if col == "row" else "right")
    before_pred = [o.predict(before) for o in result.observations]
    for i, label in enumerate(fit.labels):
        rt.add_row(
            label,
            f"{fit.measured[i]:g}",
            f"{before_pred[i]:.4g}",
            f"{fit.predicted[i]:.4g}",
            f"{fit.residuals[i]:+.2%}",
        )
    return [ft, rt]


# a row the fitted factors leave further off than this is one they cannot reach within their bounds
FAR_RESIDUAL = 0.25


def calibration_warnings(result: Calibration) -> list[str]:
    """One line per factor the rows cannot determine or that ran to a bound, and per row the fit
    cannot reach."""
    fit = result.fit
    out = []
    for n, why in fit.undetermined.items():
        moved = f"{fit.start[n]:.4g} -> {fit.values[n]:.4g}"
        where = "; it ran to its bound" if n in fit.at_bound else ""
        out.append(f"{n}: {why} ({moved}{where}: the value written is one of many that fit as well)")
    for n in fit.at_bound:
        if n not in fit.undetermined:
            lo, hi = fit.bounds[n]
            out.append(
                f"{n}: ran to its bound ({fit.start[n]:.4g} -> {fit.values[n]:.4g}, bounds {lo:.4g} to {hi:.4g}): "
                "the rows ask for more than the factor can give"
            )
    out += [f"{n}: no row is sensitive to it; kept at its value" for n in result.insensitive]
    far = [(label, r) for label, r in zip(fit.labels, fit.residuals, strict=True) if abs(r) > FAR_RESIDUAL]
    for label, r in far:
        out.append(
            f"{label}: still {r:+.1%} off after the fit: no factor values within their bounds reproduce it; check "
            "the figure (its units, the plan it measured) before using the file"
        )
    if not fit.success:
        out.append(f"the fit did not converge: {fit.message}")
    return out
