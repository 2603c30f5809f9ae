"""How sure the page's figures are: their bands, and the published rows of the machine with their errors.

Nothing here recomputes a figure its own way: bands are the prediction's (`planner.costmodel.uncertainty`
through `planner.report.uncertainty_report.band_rows`), the lead of rank 1 is the terminal's
(`planner.ranking.robust.lead_verdict`, passed in as its lines), and the fidelity rows are
`planner.costmodel.fidelity.fidelity_report` over the rows of validation/ (docs/validation.md) that run on
the plan's machine, printed by `planner.report.fidelity_report` (each machine's factors are
fitted on its own rows, so the subset gives the same figures as `moeplan fidelity`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from planner.costmodel.prediction import Prediction
from planner.report.uncertainty_report import band_rows
from planner.specs.hardware import HardwareSpec

_CACHE_PREFIX = "fidelity-"


@dataclass
class BandRow:
    block: str
    figure: str
    slow: str  # the figure at the slow end of the band (a time its largest, a rate its smallest)
    mid: str
    fast: str
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
    """Every banded figure of a prediction (slow end, predicted, fast end, spread) and how the band was made."""
    rows = [
        BandRow(block, label, number(slow), number(mid), number(fast), spread)
        for block, label, slow, mid, fast, spread in band_rows(prediction)
    ]
    method = prediction.uncertainty.method if prediction.uncertainty is not None else ""
    return rows, method


@lru_cache(maxsize=8)
def _machine_rows(name: str) -> tuple[tuple[dict[str, str], ...], tuple[str, ...]]:
    """The cells and fit lines of the published rows on the catalog machine `name`.

    The leave-one-out refits take a second or two (A2's), and their result depends only on the
    package's code and catalogs: it is kept in the cache folder under a hash of both (a change of
    either starts a new file; the files of other versions are removed), and in memory for the
    pages of one process."""
    path = _cache_file(name)
    if path is not None:
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            data = json.loads(path.read_text(encoding="utf-8"))
            return tuple(dict(r) for r in data["rows"]), tuple(str(x) for x in data["lines"])
    from planner.costmodel.fidelity import fidelity_report
    from planner.costmodel.reference import published_rows
    from planner.report.fidelity_report import fit_lines, row_cells
    from planner.specs.catalog import load_hardware, load_plan

    rows = [r for r in published_rows() if load_hardware(load_plan(r.plan)[0].hardware).name == name]
    if not rows:
        return (), ()
    report = fidelity_report(rows)
    cells, lines = tuple(row_cells(r) for r in report.rows), tuple(fit_lines(report))
    if path is not None:
        _store(path, {"rows": cells, "lines": lines})
    return cells, lines


def _cache_file(name: str) -> Path | None:
    from planner.candidates.table_store import code_digest
    from planner.costmodel.disk_memo import cache_folder
    from planner.specs.catalog import catalog_dir

    folder = cache_folder()
    if folder is None:
        return None
    digest = hashlib.sha256(code_digest().encode())
    # the catalogs (and the store of measured rows beside them) sit outside the package in a checkout
    catalogs = catalog_dir("plans").parent
    for kind in ("plans", "hardware", "models", "validation"):
        for file in sorted((catalogs / kind).rglob("*")):
            if file.is_file():
                digest.update(file.name.encode())
                with contextlib.suppress(OSError):
                    digest.update(file.read_bytes())
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return folder / f"{_CACHE_PREFIX}{digest.hexdigest()[:16]}-{safe}.json"


def _store(path: Path, data: dict[str, object]) -> None:
    """Write the cache file, and remove those another version of the code or catalogs wrote."""
    from planner.costmodel.disk_memo import write_cache_file

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        version = path.name[: len(_CACHE_PREFIX) + 16]
        for old in path.parent.glob(f"{_CACHE_PREFIX}*.json"):
            if not old.name.startswith(version):
                with contextlib.suppress(OSError):
                    old.unlink()
    except OSError:
        return  # a read-only or full disk only costs the next page its speed
    write_cache_file(path, json.dumps(data, ensure_ascii=False).encode())


def fidelity_for(hw: HardwareSpec) -> Fidelity:
    """The rows of validation/ that run on a machine named like `hw`, with their errors."""
    from planner.errors import BadInputError
    from planner.specs.catalog import load_hardware

    cells, lines = _machine_rows(hw.name)
    out = Fidelity(hw.name, list(cells), list(lines))
    if not cells:
        out.note = (
            f"No published measurement runs on '{hw.name}': its figures are checked against none "
            "(validation/ (the measured rows, docs/validation.md); moeplan fidelity lists every row)."
        )
        return out
    try:
        catalog = load_hardware(hw.name)
    except BadInputError:
        catalog = None
    # (a price or a power figure changes no prediction: a machine file that only prices the card is the catalog's)
    costless = {"price_per_card_hour", "price_per_card", "power_w_per_card", "node_power_w"}
    if catalog is not None and catalog.model_dump(exclude=costless) != hw.model_dump(exclude=costless):
        out.note = (
            f"These rows are evaluated on the catalog's '{hw.name}' file, whose factors differ from the machine "
            "file this plan was made with: they check the catalog's factors, not yours."
        )
    return out
