"""The AFD plan section: its rules, each error naming the field and the fix (exit 2 from the CLI)."""

from __future__ import annotations

import pytest
import yaml

from planner.costmodel.evaluate import load_plan_specs
from planner.errors import BadInputError
from planner.specs.catalog import load_hardware
from planner.specs.files import validate_model
from planner.specs.plan import AfdPlan, Plan, afd_auto_link_level, afd_link_level
from tests.conftest import PLANS, run_cli


def _afd(**changes) -> dict:
    data = yaml.safe_load((PLANS / "afd-plugin-64a16f-16k.yaml").read_text())
    for dotted, value in changes.items():
        node = data
        keys = dotted.split("__")
        for k in keys[:-1]:
            node = node[k]
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return data


def _check(data: dict) -> None:
    load_plan_specs(validate_model(Plan, data, "plan.yaml", "plan"))


def test_the_shipped_afd_plans_pass_every_rule():
    for name in ("afd-plugin-64a16f-16k", "afd-plugin-48a16f-32k", "afd-a3-example"):
        _check(yaml.safe_load((PLANS / f"{name}.yaml").read_text()))


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        # an A:F split that does not fit the experts: 8 FFN devices x 16 slots hold 128 of 256 experts
        (
            {"afd__ffn_devices": 8, "afd__moe__ep": 8, "afd__dense_ffn": {"dp": 8, "tp": 1}},
            "afd.moe: the 8 FFN devices hold ep x slots_per_device = 8 x 16 = 128 expert slots",
        ),
        ({"afd__moe__ep": 12}, "does not tile the instance's 16 FFN devices"),
        ({"afd__attention": {"dp": 32, "tp": 1}}, "afd.attention: dp × tp = 32 × 1 = 32 does not tile"),
        ({"afd__lm_head": {"dp": 16, "tp": 1}}, "afd.lm_head"),
        ({"afd__dense_ffn": {"dp": 64, "tp": 1}}, "afd.dense_ffn (on the ffn side)"),
        (
            {"afd__mtp_tokens": 1, "model": "qwen3-235b-a22b", "afd__dense_ffn": None},
            "afd.mtp_tokens = 1: model 'qwen3-235b-a22b' has no MTP layers",
        ),
        ({"model": "qwen3-235b-a22b"}, "afd.dense_ffn: model 'qwen3-235b-a22b' has no dense FFN layers"),
        ({"afd__link": "sio"}, "afd.link: 'SIO (two dies of a package)' cannot carry"),
        ({"afd__link": "nvlink"}, "afd.link: a3-superpod has no link level 'nvlink'"),
        ({"afd__link": "ub"}, "names 2 levels of a3-superpod"),
    ],
)
def test_afd_rules_name_the_field(changes, needle):
    with pytest.raises(BadInputError) as err:
        _check(_afd(**changes))
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"afd__micro_batches": 5}, "afd.micro_batches"),
        ({"afd__micro_batches": 0}, "afd.micro_batches"),
        ({"afd__concurrency_per_device": 1}, "micro_batches (2) cannot exceed concurrency_per_device (1)"),
        ({"decode": {"devices": 8, "attention": {"dp": 8, "tp": 1}, "concurrency_per_device": 1}}, "'afd' section"),
        (
            {
                "afd__prefill_batch_tokens": 8192,
                "prefill": {"devices": 16, "attention": {"dp": 16, "tp": 1}, "batch_tokens": 8192},
            },
            "afd.prefill_batch_tokens makes the AFD instances prefill",
        ),
        (
            {"afd__shared_expert_on": "attention", "afd__shared_expert": {"placement": "dedicated", "devices": 1}},
            "shared_expert_on: attention",
        ),
    ],
)
def test_afd_section_shape_errors(changes, needle):
    with pytest.raises(Exception) as err:
        validate_model(Plan, _afd(**changes), "plan.yaml", "plan")
    assert needle in str(err.value)


def test_a_split_whose_experts_overflow_hbm_is_refused_with_the_ffn_count_that_fits(tmp_path):
    # 8 FFN devices with 32 slots each: 32 x 59 layers x 44 MB of INT8 experts cannot fit 64 GB
    data = _afd(
        **{
            "afd__ffn_devices": 8,
            "afd__moe": {"ep": 8, "slots_per_device": 32, "comm": "alltoall"},
            "afd__dense_ffn": {"dp": 8, "tp": 1},
        }
    )
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    r = run_cli("evaluate", str(path))
    assert r.exit_code == 2
    assert "afd: the 8 FFN devices cannot hold the experts" in r.output and "use ffn_devices >= 1" in r.output


def test_auto_link_is_the_level_the_pairs_cross():
    cm, a3 = load_hardware("cm384"), load_hardware("a3")
    # 16 FFN dies on the first node, 64 attention dies on the next four: the supernode's UB
    plan = AfdPlan(attention_devices=64, ffn_devices=16, attention={"dp": 64, "tp": 1}, concurrency_per_device=2)
    assert cm.levels[afd_auto_link_level(cm, plan)].name == "UB (supernode)"
    assert a3.levels[afd_link_level(a3, plan)].name == "HCCS (supernode)"
    # 4 FFN + 12 attention dies fit one A3 server: HCCS carries them
    small = AfdPlan(attention_devices=12, ffn_devices=4, attention={"dp": 12, "tp": 1}, concurrency_per_device=2)
    assert a3.levels[afd_auto_link_level(a3, small)].name == "HCCS (server)"
    # a slower level than needed may be named (attention and FFN in other servers)
    wider = small.model_copy(update={"link": "HCCS (supernode)"})
    assert a3.levels[afd_link_level(a3, wider)].name == "HCCS (supernode)"


def test_bad_afd_input_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_afd(afd__micro_batches=7)))
    r = run_cli("evaluate", str(path))
    assert r.exit_code == 2
    assert "afd.micro_batches" in r.output and "Traceback" not in r.output
    assert len([line for line in r.output.splitlines() if line.strip()]) == 1
