"""Tables and the JSON document of `moeplan whatif`: base, new and base re-scored side by side."""

from __future__ import annotations

import json

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from planner.ranking.compare import LOWER_IS_BETTER, Delta
from planner.ranking.whatif import WhatIfResult
from planner.report.table_counts import tables_built_text

ALWAYS_SHOWN = ("hardware", "cards", "P:D cards")
DIGITS = {
    "tpot_ms": 1,
    "tpot_at_acceptance_percentile_ms": 1,
    "ttft_ms": 0,
    "decode_hbm_headroom_gib": 2,
    "prefill_hbm_headroom_gib": 2,
    "requests_per_s": 2,
    "cards": 0,
    "cards_for_rate": 0,
}


def _num(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    if key in ("cards", "cards_for_rate"):
        return f"{v:g}"
    return f"{v:.{DIGITS.get(key, 1)}f}"


def _delta_text(d: Delta) -> Text:
    if d.delta is None:
        return Text("-")
    if abs(d.delta) < 1e-9:
        return Text("=")
    better = d.delta < 0 if d.name in LOWER_IS_BETTER else d.delta > 0
    size = _num(d.name, abs(d.delta))
    if float(size) == 0.0:  # a change below the figure's printed places
        return Text("≈")
    rel = f" ({d.relative:+.0%})" if d.relative is not None else ""
    sign = "+" if d.delta > 0 else "-"
    return Text(f"{sign}{size}{rel}", style="green" if better else "red")


def _ok(flag: bool | None) -> Text:
    if flag is None:
        return Text("-")
    return Text("yes", style="green") if flag else Text("NO", style="bold red")


def _value(v: object) -> str:
    if v is None:
        return "unset"
    return f"{v:g}" if isinstance(v, float) else str(v)


def headline_text(result: WhatIfResult) -> Text:
    """One line: what the base is and what changes."""
    changes = ", ".join(f"{c.name} {_value(c.base)} -> {_value(c.new)}" for c in result.assumption_changes)
    return Text.assemble(
        ("What if: ", "bold"),
        f"base = {result.base_source}; ",
        ("new = " + (changes or "the same assumptions, re-planned"), "bold"),
    )


def assumptions_table(result: WhatIfResult) -> Table:
    """Which assumptions the what-if changes."""
    table = Table(title="Changed assumptions")
    table.add_column("assumption")
    table.add_column("base", justify="right")
    table.add_column("new", justify="right")
    for c in result.assumption_changes:
        table.add_row(c.name, escape(_value(c.base)), Text(_value(c.new), style="bold"))
    if not result.assumption_changes:
        table.add_row("(none)", "", "")
    return table


def _same_as_headline(result: WhatIfResult) -> bool:
    """True when the decode-per-card row would repeat the headline (no column has a prefill)."""
    cols = [c for c in (result.base, result.new, result.rescored) if c.plan is not None]
    return all(
        c.figures.get("decode_tokens_per_s_per_card") == c.figures.get("output_tokens_per_s_per_card") for c in cols
    )


def comparison_table(result: WhatIfResult) -> Table:
    """Choices that changed and every figure, for base, new (with delta) and base re-scored."""
    base, new, res = result.base, result.new, result.rescored
    table = Table(
        title="Base, re-planned, and base re-scored under the new assumptions",
        caption_justify="left",
        caption="Δ: new - base (green: better; ≈: less than the figure's last printed place). Re-scored: the "
        "base plan's layouts, not "
        "re-planned, under the new workload, SLOs and machine.",
    )
    table.add_column("")
    table.add_column("base", justify="right")
    table.add_column("new (re-planned)", justify="right")
    table.add_column("Δ", justify="right")
    table.add_column("base re-scored", justify="right")
    changed = {c.name for c in result.choice_changes}
    rows = [k for k in base.choices if k in changed or k in ALWAYS_SHOWN]
    # a colocated plan's one layout and concurrency serve both phases: its rows are not decode's
    colocated = any(c.plan is not None and c.plan.is_colocated for c in (base, new, res))
    for key in rows:
        style = "bold" if key in changed else ""
        label = key
        if colocated and key.startswith(("decode ", "prefill ")):
            phase, rest = key.split(" ", 1)
            label = f"{phase} (or colocated) {rest}" if phase == "decode" else f"{phase} (or colocated prefill) {rest}"
        table.add_row(
            Text(label, style=style),
            base.choices.get(key, "-"),
            Text(new.choices.get(key, "-"), style=style),
            "changed" if key in changed else "=",
            res.choices.get(key, "-") if res.plan is not None else "",
        )
    if not changed:
        table.add_row("(no choice changed)", "", "", "", "")
    table.add_section()
    res_deltas = {d.name: d for d in result.rescored_deltas}
    skip = {"decode_tokens_per_s_per_card"} if _same_as_headline(result) else set()
    for d in result.deltas:
        if d.name in skip:
            continue
        r = res_deltas.get(d.name)
        res_cell: Text | str = ""
        if res.plan is not None and r is not None:
            res_cell = Text(_num(d.name, r.new)) + Text(" ") + _delta_text(r) if r.new is not None else Text("-")
        table.add_row(d.label, _num(d.name, d.base), _num(d.name, d.new), _delta_text(d), res_cell)
    table.add_section()
    table.add_row(
        "meets the SLOs",
        _ok(base.meets_slo),
        _ok(new.meets_slo),
        "",
        _ok(res.meets_slo) if res.plan is not None else "",
    )
    table.add_row(
        "fits HBM",
        _ok(base.fits_hbm),
        _ok(new.fits_hbm),
        "",
        _ok(res.fits_hbm) if res.plan is not None else "",
    )
    if res.plan is None:
        table.add_row("base re-scored", "", "", "", Text("cannot run: see below", style="red"))
    return table


def binding_table(result: WhatIfResult) -> Table:
    """What binds each column, phase by phase."""
    table = Table(title="What binds", show_lines=False)
    table.add_column("plan")
    table.add_column("phase")
    table.add_column("binds")
    table.add_column("why")
    for col in (result.base, result.new, result.rescored):
        if col.plan is None:
            table.add_row(col.title, "", Text("-", style="red"), escape(col.error))
            continue
        for i, b in enumerate(col.bindings):
            tag = b.constraint.replace("_", " ") + (" (broken)" if b.violated else "")
            tag += "" if b.certain else " (may bind)"
            table.add_row(
                col.title if i == 0 else "",
                b.phase,
                Text(tag, style="red" if b.violated else ""),
                escape(b.message),
            )
        table.add_section()
    return table


def whatif_renderables(result: WhatIfResult) -> list[RenderableType]:
    """Everything `moeplan whatif` prints."""
    out: list[RenderableType] = [headline_text(result)]
    if result.assumption_changes:
        out.append(assumptions_table(result))
    out += [comparison_table(result), binding_table(result)]
    for note in result.notes:
        out.append(Text(f"note: {note}", style="dim"))
    out.append(
        Text(
            f"{result.seconds:.2f} s; cost tables: {tables_built_text(result.cache_misses, result.cache_loaded)}, "
            f"{result.cache_hits} reused.",
            style="dim",
        )
    )
    return out


def whatif_document(result: WhatIfResult) -> str:
    """The JSON of `--json`: assumptions, changes, the three columns, deltas and bindings."""
    return json.dumps(result.as_dict(), indent=2, ensure_ascii=False) + "\n"
