"""Plan-format rules: tiling, expert slots, ranges; each error names the field and the fix."""

from __future__ import annotations

import pytest
import yaml

from planner.costmodel.evaluate import load_plan_specs
from planner.errors import BadInputError
from planner.specs.files import validate_model
from planner.specs.plan import Plan
from tests.conftest import PLANS


def _plan(**changes) -> dict:
    data = yaml.safe_load((PLANS / "a2-d70.yaml").read_text())
    for dotted, value in changes.items():
        node = data
        keys = dotted.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return data


def _check(data: dict) -> None:
    plan = validate_model(Plan, data, "plan.yaml", "plan")
    load_plan_specs(plan)


def test_the_report_plan_is_valid():
    _check(_plan())


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        (
            {"decode__attention": {"dp": 16, "tp": 1}},
            r"decode\.attention: dp × tp = 16 × 1 = 16 does not tile .* 32 devices",
        ),
        ({"decode__dense_ffn": {"dp": 4, "tp": 4}}, r"decode\.dense_ffn: .* choose dp × tp = 32"),
        (
            {"decode__moe": {"ep": 32, "slots_per_device": 7, "comm": "allgather"}},
            r"leaves 32 of the 256 routed experts without a slot; use slots_per_device >= 8",
        ),
        (
            {"decode__moe": {"ep": 16, "slots_per_device": 16, "comm": "allgather"}},
            r"ep \(16\) \+ dedicated .* does not tile",
        ),
        (
            {"model": "deepseek-v2-lite", "decode__attention": {"dp": 1, "tp": 32}},
            r"decode\.attention: tp = 32 does not divide the model's attention heads \(16\)",
        ),
        ({"decode__lm_head": {"dp": 3, "tp": 8}}, r"decode\.lm_head: dp × tp = 3 × 8 = 24"),
        (
            {"decode__shared_expert": {"placement": "dedicated", "devices": 4}},
            r"ep \(32\) \+ dedicated shared-expert devices \(4\) = 36",
        ),
        ({"workload__input_tokens": 200000}, r"exceeds the model's context of 163840"),
    ],
)
def test_rule_errors_name_the_field(changes, pattern):
    with pytest.raises(BadInputError, match=pattern):
        _check(_plan(**changes))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workload__input_tokens": 0}, "workload.input_tokens"),
        ({"workload__output_tokens": -5}, "workload.output_tokens"),
        ({"workload__mtp_acceptance": 1.5}, "workload.mtp_acceptance"),
        ({"decode__concurrency_per_device": 0}, "decode.concurrency_per_device"),
        (
            {"decode__moe": {"ep": 32, "slots_per_device": 8, "comm": "carrier-pigeon"}},
            "decode.moe.comm",
        ),
        ({"decode__colour": "blue"}, "decode.colour"),
        ({"schema_version": 3}, "schema_version"),
    ],
)
def test_schema_errors_name_the_field(changes, field):
    with pytest.raises(BadInputError, match=field.replace(".", r"\.")):
        _check(_plan(**changes))


def test_a_plan_needs_a_phase():
    data = _plan()
    del data["decode"]
    with pytest.raises(BadInputError, match="needs a 'decode' or a 'prefill' section"):
        _check(data)


def test_mtp_needs_mtp_layers():
    data = _plan(model="kimi-k2")
    data["decode"]["moe"] = {"ep": 32, "slots_per_device": 12, "comm": "allgather"}
    with pytest.raises(BadInputError, match="no MTP layers; set mtp_tokens: 0"):
        _check(data)


def test_hybrid_attention_layouts_must_tile_too():
    data = yaml.safe_load((PLANS / "a2-p.yaml").read_text())
    data["prefill"]["attention"]["post"] = {"dp": 4, "tp": 2}
    with pytest.raises(BadInputError, match=r"prefill\.attention\.post"):
        _check(data)
