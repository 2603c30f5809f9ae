"""The band every prediction carries, as a table, and the ranked list's robustness lines."""

from __future__ import annotations

from rich.table import Table

from planner.costmodel.prediction import BandFigure, Prediction

FIGURE_LABELS = {
    "tokens_per_s_per_card": "tokens/s per card",
    "output_tokens_per_s_per_card": "output tokens/s per card",
    "tpot_ms": "TPOT ms",
    "ttft_ms": "TTFT ms",
    "step_ms": "step ms",
    "forward_ms": "forward ms",
    "requests_per_s": "requests/s",
    "cost_per_million_output_tokens": "cost per M output tokens",
    "joules_per_output_token": "J per output token",
}


def band_rows(prediction: Prediction) -> list[tuple[str, str, BandFigure, str]]:
    """(block, figure label, band, spread text) of every banded figure that means something."""
    u = prediction.uncertainty
    if u is None:
        return []
    # a colocated instance's throughput, TPOT and TTFT are the colocated block's: the decode and
    # prefill blocks are its steps and forwards alone (their own tokens/s, TPOT, TTFT mean nothing)
    alone = {"decode": ("step_ms",), "prefill": ("forward_ms",)} if prediction.colocated is not None else {}
    rows = []
    for block, figures in u.bands.items():
        for name, b in figures.items():
            if block in alone and name not in alone[block]:
                continue
            spread = f"-{max(0.0, 1 - b.low / b.mid):.1%} / +{max(0.0, b.high / b.mid - 1):.1%}" if b.mid else "-"
            rows.append((block, FIGURE_LABELS.get(name, name), b, spread))
    return rows


def uncertainty_table(prediction: Prediction) -> Table | None:
    """Low / mid / high of every banded figure (None when the prediction carries no band)."""
    u = prediction.uncertainty
    if u is None or not u.bands:
        return None
    table = Table(title="Uncertainty: figures at the ends of the factor ranges", caption=u.method)
    for col in ("block", "figure", "low", "mid", "high", "spread"):
        table.add_column(col, justify="left" if col in ("block", "figure") else "right")
    for block, label, b, spread in band_rows(prediction):
        table.add_row(block, label, f"{b.low:.4g}", f"{b.mid:.4g}", f"{b.high:.4g}", spread)
    return table
