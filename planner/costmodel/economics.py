"""Cost and energy of a plan at its predicted throughput: money per million tokens, joules per token.

    power (W)          = sum over machines of cards x power_w_per_card + nodes x node_power_w
    joules per token   = power / tokens per second
    price per hour     = sum over machines of cards x price_per_card_hour
    cost per M tokens  = price per hour / (tokens per second x 3600) x 10^6

Tokens per second are the plan's: the whole deployment's output (and input + output, "total")
tokens when the plan has both phases (prefill and decode matched, or colocated instances); a
decode-only plan has no prefill cards, so only its output tokens are priced, and a prefill-only
plan only its input tokens. Each phase is priced on its own machine (mixed-hardware plans). Power
comes from the hardware file (`power_w_per_card`, with what it covers: the card alone, an all-in
share of the system, or a stated assumption), prices only from the user (`price_per_card_hour`):
a figure that lacks either is left out and `missing` says which field to add.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.costmodel.prediction import EconomicsPrediction, Prediction
from planner.errors import BadInputError
from planner.specs.hardware import HardwareSpec

SECONDS_PER_HOUR = 3600.0
PER_MILLION = 1e6


@dataclass(frozen=True)
class PricedPart:
    """Devices of one phase of a plan on one machine."""

    phase: str
    hw: HardwareSpec
    devices: int


def _throughput(prediction: Prediction, parts: list[PricedPart]) -> tuple[float | None, float | None, str]:
    """(output tokens/s, input + output tokens/s, what they cover) of the priced devices."""
    s = prediction.system
    if s is not None:
        return s.output_tokens_per_s, s.output_tokens_per_s + s.input_tokens_per_s, "the whole deployment"
    devices = sum(p.devices for p in parts)
    if prediction.afd is not None:
        return prediction.afd.tokens_per_s_per_device * devices, None, "decode only (the plan has no prefill cards)"
    if prediction.decode is not None:
        return prediction.decode.tokens_per_s_per_device * devices, None, "decode only (the plan has no prefill cards)"
    if prediction.prefill is not None:
        return None, prediction.prefill.tokens_per_s_per_device * devices, "prefill only (input tokens)"
    return None, None, "no throughput"


def _per_token(amount: float | None, tokens_per_s: float | None, scale: float) -> float | None:
    if amount is None or not tokens_per_s:
        return None
    return round(amount * scale / tokens_per_s, 6)


def plan_economics(prediction: Prediction, parts: list[PricedPart]) -> EconomicsPrediction:
    """Cost and energy of the devices in `parts` at the prediction's throughput (module docstring)."""
    machines: dict[str, tuple[HardwareSpec, int]] = {}
    for p in parts:
        hw, devices = machines.get(p.hw.name, (p.hw, 0))
        machines[p.hw.name] = (hw, devices + p.devices)
    cards = sum(hw.cards(n) for hw, n in machines.values())
    missing: list[str] = []
    power: float | None = 0.0
    power_basis = []
    price: float | None = 0.0
    currencies = set()
    for name, (hw, devices) in machines.items():
        n_cards = hw.cards(devices)
        if hw.power_w_per_card is None:
            power = None
            missing.append(f"{name} has no power_w_per_card (add it to a copy of its hardware file)")
        elif power is not None:
            power += n_cards * hw.power_w_per_card.value
            basis = f"{name} {hw.power_w_per_card.value:g} W per card ({hw.power_w_per_card.basis})"
            if hw.node_power_w is not None:
                power += math.ceil(devices / hw.devices_per_node) * hw.node_power_w.value
                basis += f" + {hw.node_power_w.value:g} W per node"
            power_basis.append(basis)
        if hw.price_per_card_hour is None:
            price = None
            missing.append(f"{name} has no price_per_card_hour (yours: --price-per-card-hour, or the hardware file)")
        elif price is not None:
            price += n_cards * hw.price_per_card_hour.value
            currencies.add(hw.price_per_card_hour.currency)
    if len(currencies) > 1:
        raise BadInputError(
            f"price_per_card_hour.currency: the plan's machines are priced in {', '.join(sorted(currencies))}; "
            "give every machine's price in one currency."
        )
    out_tps, total_tps, basis = _throughput(prediction, parts)
    return EconomicsPrediction(
        cards=round(cards, 4),
        output_tokens_per_s=None if out_tps is None else round(out_tps, 4),
        total_tokens_per_s=None if total_tps is None else round(total_tps, 4),
        throughput_basis=basis,
        power_w=None if power is None else round(power, 3),
        power_basis="; ".join(power_basis) if power is not None else None,
        joules_per_output_token=_per_token(power, out_tps, 1.0),
        joules_per_token=_per_token(power, total_tps, 1.0),
        price_per_hour=None if price is None else round(price, 6),
        currency=next(iter(currencies)) if price is not None and currencies else None,
        cost_per_million_output_tokens=_per_token(price, out_tps, PER_MILLION / SECONDS_PER_HOUR),
        cost_per_million_tokens=_per_token(price, total_tps, PER_MILLION / SECONDS_PER_HOUR),
        missing=missing,
    )
