"""--max-redundant-experts at every value: a size with no expert layout under the cap is no candidate.

A cap of 0, 1 or 8 left some instance sizes (40 devices on a2: 256 experts need 7 slots a device,
24 copies) without any expert layout; their tables were costed without the MoE layers and the
plan built from them had no `moe` section, so `plan`, `sweep` and `whatif` stopped with "moe is
missing" (exit 2) though the user wrote no plan file. Now such a size is left out; when every size
of a phase is, the request is infeasible (exit 1) and the message names the cap and the smallest
one that works, checked.
"""

from __future__ import annotations

import re

import pytest

from planner.errors import InfeasibleError
from planner.search.plan_search import TableCache, run_search
from tests.conftest import run_cli
from tests.search.test_nearest import _request

CACHE = TableCache()
EXPERTS = 256  # deepseek-v3's routed experts


def _copies(plan) -> list[int]:
    """The redundant expert copies of each phase instance of a plan."""
    phases = [plan.decode, plan.prefill, plan.colocated]
    return [p.moe.ep * p.moe.slots_per_device - EXPERTS for p in phases if p is not None]


@pytest.mark.parametrize("cap", [0, 1, 8])
def test_a_small_cap_gives_plans_that_keep_it(cap):
    outcome = run_search(_request(max_redundant_experts=cap, top=3), cache=CACHE)
    assert outcome.plans
    for plan in outcome.plans:
        copies = _copies(plan)
        assert copies and all(0 <= c <= cap for c in copies), copies


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "--max-redundant-experts", "0", "--top", "1"),
        ("plan", "--max-redundant-experts", "1", "--structure", "pd", "--top", "1"),
        ("plan", "--max-redundant-experts", "8", "--phase", "decode", "--top", "1"),
        ("sweep", "--max-redundant-experts", "0"),
        ("whatif", "plans/a2-d70.yaml", "--max-redundant-experts", "0"),
    ],
)
def test_the_commands_run_with_a_small_cap(args):
    r = run_cli(*args)
    assert r.exit_code == 0, r.output
    assert "is missing" not in r.output


def test_a_pinned_size_with_no_layout_under_the_cap_names_the_cap_that_works():
    """24 devices hold 256 experts in 11 slots a device at the fewest: 8 copies."""
    with pytest.raises(InfeasibleError) as info:
        run_search(_request(max_redundant_experts=0, decode_devices=24, top=1), cache=CACHE)
    reason = " ".join(str(info.value).split())
    assert reason.startswith("experts:"), reason
    assert "--max-redundant-experts 0" in reason
    found = re.search(r"Raise --max-redundant-experts to at least ([0-9]+)", reason)
    assert found and int(found.group(1)) == 8, reason
    assert run_search(_request(max_redundant_experts=8, decode_devices=24, top=1), cache=CACHE).plans


def test_the_cli_exits_1_on_a_pinned_size_with_no_layout_under_the_cap():
    r = run_cli("plan", "--max-redundant-experts", "0", "--prefill-devices", "24", "--top", "1")
    assert r.exit_code == 1, r.output
    assert "--max-redundant-experts to at least 8" in " ".join(r.output.split())


def test_the_binding_line_names_the_next_size_the_cap_leaves_a_layout():
    # whatif's and plan's "the next instance size (40 devices) was not tried" under --max-redundant-experts 0:
    # 256 experts over 40 devices need 24 copies, so the search never costs 40; the next size it holds is 64
    from planner.ranking.binding import _next_size, size_admits
    from planner.search.request import PlanRequest
    from planner.specs.catalog import load_hardware, load_model

    model, hw = load_model("deepseek-v3"), load_hardware("a2")
    capped = size_admits(model, PlanRequest(max_redundant_experts=0))
    assert not capped(40) and not capped(48) and capped(32) and capped(64)
    assert _next_size(hw, 32) == 40 and _next_size(hw, 32, capped) == 64
    assert _next_size(hw, 32, size_admits(model, PlanRequest())) == 40  # the default space holds 40
