"""What binds a plan: HBM, TPOT, TTFT, the card budget, the rate, or the search space.

A plan from the search sits where some constraint stops it from doing more. To name that
constraint, its neighbours are evaluated with the cost model (never the solver):

- decode: one more sequence per device (B + 1), or below FRACTIONAL_BELOW sequences a device one
  more per attention TP group (B + 1/tp, the decode axis's step there). If that overflows HBM, HBM
  binds; if it misses the TPOT SLO, TPOT binds; if the rules would allow it but it is beyond the
  search's cap (planner.candidates.tables.MAX_CONCURRENCY), the search space binds. Every
  concurrency of that axis up to the cap is searched, so a plan the search returns is never stopped
  by a gap in its axis.
- prefill: one more request per forward, with HBM and TTFT in the same roles.
- deployment: one more instance of the phase that limits the request rate. If it would raise
  output tokens/s per card but does not fit the card budget, the budget binds; with a target
  rate, the rate sets the size.

A plan that already breaks a rule (a deployment re-scored under tighter assumptions) gets the
broken rule and the largest concurrency or batch that would satisfy it.

The search decides on integer tables (µs and MiB, rounded up), so a neighbour the floats would
just allow can still be out of its reach: a neighbour within that rounding counts as blocked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from planner.candidates.colocated_candidates import CHUNK_TOKENS_PER_DEVICE
from planner.candidates.space import instance_sizes
from planner.candidates.tables import (
    FRACTIONAL_BELOW,
    MAX_CONCURRENCY,
    MAX_REQUESTS_PER_FORWARD,
    steps_per_group_sequence,
)
from planner.costmodel.acceptance_spread import slo_tpot_factor
from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.evaluate import PlanSpecs, evaluate_plan
from planner.costmodel.memory import decode_hbm, prefill_hbm
from planner.costmodel.prediction import ColocatedPrediction, Prediction, slo_judged_tpot_ms
from planner.costmodel.prefill import prefill_forward
from planner.search.contexts import make_context, phase_contexts
from planner.search.plan_search import SearchOutcome
from planner.search.request import PlanRequest
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import SLO, AfdPlan, DecodePlan, Plan, PrefillPlan, integral_as_int

GIB = 1024.0**3
# the integer tables round each module's MiB and the fixed part up: up to ~1 MiB each
ROUNDING_BYTES = 8 * 1024.0**2
# ... and each module's µs up, which moves TPOT/TTFT by a few µs at most
ROUNDING_MS = 0.01

Constraint = Literal["hbm", "tpot", "ttft", "itl", "card_budget", "rate", "search_space", "admission", "none"]


@dataclass(frozen=True)
class Binding:
    """One phase's (or the deployment's) binding constraint, in a sentence and in a few words.

    `violated` is True when the plan already breaks the rule (rather than being stopped by it).
    `certain` is False when the neighbour could not be scored without a search (a larger
    instance size): the constraint may bind. `figures` holds the sentence's numbers for JSON.
    """

    phase: str
    constraint: Constraint
    message: str
    short: str
    violated: bool = False
    figures: dict[str, float] = field(default_factory=dict)
    certain: bool = True

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return asdict(self)


# ---- decode and prefill ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Probe:
    """A phase's figures at some values of its integer (decode: sequences per device; prefill:
    requests per forward)."""

    latency_ms: np.ndarray  # TPOT or TTFT
    total_bytes: np.ndarray  # HBM per device
    capacity_bytes: float
    per_card: np.ndarray  # decode: output tokens/s per card (prefill: unused)
    step_ms: np.ndarray | None = None  # decode: the step, the gap between two emissions (the ITL limit's)


@dataclass(frozen=True)
class _Axis:
    """How one phase's integer is scored and named: `value` is the plan's, `probe(values)` scores
    the phase at other values, the templates say what binds in the phase's words ({v}: the value,
    {n}: the next one, {m}: the largest allowed, {lat}: a latency formatted `lat_format`)."""

    phase: str
    value: int | float
    probe: Callable[[list[float]], _Probe]
    slo_name: str  # TPOT or TTFT
    lat_format: str  # ".1f" or ".0f"
    key: str  # figures' name of the integer: "concurrency_per_device" or "requests_per_forward"
    label: str
    cap: int
    at: str  # where an HBM overflow happens: "at {v} sequences per device"
    slo_at: str  # where a missed SLO happens
    over_fix: Callable[[int | float], str]  # the HBM overflow's advice, given the largest that fits
    max_tag: str  # "B{m}" or "{m}"
    slo_fix: Callable[[int | float, float, float], str]  # the missed SLO's advice (largest, its per card, now)
    cap_text: str
    hbm_lead: str  # "decode concurrency ({v} per device)"
    short_of: str  # "{n}" or "one more request"
    one_more: str  # "one more sequence per device ({n})"
    none_lead: str  # "nothing binds decode concurrency: {n} sequences per device"
    could: str  # "run more"
    step: float = 1.0  # the next value is value + step (a fraction below one device's sequence: 1 / TP)
    fine_step: float = 1.0  # the axis's step below `fine_below` (1 / TP on the decode axis), 1 above
    fine_below: float = 0.0


def above(value: float, limit: float, decimals: int) -> str:
    """`value` to `decimals` places, or to as many more as it takes to show it above `limit`:
    a figure just over its SLO prints as 100.04 ms > 100 ms, not 100.0 ms > 100 ms."""
    for d in range(decimals, decimals + 10):
        text = f"{value:.{d}f}"
        if float(text) > limit:
            return text
    return f"{value:.{decimals + 9}f}"


def _vs(value: float, limit: float, decimals: int, noun: str = "") -> str:
    """'V ms >' when the value is above the limit (shown with the places that tell), 'V ms ~' when it is
    within the tables' rounding below it: the text before the limit in a "gives ... 100 ms" line."""
    if value > limit:
        return f"{above(value, limit, decimals)} ms{noun} >"
    return f"{value:.{decimals}f} ms{noun} ~"


