"""How sure the page's figures are: their bands, and the published rows of the machine with their errors.

Nothing here recomputes a figure its own way: bands are the prediction's (`planner.costmodel.uncertainty`
through `planner.report.uncertainty_report.band_rows`), the lead of rank 1 is the terminal's
(`planner.ranking.robust.lead_verdict`, passed in as its lines), and the fidelity rows are
`planner.costmodel.fidelity.fidelity_report` over the rows of plans/published.yaml that run on
the plan's machine, printed by `planner.report.fidelity_report` (each machine's factors are
fitted on its own rows, so the subset gives the same figures as `moeplan fidelity`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from planner.costmodel.prediction import Prediction
from planner.report.uncertainty_report import band_rows
from planner.specs.hardware import HardwareSpec

FIDELITY_COLUMNS = (
    "row",
    "figure",
    "published",
    "predicted",
    "error",
    "leave-one-out",
    "band",
    "tolerance",
    "determines",
)


@dataclass
class BandRow:
    block: str
    figure: str
    low: str
    mid: str
    high: str
    spread: str


@dataclass
class Fidelity:
    """The published rows of one machine and what the fit says of them."""

    machine: str
    rows: list[dict[str, str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    note: str = ""


def number(x: float) -> str:
    """Four significant digits, whole numbers from 1,000 up (no exponent)."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def bands(prediction: Prediction) -> tuple[list[BandRow], str]:
    """Every banded figure of a prediction (low, mid, high, spread) and how the band was made."""
    rows = [
        BandRow(block, label, number(b.low), number(b.mid), number(b.high), spread)
        for block, label, b, spread in band_rows(prediction)
    ]
    method = prediction.uncertainty.method if prediction.uncertainty is not None else ""
    return rows, method


@lru_cache(maxsize=8)
def _machine_rows(name: str) -> tuple[tuple[dict[str, str], ...], tuple[str, ...]]:
    """The cells and fit lines of the published rows on the catalog machine `name` (the leave-one-out
    refits take a second or two: a sweep's or a test session's pages share them)."""
    from planner.costmodel.fidelity import fidelity_report
    from planner.costmodel.reference import published_rows
    from planner.report.fidelity_report import fit_lines, row_cells
    from planner.specs.catalog import load_hardware, load_plan

    rows = [r for r in published_rows() if load_hardware(load_plan(r.plan)[0].hardware).name == name]
    if not rows:
        return (), ()
    report = fidelity_report(rows)
    return tuple(row_cells(r) for r in report.rows), tuple(fit_lines(report))


def fidelity_for(hw: HardwareSpec) -> Fidelity:
    """The rows of plans/published.yaml that run on a machine named like `hw`, with their errors."""
    from planner.errors import BadInputError
    from planner.specs.catalog import load_hardware

    cells, lines = _machine_rows(hw.name)
    out = Fidelity(hw.name, list(cells), list(lines))
    if not cells:
        out.note = (
            f"No published measurement runs on '{hw.name}': its figures are checked against none "
            "(plans/published.yaml; `moeplan fidelity` lists every row)."
        )
        return out
    try:
        catalog = load_hardware(hw.name)
    except BadInputError:
        catalog = None
    if catalog is not None and catalog != hw:
        out.note = (
            f"These rows are evaluated on the catalog's '{hw.name}' file, whose factors differ from the machine "
            "file this plan was made with: they check the catalog's factors, not yours."
        )
    return out
