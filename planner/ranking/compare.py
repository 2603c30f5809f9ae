"""Two plans side by side: the choices each made and the figures each reaches, with deltas.

Choices are strings (a layout, a count) and are compared for equality; figures are numbers
(tokens/s, ms, GiB, cards) and get a delta and a relative change. Both come from the plan and
its `predicted` block only, so any scored plan can be compared with any other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from planner.costmodel.prediction import Prediction
from planner.ranking.binding import cards_for_rate
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import DecodePlan, PhasePlan, Plan, PrefillPlan

GIB = 1024.0**3

# figure key -> label (with unit); the order is the order of the report's rows
FIGURE_LABELS: dict[str, str] = {
    "output_tokens_per_s_per_card": "output tokens/s per card",
    "decode_tokens_per_s_per_card": "decode tokens/s per decode card",
    "tokens_per_s_per_user": "tokens/s per user",
    "tpot_ms": "TPOT ms",
    "tpot_at_acceptance_percentile_ms": "TPOT ms, SLO-percentile request (MTP)",
    "ttft_ms": "TTFT ms",
    "decode_hbm_headroom_gib": "decode (or colocated) HBM headroom GiB per device",
    "prefill_hbm_headroom_gib": "prefill HBM headroom GiB per device",
    "requests_per_s": "requests/s",
    "cards": "cards",
    "cards_for_rate": "cards for the rate",
}
# figures where lower is better (for the report's colours)
LOWER_IS_BETTER = {"tpot_ms", "tpot_at_acceptance_percentile_ms", "ttft_ms", "cards", "cards_for_rate"}


def _layout(phase: PhasePlan, module: str) -> str:
    if module == "attention":
        return phase.attention.short()
    if module == "dense_ffn":
        return phase.dense_layout.short() if phase.dense_ffn is not None else "-"
    if module == "moe":
        return phase.moe.short() if phase.moe is not None else "-"
    if module == "shared_expert":
        return phase.shared_expert.short()
    return phase.lm_head_layout.short()


def phase_choices(name: str, phase: PhasePlan | None, routed_experts: int | None) -> dict[str, str]:
    """One phase's choices: instances, size, layout per module, and its free integers."""
    keys = [
        "instances x devices",
        "attention",
        "dense FFN",
        "MoE",
        "shared expert",
        "LM head",
        "redundant expert slots",
    ]
    keys += (
        ["concurrency per device", "MTP draft tokens", "micro-batches"]
        if name == "decode"
        else ["tokens per forward", "micro-batches"]
    )
    if phase is None:
        return {f"{name} {k}": "-" for k in keys}
    out = {
        f"{name} instances x devices": f"{phase.instances} x {phase.devices}",
        f"{name} attention": _layout(phase, "attention"),
        f"{name} dense FFN": _layout(phase, "dense_ffn"),
        f"{name} MoE": _layout(phase, "moe"),
        f"{name} shared expert": _layout(phase, "shared_expert"),
        f"{name} LM head": _layout(phase, "lm_head"),
    }
    redundant = "-"
    if phase.moe is not None and routed_experts:
        redundant = str(phase.moe.ep * phase.moe.slots_per_device - routed_experts)
    out[f"{name} redundant expert slots"] = redundant
    if isinstance(phase, DecodePlan):
        out[f"{name} concurrency per device"] = str(phase.concurrency_per_device)
        out[f"{name} MTP draft tokens"] = str(phase.mtp_tokens)
        out[f"{name} micro-batches"] = str(phase.micro_batches)
    elif isinstance(phase, PrefillPlan):
        out[f"{name} tokens per forward"] = str(phase.batch_tokens)
        out[f"{name} micro-batches"] = str(phase.micro_batches)
    return out


def plan_devices(plan: Plan) -> int:
    """Devices a plan occupies (a colocated plan's two sections share theirs)."""
    if plan.is_colocated and plan.decode_phase is not None:
        return plan.decode_phase.total_devices
    return plan.total_devices


