"""Workloads as they are (issue 13, part 4): prefix-cache hits, length distributions, long context."""

from __future__ import annotations

import json
import math

import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.memory import kv_tokens_in_use, prefill_hbm
from planner.costmodel.prefill import prefill_forward
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import AttentionLayout, DecodePlan, MoELayout, ParallelLayout, PrefillPlan
from planner.specs.quantization import get_quantization
from planner.specs.workload import PAIR_BINS, Workload, WorkloadFile
from tests.conftest import REPO, llama_8b_config, run_cli

PREFILL = PrefillPlan(
    devices=16,
    attention=AttentionLayout(dp=16, tp=1),
    dense_ffn=ParallelLayout(dp=16, tp=1),
    moe=MoELayout(ep=16, slots_per_device=16),
    batch_tokens=16384,
)
DECODE = DecodePlan(
    devices=32,
    attention=AttentionLayout(dp=32, tp=1),
    dense_ffn=ParallelLayout(dp=32, tp=1),
    moe=MoELayout(ep=32, slots_per_device=8),
    concurrency_per_device=24,
)


def _ctx(w: Workload) -> CostContext:
    return CostContext(load_model("deepseek-v3"), load_hardware("a2"), get_quantization("a8w8c16"), w)


def test_prefix_hits_skip_prefill_compute_but_keep_kv():
    cold, warm = (
        _ctx(Workload(input_tokens=4096, output_tokens=256)),
        _ctx(Workload(input_tokens=4096, output_tokens=256, prefix_hit_rate=0.5)),
    )
    assert warm.prefill_tokens_per_request == 2048
    # attention of the computed half attends to the whole prompt: (1 + h) / 2 * L + 1/2
    assert warm.prefill_attended_tokens == pytest.approx(0.75 * 4096 + 0.5)
    f_cold, f_warm = prefill_forward(cold, PREFILL), prefill_forward(warm, PREFILL)
    # the same computed tokens per forward serve twice the requests
    assert f_warm.requests_per_forward[0] == pytest.approx(2 * f_cold.requests_per_forward[0])
    # the whole prompt's KV stays in HBM: twice the KV per computed token (at a batch of two prompts a DP
    # rank and more: below one, a rank holds one whole prompt's KV either way)
    kv_cold = prefill_hbm(cold, PREFILL, 8 * 16384).breakdown_bytes["kv_cache"][0]
    kv_warm = prefill_hbm(warm, PREFILL, 8 * 16384).breakdown_bytes["kv_cache"][0]
    assert kv_warm == pytest.approx(2 * kv_cold)
    one_prompt = prefill_hbm(cold, PREFILL).breakdown_bytes["kv_cache"][0]
    assert prefill_hbm(warm, PREFILL).breakdown_bytes["kv_cache"][0] == pytest.approx(one_prompt)
    # decode is untouched: every KV position is there
    assert decode_step(warm, DECODE).step_s[0] == pytest.approx(decode_step(cold, DECODE).step_s[0])


def test_prefix_hits_raise_planned_prefill_throughput():
    base = run_cli("plan", "--phase", "prefill", "--max-cards", "32", "--json", "-")
    hits = run_cli("plan", "--phase", "prefill", "--max-cards", "32", "--prefix-hit-rate", "0.563", "--json", "-")
    assert base.exit_code == 0 and hits.exit_code == 0, hits.output
    b = json.loads(base.output)["plans"][0]["predicted"]["prefill"]
    h = json.loads(hits.output)["plans"][0]
    assert h["workload"]["prefix_hit_rate"] == 0.563
    rps = lambda p: p["requests_per_forward"] / p["forward_ms"]  # noqa: E731
    assert rps(h["predicted"]["prefill"]) > 1.5 * rps(b)


def test_distribution_statistics_by_hand():
    # 3 short requests (100 + 10) and 1 long one (1000 + 100)
    w = Workload(
        lengths=[
            {"input_tokens": 100, "output_tokens": 10, "weight": 3},
            {"input_tokens": 1000, "output_tokens": 100, "weight": 1},
        ]
    )
    assert (w.input_tokens, w.output_tokens) == (325, 32)  # means, filled in
    s = w.stats
    # the decode pool holds a request for its output length: weights 3*10 and 1*100
    mean = (30 * (100 + 5) + 100 * (1000 + 50)) / 130
    assert s.decode_context_mean == pytest.approx(mean)
    second = (30 * (100**2 + 100 * 10 + 100 / 3) + 100 * (1000**2 + 1000 * 100 + 100**2 / 3)) / 130
    assert s.decode_context_std == pytest.approx(math.sqrt(second - mean**2))
    assert s.input_second_moment == pytest.approx((3 * 100**2 + 1000**2) / 4)
    assert w.slo_input_tokens == 1000  # p90 of 4 requests is the long one
    assert Workload(lengths=w.lengths, slo_percentile=75).slo_input_tokens == 100
    assert w.longest_context_tokens == 1100
    # the mean would mislead: a fixed 325 + 32 workload attends to far less
    assert (
        _ctx(w).mean_decode_context_tokens
        > 2 * _ctx(Workload(input_tokens=325, output_tokens=32)).mean_decode_context_tokens
    )
    with pytest.raises(ValueError, match="not the mean"):
        Workload(input_tokens=500, output_tokens=32, lengths=w.lengths)