def _decimals(fmt: str) -> int:
    """Decimal places of a format spec such as '.1f'."""
    match = re.search(r"\.(\d+)f", fmt)
    return int(match.group(1)) if match else 0


def _largest_ok(axis: _Axis, upto: float, slo_ms: float | None) -> tuple[int | float, float]:
    """Largest value <= upto of the axis (multiples of its fine step below `fine_below`, of its step
    above) that fits HBM and meets the SLO, with its tokens/s per card."""
    fine = min(upto, axis.fine_below - 1e-9)
    values: list[int | float] = [
        integral_as_int(k * axis.fine_step) for k in range(1, math.floor(max(fine, 0) / axis.fine_step + 1e-9) + 1)
    ]
    start = max(axis.fine_below, axis.step)
    steps = math.floor((upto - start) / axis.step + 1e-9) + 1 if upto >= start - 1e-9 else 0
    values += [integral_as_int(start + k * axis.step) for k in range(max(0, steps))]
    values = values or [integral_as_int(axis.step)]
    f = axis.probe([float(v) for v in values])
    ok = f.total_bytes <= f.capacity_bytes
    if slo_ms is not None:
        ok &= f.latency_ms <= slo_ms
    if not ok.any():
        return 0, 0.0
    i = int(np.flatnonzero(ok)[-1])
    return values[i], float(f.per_card[i])


def _sequence_step(concurrency_per_device: int | float, tp: int, fractional_below: float) -> float:
    """The next concurrency the search tries: one more sequence per attention TP group (1/tp a device)
    below `fractional_below` per device when tp is a power of two (the decode axis,
    planner.candidates.tables.FRACTIONAL_BELOW), or below one sequence a device (a plan file may state
    it); one more sequence per device above."""
    fractional = concurrency_per_device < fractional_below - 1e-9 and steps_per_group_sequence(tp)
    return 1 / tp if fractional or not float(concurrency_per_device).is_integer() else 1.0


