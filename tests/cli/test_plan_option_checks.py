"""`moeplan plan`'s less common options: --objective total is exact (no per-card pruning of sizes),
--robust prices the other structures like rank 1, flags a request would ignore are refused, and
labels say what a prefill-only plan counts."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli

LITE = ("plan", "--model", "deepseek-v2-lite", "--engine", "none")


def _total(output: str) -> float:
    match = re.search(r"output tokens/s │ ([0-9.]+)", output)
    assert match, output
    return float(match.group(1))


def test_objective_total_finds_the_size_that_packs_the_budget():
    # 11 cards: two colocated 4-device instances leave 3 cards idle; the pinned 2-device search shows that
    # five of those give more tokens/s in the same budget, so the free search must give at least that
    free = run_cli(*LITE, "--max-cards", "11", "--objective", "total", "--structure", "colocated", "--top", "1")
    pinned = run_cli(
        *LITE, "--max-cards", "11", "--objective", "total", "--structure", "colocated", "--top", "1",
        "--decode-devices", "2",
    )  # fmt: skip
    assert free.exit_code == 0 and pinned.exit_code == 0, free.output + pinned.output
    assert _total(free.output) >= _total(pinned.output) * (1 - 1e-9)
    assert (
        "output tokens/s of the whole deployment against rank 1"
        in run_cli(*LITE, "--max-cards", "11", "--objective", "total", "--top", "1").output
    )


def test_robust_prices_the_other_structures_at_the_predicted_factors(tmp_path):
    out = tmp_path / "r.json"
    # at 6 cards the best plan is colocated and the other structures' table has a disaggregated row
    plain = run_cli(*LITE, "--max-cards", "6", "--top", "3")
    robust = run_cli(*LITE, "--max-cards", "6", "--top", "3", "--robust", "--json", str(out))
    assert plain.exit_code == 0 and robust.exit_code == 0, robust.output

    def disaggregated(output: str) -> str:
        return next(line for line in output.splitlines() if line.startswith("│ disaggregated"))

    # the same plan at the same (predicted) figure in both: its tokens/s per card cell
    assert disaggregated(plain.output).split("│")[-3] == disaggregated(robust.output).split("│")[-3]
    assert json.loads(out.read_text())["plans"]


def test_flags_a_request_would_ignore_are_refused():
    cases = [
        (("--phase", "decode", "--ttft-ms", "1"), "--ttft-ms"),
        (("--phase", "prefill", "--tpot-ms", "5"), "--tpot-ms"),
        (("--phase", "prefill", "--decode-devices", "4"), "--decode-devices"),
        (("--phase", "decode", "--prefill-devices", "4"), "--prefill-devices"),
        (("--kv-transfer-gbps", "25", "--structure", "colocated"), "--structure colocated"),
    ]
    for flags, named in cases:
        r = run_cli(*LITE, "--max-cards", "8", *flags)
        assert r.exit_code == 2, (flags, r.output)
        assert r.output.startswith("error: ") and named in r.output, r.output


@pytest.mark.parametrize(
    ("phase", "flags", "named"),
    [
        ("decode", ("--kv-transfer-gbps", "1"), "--kv-transfer-gbps"),
        ("decode", ("--max-prefill-cards", "4"), "--max-prefill-cards"),
        ("decode", ("--prefill-hardware", "a3"), "--prefill-hardware"),
        ("decode", ("--prefix-hit-rate", "0.5"), "--prefix-hit-rate"),
        ("prefill", ("--max-decode-cards", "4"), "--max-decode-cards"),
        ("prefill", ("--decode-hardware", "a3"), "--decode-hardware"),
        ("prefill", ("--mtp", "1"), "--mtp"),
        ("prefill", ("--mtp-acceptance", "0.9"), "--mtp-acceptance"),
        ("prefill", ("--tpot-at-percentile",), "--tpot-at-percentile"),
        ("prefill", ("--no-decode-microbatch",), "--no-decode-microbatch"),
    ],
)
def test_a_flag_of_the_other_phase_is_refused_naming_it_and_the_phase(phase, flags, named):
    r = run_cli(*LITE, "--max-cards", "8", "--phase", phase, *flags)
    assert r.exit_code == 2, r.output
    assert r.output == f"error: {named}: --phase {phase} plans no phase it applies to; drop {named} or the --phase.\n"


def test_a_workload_file_names_itself_and_its_lengths_are_not_overridden(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("pairs: [[1000000, 10]]\n")
    r = run_cli(*LITE, "--max-cards", "8", "--workload", str(path))
    assert r.exit_code == 2 and "--workload file's longest request" in r.output, r.output
    ok = tmp_path / "ok.yaml"
    ok.write_text("pairs: [[150, 15]]\n")
    both = run_cli(*LITE, "--max-cards", "8", "--workload", str(ok), "--input-tokens", "4096")
    assert both.exit_code == 2 and "--input-tokens" in both.output, both.output


def test_a_kv_link_on_one_machine_says_the_phases_are_searched_apart():
    r = run_cli(*LITE, "--max-cards", "8", "--kv-transfer-gbps", "25", "--top", "1")
    assert r.exit_code == 0, r.output
    assert "prefill and decode instances apart" in r.output


def test_a_prefill_only_plan_counts_prompt_tokens():
    r = run_cli(*LITE, "--max-cards", "8", "--phase", "prefill", "--top", "2")
    assert r.exit_code == 0, r.output
    assert "prompt tok/s/card" in r.output


def test_max_cost_says_it_needs_a_card_price_not_a_running_price():
    r = run_cli(*LITE, "--max-cost", "10", "--price-per-card-hour", "2")
    assert r.exit_code == 2, r.output
    assert "price_per_card" in r.output and "--price-per-card-hour" in r.output and "--max-cards" in r.output
    assert "both hardware YAMLs" not in r.output


def test_fidelity_refuses_two_formats_at_once():
    for flags in (("--json", "--markdown"), ("--misses", "--json"), ("--misses", "--markdown")):
        r = run_cli("fidelity", *flags)
        assert r.exit_code == 2 and r.output.startswith("error: "), (flags, r.output)


def test_another_structures_plan_that_is_in_the_list_says_its_rank():
    # --top 8: the best colocated plan ranks sixth, below a near-tie with a shorter TTFT
    r = run_cli(*LITE, "--max-cards", "8", "--top", "8")
    assert r.exit_code == 0, r.output
    listed = {line.split("│")[2].strip() + line.split("│")[3].strip() for line in r.output.splitlines()
              if re.match(r"│ \d │", line)}  # fmt: skip
    rows = [line for line in r.output.splitlines() if line.startswith("│ colocated ")]
    assert rows, r.output
    # (cards and P:D of a listed row: here AFD ranks first and the best colocated plan is in the list)
    matched = [row for row in rows if "".join(c.strip() for c in row.split("│")[2:4]) in listed]
    assert matched, r.output
    assert all("(rank " in row for row in matched), matched


def test_sweep_refuses_a_flag_of_the_phase_it_leaves_out():
    # sweep ran --phase decode --ttft-ms 1000,2000 as two identical points (the TTFT SLO binds no decode plan)
    for args, flag in (
        (("--phase", "decode", "--ttft-ms", "1000,2000"), "--ttft-ms"),
        (("--phase", "prefill", "--mtp", "1"), "--mtp"),
    ):
        r = run_cli("sweep", *args)
        assert r.exit_code == 2 and f"{flag}: --phase" in r.output, r.output