def pd_cards(plan: Plan, hw: HardwareSpec, sep: str = " : ") -> str:
    """Instances x cards per instance, prefill then decode ("1x16 : 1x32"), or "colocated 2x24".

    Counted in cards, as the card budget is (a CM384 card is a 910C package of two dies); an
    instance of an odd number of CM384 dies shows its half card. A phase on another machine than
    `hw` (prefill and decode on two machines) counts its own machine's cards.
    """
    mixed = any(getattr(p, "hardware", None) for p in (plan.prefill, plan.decode))

    def each(phase: Any) -> str:
        if phase is None:
            return "-"
        machine = hw
        if mixed:
            from planner.specs.catalog import load_hardware

            machine = load_hardware(getattr(phase, "hardware", None) or plan.hardware)
        return f"{phase.instances}x{machine.cards(phase.devices):g}"

    if plan.is_colocated and plan.decode_phase is not None:
        return f"colocated {each(plan.decode_phase)}"
    if plan.afd is not None:
        a = plan.afd
        afd = f"{a.instances}x({hw.cards(a.attention_devices):g}A+{hw.cards(a.ffn_devices):g}F)"
        if a.prefill_batch_tokens is not None:
            return f"AFD colocated {afd}"
        return each(plan.prefill_phase) + sep + afd
    return each(plan.prefill_phase) + sep + each(plan.decode_phase)


def afd_choices(plan: Plan) -> dict[str, str]:
    """The choices of an AFD section, as plan_choices lists a phase's."""
    a = plan.afd
    if a is None:
        return {}
    moe = a.moe.short() if a.moe is not None else "-"
    if a.shared_expert.placement == "dedicated":
        moe += f"+shared x{a.shared_expert.devices}"
    return {
        "afd instances x devices": f"{a.instances} x ({a.attention_devices} + {a.ffn_devices})",
        "afd attention": a.attention.short(),
        "afd LM head": a.lm_head_layout.short(),
        "afd MoE": moe,
        "afd dense FFN": f"{a.dense_layout.short()} on {a.dense_ffn_on}",
        "afd shared expert on": a.shared_expert_on,
        "afd link": a.link,
        "afd concurrency per attention device": str(a.concurrency_per_device),
        "afd MTP draft tokens": str(a.mtp_tokens),
        "afd micro-batches": str(a.micro_batches),
    }


def phase_hardware(plan: Plan) -> dict[str, str | None]:
    """The machine each phase section names (None: the plan's own, or no such section)."""
    return {name: getattr(sec, "hardware", None) for name, sec in (("prefill", plan.prefill), ("decode", plan.decode))}


def _mixed_hardware(plan: Plan) -> bool:
    """True when a phase runs on a machine of its own (its cards are counted on that machine)."""
    return any(phase_hardware(plan).values())


def plan_choices(plan: Plan, hw: HardwareSpec, model: ModelSpec | None) -> dict[str, str]:
    """Every choice of a plan: cards, P:D, and each phase's layouts and integers."""
    routed = model.moe.routed_experts if model is not None and model.moe is not None else None
    devices = plan_devices(plan)
    out = {"hardware": hw.name, "cards": f"{hw.cards(devices):g}", "P:D cards": pd_cards(plan, hw)}
    phase_hw = phase_hardware(plan)
    if any(phase_hw.values()):  # mixed hardware: each phase on its own machine
        out["hardware"] = " / ".join(f"{name} {v or plan.hardware}" for name, v in phase_hw.items())
        system = (plan.predicted or {}).get("system") or {}
        if "cards" in system:
            out["cards"] = f"{system['cards']:g}"
    out.update(phase_choices("decode", plan.decode_phase, routed))
    out.update(afd_choices(plan))
    prefill = phase_choices("prefill", plan.prefill_phase, routed)
    if plan.is_colocated:
        # the prefill section repeats the decode one's instances and layouts
        prefill = {k: v for k, v in prefill.items() if k in ("prefill tokens per forward", "prefill micro-batches")}
        chunk = plan.colocated.chunk_tokens if plan.colocated is not None else None
        prefill["prefill schedule"] = f"chunked, {chunk} tokens per step" if chunk else "whole forwards"
    out.update(prefill)
    return out


