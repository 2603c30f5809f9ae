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


# figures that grow as the deployment slows: times, and what each output token costs (money, energy)
_LARGER_WHEN_SLOW = ("_ms", "_per_output_token", "_per_million_output_tokens")


def slow_fast(name: str, band: BandFigure) -> tuple[float, float, str]:
    """(the figure at the slow end, at the fast end, 'slow / fast' spread) of a band: a time
    (`..._ms`) or a cost per output token is largest at the slow end, a rate smallest."""
    up, down = max(0.0, band.high / band.mid - 1), max(0.0, 1 - band.low / band.mid)
    if name.endswith(_LARGER_WHEN_SLOW):
        return band.high, band.low, f"+{up:.1%} / -{down:.1%}"
    return band.low, band.high, f"-{down:.1%} / +{up:.1%}"


def band_rows(prediction: Prediction) -> list[tuple[str, str, float, float, float, str]]:
    """(block, figure label, slow end, predicted, fast end, spread slow / fast) of every banded
    figure that means something."""
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
            slow, fast, spread = slow_fast(name, b) if b.mid else (b.low, b.high, "-")
            rows.append((block, FIGURE_LABELS.get(name, name), slow, b.mid, fast, spread))
    return rows


def uncertainty_table(prediction: Prediction) -> Table | None:
    """Slow end / predicted / fast end of every banded figure (None when the prediction carries no
    band): a time is largest at the slow end, a rate smallest, so each column means one thing."""
    u = prediction.uncertainty
    if u is None or not u.bands:
        return None
    table = Table(title="Uncertainty: figures at the ends of the factor ranges", caption=u.method)
    for col in ("block", "figure", "slow end", "predicted", "fast end", "spread slow / fast"):
        table.add_column(col, justify="left" if col in ("block", "figure") else "right")
    for block, label, slow, mid, fast, spread in band_rows(prediction):
        table.add_row(block, label, f"{slow:.4g}", f"{mid:.4g}", f"{fast:.4g}", spread)
    return table
