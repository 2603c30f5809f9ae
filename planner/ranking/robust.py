"""How sure the ranking is: bands on ranked plans, whether rank 1's lead survives them, what it rests on.

Bands come from `planner.costmodel.uncertainty` (every factor at an end of its range). Two plans
share the machine, so their errors are correlated: rank 1's lead over rank 2 is judged under the
same factor scenarios for both plans (both corners, then each factor alone at either end), not by
overlapping two independent bands. The lead is *inside the band* when some scenario puts rank 2
level with or ahead of rank 1.

What the lead rests on: the two plans' costs per output token per card (decode step, or prefill
forward for prefill-only plans) split by module, with the MoE part split into expert compute and
expert balance (the MoE time the busiest device adds over the mean one: moe x (1 - 1/imbalance)).
When one term gives at least `DOMINANT_SHARE` of the lead it is named, with how uncertain that
term is (its relative spread over the scenarios; expert balance is not covered by the factor
ranges at all: the imbalance model is the least certain term, see planner/costmodel/imbalance.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, plan_with_prediction
from planner.costmodel.imbalance import ImbalanceModel
from planner.costmodel.prediction import Prediction
from planner.costmodel.uncertainty import FactorScenario, prediction_uncertainty, scenarios, with_uncertainty
from planner.specs.plan import Plan

DOMINANT_SHARE = 0.5
EXPERT_BALANCE = "expert balance"
TERM_LABELS = {
    "attention": "attention compute",
    "attention_comm": "attention collectives",
    "dense_ffn": "dense FFN",
    "dense_ffn_comm": "dense FFN collectives",
    "moe": "expert compute",
    "moe_comm": "MoE dispatch/combine",
    "lm_head": "LM head",
    "lm_head_comm": "LM head collectives",
    "mtp": "MTP",
    "micro_batch_overlap": "micro-batch overlap",
    "launch_overhead": "launch costs",
}


def headline_of(prediction: Prediction) -> float:
    """The figure plans are ranked by: output tokens/s per card (system, else decode or AFD, else prefill)."""
    if prediction.system is not None:
        return prediction.system.output_tokens_per_s_per_card
    if prediction.decode is not None:
        return prediction.decode.tokens_per_s_per_card
    if prediction.afd is not None:
        return prediction.afd.tokens_per_s_per_card
    return prediction.prefill.tokens_per_s_per_card if prediction.prefill is not None else 0.0


def headline_band(prediction: Prediction) -> tuple[float, float, float] | None:
    """(low, mid, high) of the headline figure, when the prediction carries a band."""
    u = prediction.uncertainty
    if u is None:
        return None
    for block, figure in (
        ("system", "output_tokens_per_s_per_card"),
        ("decode", "tokens_per_s_per_card"),
        ("afd", "tokens_per_s_per_card"),
        ("prefill", "tokens_per_s_per_card"),
    ):
        b = u.bands.get(block, {}).get(figure)
        if b is not None:
            return b.low, b.mid, b.high
    return None


def with_band(plan: Plan, specs: PlanSpecs, imbalance: ImbalanceModel | None) -> Plan:
    """The plan re-scored on `specs` with its band attached to `predicted`."""
    mid = evaluate_plan(plan, imbalance=imbalance, specs=specs)
    return plan_with_prediction(plan, with_uncertainty(mid, prediction_uncertainty(plan, specs, mid, None, imbalance)))


def rank_by_low_end(plans: list[Plan]) -> list[Plan]:
    """Plans re-ranked by the pessimistic end of their headline band (ties: by the mid value)."""

    def key(p: Plan) -> tuple[float, float]:
        band = headline_band(Prediction.model_validate(p.predicted))
        return (-(band[0] if band else 0.0), -(band[1] if band else 0.0))

    ordered = sorted(plans, key=key)
    return [p.model_copy(update={"rank": i + 1}) for i, p in enumerate(ordered)]


def per_token_terms(prediction: Prediction, plan: Plan, devices_per_card: int) -> dict[str, float]:
    """Milliseconds per output (or input) token per card, by term."""
    # plan format v2 names the phases the cost model uses decode_phase / prefill_phase
    d, phase = prediction.decode, getattr(plan, "decode_phase", plan.decode)
    pre = getattr(plan, "prefill_phase", plan.prefill)
    if d is not None and phase is not None:
        tokens = phase.concurrency_per_device * d.tokens_per_step_per_sequence * devices_per_card
        parts, imb = d.breakdown_ms, d.moe_imbalance
    elif prediction.prefill is not None and pre is not None:
        tokens = pre.batch_tokens / pre.devices * devices_per_card
        parts, imb = prediction.prefill.breakdown_ms, prediction.prefill.moe_imbalance
    else:
        return {}
    out: dict[str, float] = {}
    for key, ms in parts.items():
        if key == "moe" and imb > 0:
            mean_ms, balance_ms = split_expert_balance(ms, imb)
            out[EXPERT_BALANCE] = balance_ms / tokens
            out[TERM_LABELS["moe"]] = mean_ms / tokens
        else:
            out[TERM_LABELS.get(key, key)] = ms / tokens
    return out


def split_expert_balance(moe_ms: float, imbalance: float) -> tuple[float, float]:
    """The MoE time of the busiest device as (what the mean device takes, what the busiest adds over it)."""
    if imbalance <= 0:
        return moe_ms, 0.0
    return moe_ms / imbalance, moe_ms * (1.0 - 1.0 / imbalance)


@dataclass
class LeadVerdict:
    """Rank 1 against rank 2 under shared factor scenarios."""

    lead: float  # headline difference at the predicted factors
    lead_fraction: float
    worst_lead: float
    worst_scenario: str
    inside_band: bool
    dominant_term: str | None
    dominant_share: float
    term_spread: dict[str, float]
    ranged: bool = True  # some factor range of the machine file moves either plan's headline
    ranked_pessimistic: bool = False  # the plans were ranked at the slow end of the band (--robust)
    unit: str = "tok/s/card"  # of the figure compared (tok/s with --objective total)

    def lines(self) -> list[str]:
        """What `moeplan plan` prints under the ranked table: a lead that rounds to zero is a tie, and
        a gap is always written as a positive figure for the plan that is ahead."""
        out = []
        tied = round(self.lead, 1) == 0
        unit = self.unit
        if not self.ranged:
            head = (
                f"rank 1 and rank 2 are tied (0.0 {unit}); the tie"
                if tied
                else f"rank 1's lead over rank 2 ({self.lead:+.1f} {unit}, {self.lead_fraction:+.1%})"
            )
            out.append(
                f"{head} is not tested against factor ranges: no range in the machine file moves either plan's "
                "figures, so they carry no uncertainty band."
            )
            return out
        if self.lead < 0 or tied:
            why = (
                "rank 1 leads at the pessimistic end of the band (--robust ranks by it)."
                if self.ranked_pessimistic
                else "the search ranks by its integer cost tables (every time rounded up to whole microseconds), "
                "so plans this close are a tie."
            )
            where = (
                f"at the predicted factors rank 1 and rank 2 are tied (0.0 {unit})"
                if tied
                else f"at the predicted factors rank 2 is ahead of rank 1 by {-self.lead:.1f} {unit} "
                f"({-self.lead_fraction:.2%})"
            )
            out.append(f"{where}: {why}")
            return out
        lead = f"rank 1's lead over rank 2 ({self.lead:+.1f} {unit}, {self.lead_fraction:+.1%})"
        if self.inside_band:
            worst = (
                "the two are tied"
                if round(self.worst_lead, 1) == 0
                else f"rank 2 is ahead by {-self.worst_lead:.1f} {unit}"
            )
            out.append(
                f"{lead} is inside the uncertainty band: with {self.worst_scenario} (same factors for both plans) "
                f"{worst}."
            )
        else:
            out.append(
                f"{lead} holds at every end of the factor ranges (smallest: {self.worst_lead:+.1f} with "
                f"{self.worst_scenario})."
            )
        if self.dominant_term is not None:
            if self.dominant_term == EXPERT_BALANCE:
                certainty = "the least certain term: the imbalance model is not covered by the factor ranges"
            else:
                spread = self.term_spread.get(self.dominant_term, 0.0)
                least = max(self.term_spread, key=lambda k: self.term_spread[k]) if self.term_spread else None
                # terms that give the lead only: the least certain among them
                certainty = f"that part of the lead moves by ±{spread:.0%} over the factor ranges" + (
                    ", the least certain term" if least == self.dominant_term else ""
                )
            part = (
                f"{self.dominant_share:.0%} of it"
                if self.dominant_share <= 1.0
                else "more than all of it: other terms favour rank 2"
            )
            out.append(f"the lead comes from {self.dominant_term} ({part}; {certainty}).")
        return out


def _evaluate(
    plan: Plan, sc: FactorScenario, specs: PlanSpecs, imbalance: ImbalanceModel | None, mid: Prediction
) -> Prediction:
    """`plan` under the scenario; `mid` is its prediction on `specs` (HBM figures are taken over)."""
    return evaluate_plan(plan, imbalance=imbalance, specs=PlanSpecs(specs.model, sc.hw, specs.quant), hbm_from=mid)


def lead_verdict(
    first: Plan,
    second: Plan,
    specs: PlanSpecs,
    imbalance: ImbalanceModel | None,
    ranked_pessimistic: bool = False,
    cards: tuple[float, float] | None = None,
) -> LeadVerdict:
    """Does rank 1 stay ahead of rank 2 under every factor scenario, and which term gives its lead
    (`ranked_pessimistic`: the list was ranked at the slow end of the band, --robust). The figure
    compared is tokens/s per card, or with `cards` (each plan's, --objective total) tokens/s of the
    whole deployment."""
    scale = cards or (1.0, 1.0)

    def figure(prediction: Prediction, which: int) -> float:
        return headline_of(prediction) * scale[which]

    p1 = evaluate_plan(first, imbalance=imbalance, specs=specs)
    p2 = evaluate_plan(second, imbalance=imbalance, specs=specs)
    lead = figure(p1, 0) - figure(p2, 1)
    worst, worst_label = lead, "the predicted factors"
    dpc = specs.hw.devices_per_card

    def savings(a: Prediction, b: Prediction) -> dict[str, float]:
        ta, tb = per_token_terms(a, first, dpc), per_token_terms(b, second, dpc)
        return {k: tb.get(k, 0.0) - ta.get(k, 0.0) for k in set(ta) | set(tb)}

    saving = savings(p1, p2)
    samples: dict[str, list[float]] = {k: [v] for k, v in saving.items()}
    moved = False
    for sc in scenarios(specs.hw):
        s1, s2 = _evaluate(first, sc, specs, imbalance, p1), _evaluate(second, sc, specs, imbalance, p2)
        moved = moved or headline_of(s1) != headline_of(p1) or headline_of(s2) != headline_of(p2)
        gap = figure(s1, 0) - figure(s2, 1)
        if gap < worst:
            worst, worst_label = gap, sc.label
        for k, v in savings(s1, s2).items():
            samples.setdefault(k, []).append(v)
    # how far each term's contribution to the lead moves over the scenarios, relative to its predicted size
    spread = {k: (max(v) - min(v)) / 2 / abs(v[0]) for k, v in samples.items() if v and abs(v[0]) > 0}
    total = sum(saving.values())
    dominant, share = None, 0.0
    if total > 0:
        k = max(saving, key=lambda x: saving[x])
        if saving[k] >= DOMINANT_SHARE * total:
            dominant, share = k, saving[k] / total
    base = figure(p2, 1)
    return LeadVerdict(
        lead=lead,
        lead_fraction=lead / base if base else 0.0,
        worst_lead=worst,
        worst_scenario=worst_label,
        inside_band=worst <= 0.0,
        dominant_term=dominant,
        dominant_share=share,
        term_spread=spread,
        ranged=moved,
        ranked_pessimistic=ranked_pessimistic,
        unit="tok/s" if cards is not None else "tok/s/card",
    )


def band_cell(plan: Plan) -> str:
    """'low-high' of the headline for the ranked table."""
    if not plan.predicted:
        return "-"
    band = headline_band(Prediction.model_validate(plan.predicted))
    if band is None or band[0] == band[2]:  # (no factor has a range: no band)
        return "-"
    return f"{band[0]:.0f}-{band[2]:.0f}"


def tpot_band_cell(plan: Plan) -> str:
    """'low-high' of TPOT (decode, colocated or AFD) for the ranked table."""
    u: Any = (plan.predicted or {}).get("uncertainty")
    if not u:
        return "-"
    for block in ("colocated", "decode", "afd"):
        b = u.get("bands", {}).get(block, {}).get("tpot_ms")
        if b:
            return "-" if b["low"] == b["high"] else f"{b['low']:.1f}-{b['high']:.1f}"
    return "-"
