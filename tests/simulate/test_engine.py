"""The event loop and the instances: routing, seats and KV cache, preemption, structures, records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.errors import BadInputError
from planner.simulate.build import RandomDataset, Traffic, build_simulation
from planner.simulate.metrics import parse_goodput, weighted_percentile
from planner.simulate.routing import engine_routing
from planner.simulate.run import judge, simulate_plan
from planner.specs.catalog import load_plan

HERE = Path(__file__).resolve().parent


def _plan(name: str):
    return load_plan(str(HERE / f"{name}.yaml") if (HERE / f"{name}.yaml").exists() else name)[0]


def _tight():
    # small-pd on a device whose engine may fill 59% of HBM: 8 seats per device, KV for about 7
    plan = _plan("small-pd")
    return plan.model_copy(
        update={"hbm_utilization": 0.59, "decode": plan.decode.model_copy(update={"concurrency_per_device": 8})}
    )


def test_every_request_completes_and_the_records_are_consistent():
    result = simulate_plan(_plan("small-pd"), Traffic(requests=800, rate_per_s=5.0, seed=3))
    t = result.built.sim.table
    assert result.summary["completed"] == 800 and result.summary["failed"] == 0
    assert np.all(t.delivered_tokens == t.output_tokens)
    order = np.vstack([t.ready_s, t.sent_s, t.prefill_done_s, t.kv_ready_s, t.first_token_s, t.end_s])
    assert np.all(np.diff(order, axis=0) >= -1e-9)  # each request's timeline runs forward
    assert result.summary["total_output_tokens"] == int(t.output_tokens.sum())


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    a = simulate_plan(_plan("small-pd"), Traffic(requests=300, rate_per_s=6.0, seed=7)).summary
    b = simulate_plan(_plan("small-pd"), Traffic(requests=300, rate_per_s=6.0, seed=7)).summary
    c = simulate_plan(_plan("small-pd"), Traffic(requests=300, rate_per_s=6.0, seed=8)).summary
    assert a["mean_ttft_ms"] == b["mean_ttft_ms"] and a["p99_tpot_ms"] == b["p99_tpot_ms"]
    assert a["mean_ttft_ms"] != c["mean_ttft_ms"]


def test_round_robin_spreads_requests_over_dp_ranks_in_turn():
    built = build_simulation(_plan("small-pd"), Traffic(requests=64, concurrency=64), routing=engine_routing("sglang"))
    built.sim.run()
    ranks = built.sim.table.dp_rank
    assert np.bincount(ranks, minlength=32).tolist() == [2] * 32
    assert engine_routing("sglang").dp_ranks == "round-robin"
    assert engine_routing("vllm-ascend").dp_ranks == "least-loaded"
    assert "core_client.py" in engine_routing(None).describe()


def test_the_kv_cache_binds_admission_and_preempts_the_latest_when_it_overflows():
    result = simulate_plan(_tight(), Traffic(requests=1500, concurrency=400, seed=0))
    bound = result.summary["moeplan"]["bound"]
    assert bound["peak_running"] <= bound["decode_seats"] == 256
    assert bound["kv_blocked_steps"] > 0 and bound["preemptions"] > 0
    assert any("KV cache, not the seats, binds admission" in n for n in result.summary["moeplan"]["notes"])
    t = result.built.sim.table
    assert result.summary["failed"] == 0 and np.all(t.delivered_tokens == t.output_tokens)
    assert t.preemptions.sum() == bound["preemptions"]


def test_a_decode_concurrency_the_plan_cannot_hold_is_refused():
    with pytest.raises(BadInputError, match="--decode-concurrency = 500: the plan cannot hold it; HBM per device"):
        build_simulation(_plan("small-pd"), Traffic(requests=10, concurrency=10), decode_concurrency=500)


def test_a_request_longer_than_a_ranks_kv_cache_is_refused():
    random = RandomDataset(60000, 100, 0.0, "vllm")
    with pytest.raises(BadInputError, match="does not fit the KV cache one DP rank"):
        build_simulation(_tight(), Traffic(requests=10, concurrency=1, random=random))


@pytest.mark.parametrize("name,structure", [("a2-d70", "decode-only"), ("a2-p", "prefill-only")])
def test_single_phase_plans_run(name, structure):
    result = simulate_plan(_plan(name), Traffic(requests=300, rate_per_s=3.0, seed=0))
    assert result.built.structure == structure
    assert result.summary["completed"] == 300
    if structure == "prefill-only":
        assert result.summary["mean_ttft_ms"] == pytest.approx(result.summary["mean_e2el_ms"])


def test_mixed_hardware_plan_runs_each_phase_on_its_machine():
    result = simulate_plan(_plan("small-mixed"), Traffic(requests=300, rate_per_s=4.0, seed=0))
    assert result.built.structure == "disaggregated" and result.summary["completed"] == 300
    t = result.built.sim.table
    # 1,024-token prompts of DeepSeek-V3's 70 KB-per-token cache over the stated 20 GB/s link
    transfer = t.kv_ready_s - t.prefill_done_s
    assert np.allclose(transfer, 1024 * 61 * 576 * 2 / 2e10 + 576 * 2 * 1024 * 0, rtol=0.05)


def test_warm_start_fills_decode_and_the_cooldown_keeps_the_load_until_the_measured_end():
    plan = _plan("small-pd")
    traffic = Traffic(requests=900, rate_per_s=8.0, cooldown=600, warm_start=True, seed=0)
    result = simulate_plan(plan, traffic)
    sim = result.built.sim
    # decode holds what the rate keeps in it: rate x output x static TPOT (at most the 128 seats)
    tpot_s = result.built.prediction.decode.tpot_ms / 1e3
    assert sim.table.count - sim.table.clients == min(128, round(8.0 * 512 * tpot_s))
    assert result.summary["num_prompts"] == 300 and result.summary["completed"] == 300
    assert np.isnan(sim.table.end_s[sim.table.clients - 1])  # the run stopped before the cool-down drained


def test_colocated_whole_forwards_deliver_the_first_token_from_prefill():
    result = simulate_plan(_plan("small-colocated-whole"), Traffic(requests=200, concurrency=50, seed=0))
    t = result.built.sim.table
    assert result.summary["completed"] == 200
    assert np.all(t.first_token_s < t.end_s)
    assert np.all(np.isnan(t.kv_ready_s))  # no transfer: prefill and decode share the devices


def test_weighted_percentile_is_numpys_on_the_expanded_sample():
    rng = np.random.default_rng(0)
    values = rng.random(50)
    weights = rng.integers(1, 5, 50).astype(float)
    expanded = np.repeat(values, weights.astype(int))
    for p in (1, 50, 90, 99, 100):
        assert weighted_percentile(values, weights, p) == pytest.approx(np.percentile(expanded, p))


def test_goodput_parses_like_vllm_and_the_verdict_reads_the_percentile():
    assert parse_goodput(["ttft:2000", "tpot:100"]) == {"ttft": 2000.0, "tpot": 100.0}
    with pytest.raises(BadInputError, match="--goodput: 'foo' is not one of ttft, tpot, e2el"):
        parse_goodput(["foo:1"])
    summary = {"p90_ttft_ms": 2500.0, "p90_tpot_ms": 90.0, "moeplan": {"structure": "disaggregated"}}
    verdict = judge(summary, 2000.0, 100.0, 90.0)
    assert verdict.met is False and verdict.misses() == ["TTFT p90 2,500 ms > 2,000 ms"]
