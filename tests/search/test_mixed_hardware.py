"""Prefill on one machine, decode on another (issue 13, part 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from planner.search.plan_search import run_search
from planner.search.request import PlanRequest
from tests.conftest import PROOF, REPO, run_cli


def test_a2_to_cm384_plan_round_trips_through_json_and_evaluate(tmp_path):
    out = tmp_path / "plans.json"
    r = run_cli(
        "plan", "--prefill-hardware", "a2", "--decode-hardware", "cm384", "--max-cards", "96", "--top", "2",
        "--json", str(out),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    for plan in doc["plans"]:
        assert plan["hardware"] == "a2"
        assert plan["decode"]["hardware"] == "cm384" and "hardware" not in plan["prefill"]
        single = tmp_path / "one.json"
        single.write_text(json.dumps(plan))
        again = run_cli("evaluate", str(single), "--json", "-")
        assert again.exit_code == 0, again.output
        assert json.loads(again.output)["predicted"] == plan["predicted"]
        # cards of each kind: a CM384 card is two dies, an A2 card one
        system = plan["predicted"]["system"]
        cards = plan["decode"]["devices"] * plan["decode"]["instances"] / 2
        cards += plan["prefill"]["devices"] * plan["prefill"]["instances"]
        assert system["cards"] == pytest.approx(cards) and cards <= 96
        # YAML too
        y = tmp_path / "one.yaml"
        y.write_text(yaml.safe_dump(plan))
        assert run_cli("evaluate", str(y), "--json", "-").exit_code == 0


def test_each_phase_is_costed_on_its_own_machine():
    mixed = run_search(PlanRequest(prefill_hardware="a2", decode_hardware="cm384", max_cards=96, top=1)).plans[0]
    decode_only = run_search(
        PlanRequest(hardware="cm384", phase="decode", decode_devices=mixed.decode.devices, max_cards=96, top=1)
    ).plans[0]
    # the decode section's best configuration on cm384 alone reaches the same per-device rate
    assert mixed.predicted["decode"]["tokens_per_s_per_device"] == pytest.approx(
        decode_only.predicted["decode"]["tokens_per_s_per_device"], rel=1e-6
    )
    assert mixed.predicted["prefill"]["tokens_per_s_per_card"] == pytest.approx(
        mixed.predicted["prefill"]["tokens_per_s_per_device"]
    )  # A2: one die per card


def test_per_phase_card_budgets_hold():
    o = run_search(
        PlanRequest(prefill_hardware="a2", decode_hardware="cm384", max_prefill_cards=16, max_decode_cards=32, top=3)
    )
    for p in o.plans:
        assert p.prefill.total_devices <= 16
        assert p.decode.total_devices / 2 <= 32


def test_kv_transfer_bandwidth_adds_to_ttft(tmp_path):
    req = PlanRequest(prefill_hardware="a2", decode_hardware="cm384", max_cards=96, top=1)
    plan = run_search(req).plans[0]
    slow = plan.model_copy(
        update={"prefill": plan.prefill.model_copy(update={"kv_transfer_bytes_per_s": 5e9}), "predicted": None}
    )
    path = tmp_path / "slow.json"
    path.write_text(slow.model_dump_json(exclude_none=True))
    r = run_cli("evaluate", str(path), "--json", "-")
    assert r.exit_code == 0, r.output
    ttft_slow = json.loads(r.output)["predicted"]["prefill"]["ttft_ms"]
    # DeepSeek-V3 KV: (512 + 64) x (61 layers + 1 MTP layer) x 2 bytes per token; 2048 prompt tokens,
    # the link from 25 (both machines' YAML) down to 5 GB/s
    kv_bytes = 2048 * 576 * 62 * 2
    expected_ms = kv_bytes / 5e9 * 1e3 - kv_bytes / 25e9 * 1e3
    assert ttft_slow - plan.predicted["prefill"]["ttft_ms"] == pytest.approx(expected_ms, rel=1e-3)
    # --kv-transfer-gbps is stored in the plan
    r = run_cli(
        "plan", "--prefill-hardware", "a2", "--decode-hardware", "cm384", "--kv-transfer-gbps", "50",
        "--max-cards", "96", "--top", "1", "--json", "-",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["plans"][0]["prefill"]["kv_transfer_bytes_per_s"] == 50e9


def _priced(tmp_path: Path, name: str, price: float) -> str:
    data = yaml.safe_load((REPO / "hardware" / f"{name}.yaml").read_text())
    data["price_per_card"] = {"value": price, "source": "test price"}
    path = tmp_path / f"{name}-priced.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_cost_budget_needs_prices_and_holds_with_them(tmp_path):
    r = run_cli("plan", "--prefill-hardware", "a2", "--decode-hardware", "cm384", "--max-cost", "100")
    assert r.exit_code == 2 and "price_per_card" in r.output
    a2, cm = _priced(tmp_path, "a2", 1.0), _priced(tmp_path, "cm384", 3.0)
    o = run_search(PlanRequest(hardware=a2, prefill_hardware=a2, decode_hardware=cm, max_cost=150, top=2))
    for p in o.plans:
        cost = p.prefill.total_devices * 1.0 + p.decode.total_devices / 2 * 3.0
        assert cost <= 150
        assert any("cost" in n for n in p.predicted["notes"])


def test_a_target_rate_across_machines_buys_one_prefill_instance():
    """--rate 2 with decode on cm384 (a 288-die instance) and prefill on a2: one decode and one
    prefill instance serve it. The mixed search had its own count rule, which matched prefill to
    the decode instance's capacity and bought five 24-die prefill instances (264 cards, 160 do);
    it now asks the one count solver the single-machine search asks."""
    o = run_search(
        PlanRequest(
            prefill_hardware="a2",
            decode_hardware="cm384",
            max_cards=384,
            rate_per_s=2.0,
            decode_devices=288,
            top=1,
            settings=PROOF,
        )
    )
    plan = o.plans[0]
    assert plan.prefill.instances == 1 and plan.decode.instances == 1
    assert plan.predicted["system"]["requests_per_s"] >= 2.0
    assert o.optimal


def test_whatif_swaps_one_phase_machine():
    r = run_cli("whatif", "--decode-hardware", "cm384", "--max-cards", "96", "--no-colocated", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    new = doc["new"]["plan"]
    assert new["decode"]["hardware"] == "cm384" and new["hardware"] == "a2"
    assert {"name": "decode-hardware", "base": None, "new": "cm384"}.items() <= next(
        c for c in doc["changes"]["assumptions"] if c["name"] == "decode-hardware"
    ).items()


def test_the_title_states_the_budget_the_search_applies():
    # --max-prefill-cards alone caps prefill; decode keeps --max-cards of its machine: the title said
    # "<= 48 cards" above a 64-card plan
    r = run_cli("plan", "--max-prefill-cards", "16", "--top", "1", "--json", "-")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)["plans"][0]
    assert plan["prefill"]["instances"] * plan["prefill"]["devices"] <= 16
    assert plan["decode"]["instances"] * plan["decode"]["devices"] <= 48
    text = " ".join(run_cli("plan", "--max-prefill-cards", "16", "--top", "1").output.split())
    assert "<= 16 prefill cards, <= 48 decode cards" in text and "<= 48 cards" not in text
    assert PlanRequest(max_cost=150).budget_text() == "cost <= 150"
    assert (
        PlanRequest(max_decode_cards=8, max_cost=150).budget_text()
        == "<= 48 prefill cards, <= 8 decode cards, cost <= 150"
    )
