"""--objective: cost and energy pick another plan than tokens per card where the two phases run on
machines with different prices or power; total fills the budget.

On one machine every device has the same price and power, so cost and energy rank plans exactly
as tokens per card does; across two machines a phase's device weighs its own machine's price or
power, and the instance counts trade one machine's idle capacity against the other's.
"""

from __future__ import annotations

import json

from tests.conftest import run_cli


def _plan(*args: str) -> dict:
    r = run_cli("plan", "--top", "1", "--json", "-", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["plans"][0]


def _shape(plan: dict) -> tuple:
    return tuple(
        (phase, plan[phase].get("instances"), plan[phase].get("devices"), plan[phase].get("concurrency_per_device"))
        for phase in ("prefill", "decode", "colocated", "afd")
        if phase in plan
    )


def _econ(plan: dict, key: str) -> float:
    return plan["predicted"]["economics"][key]


def _per_card(plan: dict) -> float:
    return plan["predicted"]["system"]["output_tokens_per_s_per_card"]


def test_cost_picks_a_bigger_decode_instance_when_prefill_cards_are_dear():
    # prefill on A2 at 20 per card-hour, decode on CloudMatrix384 at 1: tokens per card matches the
    # prefill instances with a decode instance they keep nearly full; per unit of cost the dear prefill
    # instances are better kept busy by a bigger decode instance (the sizes follow the cost model:
    # 32 and 40 decode cards under the factors of 2026-12-03)
    common = (
        "--prefill-hardware", "a2", "--decode-hardware", "cm384", "--max-prefill-cards", "32",
        "--max-decode-cards", "48", "--price-per-card-hour", "a2=20,cm384=1", "--currency", "USD",
    )  # fmt: skip
    per_card = _plan(*common)
    cheapest = _plan(*common, "--objective", "cost")
    assert _shape(per_card) != _shape(cheapest)
    assert cheapest["decode"]["devices"] > per_card["decode"]["devices"]
    # each wins on its own objective
    assert _econ(cheapest, "cost_per_million_output_tokens") < _econ(per_card, "cost_per_million_output_tokens")
    assert _per_card(per_card) > _per_card(cheapest)


def test_energy_picks_another_decode_size_when_prefill_draws_more_per_card():
    # prefill on CloudMatrix384 (1456 W per card, all-in), decode on A2 (310 W, assumed): tokens per card
    # takes a second prefill instance to feed a 64-card decode, energy stays at one and a smaller decode
    common = (
        "--prefill-hardware", "cm384", "--decode-hardware", "a2", "--max-prefill-cards", "16",
        "--max-decode-cards", "64",
    )  # fmt: skip
    per_card = _plan(*common)
    least_energy = _plan(*common, "--objective", "energy")
    assert _shape(per_card) != _shape(least_energy)
    assert _econ(least_energy, "joules_per_output_token") < _econ(per_card, "joules_per_output_token")
    assert _per_card(per_card) > _per_card(least_energy)


def test_on_one_machine_cost_ranks_as_tokens_per_card():
    common = ("--price-per-card-hour", "2.5", "--currency", "USD")
    assert _shape(_plan(*common)) == _shape(_plan(*common, "--objective", "cost"))


def test_total_fills_the_budget_with_the_most_tokens():
    # 36 A2 cards: the best plan per card is a 24-card one; the most tokens take more of the 36
    per_card = _plan("--max-cards", "36")
    total = _plan("--max-cards", "36", "--objective", "total")

    def tokens(plan: dict) -> float:
        return plan["predicted"]["system"]["output_tokens_per_s"]

    def cards(plan: dict) -> float:
        return plan["predicted"]["system"]["cards"]

    assert cards(total) <= 36
    assert cards(per_card) < 36 and tokens(total) > tokens(per_card)
    assert _per_card(per_card) >= _per_card(total)
