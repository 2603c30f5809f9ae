"""Cost and energy: cost per million tokens and joules per token at the predicted throughput."""

from __future__ import annotations

import json

import pytest
import yaml

from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, load_plan_specs
from planner.errors import BadInputError
from planner.specs.catalog import load_hardware, load_plan
from planner.specs.hardware import PricePerCardHour
from tests.conftest import PLANS, REPO, run_cli


def _priced(hw, value: float, currency: str = "USD"):
    return hw.model_copy(
        update={"price_per_card_hour": PricePerCardHour(value=value, currency=currency, source="test")}
    )


def test_cost_and_energy_follow_from_throughput_power_and_price():
    plan, _ = load_plan("xdeepserve-d")
    specs = load_plan_specs(plan)
    p = evaluate_plan(plan, None, specs=PlanSpecs(specs.model, _priced(specs.hw, 2.0), specs.quant))
    e = p.economics
    assert e is not None and e.missing == []
    cards = plan.decode.total_devices / 2
    tokens_per_s = p.decode.tokens_per_s_per_device * plan.decode.total_devices
    assert e.cards == cards
    assert e.power_w == pytest.approx(cards * 1456)  # cm384's all-in power per 910C package
    assert e.joules_per_output_token == pytest.approx(cards * 1456 / tokens_per_s, rel=1e-5)
    assert e.price_per_hour == pytest.approx(2.0 * cards)
    assert e.cost_per_million_output_tokens == pytest.approx(2.0 * cards / (tokens_per_s * 3600) * 1e6, rel=1e-5)
    # a decode-only plan prices no prefill: no figure per total token
    assert e.cost_per_million_tokens is None and "decode only" in e.throughput_basis


def test_a_plan_with_both_phases_prices_the_whole_deployment_per_output_and_per_total_token():
    plan, _ = load_plan("afd-a3-example")
    specs = load_plan_specs(plan)
    p = evaluate_plan(plan, None, specs=PlanSpecs(specs.model, _priced(specs.hw, 3.0), specs.quant))
    e, s = p.economics, p.system
    assert e.cards == s.cards
    assert e.cost_per_million_output_tokens == pytest.approx(
        3.0 * s.cards / (s.output_tokens_per_s * 3600) * 1e6, rel=1e-5
    )
    total = s.output_tokens_per_s + s.input_tokens_per_s
    assert e.cost_per_million_tokens == pytest.approx(3.0 * s.cards / (total * 3600) * 1e6, rel=1e-5)


def test_no_price_no_cost_and_it_says_which_field():
    plan, _ = load_plan("a2-d70")
    e = evaluate_plan(plan, None).economics
    assert e.cost_per_million_output_tokens is None and e.joules_per_output_token is not None
    assert any("a2 has no price_per_card_hour" in m for m in e.missing)
    # a machine without a power figure leaves energy out the same way
    a350 = load_hardware("atlas350")
    assert a350.power_w_per_card is None


def test_mixed_hardware_prices_each_phase_on_its_machine(tmp_path):
    a2 = yaml.safe_load((REPO / "hardware" / "a2.yaml").read_text())
    cm = yaml.safe_load((REPO / "hardware" / "cm384.yaml").read_text())
    for data, name, price in ((a2, "a2p", 1.0), (cm, "cmp", 5.0)):
        data["name"] = name
        data["price_per_card_hour"] = {"value": price, "currency": "USD", "source": "test"}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    plan = yaml.safe_load((PLANS / "a2-d70.yaml").read_text())
    plan["decode"]["hardware"] = str(tmp_path / "cmp.yaml")
    plan["hardware"] = str(tmp_path / "a2p.yaml")
    plan["prefill"] = yaml.safe_load((PLANS / "a2-p.yaml").read_text())["prefill"]
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(plan))
    r = run_cli("evaluate", str(path), "--json", "-")
    assert r.exit_code == 0, r.output
    e = json.loads(r.output)["predicted"]["economics"]
    decode_cards = plan["decode"]["devices"] / 2
    prefill_cards = plan["prefill"]["devices"]
    assert e["price_per_hour"] == pytest.approx(5.0 * decode_cards + 1.0 * prefill_cards)
    assert e["power_w"] == pytest.approx(1456 * decode_cards + 310 * prefill_cards)


def test_currencies_must_agree():
    from planner.costmodel.economics import PricedPart, plan_economics

    plan, _ = load_plan("a2-d70")
    p = evaluate_plan(plan, None)
    a2 = _priced(load_hardware("a2"), 1.0, "USD")
    cm = _priced(load_hardware("cm384"), 1.0, "CNY")
    with pytest.raises(BadInputError, match="price_per_card_hour.currency"):
        plan_economics(p, [PricedPart("decode", cm, 32), PricedPart("prefill", a2, 16)])


@pytest.mark.parametrize("price", ["-1", "0", "abc", "cm384=2"])
def test_bad_prices_are_one_line_and_exit_2(price):
    r = run_cli("evaluate", "a2-d70", "--price-per-card-hour", price)
    assert r.exit_code == 2 and "--price-per-card-hour" in r.output and "Traceback" not in r.output


def test_a_negative_price_in_a_hardware_file_is_refused_by_field(tmp_path):
    data = yaml.safe_load((REPO / "docs" / "examples" / "priced-a3.yaml").read_text())
    data["price_per_card_hour"]["value"] = -2
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump(data))
    r = run_cli("evaluate", "a2-d70", "--hardware", str(tmp_path / "hw.yaml"))
    assert r.exit_code == 2 and "price_per_card_hour" in r.output


def test_the_example_priced_file_loads_and_no_catalog_machine_ships_a_price():
    hw = load_hardware(str(REPO / "docs" / "examples" / "priced-a3.yaml"))
    assert hw.price_per_card_hour is not None and hw.price_per_card_hour.currency == "EXAMPLE"
    for name in ("a2", "a3", "cm384", "h100", "atlas350", "atlas950"):
        assert load_hardware(name).price_per_card_hour is None
