"""What the simulated client sends: arrivals as vLLM spaces them, lengths as each client's random
dataset draws them, traces read and refused line by line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.errors import BadInputError
from planner.simulate.tracefile import load_trace
from planner.simulate.traffic import arrival_times, random_dataset_lengths


def test_poisson_arrivals_end_at_n_over_rate_as_vllm_rescales_them():
    rng = np.random.default_rng(0)
    ready = arrival_times(1000, 5.0, 1.0, rng)
    assert ready[-1] == pytest.approx(1000 / 5.0)
    gaps = np.diff(ready)
    assert np.all(gaps >= 0)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.1)  # exponential: CV 1


@pytest.mark.parametrize("burstiness", [0.25, 4.0])
def test_gamma_burstiness_sets_the_spread_of_the_gaps(burstiness):
    ready = arrival_times(20000, 10.0, burstiness, np.random.default_rng(1))
    gaps = np.diff(ready)
    # gamma(shape b): coefficient of variation 1/sqrt(b)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0 / math.sqrt(burstiness), rel=0.05)


def test_infinite_burstiness_is_a_constant_rate_and_no_rate_is_all_at_once():
    rng = np.random.default_rng(2)
    assert np.allclose(np.diff(arrival_times(10, 2.0, math.inf, rng)), 0.5)
    assert not arrival_times(10, None, 1.0, rng).any()


@pytest.mark.parametrize("rate", [0.0, -1.0, math.inf * 0])
def test_a_rate_that_is_not_positive_is_refused(rate):
    with pytest.raises(BadInputError, match="--rate"):
        arrival_times(10, rate, 1.0, np.random.default_rng(0))


def test_vllm_random_dataset_draws_around_the_length():
    inp, out = random_dataset_lengths(1000, 100, 0.5, "vllm", 20000, np.random.default_rng(0))
    assert inp.min() == 500 and inp.max() == 1500  # [floor(L(1-r)), ceil(L(1+r))]
    assert out.min() == 50 and out.max() == 150
    with pytest.raises(BadInputError, match="vLLM's random dataset takes a ratio in"):
        random_dataset_lengths(1000, 100, 1.0, "vllm", 10, np.random.default_rng(0))


def test_sglang_random_dataset_draws_below_the_length_and_ratio_one_is_fixed():
    inp, out = random_dataset_lengths(1000, 100, 0.5, "sglang", 20000, np.random.default_rng(0))
    assert inp.min() == 500 and inp.max() == 1000  # [max(int(L r), 1), L]
    assert out.min() == 50 and out.max() == 100
    inp, out = random_dataset_lengths(3584, 1536, 1.0, "sglang", 100, np.random.default_rng(0))
    assert set(inp.tolist()) == {3584} and set(out.tolist()) == {1536}
    inp, _ = random_dataset_lengths(100, 10, 0.0, "sglang", 5000, np.random.default_rng(0))
    assert inp.min() == 1


def test_a_csv_and_a_jsonl_trace_read_alike(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,input_tokens,output_tokens,user\n0.5,100,10,a\n0.0,200,20,b\n")
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        '{"timestamp": 500, "input_length": 100, "output_length": 10}\n'
        '{"timestamp": 0, "input_length": 200, "output_length": 20}\n'
    )
    for path in (csv, jsonl):
        t, i, o = load_trace(path)
        assert t.tolist() == [0.0, 0.5] and i.tolist() == [200, 100] and o.tolist() == [20, 10]


@pytest.mark.parametrize(
    "text,match",
    [
        ("arrival_s,input_tokens,output_tokens\n0,-5,10\n", "line 2: input tokens = '-5'"),
        ("arrival_s,input_tokens,output_tokens\n0,5,0\n", "output tokens = '0'"),
        ("arrival_s,input_tokens,output_tokens\n-1,5,5\n", "is negative"),
        ("arrival_s,input_tokens\n0,5\n", "no output length column"),
        ('{"arrival_s": 0, "input_tokens": 3.5, "output_tokens": 2}\n', "whole number"),
        ("", "is empty"),
    ],
)
def test_a_bad_trace_line_is_named(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(BadInputError, match=match):
        load_trace(path)