def _axis_binding(axis: _Axis, slo: float | None, itl_ms: float | None = None) -> Binding:
    """What stops the phase's value from going one step higher (or which rule it already breaks);
    `itl_ms`: the limit on the step (the gap between two emissions) a decode axis is held to too."""
    v = axis.value
    nxt = integral_as_int(v + axis.step)
    f = axis.probe([v, nxt])
    lat, total, cap = f.latency_ms, f.total_bytes, f.capacity_bytes
    name, label, fmt = axis.slo_name, axis.label, axis.lat_format
    words = {"v": v, "n": nxt}

    if total[0] > cap:
        m, _ = _largest_ok(axis, v - axis.step, None)
        over = (total[0] - cap) / GIB
        return Binding(
            axis.phase,
            "hbm",
            f"{axis.phase} overflows HBM by {over:.2f} GiB per device {axis.at.format(**words)}; {axis.over_fix(m)}.",
            f"{label}: HBM over by {over:.2f} GiB (max {axis.max_tag.format(m=m)})",
            True,
            {"over_bytes": float(total[0] - cap), f"max_{axis.key}": m},
        )
    if slo is not None and lat[0] > slo + 1e-9:
        m, m_card = _largest_ok(axis, v - axis.step, slo)
        over = above(lat[0], slo, _decimals(fmt))
        figures = {f"{name.lower()}_ms": float(lat[0]), "slo_ms": slo, f"max_{axis.key}": m}
        if axis.phase == "decode":
            figures["tokens_per_s_per_card_at_max"] = m_card
        return Binding(
            axis.phase,
            name.lower(),  # type: ignore[arg-type]
            f"{axis.phase} misses the {name} SLO: {over} ms > {slo:g} ms {axis.slo_at.format(**words)}; "
            f"{axis.slo_fix(m, m_card, float(f.per_card[0]))}.",
            f"{label}: misses {name} ({over} ms > {slo:g} ms; max {axis.max_tag.format(m=m)})",
            True,
            figures,
        )
    step = f.step_ms if itl_ms is not None else None  # None: no limit on the step to hold
    if step is not None and itl_ms is not None and step[0] > itl_ms + 1e-9:
        over = above(float(step[0]), itl_ms, 1)
        return Binding(
            axis.phase,
            "itl",
            f"{axis.phase} breaks the ITL limit: a {over} ms step > {itl_ms:g} ms {axis.slo_at.format(**words)}; "
            "lower the concurrency or re-plan.",
            f"{label}: breaks ITL ({over} ms > {itl_ms:g} ms)",
            True,
            {"step_ms": float(step[0]), "itl_ms": itl_ms},
        )
    if v >= axis.cap:
        return Binding(axis.phase, "search_space", axis.cap_text, f"{label}: search cap {axis.cap}")
    short = total[1] - cap
    if short > -ROUNDING_BYTES:
        detail = (
            f"{short / GIB:.2f} GiB short of {axis.short_of.format(**words)}"
            if short > 0
            else f"{axis.short_of.format(**words)} would leave {-short / 2**20:.1f} MiB, inside the search's MiB "
            "rounding"
        )
        return Binding(
            axis.phase,
            "hbm",
            f"{axis.hbm_lead.format(**words)} is capped by HBM: {detail}.",
            f"{label}: HBM ({max(short, 0) / GIB:.2f} GiB short of {axis.max_tag.format(m=nxt)})",
            figures={"short_bytes": float(short), f"next_{axis.key}": nxt},
        )
    if slo is not None and lat[1] > slo - ROUNDING_MS:
        rel = ">" if lat[1] > slo else "~"
        shown = above(lat[1], slo, _decimals(fmt)) if rel == ">" else f"{lat[1]:{fmt}}"
        return Binding(
            axis.phase,
            name.lower(),  # type: ignore[arg-type]
            f"{name} binds: {axis.one_more.format(**words)} gives {shown} ms {rel} {slo:g} ms.",
            f"{label}: {name} ({axis.max_tag.format(m=nxt)} gives {shown} ms {rel} {slo:g} ms)",
            figures={f"next_{name.lower()}_ms": float(lat[1]), "slo_ms": slo, f"next_{axis.key}": nxt},
        )
    if step is not None and itl_ms is not None and step[1] > itl_ms - ROUNDING_MS:
        shown = _vs(float(step[1]), itl_ms, 1, " step")
        return Binding(
            axis.phase,
            "itl",
            f"ITL binds: {axis.one_more.format(**words)} gives a {shown} {itl_ms:g} ms (the gap between two tokens).",
            f"{label}: ITL ({axis.max_tag.format(m=nxt)} gives a {shown} {itl_ms:g} ms)",
            figures={"next_step_ms": float(step[1]), "itl_ms": itl_ms, f"next_{axis.key}": nxt},
        )
    slo_txt = f" <= {slo:g} ms" if slo is not None else f", no {name} SLO"
    return Binding(
        axis.phase,
        "none",
        f"{axis.none_lead.format(**words)} still fit HBM ({(cap - total[1]) / GIB:.2f} GiB free) and give "
        f"{lat[1]:{fmt}} ms{slo_txt}; the plan could {axis.could}.",
        f"{label}: nothing binds ({axis.max_tag.format(m=nxt)} allowed)",
        figures={f"next_{name.lower()}_ms": float(lat[1]), "next_free_bytes": float(cap - total[1])},
    )


def _concurrency_axis(
    phase: str,
    what: str,
    b: int | float,
    probe: Callable[[list[float]], _Probe],
    per: str,
    cap: int,
    tp: int,
    fractional_below: float,
) -> _Axis:
    """The concurrency axis of a decode or AFD instance (every whole value to `cap` is searched): `what`
    names it ('decode', 'AFD'), `per` what it counts per ('device', 'attention device'). Below
    `fractional_below` a device (the decode and AFD searches' FRACTIONAL_BELOW), and at any fraction a plan
    states, it steps by one sequence per attention TP group of `tp`, 1/tp a device (`_sequence_step`)."""
    step = _sequence_step(b, tp, fractional_below)
    one_more = (
        f"one more sequence per attention TP group ({{n}} per {per})"
        if step < 1
        else f"one more sequence per {per} ({{n}})"
    )

    def slo_fix(m: int | float, m_card: float, now: float) -> str:
        if not m:
            return "no concurrency meets it with these layouts: re-plan"
        return f"at most {m} per {per} meet it ({m_card:.0f} tokens/s per card instead of {now:.0f})"

    return _Axis(
        phase=phase,
        value=b,
        probe=probe,
        slo_name="TPOT",
        lat_format=".1f",
        key="concurrency_per_device",
        label=f"{what} B{b}",
        cap=cap,
        at=f"at {{v}} sequences per {per}",
        slo_at=f"at {{v}} sequences per {per}",
        over_fix=lambda m: f"at most {m} fit" if m else "not even one sequence fits with these layouts",
        max_tag="B{m}",
        slo_fix=slo_fix,
        cap_text=f"search space binds: {what} concurrency is at the search's cap of {cap} per {per}.",
        hbm_lead=f"{what} concurrency ({{v}} per {per})",
        short_of="{n}",
        one_more=one_more,
        none_lead=f"nothing binds {what} concurrency: {{n}} sequences per {per}",
        could="run more",
        step=step,
        fine_step=1 / tp if steps_per_group_sequence(tp) else 1.0,
        fine_below=fractional_below,
    )


