"""Below FRACTIONAL_BELOW sequences a device the decode search tries every whole number of sequences per
attention TP group (1/tp a device): long contexts and tight TPOTs put the best plan between two whole
concurrencies, where the whole-number axis had to round it down."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from planner.candidates.phase_candidates import decode_candidates, lowest_latency_us
from planner.candidates.space import SpaceLimits, size_options
from planner.candidates.tables import FRACTIONAL_BELOW, decode_tables, to_integer_tables, whole_sequences
from planner.costmodel.context import CostContext
from planner.search.candidate_spaces import concurrency_axis
from planner.search.oracle import best_phase_ratio
from planner.specs.catalog import load_hardware, load_model
from planner.specs.plan import Workload
from planner.specs.quantization import get_quantization
from tests.conftest import llama_8b_config, run_cli


@pytest.fixture(scope="module")
def long_context():
    """DeepSeek-V3 decode on 16 A2 dies at 32K of context: HBM holds 3 sequences a die."""
    model, hw = load_model("deepseek-v3"), load_hardware("a2")
    ctx = CostContext(model, hw, get_quantization("a8w8c16"), Workload(input_tokens=32768, output_tokens=1024))
    opts = size_options(model, hw, 16, "decode", SpaceLimits(64))
    tps = [a.tp for a in opts.attention]
    t = decode_tables(ctx, opts, [0, 1], concurrency_axis(ctx, cap=12, tps=tps))
    whole = decode_tables(ctx, opts, [0, 1], concurrency_axis(ctx, cap=12))
    return t, to_integer_tables(t, hw.hbm_bytes), whole, to_integer_tables(whole, hw.hbm_bytes)


def test_the_axis_holds_every_sequence_per_group_below_the_limit(long_context):
    t, _, whole, _ = long_context
    assert max(a.tp for a in t.options.attention) == 8
    np.testing.assert_allclose(t.x_values[t.x_values < FRACTIONAL_BELOW], np.arange(1, 8 * FRACTIONAL_BELOW) / 8)
    np.testing.assert_array_equal(whole.x_values, np.arange(1, 13))  # no TPs given: whole numbers only


@pytest.mark.parametrize("slo_us", [None, 60000, 45000, 40000, 35000, 30000])
def test_the_best_decode_is_the_exhaustive_best_over_the_fractions(long_context, slo_us):
    t, ints, _, _ = long_context
    best = decode_candidates(t, ints, slo_us, keep=1)
    oracle = best_phase_ratio(t, ints, slo_us)
    assert (Fraction(best[0].num, best[0].den) if best else Fraction(0)) == oracle


@pytest.mark.parametrize(("slo_us", "x", "tp"), [(45000, 1.5, 2), (40000, 1.25, 4)])
def test_a_tight_tpot_lands_between_whole_concurrencies_and_gains_over_them(long_context, slo_us, x, tp):
    t, ints, whole, whole_ints = long_context
    (best,) = decode_candidates(t, ints, slo_us, keep=1)
    (rounded,) = decode_candidates(whole, whole_ints, slo_us, keep=1)
    # three sequences on a TP2 group or five on a TP4 group, against one a device
    assert best.x == x and rounded.x == 1
    assert best.attention.tp == tp and best.x * best.attention.tp == int(best.x * best.attention.tp)
    assert Fraction(best.num, best.den) > Fraction(rounded.num, rounded.den) * Fraction(11, 10)


def test_no_candidate_puts_a_fraction_of_a_sequence_on_its_tp_group(long_context):
    t, ints, _, _ = long_context
    found = decode_candidates(t, ints, 45000, keep=40)
    assert any(c.attention.tp == 1 for c in found) and any(not float(c.x).is_integer() for c in found)
    for c in found:
        assert whole_sequences(np.array([c.x]), c.attention.tp)[0], c
        # the ratio is x * emitted / step exactly, however the integers carry it
        e = int(np.floor(t.emitted[t.k_values.index(c.k)] * 1000 + 1e-9))
        assert Fraction(c.num, c.den) == Fraction(c.x) * e / c.time_us


def test_a_fractional_plan_runs_end_to_end(tmp_path):
    """From the CLI: the plan, its export, its re-evaluation, what binds it and MindIE's batch."""
    out, emit = tmp_path / "plan.json", tmp_path / "mindie"
    args = ["plan", "--model", "deepseek-v3", "--hardware", "a2", "--phase", "decode", "--decode-devices", "16"]
    args += ["--input-tokens", "16384", "--output-tokens", "1024", "--tpot-ms", "35", "--max-cards", "16", "--top", "1"]
    r = run_cli(*args, "--json", str(out), "--emit", "mindie", str(emit))
    assert r.exit_code == 0, r.output
    plan = json.loads(out.read_text())["plans"][0]
    decode = plan["decode"]
    assert decode["concurrency_per_device"] == 1.75 and decode["attention"]["tp"] == 4
    assert "B1.75" in r.output and "short of B2" in r.output  # the next step is one more sequence per group
    again = run_cli("evaluate", str(out), "--json", "-")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["predicted"]["decode"]["tpot_ms"] == pytest.approx(
        plan["predicted"]["decode"]["tpot_ms"], rel=1e-9
    )
    config = json.loads((emit / "decode0_config.json").read_text())
    # each DP rank's (MindIE-LLM runs a scheduler per DP rank on the same ScheduleConfig): 1.75 x its 4 dies
    assert config["BackendConfig"]["ScheduleConfig"]["maxBatchSize"] == 7


@pytest.fixture(scope="module")
def million_tokens(tmp_path_factory):
    """A Llama-8B-shaped model (8 KV heads, 128 KiB of KV a token) at 1M tokens of context on 8 A2
    dies: one request's KV is 122 GiB on one die and 15 GiB a die on a TP8 group."""
    cfg = llama_8b_config(1_100_000)
    path = tmp_path_factory.mktemp("long") / "long.json"
    path.write_text(json.dumps(cfg))
    model, hw = load_model(str(path)), load_hardware("a2")
    ctx = CostContext(model, hw, get_quantization("a8w8c16"), Workload(input_tokens=1_000_000, output_tokens=1000))
    opts = size_options(model, hw, 8, "decode", SpaceLimits(64))
    t = decode_tables(ctx, opts, [0], concurrency_axis(ctx, tps=[a.tp for a in opts.attention]))
    return t, to_integer_tables(t, hw.hbm_bytes)


@pytest.mark.parametrize("slo_us", [None, 100000, 30000])
def test_below_one_sequence_a_device_the_search_finds_the_exhaustive_best(million_tokens, slo_us):
    t, ints = million_tokens
    (best,) = decode_candidates(t, ints, slo_us, keep=1)
    assert best.x < 1 and best.attention.tp >= 4  # no die holds one request's KV alone
    assert best.x * best.attention.tp == int(best.x * best.attention.tp)
    assert Fraction(best.num, best.den) == best_phase_ratio(t, ints, slo_us)


@pytest.mark.parametrize("tables", ["long_context", "million_tokens"])
def test_the_lowest_tpot_the_diagnosis_quotes_is_one_the_search_reaches(tables, request):
    """`lowest_latency_us` (what an infeasible TPOT is told it could reach) counts the concurrencies the
    search runs, no others: at that TPOT a candidate exists, one microsecond below none does."""
    t, ints = request.getfixturevalue(tables)[:2]
    lowest = lowest_latency_us(t, ints)
    assert lowest is not None
    assert decode_candidates(t, ints, lowest, keep=1)
    assert not decode_candidates(t, ints, lowest - 1, keep=1)