def plan_figures(plan: Plan, hw: HardwareSpec, rate_per_s: float | None = None) -> dict[str, float | None]:
    """The figures of a scored plan (None where a phase is absent)."""
    pred = Prediction.model_validate(plan.predicted or {"cost_model": "", "imbalance_model": ""})
    d, p, s = pred.decode, pred.prefill, pred.system
    devices = plan_devices(plan)
    c = pred.colocated if plan.is_colocated else None
    if s is not None:
        headline = s.output_tokens_per_s_per_card
    elif d is not None:
        headline = d.tokens_per_s_per_card
    else:
        headline = None
    requests = None
    if s is not None:
        requests = s.requests_per_s
    elif d is not None and plan.decode_phase is not None:
        requests = d.tokens_per_s_per_device * plan.decode_phase.total_devices / plan.workload.output_tokens
    elif p is not None and plan.prefill_phase is not None:
        requests = plan.prefill_phase.instances * p.requests_per_forward / (p.forward_ms / 1e3)
    if c is not None:
        # one colocated instance: its own TPOT (with prefill stalls), TTFT and HBM for both phases
        return {
            "output_tokens_per_s_per_card": headline,
            "decode_tokens_per_s_per_card": None,
            "tokens_per_s_per_user": c.tokens_per_s_per_user,
            "tpot_ms": c.tpot_ms,
            "tpot_at_acceptance_percentile_ms": c.tpot_at_acceptance_percentile_ms,
            "ttft_ms": c.ttft_ms,
            "decode_hbm_headroom_gib": c.hbm_headroom_bytes / GIB,  # one instance holds both phases
            "prefill_hbm_headroom_gib": None,
            "requests_per_s": requests,
            "cards": hw.cards(devices),
            "cards_for_rate": cards_for_rate(plan, pred, hw, rate_per_s) if rate_per_s else None,
        }
    return {
        "output_tokens_per_s_per_card": headline,
        "decode_tokens_per_s_per_card": d.tokens_per_s_per_card if d else None,
        "tokens_per_s_per_user": d.tokens_per_s_per_user if d else None,
        "tpot_ms": d.tpot_ms if d else None,
        "tpot_at_acceptance_percentile_ms": d.tpot_at_acceptance_percentile_ms if d else None,
        "ttft_ms": p.ttft_ms if p else None,
        "decode_hbm_headroom_gib": d.hbm_headroom_bytes / GIB if d else None,
        "prefill_hbm_headroom_gib": p.hbm_headroom_bytes / GIB if p else None,
        "requests_per_s": requests,
        # mixed hardware (either phase naming its own machine): the system block sums each machine's cards
        "cards": s.cards if s is not None and _mixed_hardware(plan) else hw.cards(devices),
        "cards_for_rate": cards_for_rate(plan, pred, hw, rate_per_s) if rate_per_s else None,
    }


@dataclass(frozen=True)
class Change:
    """One choice or assumption that differs between two plans (or request)."""

    name: str
    base: object
    new: object

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


NEAR_ZERO_BASE = 0.05  # a base under 5% of the new value (a >20x change) gets no relative change


@dataclass(frozen=True)
class Delta:
    """One figure of two plans: base, new, new - base, and the relative change."""

    name: str
    label: str
    base: float | None
    new: float | None

    @property
    def delta(self) -> float | None:
        if self.base is None or self.new is None:
            return None
        return self.new - self.base

    @property
    def relative(self) -> float | None:
        """new / base - 1; None where a ratio misleads (a headroom, a sign change, a near-zero base:
        the absolute change says it then)."""
        if self.base is None or self.new is None or self.base == 0 or self.name.endswith("_headroom_gib"):
            return None
        if self.base * self.new < 0 or abs(self.base) < NEAR_ZERO_BASE * max(abs(self.base), abs(self.new)):
            return None
        return self.new / self.base - 1.0

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "label": self.label,
            "base": self.base,
            "new": self.new,
            "delta": self.delta,
            "relative": self.relative,
        }


def changed_choices(base: dict[str, str], new: dict[str, str]) -> list[Change]:
    """Choices whose value differs, in the order of `base`."""
    return [Change(k, base.get(k, "-"), new.get(k, "-")) for k in base if base.get(k, "-") != new.get(k, "-")]


def figure_deltas(base: dict[str, float | None], new: dict[str, float | None]) -> list[Delta]:
    """Every figure present in either plan, with its delta."""
    return [
        Delta(k, FIGURE_LABELS[k], base.get(k), new.get(k))
        for k in FIGURE_LABELS
        if base.get(k) is not None or new.get(k) is not None
    ]