def decode_binding(
    ctx: CostContext,
    phase: DecodePlan,
    tpot_slo_ms: float | None,
    tpot_factor: float = 1.0,
    max_itl_ms: float | None = None,
) -> Binding:
    """What stops the decode concurrency from going one higher (or which rule it already breaks);
    `tpot_factor`: the TPOT the SLO judges over the mean (planner.costmodel.acceptance_spread.slo_tpot_factor);
    `max_itl_ms`: the limit on the step (--max-itl-ms), which binds like the SLO."""

    def probe(bs: list[float]) -> _Probe:
        step = decode_step(ctx, phase, np.array(bs, dtype=float))
        use = decode_hbm(ctx, phase, np.array(bs, dtype=float))
        per_card = np.asarray(step.tokens_per_s_per_device) * ctx.hw.devices_per_card
        tpot = np.asarray(step.tpot_s) * 1e3 * tpot_factor
        step_ms = np.asarray(step.step_s) * 1e3
        return _Probe(tpot, np.asarray(use.total_bytes), float(use.capacity_bytes), per_card, step_ms)

    axis = _concurrency_axis(
        "decode",
        "decode",
        phase.concurrency_per_device,
        probe,
        "device",
        MAX_CONCURRENCY,
        phase.attention.tp,
        FRACTIONAL_BELOW,
    )
    return _axis_binding(axis, tpot_slo_ms, max_itl_ms)


def afd_binding(
    ctx: CostContext,
    section: AfdPlan,
    tpot_slo_ms: float | None,
    tpot_factor: float = 1.0,
    max_itl_ms: float | None = None,
) -> Binding:
    """What stops an AFD instance's concurrency per attention device from going one higher (HBM of
    either side, TPOT, the ITL limit), as decode_binding says it for a decode instance."""
    from planner.candidates.afd_candidates import MAX_CONCURRENCY as AFD_MAX_CONCURRENCY
    from planner.costmodel.afd import afd_decode_step, afd_hbm

    def probe(bs: list[float]) -> _Probe:
        b = np.array(bs, dtype=float)
        step = afd_decode_step(ctx, section, b)
        att, ffn = afd_hbm(ctx, section, b, section.prefill_batch_tokens)
        per_card = np.asarray(step.tokens_per_s_per_device) * ctx.hw.devices_per_card
        used = np.maximum(np.asarray(att.total_bytes), np.asarray(ffn.total_bytes))
        tpot = np.asarray(step.tpot_s) * 1e3 * tpot_factor
        return _Probe(tpot, used, float(att.capacity_bytes), per_card, np.asarray(step.step_s) * 1e3)

    b = section.concurrency_per_device
    tp = section.attention.tp
    axis = _concurrency_axis("afd", "AFD", b, probe, "attention device", AFD_MAX_CONCURRENCY, tp, FRACTIONAL_BELOW)
    return _axis_binding(axis, tpot_slo_ms, max_itl_ms)


