"""`simulate` and `evaluate` refuse inputs they would otherwise ignore, and print only what holds:
the machine of each phase, no MTP acceptance or TPOT verdict without a second token, the request
count's real span, what waiting at decode is for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.simulate.run import AUTO_MAX_REQUESTS, auto_requests
from planner.specs.catalog import load_plan
from tests.conftest import REPO, run_cli

SMALL = Path(__file__).resolve().parents[1] / "simulate"
PD, MIXED = str(SMALL / "small-pd.yaml"), str(SMALL / "small-mixed.yaml")


def _trace(tmp_path, body: str) -> str:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n" + body)
    return str(path)


def test_a_trace_with_no_request_is_refused(tmp_path):
    r = run_cli("simulate", PD, "--trace", _trace(tmp_path, ""))
    assert r.exit_code == 2 and "no requests" in r.output, r.output


def test_a_trace_gives_the_lengths_so_workload_is_refused_with_it(tmp_path):
    workload = str(REPO / "docs" / "examples" / "workload-chat-histogram.yaml")
    r = run_cli("simulate", PD, "--trace", _trace(tmp_path, "0,100,20\n"), "--workload", workload)
    assert r.exit_code == 2 and "drop --workload" in r.output, r.output


@pytest.mark.parametrize(
    ("flags", "named"),
    [(("--random-range-ratio", "2"), "--random-range-ratio"), (("--random-convention", "foo"), "--random-convention")],
)
def test_a_random_dataset_flag_without_the_random_lengths_is_refused(flags, named):
    r = run_cli("simulate", "a2-d70", *flags)
    assert r.exit_code == 2, r.output
    assert r.output == (
        f"error: {named} shapes the random dataset, which needs --random-input-len and --random-output-len; "
        f"give them, or drop {named}.\n"
    )


def test_one_token_requests_have_no_acceptance_and_no_tpot_verdict(tmp_path):
    out = tmp_path / "s.json"
    trace = _trace(tmp_path, "0,100,1\n0.5,200,1\n1,300,1\n")
    r = run_cli("simulate", PD, "--trace", trace, "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert "spec_decode_acceptance_rate" not in doc
    assert "MTP acceptance rate" not in r.output
    verdict = next(line for line in r.output.splitlines() if "of simulated requests the plan" in line)
    assert "TTFT p90" in verdict and "TPOT" not in verdict


def test_a_plan_on_two_machines_names_each_phase_machine():
    r = run_cli("simulate", MIXED, "--requests", "300")
    assert r.exit_code == 0, r.output
    assert "prefill on a3 and decode on a2" in r.output


def test_waiting_at_decode_is_for_admission():
    r = run_cli("simulate", "a2-d70", "--concurrency", "2000", "--requests", "3000")
    assert r.exit_code == 0, r.output
    assert "for a seat" not in r.output and "at decode for admission" in r.output


def test_the_automatic_request_count_says_its_real_span_when_capped():
    plan, _ = load_plan("a2-d70")
    from planner.costmodel.evaluate import evaluate_plan

    prediction = evaluate_plan(plan)
    n, _, why = auto_requests(plan, prediction, 1000.0, None)
    assert n == AUTO_MAX_REQUESTS
    assert "capped at" in why and "over 5 static" not in why


def test_evaluate_refuses_flags_it_would_ignore(tmp_path):
    ttft = run_cli("evaluate", "a2-d70", "--ttft-ms", "100", "--check")
    assert ttft.exit_code == 2 and "no prefill phase" in ttft.output, ttft.output
    out = run_cli("evaluate", "a2-d70", "--out", "-")
    assert out.exit_code == 2 and "--out" in out.output, out.output
    moved = run_cli("evaluate", MIXED, "--hardware", "h100")
    assert moved.exit_code == 2 and "prefill on a3" in moved.output, moved.output


def test_evaluate_emit_all_names_every_engine_that_cannot_run_the_plan(tmp_path):
    r = run_cli("evaluate", "inferencex-h200-tp8-c8", "--emit", "all", str(tmp_path / "launch"))
    assert r.exit_code == 2, r.output
    for engine in ("vllm-ascend", "sglang", "mindie"):
        assert f"--emit {engine}" in r.output, r.output
    assert not (tmp_path / "launch").exists()


def test_a_loads_file_of_another_depth_or_separator_is_refused(tmp_path):
    ten = tmp_path / "ten.csv"
    ten.write_text("\n".join(",".join("1" for _ in range(256)) for _ in range(10)) + "\n")
    r = run_cli("evaluate", "a2-d70", "--loads", str(ten))
    assert r.exit_code == 2 and "has 10 layers" in r.output and "58 MoE layers" in r.output, r.output
    semi = tmp_path / "semi.csv"
    semi.write_text("1;2;3;4\n5;6;7;8\n")
    r = run_cli("experts", "--loads", str(semi), "--devices", "2", "--slots-per-device", "2")
    assert r.exit_code == 2 and "commas" in r.output, r.output


def test_experts_with_one_window_claims_no_held_out_score():
    r = run_cli("experts", "--synthetic", "zipf:1.1", "--devices", "32", "--slots-per-device", "9")
    assert r.exit_code == 0, r.output
    assert "the held-out score above" not in r.output
    assert "no held-out score" in r.output


def test_afd_alone_does_not_claim_no_other_structure_fits():
    r = run_cli("plan", "--hardware", "a3", "--structure", "afd", "--engine", "none", "--max-cards", "64", "--top", "1")
    assert r.exit_code == 0, r.output
    assert "no deployment without AFD fits" not in r.output
    assert "not searched: --structure afd" in r.output