def test_a_single_bin_is_the_plain_workload():
    plain = _ctx(Workload(input_tokens=2048, output_tokens=512))
    binned = _ctx(Workload(lengths=[{"input_tokens": 2048, "output_tokens": 512}]))
    for name in (
        "mean_decode_context_tokens",
        "decode_context_std_tokens",
        "prefill_attended_tokens",
        "ttft_input_tokens",
    ):
        assert getattr(plain, name) == pytest.approx(getattr(binned, name))
    assert plain.decode_context_std_tokens == pytest.approx(512 / math.sqrt(12))
    assert kv_tokens_in_use(plain, [1.0, 8.0], 0, 1) == pytest.approx(kv_tokens_in_use(binned, [1.0, 8.0], 0, 1))


def test_long_requests_bind_kv_and_percentile_drives_ttft():
    tail = Workload(
        lengths=[
            {"input_tokens": 1000, "output_tokens": 200, "weight": 99},
            {"input_tokens": 60000, "output_tokens": 200, "weight": 1},
        ]
    )
    ctx = _ctx(tail)
    # one sequence of a device must be able to hold the longest request
    assert kv_tokens_in_use(ctx, [1.0], 0, 1)[0] >= 60200
    # TTFT at p90 is the short prompt's; at p99.5 the long one's (its KV transfer and its batch)
    short = prefill_forward(ctx, PREFILL).ttft_s[0]
    long_ctx = _ctx(Workload(lengths=tail.lengths, slo_percentile=99.5))
    assert long_ctx.ttft_input_tokens == 60000
    assert prefill_forward(long_ctx, PREFILL).ttft_s[0] > 2 * short  # needs several forwards of 16K tokens


def test_workload_file_pairs_and_histogram(tmp_path):
    pairs = tmp_path / "pairs.json"
    pairs.write_text(json.dumps([[100, 10], [100, 10], [1000, 100]]))
    hist = REPO / "docs" / "examples" / "workload-chat-histogram.yaml"
    r = run_cli("plan", "--workload", str(pairs), "--max-cards", "48", "--top", "1", "--json", "-")
    assert r.exit_code == 0, r.output
    w = json.loads(r.output)["plans"][0]["workload"]
    assert (w["input_tokens"], w["output_tokens"]) == (400, 40)
    assert {"input_tokens": 100, "output_tokens": 10, "weight": 2.0} in w["lengths"]
    r = run_cli("plan", "--workload", str(hist), "--max-cards", "48", "--top", "1")
    assert r.exit_code == 0, r.output
    assert "TTFT is judged at the p90 prompt (3000 tokens)" in r.output.replace("\n", " ")
    # many distinct pairs are merged into geometric bins with the same mean
    many = WorkloadFile(pairs=[(100 + i, 10 + i % 7) for i in range(PAIR_BINS + 500)])
    bins = many.bins()
    assert len(bins) < PAIR_BINS
    total = sum(b.weight for b in bins)
    mean_in = sum(b.input_tokens * b.weight for b in bins) / total
    assert mean_in == pytest.approx(100 + (PAIR_BINS + 499) / 2, rel=2e-3)
    bad = tmp_path / "bad.yaml"
    bad.write_text("pairs: [[0, 10]]\n")
    r = run_cli("plan", "--workload", str(bad))
    assert r.exit_code == 2 and "pairs" in r.output


def test_128k_context_plans_and_an_impossible_one_names_the_kv(tmp_path):
    r = run_cli(
        "plan", "--hardware", "cm384", "--input-tokens", "131072", "--output-tokens", "2048", "--max-cards", "384",
        "--ttft-ms", "60000", "--top", "1", "--json", "-",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    best = json.loads(r.output)["plans"][0]
    assert best["predicted"]["decode"]["fits_hbm"] and best["predicted"]["prefill"]["fits_hbm"]
    long_model = tmp_path / "long.json"
    long_model.write_text(json.dumps(llama_8b_config(4_200_000)))
    # a 1M-token request's KV (128 KiB a token) splits over the TP group's 8 KV heads: a plan
    # with one sequence on a TP4 or TP8 decode group fits where one die could not hold it
    r = run_cli(
        "plan", "--model", str(long_model), "--input-tokens", "1000000", "--output-tokens", "1000",
        "--ttft-ms", "1000000", "--max-cards", "64", "--top", "1", "--json", "-",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    decode = json.loads(r.output)["plans"][0]["decode"]
    per_group = decode["concurrency_per_device"] * decode["attention"]["tp"]
    assert decode["attention"]["tp"] >= 4 and per_group == pytest.approx(round(per_group))
    # 4M tokens need 61.1 GiB a die even at TP8 (one KV head a die): no layout holds it
    r = run_cli(
        "plan", "--model", str(long_model), "--input-tokens", "4000000", "--output-tokens", "1000",
        "--ttft-ms", "10000000", "--max-cards", "64",
    )  # fmt: skip
    assert r.exit_code == 1
    text = r.output.replace("\n", " ")
    assert "context: one 4,001,000-token request needs 61.1 GiB of KV cache per device" in text
    assert "16.0 KiB per token, GQA, split over TP8" in text