def prefill_binding(ctx: CostContext, phase: PrefillPlan, ttft_slo_ms: float | None) -> Binding:
    """What stops the prefill batch from taking one more request (or which rule it breaks)."""
    n_in = ctx.prefill_tokens_per_request  # computed tokens per request (prefix hits are not)
    bt = phase.batch_tokens
    r = max(1, bt // n_in)

    def probe(rs: list[float]) -> _Probe:  # whole requests: the axis steps by 1
        # the plan's own batch as it is and one request more; smaller batches as whole requests
        shifted = {r: bt, r + 1: bt + n_in}
        tokens = np.array([shifted.get(int(x), max(int(x) * n_in, phase.micro_batches)) for x in rs], dtype=float)
        fwd = prefill_forward(ctx, phase, tokens)
        use = prefill_hbm(ctx, phase, tokens)
        zeros = np.zeros(len(rs))
        return _Probe(np.asarray(fwd.ttft_s) * 1e3, np.asarray(use.total_bytes), float(use.capacity_bytes), zeros)

    axis = _Axis(
        phase="prefill",
        value=r,
        probe=probe,
        slo_name="TTFT",
        lat_format=".0f",
        key="requests_per_forward",
        label=f"prefill {r} req/forward",
        cap=MAX_REQUESTS_PER_FORWARD,
        at=f"at {bt} tokens per forward",
        slo_at="at {v} requests per forward",
        over_fix=lambda m: f"at most {m} requests ({m * n_in} tokens) fit",
        max_tag="{m}",
        slo_fix=lambda m, _c, _n: (
            f"at most {m} requests per forward meet it" if m else "no batch meets it with these layouts: re-plan"
        ),
        cap_text="search space binds: the prefill batch is at the search's cap of "
        f"{MAX_REQUESTS_PER_FORWARD} requests per forward.",
        hbm_lead=f"prefill batch ({{v}} requests, {bt} tokens per forward)",
        short_of="one more request",
        one_more="one more request per forward ({n})",
        none_lead="nothing binds the prefill batch: {n} requests per forward",
        could="batch more",
    )
    return _axis_binding(axis, ttft_slo_ms)


# ---- colocated ---------------------------------------------------------------------------------


def _colocated_figures(plan: Plan, ctx: CostContext) -> ColocatedPrediction:
    """The `colocated` block of a colocated plan (scored with the cost model, as evaluate does)."""
    specs = PlanSpecs(ctx.model, ctx.hw, ctx.quant)
    pred = evaluate_plan(plan, imbalance=ctx.imbalance, specs=specs)
    assert pred.colocated is not None
    return pred.colocated


def _judged_tpot(slo: SLO | None, block: ColocatedPrediction) -> float:
    """The TPOT the SLO judges: the mean, or with `slo.tpot_at_percentile` the SLO-percentile request's (MTP)."""
    return slo_judged_tpot_ms(bool(slo and slo.tpot_at_percentile), block)[0]


def colocated_bindings(plan: Plan, ctx: CostContext) -> list[Binding]:
    """What stops a colocated instance (both phases on the same devices) from doing more.

    Its TPOT includes the decode stalls while a prefill forward runs, and one HBM holds both
    phases, so the neighbours (one more sequence per device, one more request per forward) are
    scored as whole colocated plans.
    """
    d, p = plan.decode_phase, plan.prefill_phase
    assert d is not None and p is not None
    slo = plan.slo
    tpot_slo = slo.tpot_ms if slo else None
    ttft_slo = slo.ttft_ms if slo else None
    now = _colocated_figures(plan.model_copy(update={"predicted": None}), ctx)
    b, n_in = d.concurrency_per_device, ctx.prefill_tokens_per_request
    r = max(1, p.batch_tokens // n_in)
    broken: list[tuple[Constraint, str]] = []
    if not now.fits_hbm:
        over = -now.hbm_headroom_bytes / GIB
        broken.append(("hbm", f"overflows HBM by {over:.2f} GiB per device"))
    if tpot_slo is not None and _judged_tpot(slo, now) > tpot_slo + 1e-9:
        broken.append(
            ("tpot", f"misses the TPOT SLO: {above(_judged_tpot(slo, now), tpot_slo, 1)} ms > {tpot_slo:g} ms")
        )
    if ttft_slo is not None and now.ttft_ms > ttft_slo + 1e-9:
        broken.append(("ttft", f"misses the TTFT SLO: {above(now.ttft_ms, ttft_slo, 0)} ms > {ttft_slo:g} ms"))
    itl_slo = slo.max_itl_ms if slo else None
    if itl_slo is not None and now.longest_decode_pause_ms > itl_slo + 1e-9:
        broken.append(
            ("itl", f"breaks the ITL limit: {above(now.longest_decode_pause_ms, itl_slo, 0)} ms > {itl_slo:g} ms")
        )
    if broken:
        kind, text = broken[0]
        return [
            Binding(
                "colocated",
                kind,
                f"colocated instance {text} (B{b}, {r} requests per forward).",
                f"colocated B{b}/{r} req: {text}",
                True,
            )
        ]

    section = plan.colocated
    assert section is not None

    def neighbour(label: str, update: Mapping[str, int | float]) -> tuple[Constraint, str, str]:
        moved = plan.model_copy(update={"colocated": section.model_copy(update=update), "predicted": None})
        f = _colocated_figures(moved, ctx)
        if f.hbm_headroom_bytes < ROUNDING_BYTES:
            short = max(-f.hbm_headroom_bytes, 0) / GIB
            return "hbm", f"capped by HBM: {short:.2f} GiB short of {label}", "HBM"
        if tpot_slo is not None and _judged_tpot(slo, f) > tpot_slo - ROUNDING_MS:
            return (
                "tpot",
                f"TPOT binds: {label} gives {_vs(_judged_tpot(slo, f), tpot_slo, 1)} {tpot_slo:g} ms (decode stalls "
                "during prefill included)",
                "TPOT",
            )
        if ttft_slo is not None and f.ttft_ms > ttft_slo - ROUNDING_MS:
            return "ttft", f"TTFT binds: {label} gives {_vs(f.ttft_ms, ttft_slo, 0)} {ttft_slo:g} ms", "TTFT"
        if itl_slo is not None and f.longest_decode_pause_ms > itl_slo - ROUNDING_MS:
            return (
                "itl",
                f"ITL binds: {label} gives a {_vs(f.longest_decode_pause_ms, itl_slo, 0, ' gap')} {itl_slo:g} ms",
                "ITL",
            )
        return "none", f"nothing binds: {label} is still allowed", "nothing binds"

    def at_cap(kind: Constraint, text: str, tag: str, cap: int, value: int | float, what: str, step: float = 1):
        # the search tries every value up to its cap: one more is allowed but beyond it
        if kind == "none" and value >= cap:
            return (
                "search_space",
                f"search space binds: {integral_as_int(value + step)} {what} would be allowed, but the search tries at "
                f"most {cap}",
                "search space",
            )
        return kind, text, tag

    out = []
    b_step = _sequence_step(b, section.attention.tp, FRACTIONAL_BELOW)
    more_seqs = {"concurrency_per_device": integral_as_int(b + b_step)}
    kind, text, tag = at_cap(
        *neighbour(f"{integral_as_int(b + b_step)} sequences per device", more_seqs),
        MAX_CONCURRENCY,
        b,
        "sequences per device",
        b_step,
    )
    message = f"colocated decode concurrency ({b} per device): {text}."
    out.append(Binding("decode", kind, message, f"colocated B{b}: {tag}"))
    if section.chunk_tokens is not None:
        chunk = section.chunk_tokens
        bigger = {"chunk_tokens": 2 * chunk, "prefill_batch_tokens": 2 * chunk}
        kind, text, tag = neighbour(f"{2 * chunk}-token chunks", bigger)
        largest = max(CHUNK_TOKENS_PER_DEVICE) * section.devices
        if kind == "none" and chunk >= largest:  # the search tries no larger chunk
            kind, tag = "search_space", "search space"
            text = (
                f"search space binds: {2 * chunk}-token chunks would be allowed, but the search tries at most "
                f"{max(CHUNK_TOKENS_PER_DEVICE)} prompt tokens per device and step"
            )
        message = f"colocated chunked prefill ({chunk} prompt tokens per step): {text}."
        # (the next chunk the search tries is twice this one: the tag names it, as the decode tags name B + 1)
        at = "" if kind in ("none", "search_space") else f" at {2 * chunk}"
        out.append(Binding("prefill", kind, message, f"colocated chunk {chunk}: {tag}{at}"))
        return out
    held = now.prompts_per_forward
    if held is not None and held <= r + 1e-9:
        # the forwards already hold fewer prompts than the batch (what a full instance admits): a
        # larger batch would run the same forwards (planner.costmodel.colocated), only its limits
        # grow; with r < held < r + 1 one more request would fill forwards more, so it is scored
        text = (
            f"admissions bind: a full instance admits about {held:.2f} prompts between forwards (the sequences "
            f"its decode steps finish), so a batch of {r + 1} would run the same forwards and serve no more"
        )
        message = f"colocated prefill batch ({r} requests per forward): {text}."
        out.append(Binding("prefill", "admission", message, f"colocated {r} req/forward: admissions bind"))
        return out
    more_requests = {"prefill_batch_tokens": (r + 1) * n_in}
    kind, text, tag = at_cap(
        *neighbour(f"{r + 1} requests per forward", more_requests),
        MAX_REQUESTS_PER_FORWARD,
        r,
        "requests per forward",
    )
    message = f"colocated prefill batch ({r} requests per forward): {text}."
    out.append(Binding("prefill", kind, message, f"colocated {r} req/forward: {tag}"))
    return out


# ---- deployment --------------------------------------------------------------------------------


def _instance_rates(plan: Plan, prediction: Prediction) -> tuple[float | None, float | None]:
    """Requests/s one decode instance and one prefill instance serve."""
    d_rps = p_rps = None
    if plan.is_colocated and prediction.system is not None and plan.decode_phase is not None:
        # one colocated instance serves both phases: count it once, as a decode instance
        return prediction.system.requests_per_s / plan.decode_phase.instances, None
    if plan.afd is not None and prediction.afd is not None:
        if prediction.colocated is not None and prediction.system is not None:  # AFD instances that prefill too
            return prediction.system.requests_per_s / plan.afd.instances, None
        d_rps = prediction.afd.tokens_per_s_per_device * plan.afd.devices / plan.workload.output_tokens
    if plan.decode_phase is not None and prediction.decode is not None:
        d = prediction.decode
        d_rps = d.tokens_per_s_per_device * plan.decode_phase.devices / plan.workload.output_tokens
    if plan.prefill_phase is not None and prediction.prefill is not None:
        p = prediction.prefill
        p_rps = p.requests_per_forward / (p.forward_ms / 1e3)
    return d_rps, p_rps


def decoding_section(plan: Plan) -> Any:
    """The section whose instances decode: the decode (or colocated) phase, or the AFD section."""
    return plan.afd if plan.afd is not None else plan.decode_phase


def cards_for_rate(plan: Plan, prediction: Prediction, hw: HardwareSpec, rate_per_s: float) -> float:
    """Cards this plan's instance configurations need to serve `rate_per_s` (instances scaled)."""
    d_rps, p_rps = _instance_rates(plan, prediction)
    devices = 0
    for phase, rps in ((decoding_section(plan), d_rps), (plan.prefill_phase, p_rps)):
        if phase is not None and rps:
            # 1e-4: the predicted figures are rounded to 4 digits; a plan serving its own rate needs
            # no extra instance for that rounding
            devices += math.ceil(rate_per_s / rps - 1e-4) * phase.devices
    return hw.cards(devices)


def _next_size(hw: HardwareSpec, devices: int, admits: Callable[[int], bool] | None = None) -> int | None:
    """The next instance size the search's space holds past `devices` (`admits`: a size the request's
    limits leave an expert layout for; None: every size)."""
    cap = hw.max_devices if hw.max_devices is not None else max(4 * devices, devices + hw.devices_per_node)
    larger = (s for s in instance_sizes(hw, cap, devices + 1) if s > devices)
    return next((s for s in larger if admits is None or admits(s)), None)


def size_admits(model: ModelSpec, req: PlanRequest) -> Callable[[int], bool]:
    """Whether the request's layout limits (--max-redundant-experts, its engine) leave an instance of n
    devices an expert layout: the search leaves sizes without one out (planner.search.candidate_spaces)."""
    from planner.candidates.space import moe_options
    from planner.search.candidate_spaces import request_limits

    if model.moe is None:
        return lambda n: True
    return lambda n: bool(moe_options(model, n, request_limits(req, n)))


def deployment_binding(
    plan: Plan,
    prediction: Prediction,
    hw: HardwareSpec,
    max_cards: float | None,
    rate_per_s: float | None,
    admits: Callable[[int], bool] | None = None,
) -> Binding:
    """What limits the deployment's size: the card budget, the target rate, or nothing (`admits`:
    `size_admits` of the request, when known)."""
    d_rps, p_rps = _instance_rates(plan, prediction)
    d_name = "AFD" if plan.afd is not None else "decode"
    phases = [
        (name, ph, rps)
        for name, ph, rps in ((d_name, decoding_section(plan), d_rps), ("prefill", plan.prefill_phase, p_rps))
        if ph is not None and rps
    ]
    if plan.is_colocated or (plan.afd is not None and plan.afd.prefill_batch_tokens is not None):
        phases = [("colocated", ph, rps) for _, ph, rps in phases]
    used = sum(ph.total_devices for _, ph, _ in phases)
    cards = hw.cards(used)
    budget = None if max_cards is None else int(math.floor(max_cards * hw.devices_per_card + 1e-9))
    spare = None if budget is None else budget - used
    if spare is not None and spare < 0:
        return Binding(
            "deployment",
            "card_budget",
            f"over the card budget: the deployment uses {cards:g} cards, {hw.cards(-spare):g} "
            f"more than --max-cards {max_cards:g} allows.",
            f"cards: over budget by {hw.cards(-spare):g}",
            True,
            {"cards": cards, "max_cards": float(max_cards or 0)},
        )
    caps = {name: ph.instances * rps for name, ph, rps in phases}
    served = min(caps.values()) if caps else 0.0
    limiting = min(caps, key=lambda k: caps[k]) if caps else "decode"
    if rate_per_s is not None:
        meets = served >= rate_per_s * (1 - 1e-9)
        # a plan sized elsewhere (a plan file, a base re-scored at a new rate) can serve more than the rate:
        # then one instance fewer of some phase would still serve it, and the rate did not set its size
        spare_phase = next(
            (
                name
                for name, ph, rps in phases
                if ph.instances > 1 and min(c - (rps if k == name else 0.0) for k, c in caps.items()) >= rate_per_s
            ),
            None,
        )
        if meets and spare_phase is not None:
            msg = (
                f"larger than the rate needs: {cards:g} cards serve {served:.2f} requests/s, more than the "
                f"{rate_per_s:g} asked; one {spare_phase} instance fewer would still serve it."
            )
        else:
            msg = (
                f"the rate sets the size: {cards:g} cards serve {served:.2f} requests/s "
                f"({'>=' if meets else '<'} the {rate_per_s:g} asked; {limiting} capacity binds)."
            )
        return Binding(
            "deployment",
            "rate",
            msg,
            f"rate: {cards:g} cards for {rate_per_s:g} req/s"
            + (" (more than it needs)" if meets and spare_phase is not None else ""),
            violated=not meets,
            figures={"cards": cards, "requests_per_s": served, "rate_per_s": rate_per_s},
        )
    out = plan.workload.output_tokens
    if len(phases) == 2:
        name, ph, rps = next(p for p in phases if p[0] == limiting)
        other = "prefill" if limiting == "decode" else "decode"
        grown = dict(caps)
        grown[limiting] += rps
        now = served * out / cards
        after = min(grown.values()) * out / hw.cards(used + ph.devices)
        if after > now * (1 + 1e-9):
            if spare is not None and ph.devices > spare:
                need = hw.cards(ph.devices - spare)
                return Binding(
                    "deployment",
                    "card_budget",
                    f"card budget binds: another {limiting} instance needs {need:g} more cards "
                    f"({hw.cards(spare):g} of {max_cards:g} spare); it would raise output "
                    f"tokens/s per card from {now:.0f} to {after:.0f}.",
                    f"cards: budget (another {limiting} instance needs {need:g} more)",
                    figures={"more_cards": need, "tokens_per_s_per_card_after": after},
                )
            lead = "no card budget given" if budget is None else "the card budget does not bind"
            return Binding(
                "deployment",
                "none",
                f"{lead}: another {limiting} instance fits and would raise output tokens/s per "
                f"card from {now:.0f} to {after:.0f}.",
                f"cards: another {limiting} instance fits",
                figures={"tokens_per_s_per_card_after": after},
            )
        return Binding(
            "deployment",
            "none",
            f"the card budget does not bind: another {limiting} instance would lower output "
            f"tokens/s per card ({now:.0f} -> {after:.0f}): {other} capacity would then bind.",
            f"cards: P:D balance ({limiting} limits; one more would idle {other})",
            figures={"tokens_per_s_per_card_after": after},
        )
    if not phases:
        return Binding("deployment", "none", "no phase to size.", "cards: -")
    name, ph, _ = phases[0]
    nxt = _next_size(hw, ph.devices, admits)
    if nxt is None:
        return Binding(
            "deployment",
            "search_space",
            f"the {name} instance spans {ph.devices} devices, the largest instance {hw.name} "
            "allows; more instances add capacity, not tokens/s per card.",
            f"cards: largest {hw.name} instance",
        )
    if budget is not None and nxt > budget:
        need = hw.cards(nxt - budget)
        return Binding(
            "deployment",
            "card_budget",
            f"the card budget may bind: it caps the {name} instance at {ph.devices} devices, and "
            f"the next instance size ({nxt} devices, {need:g} more cards) was not tried (more "
            "instances of this size add capacity, not tokens/s per card); re-plan with a larger "
            "--max-cards to see whether it helps.",
            f"cards: budget may cap instance size ({nxt} devices needs {need:g} more)",
            figures={"next_instance_devices": nxt, "more_cards": need},
            certain=False,
        )
    if budget is None:
        return Binding(
            "deployment",
            "none",
            f"no card budget given: the {name} instance size ({ph.devices} devices) is the "
            "plan's own choice; tokens/s per card does not grow with the instance count.",
            "cards: no budget",
        )
    return Binding(
        "deployment",
        "none",
        f"the card budget does not bind: {name} instances up to {budget} devices fit in it; "
        "tokens/s per card does not grow with the instance count.",
        "cards: budget does not bind",
    )


# ---- whole plans -------------------------------------------------------------------------------


def plan_bindings(
    plan: Plan,
    ctx: CostContext,
    max_cards: float | None = None,
    rate_per_s: float | None = None,
    admits: Callable[[int], bool] | None = None,
) -> list[Binding]:
    """Decode, prefill and deployment bindings of a plan (scored if it has no `predicted`)."""
    if plan.predicted:
        prediction = Prediction.model_validate(plan.predicted)
    else:
        prediction = evaluate_plan(plan, imbalance=ctx.imbalance, specs=PlanSpecs(ctx.model, ctx.hw, ctx.quant))
    slo = plan.slo
    out = []
    if plan.is_colocated:
        out.extend(colocated_bindings(plan, ctx))
    if plan.decode_phase is not None and not plan.is_colocated:
        factor = slo_tpot_factor(slo, ctx.workload, plan.decode_phase.mtp_tokens)
        itl = slo.max_itl_ms if slo else None
        out.append(decode_binding(ctx, plan.decode_phase, slo.tpot_ms if slo else None, factor, itl))
    if plan.afd is not None:
        factor = slo_tpot_factor(slo, ctx.workload, plan.afd.mtp_tokens)
        out.append(afd_binding(ctx, plan.afd, slo.tpot_ms if slo else None, factor, slo.max_itl_ms if slo else None))
    if plan.prefill_phase is not None and not plan.is_colocated:
        out.append(prefill_binding(ctx, plan.prefill_phase, slo.ttft_ms if slo else None))
    out.append(deployment_binding(plan, prediction, ctx.hw, max_cards, rate_per_s, admits))
    return out


def request_bindings(plan: Plan, req: PlanRequest) -> list[Binding]:
    """Bindings of a plan the search returned for `req` (its budget, rate and imbalance), judged in the cost
    context the search used (planner.search.contexts.make_context): a --robust request's at the slow end of
    every factor range, as `plan` says its 'why' line is."""
    if req.is_mixed:
        return mixed_request_bindings(plan, req)
    ctx = make_context(req)
    return plan_bindings(plan, ctx, req.max_cards, req.rate_per_s, size_admits(ctx.model, req))


def mixed_request_bindings(plan: Plan, req: PlanRequest) -> list[Binding]:
    """Phase bindings of a plan whose phases run on different machines (each on its own)."""
    contexts = phase_contexts(req)
    d_ctx, p_ctx = contexts.decode, contexts.prefill
    slo = plan.slo
    out = []
    if plan.decode is not None:
        factor = slo_tpot_factor(slo, d_ctx.workload, plan.decode.mtp_tokens)
        itl = slo.max_itl_ms if slo else None
        out.append(decode_binding(d_ctx, plan.decode, slo.tpot_ms if slo else None, factor, itl))
    if plan.prefill is not None:
        out.append(prefill_binding(p_ctx, plan.prefill, slo.ttft_ms if slo else None))
    return out


def outcome_bindings(outcome: SearchOutcome, index: int = 0) -> list[Binding]:
    """Bindings of the `index`-th plan of a search, under the request it answered."""
    return request_bindings(outcome.plans[index], outcome.request)


TAGS = {
    "hbm": "HBM",
    "tpot": "TPOT",
    "ttft": "TTFT",
    "itl": "ITL",
    "card_budget": "cards",
    "rate": "rate",
    "search_space": "space",
    "admission": "admits",
}


def binding_tags(bindings: list[Binding]) -> str:
    """A few characters for a table cell: e.g. "D:TPOT P:HBM cards" (nothing for 'none')."""
    prefix = {"decode": "D:", "prefill": "P:", "deployment": "", "colocated": "C:", "afd": "AFD:"}
    parts = [
        prefix.get(b.phase, "") + TAGS[b.constraint] + ("!" if b.violated else "") + ("?" if not b.certain else "")
        for b in bindings
        if b.constraint in TAGS
    ]
    return " ".join(parts) or "-"


def why_line(outcome: SearchOutcome, index: int = 0) -> str:
    """One line for `moeplan plan`: what binds the best plan, phase by phase.

    e.g. "why: decode B74: HBM (0.12 GiB short of B75); prefill 34 req/forward: TTFT (...);
    cards: budget (another decode instance needs 32 more)".
    """
    return "why: " + "; ".join(b.short for b in outcome_bindings(outcome, index))
