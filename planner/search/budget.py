"""What a deployment may use, and what each instance costs in the objective's unit.

On one machine the budget is `--max-cards` in devices, and an instance weighs its devices (so
requests/s per weight is tokens/s per card up to the constant devices per card). With prefill
and decode on different machines (planner.search.contexts) each machine is a *pool* of devices
and the budget is a set of linear caps over the pools:

- `--max-prefill-cards` / `--max-decode-cards`: the devices of that machine;
- `--max-cost` (both hardware YAMLs carry `price_per_card`): the cost of every instance;
- otherwise `--max-cards` caps the cards of both kinds together.

An instance weighs its cost when both machines are priced, else its cards. Weights and caps
enter the solver as integers in one conversion each: cards in units of 1 / lcm(devices per card
of the two machines) (exact), cost in millionths of the YAMLs' price unit (rounded to the
nearest millionth per device; the cap rounded down).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.costmodel.context import CostContext
from planner.errors import BadInputError
from planner.search.contexts import PhaseContexts
from planner.search.deployment import Offer, Role, rate_milli_of
from planner.search.request import MAX_CARDS, PlanRequest
from planner.specs.hardware import HardwareSpec

COST_SCALE = 1_000_000  # cost units, in millionths


@dataclass(frozen=True)
class Budget:
    """Linear caps over the pools' devices, and the objective's weight of a device of each pool."""

    limits: tuple[int, ...]  # cap k: sum over instances of uses[k] <= limits[k]
    per_device: tuple[tuple[int, ...], ...]  # per_device[k][pool]: what one device uses of cap k
    weight_per_device: tuple[int, ...]  # per pool
    pool_devices: tuple[int, ...]  # the most devices of each pool any instance may span
    unit: str = "device"  # what the weight counts: "device", "card" or "cost unit"
    mixed: bool = False  # decode and prefill draw from two pools

    def pool(self, role: Role) -> int:
        """The pool a role's instances draw their devices from."""
        return 1 if self.mixed and role == "prefill" else 0

    def offer(self, role: Role, devices: int, rate_milli: int) -> Offer:
        """One instance of `devices` devices serving `rate_milli`, as the deployment question sees it."""
        pool = self.pool(role)
        uses = tuple(row[pool] * devices for row in self.per_device)
        return Offer(rate_milli, devices, self.weight_per_device[pool] * devices, uses)

    def most_instances(self, offer: Offer) -> int:
        """How many instances of `offer` fit the caps on their own."""
        return min((lim // u for lim, u in zip(self.limits, offer.uses, strict=True) if u > 0), default=0)


def budget_devices(request: PlanRequest, hw: HardwareSpec) -> int:
    """Devices --max-cards allows (refusing budgets out of range)."""
    if not (math.isfinite(request.max_cards) and 0 < request.max_cards <= MAX_CARDS):
        raise BadInputError(f"--max-cards must be between 0 and {MAX_CARDS:,}.")
    devices = int(math.floor(request.max_cards * hw.devices_per_card + 1e-9))
    if devices < 1:
        raise BadInputError("--max-cards must allow at least one device.")
    return devices


def request_budget(request: PlanRequest, contexts: PhaseContexts) -> Budget:
    """The budget of a request (see the module docstring); with --objective cost or energy the
    weights are each machine's price or power per device (`objective_weights`)."""
    if not contexts.mixed:
        devices = budget_devices(request, contexts.decode.hw)
        budget = Budget((devices,), ((1,),), (1,), (devices,))
    else:
        budget = _mixed_budget(request, contexts.decode, contexts.prefill)
    weighed = objective_weights(request.objective, contexts.decode.hw, contexts.prefill.hw)
    if weighed is None:
        return budget
    weights, unit = weighed
    return replace(budget, weight_per_device=weights if budget.mixed else weights[:1], unit=unit)


POWER_SCALE = 1000  # watts, in thousandths


def objective_weights(objective: str, d_hw: HardwareSpec, p_hw: HardwareSpec) -> tuple[tuple[int, int], str] | None:
    """(weight of a decode device, of a prefill device) under --objective cost (price per card-hour,
    in millionths, per device) or energy (watts per device in thousandths, a node's power besides
    its cards shared over its devices); None for the other objectives. A machine without the
    figure is refused naming the field."""
    if objective not in ("cost", "energy"):
        return None
    out = []
    for hw in (d_hw, p_hw):
        if objective == "cost":
            if hw.price_per_card_hour is None:
                raise BadInputError(
                    f"--objective cost: hardware '{hw.name}' has no price_per_card_hour; give your price with "
                    "--price-per-card-hour (or price_per_card_hour: {value, currency, source} in its YAML)."
                )
            out.append(round(hw.price_per_card_hour.value / hw.devices_per_card * COST_SCALE))
        else:
            if hw.power_w_per_card is None:
                raise BadInputError(
                    f"--objective energy: hardware '{hw.name}' has no power_w_per_card; add power_w_per_card: "
                    "{value, basis, source} to a copy of its YAML."
                )
            watts = hw.power_w_per_card.value / hw.devices_per_card
            if hw.node_power_w is not None:
                watts += hw.node_power_w.value / hw.devices_per_node
            out.append(round(watts * POWER_SCALE))
    if min(out) < 1:
        raise BadInputError(f"--objective {objective}: a device's weight rounds to zero; check the hardware figures.")
    return (out[0], out[1]), ("cost unit" if objective == "cost" else "mW")


def _phase_cards(cards: float | None, flag: str, ctx: CostContext) -> int | None:
    if cards is None:
        return None
    if not (math.isfinite(cards) and 0 < cards <= MAX_CARDS):
        raise BadInputError(f"{flag} must be between 0 and {MAX_CARDS:,} cards.")
    devices = int(math.floor(cards * ctx.hw.devices_per_card + 1e-9))
    if devices < 1:
        raise BadInputError(f"{flag} {cards:g} allows no {ctx.hw.name} device; raise it.")
    return devices


def _mixed_budget(request: PlanRequest, d_ctx: CostContext, p_ctx: CostContext) -> Budget:
    d_hw, p_hw = d_ctx.hw, p_ctx.hw
    priced = d_hw.price_per_card is not None and p_hw.price_per_card is not None
    if request.max_cost is not None and not priced:
        missing = d_hw.name if d_hw.price_per_card is None else p_hw.name
        files = "the hardware YAML" if d_hw.name == p_hw.name else "both hardware YAMLs"
        cards = "--max-cards" if d_hw.name == p_hw.name else "--max-prefill-cards, --max-decode-cards"
        raise BadInputError(
            f"--max-cost caps what the cards cost to buy, which needs price_per_card (cost units per card) in "
            f"{files}; '{missing}' has none (a running price, --price-per-card-hour, prices tokens, not this "
            f"budget). Add price_per_card: {{value: ..., source: ...}} to it, or budget in cards ({cards})."
        )
    if not (math.isfinite(request.max_cards) and 0 < request.max_cards <= MAX_CARDS):
        raise BadInputError(f"--max-cards must be between 0 and {MAX_CARDS:,}.")
    lcm = math.lcm(d_hw.devices_per_card, p_hw.devices_per_card)
    card_units = (lcm // d_hw.devices_per_card, lcm // p_hw.devices_per_card)
    if priced:
        assert d_hw.price_per_card is not None and p_hw.price_per_card is not None
        cost_units = (
            round(d_hw.price_per_card.value / d_hw.devices_per_card * COST_SCALE),
            round(p_hw.price_per_card.value / p_hw.devices_per_card * COST_SCALE),
        )
    limits: list[int] = []
    rows: list[tuple[int, ...]] = []
    d_cap = _phase_cards(request.max_decode_cards, "--max-decode-cards", d_ctx)
    p_cap = _phase_cards(request.max_prefill_cards, "--max-prefill-cards", p_ctx)
    if d_cap is not None:
        limits.append(d_cap)
        rows.append((1, 0))
    if p_cap is not None:
        limits.append(p_cap)
        rows.append((0, 1))
    if request.max_cost is not None:
        if not (math.isfinite(request.max_cost) and request.max_cost > 0):
            raise BadInputError("--max-cost must be a positive number.")
        limits.append(int(math.floor(request.max_cost * COST_SCALE + 1e-6)))
        rows.append(cost_units)
    elif d_cap is None and p_cap is None:  # --max-cards caps the cards of both kinds together
        limits.append(int(math.floor(request.max_cards * lcm + 1e-9)))
        rows.append(card_units)
    elif d_cap is None or p_cap is None:  # a phase without its own cap: --max-cards of its machine
        hw, row = (d_hw, (1, 0)) if d_cap is None else (p_hw, (0, 1))
        limits.append(int(math.floor(request.max_cards * hw.devices_per_card + 1e-9)))
        rows.append(row)
    # the largest instance of each machine: what the caps allow its devices on their own
    pools = tuple(
        max(1, min(10**7, min((lim // row[p] for lim, row in zip(limits, rows, strict=True) if row[p] > 0), default=1)))
        for p in (0, 1)
    )
    weights = cost_units if priced else card_units
    return Budget(tuple(limits), tuple(rows), weights, pools, "cost unit" if priced else "card", True)


def role_offers(budget: Budget, role: Role, candidates: list, output_tokens: int) -> list[Offer]:
    """The offers of a role's candidates (phase or colocated), index for index."""
    return [budget.offer(role, c.devices, rate_milli_of(c, output_tokens)) for c in candidates]
