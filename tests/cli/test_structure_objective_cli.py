"""`--structure`, `--objective`, `--price-per-card-hour` and `--y-axis`: bad input is one line and
exit 2, before any search."""

from __future__ import annotations

import pytest

from tests.conftest import PLANS, run_cli


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--structure", "pd,moe"), "--structure: 'moe' is not a structure"),
        (("--structure", "colocated", "--no-colocated"), "contradict"),
        (
            ("--structure", "colocated", "--phase", "decode"),
            "--structure colocated and --phase decode contradict each other",
        ),
        (
            ("--structure", "pd,colocated", "--phase", "prefill"),
            "--structure colocated and --phase prefill contradict each other",
        ),
        (
            ("--structure", "afd", "--phase", "prefill", "--engine", "none"),
            "--structure afd and --phase prefill contradict each other",
        ),
        (("--objective", "speed"), "--objective: 'speed' is not one of"),
        (("--objective", "total", "--rate", "2"), "--objective total fills the budget"),
        (("--objective", "cost"), "hardware 'a2' has no price_per_card_hour"),
        (
            ("--objective", "energy", "--hardware", "atlas350", "--quantization", "fp8"),
            "hardware 'atlas350' has no power_w_per_card",
        ),
        (("--price-per-card-hour", "-1"), "is not a positive price"),
        (("--structure", "afd", "--simulate"), "--structure afd with --simulate: the simulator does not model AFD"),
        (
            ("--structure", "afd", "--prefill-hardware", "a2", "--decode-hardware", "cm384"),
            "--structure afd: AFD decode instances are searched on one machine",
        ),
        (("--price-per-card-hour", "cm384=2"), "'cm384' is not a machine of this run"),
        (
            ("--engine", "sglang", "--structure", "afd", "--model", "deepseek-v3", "--hardware", "a3"),
            "--structure afd: --engine sglang cannot run it: its AFD runs Qwen3MoeForCausalLM",
        ),
        (
            ("--engine", "vllm-ascend", "--structure", "afd", "--model", "deepseek-v3"),
            "--structure afd: --engine vllm-ascend cannot run it: its AFD runs on a3, a3-superpod, cm384, not on a2",
        ),
    ],
)
def test_plan_refuses_in_one_line(args, says):
    r = run_cli("plan", *args)
    assert r.exit_code == 2, r.output
    assert says in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--y-axis", "price"), "--y-axis: 'price' is not one of"),
        (("--y-axis", "cost"), "--y-axis cost: hardware 'a2' has no price_per_card_hour"),
        (("--y-axis", "energy", "--hardware", "atlas950"), "hardware 'atlas950' has no power_w_per_card"),
    ],
)
def test_sweep_refuses_an_axis_it_cannot_draw(args, says):
    r = run_cli("sweep", "--tpot-ms", "50,100", *args)
    assert r.exit_code == 2, r.output
    assert says in r.output
    assert "Traceback" not in r.output


def test_sweep_with_an_energy_axis_charts_joules_per_output_token():
    args = ("sweep", "--tpot-ms", "50,100", "--hardware", "a3", "--model", "deepseek-v2-lite", "--max-cards", "16")
    r = run_cli(*args, "--y-axis", "energy")
    assert r.exit_code == 0, r.output
    assert "J/out tok" in r.output and "joules per output token (prefill + decode cards; lower is better)" in r.output
    csv = run_cli(*args, "--y-axis", "energy", "--csv", "-")
    assert csv.exit_code == 0, csv.output
    header, *rows = csv.output.strip().splitlines()
    col = header.split(",").index("joules_per_output_token")
    assert rows and all(float(row.split(",")[col]) > 0 for row in rows)


def test_a_lower_is_better_front_keeps_the_cheapest_points():
    from planner.ranking.frontier import pareto_front

    xy = [(10.0, 2.0), (10.0, 1.0), (20.0, 3.0), (5.0, 0.5), (15.0, 4.0)]
    assert pareto_front(xy, lower_y_better=True) == [3, 1, 2]
    assert pareto_front(xy) == [4, 2]


def test_simulate_refuses_an_afd_plan_by_name():
    r = run_cli("simulate", str(PLANS / "afd-a3-example.yaml"))
    assert r.exit_code == 2, r.output
    assert "afd: the simulator does not model attention-FFN disaggregated instances" in r.output
