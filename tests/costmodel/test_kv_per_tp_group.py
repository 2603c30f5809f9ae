"""The decode KV cache is counted once per attention TP group (its sequences, one longest among them)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.costmodel.context import CostContext
from planner.costmodel.memory import decode_hbm, kv_tokens_in_use, request_kv_bytes_per_device
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import AttentionLayout, DecodePlan, MoELayout, ParallelLayout
from planner.specs.quantization import get_quantization
from planner.specs.workload import Workload

TAIL = Workload(
    lengths=[
        {"input_tokens": 2000, "output_tokens": 500, "weight": 9},
        {"input_tokens": 60000, "output_tokens": 500, "weight": 1},
    ]
)


def _ctx(model: str, w: Workload = TAIL) -> CostContext:
    return CostContext(load_model(model), load_hardware("a2"), get_quantization("a8w8c16"), w)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_a_group_of_tp_devices_holds_what_one_device_with_all_its_sequences_would(tp):
    ctx = _ctx("deepseek-v3")
    s = np.array([1 / tp, 0.5, 1.0, 3.0, 24.0])
    assert kv_tokens_in_use(ctx, s, 1, tp) * tp == pytest.approx(kv_tokens_in_use(ctx, s * tp, 1, 1))


def test_the_longest_request_and_the_margin_are_counted_once_per_group():
    ctx = _ctx("deepseek-v3")
    mean, std = ctx.mean_decode_context_tokens, ctx.decode_context_std_tokens
    longest = ctx.max_context_tokens
    for s, tp in ((2.0, 8), (1 / 8, 8), (0.5, 4), (3.0, 2)):
        g = s * tp
        group = max(g * mean + 2 * math.sqrt(g) * std, max(g - 1, 0) * mean + longest)
        assert kv_tokens_in_use(ctx, [s], 0, tp)[0] == pytest.approx(group / tp)
    # one sequence on a TP8 group is one request: the longest, never eight of them
    assert kv_tokens_in_use(ctx, [1 / 8], 0, 8)[0] * 8 == pytest.approx(max(longest, mean + 2 * std))
    with pytest.raises(ValueError, match="tp = 0"):
        kv_tokens_in_use(ctx, [1.0], 0, 0)


def _decode(tp: int, concurrency: float, devices: int = 8) -> DecodePlan:
    return DecodePlan(
        devices=devices,
        attention=AttentionLayout(dp=devices // tp, tp=tp),
        dense_ffn=ParallelLayout(dp=devices, tp=1),
        moe=MoELayout(ep=devices, slots_per_device=256 // devices + 1),
        concurrency_per_device=concurrency,
    )


def test_gqa_heads_split_the_kv_and_mla_latent_does_not():
    # Qwen3-235B: 4 KV heads. One sequence on a TP4 group holds a quarter of its KV a die
    qwen = _ctx("qwen3-235b-a22b", Workload(input_tokens=100_000, output_tokens=1000))
    one = decode_hbm(qwen, _decode(1, 1.0)).breakdown_bytes["kv_cache"][0]
    split = decode_hbm(qwen, _decode(4, 0.25)).breakdown_bytes["kv_cache"][0]
    assert split == pytest.approx(one / 4)
    assert request_kv_bytes_per_device(qwen, 1000.0, 4) == pytest.approx(
        request_kv_bytes_per_device(qwen, 1000.0, 1) / 4
    )
    # DeepSeek-V3: MLA's latent is replicated over the group: the same bytes a die
    ds = _ctx("deepseek-v3", Workload(input_tokens=100_000, output_tokens=1000))
    one = decode_hbm(ds, _decode(1, 1.0)).breakdown_bytes["kv_cache"][0]
    assert decode_hbm(ds, _decode(4, 0.25)).breakdown_bytes["kv_cache"][0] == pytest.approx(one)
