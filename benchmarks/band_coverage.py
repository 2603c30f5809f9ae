"""How often the bands hold the measured figure, per machine group and at several widths.

    python benchmarks/band_coverage.py

A band is a plan's figure with every ranged factor and imbalance parameter at the slow and the fast end of
its range (the corners), widened by `BAND_Z` (1.645, the two-sided 90% point of a normal error) times the
model's RMS held-out error on the machine's group (planner/costmodel/uncertainty.py). `moeplan fidelity`
counts the rows whose measured figure lies inside its band, each band widened without the row's own error;
this script splits that count by machine group and prints it at several multiples of the error, so a group
whose bands claim more than they hold shows. The figures are held out: no row's error widens its own band.
"""

from __future__ import annotations

MULTIPLES = (0.0, 1.0, 1.645, 1.96)


def half_width(rows: list) -> float:
    """Median half-width of the shipped bands, relative to the prediction: how sharp a band is beside how
    often it holds (a band wide enough holds everything and says little)."""
    import numpy as np

    return float(np.median([(r.band[1] - r.band[0]) / (2.0 * r.predicted) for r in rows]))


def coverage_lines() -> list[str]:
    """One line per machine group and one for the store: rows inside their bands at each multiple."""
    from planner.costmodel.fidelity import fidelity_report
    from planner.costmodel.store_fit import fit_config

    report = fidelity_report()
    config = fit_config()
    groups: dict[str, list] = {}
    for r in report.rows:
        if r.band is not None:
            groups.setdefault(config.group_of(r.hardware) or "(no group)", []).append(r)
    widths = "  ".join(f"{'x' + format(z, 'g'):>9}" for z in MULTIPLES)
    head = f"{'group':<20} {'rows':>4} {'held-out RMS':>12} {'half-width':>10}  {widths}"
    lines = [head]

    def line(name: str, rows: list, rms: str) -> str:
        counts = "  ".join(f"{sum(1 for r in rows if r.in_band_at(z)):>4}/{len(rows):<4}" for z in MULTIPLES)
        return f"{name:<20} {len(rows):>4} {rms:>12} {half_width(rows):>10.0%}   {counts}"

    for name in sorted(groups):
        # each row's error is over the group's other figures: the largest of them is printed
        lines.append(line(name, groups[name], f"{max(r.band_error for r in groups[name]):.1%}"))
    every = [r for rows in groups.values() for r in rows]
    lines.append(line("every group", every, "-"))
    lines.append("held-out RMS: the largest over the group's rows (each row's is over the others; a group with fewer")
    lines.append("than three other figures takes the largest group's); x: the multiple of it the corners are widened")
    lines.append("by (x0: the corners alone; x1.645: the shipped band); half-width: the shipped bands' median")
    lines.append("half-width over the prediction (a band wide enough holds everything and says little)")
    outside = [r for r in every if not r.in_band]
    for r in outside:
        lo, hi = r.band or (0.0, 0.0)
        lines.append(
            f"  outside at x1.645: {r.row.id} ({r.hardware}): measured {r.row.published:g}, band {lo:.4g}-{hi:.4g}"
            + (" (known miss)" if r.row.known_miss else "")
        )
    if report.stale:
        lines.append("(the shipped fit is out of date: leave-one-out recomputed now; rerun calibrate_factors.py)")
    return lines


def main() -> int:
    print("\n".join(coverage_lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
