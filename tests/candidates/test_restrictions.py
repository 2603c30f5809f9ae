"""Each named limit of the search space (planner.candidates.restrictions) keeps out what it says,
and its flag, where it has one, lifts it; no rule is keyed to one published deployment."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from planner.candidates import restrictions as rules
from planner.candidates.colocated_candidates import CHUNK_TOKENS_PER_DEVICE
from planner.candidates.space import MAX_EXTRA_SLOTS, SpaceLimits, instance_sizes, size_options
from planner.errors import BadInputError
from planner.specs.catalog import load_hardware, load_model, load_plan
from planner.specs.plan import check_plan
from tests.conftest import PLANS, run_cli

A2, CM384 = load_hardware("a2"), load_hardware("cm384")
V3 = load_model("deepseek-v3")


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


def test_ep_spans_the_instance_and_the_format_refuses_less():
    for devices in (16, 32, 64):
        for o in size_options(V3, A2, devices, "decode", SpaceLimits(1024)).moe:
            assert o.moe.ep + o.shared.dedicated_devices == devices
    plan, _ = load_plan(str(PLANS / "a2-d70.yaml"))
    half = plan.decode.model_copy(update={"moe": plan.decode.moe.model_copy(update={"ep": plan.decode.moe.ep // 2})})
    with pytest.raises(BadInputError, match="does not tile"):
        check_plan(plan.model_copy(update={"decode": half}), V3, A2)


def test_extra_slots_keep_within_four_and_half_the_experts_unless_lifted():
    experts = V3.moe.routed_experts
    for devices in (16, 32, 64, 128):
        default = size_options(V3, A2, devices, "decode", SpaceLimits(1024)).moe
        lifted = size_options(V3, A2, devices, "decode", SpaceLimits(1024, max_extra_slots=8, max_redundancy=None)).moe
        for o in default:
            base = -(-experts // o.moe.ep)
            copies = o.moe.ep * o.moe.slots_per_device - experts
            assert o.moe.slots_per_device <= base + MAX_EXTRA_SLOTS
            assert o.moe.slots_per_device == base + 1 or copies <= 0.5 * experts or o.moe.slots_per_device == base
        most = max(o.moe.slots_per_device - -(-experts // o.moe.ep) for o in lifted)
        assert most == min(8, experts - -(-experts // (devices - 1)))  # every slot up to 8 beyond the fewest


def test_tp_sizes_are_powers_of_two_in_a_node_unless_any_tp():
    kimi3 = load_model("kimi-k3")  # 96 heads: TP 3, 6, 12 divide them
    opts = size_options(kimi3, A2, 24, "decode", SpaceLimits(1024))
    assert all(_pow2(a.tp) and a.tp <= A2.devices_per_node for a in opts.attention)
    lifted = size_options(kimi3, A2, 24, "decode", SpaceLimits(1024, any_tp=True))
    assert {a.tp for a in lifted.attention} == {1, 2, 3, 4, 6, 8, 12, 24}


def test_the_prefill_core_tp_may_span_nodes_in_powers_of_two():
    """No rule keyed to the report's TP16 over two A2 nodes: the hybrid's core TP is any power of
    two up to the instance that divides the heads (the cost model prices the slower link)."""
    for devices in (16, 32, 64):
        cores = {a.tp for a in size_options(V3, A2, devices, "prefill", SpaceLimits(1024)).attention if a.pre}
        assert cores == {t for t in (2, 4, 8, 16, 32, 64) if t <= devices}
        posts = {a.post.tp for a in size_options(V3, A2, devices, "prefill", SpaceLimits(1024)).attention if a.post}
        assert posts == {1, 2}  # the hybrid-post-tp limit


def test_dedicated_shared_experts_take_the_best_balanced_count():
    """No count keyed to a deployment: of the two integers around devices x shared / (top-k +
    shared), the one whose busier group is the least busy, at any size where one device is
    enough (8 devices: one shared-expert device; the rule used to start at 16)."""
    for devices in (8, 16, 32, 72, 288):
        counts = {
            o.shared.devices
            for o in size_options(V3, A2, devices, "decode", SpaceLimits(1024)).moe
            if o.shared.placement == "dedicated"
        }
        crossing = devices / 9
        neighbours = [n for n in (math.floor(crossing), math.ceil(crossing)) if 1 <= n < devices]
        busier = {n: max(8 / (devices - n), 1 / n) for n in neighbours}
        assert counts == {min(neighbours, key=lambda n: (busier[n], n))}


def test_instance_sizes_skip_only_what_the_rule_names():
    sizes = instance_sizes(A2, 80 * 8 + 512, 1)
    assert [s for s in sizes if s < 8] == [1, 2, 4]  # 3, 5, 6, 7 devices: not powers of two
    nodes = [s // 8 for s in sizes if s >= 8]
    assert nodes[:64] == list(range(1, 65))
    assert [n for n in nodes if n > 64] == [128]  # 65..80 nodes skipped, 128 (a power of two) kept


def test_mtp_depths_are_two_by_default_and_the_flag_reaches_deeper():
    default = run_cli("plan", "--phase", "decode", "--max-cards", "32", "--top", "1", "--json", "-")
    deeper = run_cli(
        "plan", "--phase", "decode", "--max-cards", "32", "--top", "1", "--mtp", "3", "--engine", "none", "--json", "-"
    )
    assert default.exit_code == 0 and deeper.exit_code == 0, default.output + deeper.output
    assert json.loads(default.output)["plans"][0]["decode"]["mtp_tokens"] <= 2
    assert json.loads(deeper.output)["plans"][0]["decode"]["mtp_tokens"] == 3
    assert "mtp-depths" in {s["limit"] for s in json.loads(default.output)["space"]}
    assert "mtp-depths" not in {s["limit"] for s in json.loads(deeper.output)["space"]}


def test_colocated_plans_use_the_named_chunks_and_one_decode_micro_batch():
    r = run_cli("plan", "--max-cards", "16", "--top", "10", "--json", "-")
    assert r.exit_code == 0, r.output
    colocated = [p["colocated"] for p in json.loads(r.output)["plans"] if "colocated" in p]
    assert colocated
    for c in colocated:
        assert c.get("decode_micro_batches", 1) == 1
        chunk = c.get("chunk_tokens")
        assert chunk is None or chunk in {g * c["devices"] for g in CHUNK_TOKENS_PER_DEVICE}


def test_the_verdict_names_its_space_and_explain_space_lists_it(tmp_path):
    r = run_cli("plan", "--max-cards", "16", "--top", "1")
    assert r.exit_code == 0, r.output
    verdict = next(i for i, line in enumerate(r.output.splitlines()) if line.startswith("OPTIMAL: proven best"))
    over = " ".join(" ".join(r.output.splitlines()[verdict + 1 : verdict + 4]).split())
    assert over.startswith("over: EP = instance size") and "--explain-space lists them" in over
    explained = run_cli("plan", "--max-cards", "16", "--top", "1", "--explain-space")
    assert explained.exit_code == 0
    for rule in (rules.EP_INSTANCE, rules.EXTRA_SLOTS, rules.TP_POWERS, rules.CHUNK_SIZES):
        assert rule.lift in explained.output and rule.short.split()[0] in explained.output
    lifted = run_cli("plan", "--max-cards", "16", "--top", "1", "--any-tp", "--max-extra-slots", "6", "--json", "-")
    assert lifted.exit_code == 0, lifted.output
    named = {s["limit"] for s in json.loads(lifted.output)["space"]}
    assert "tp-powers" not in named and "extra-slots" not in named and "ep-instance" in named


def test_micro_batches_are_one_or_two():
    from planner.search.request import PlanRequest

    assert size_options(V3, A2, 16, "prefill", SpaceLimits(1024)).prefill_micro_batches == (1, 2)
    assert PlanRequest().decode_micro_batches == (1, 2)


def test_decode_concurrency_is_searched_per_tp_group_below_the_limit_and_per_device_above():
    """Below FRACTIONAL_BELOW a device the axis holds every whole number of sequences per attention TP
    group of every TP of the size (1/tp a device); from it on, whole numbers per device (the rule the
    verdict names); a layout never runs a fraction of a sequence on its TP group (no HBM there)."""
    from planner.candidates.tables import FRACTIONAL_BELOW, whole_sequences
    from planner.search.budget import request_budget
    from planner.search.candidate_spaces import candidate_spaces, space_restrictions
    from planner.search.contexts import phase_contexts
    from planner.search.request import PlanRequest

    request = PlanRequest(max_cards=16)
    contexts = phase_contexts(request)
    spaces = candidate_spaces(contexts, request, request_budget(request, contexts), 1, None, None)
    assert spaces is not None
    dspace, pspace = spaces
    tables = [(t, ints) for t, ints in dspace.tables.values()]
    assert any(a.tp > 1 for t, _ in tables for a in t.options.attention)
    for t, ints in tables:
        xs = t.x_values
        largest_tp = max(a.tp for a in t.options.attention)
        below = xs[xs < FRACTIONAL_BELOW]
        np.testing.assert_allclose(below, np.arange(1, FRACTIONAL_BELOW * largest_tp) / largest_tp)
        above = xs[xs >= FRACTIONAL_BELOW]
        assert np.all(above == np.round(above)) and np.all(np.diff(above) == 1)
        for i, a in enumerate(t.options.attention):
            runs = ints.hbm_mib["attention"][i, 0, :] < ints.hbm_capacity_mib * 1000
            np.testing.assert_array_equal(runs, whole_sequences(xs, a.tp))
    assert rules.WHOLE_CONCURRENCY in space_restrictions(request, contexts, dspace, pspace)
    plan, _ = load_plan(str(PLANS / "a3-vllm-ascend-kimi-k2-thinking-tp16-d.yaml"))
    assert plan.decode.concurrency_per_device == 0.0625  # on the axis of a TP16 layout
