"""Inputs that used to end in an internal error (exit 70), a wrong message or silent acceptance: each is now
refused with exit 2 (or 1 when the request is infeasible) naming the field and the fix."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO, run_cli


def _last_line(output: str) -> str:
    assert "Traceback" not in output and "internal error" not in output, output
    return [ln for ln in output.strip().splitlines() if ln.strip()][-1]


@pytest.mark.parametrize("utilization", ["0.05", "0.01"])
def test_an_hbm_utilization_that_leaves_no_room_is_infeasible_naming_hbm(utilization):
    """At 0.05 an A2 device may fill 3.2 GiB, less than its 3.6 GiB of runtime reserve and buffers: exit 1 with
    HBM as what binds and the least --hbm-utilization that leaves room (it was a ValueError, exit 70)."""
    r = run_cli("plan", "--top", "1", "--hbm-utilization", utilization)
    assert r.exit_code == 1
    line = _last_line(r.output)
    assert "HBM: at --hbm-utilization" in line and "runtime reserve and communication buffers" in line
    assert "Raise --hbm-utilization to at least 0.06" in line


def test_a_low_hbm_utilization_with_room_offers_raising_it():
    r = run_cli("plan", "--top", "1", "--hbm-utilization", "0.1")
    assert r.exit_code == 1
    assert "raise --hbm-utilization (now 0.1; default 0.9)" in " ".join(r.output.split())


def test_simulate_refuses_a_negative_seed_and_ranges_print_whole_numbers():
    r = run_cli("simulate", "a2-d70", "--requests", "30", "--seed", "-1")
    assert r.exit_code == 2
    assert _last_line(r.output) == "error: --seed: -1 is out of range; give a whole number from 0 to 4294967295."


def test_simulate_refuses_a_prefill_delay_of_no_passes():
    r = run_cli("simulate", "a2-d70", "--prefill-delay-passes", "0")
    assert r.exit_code == 2 and "--prefill-delay-passes: 0 is out of range" in _last_line(r.output)


def test_an_unknown_engine_lists_auto_and_none_where_they_are_choices():
    r = run_cli("plan", "--engine", "bogus")
    assert r.exit_code == 2
    assert "choose one of auto, none, vllm-ascend, sglang, mindie" in _last_line(r.output)


def test_an_empty_mtp_list_is_refused_not_read_as_the_default():
    r = run_cli("plan", "--mtp", "")
    assert r.exit_code == 2 and "--mtp: '' is not an integer" in _last_line(r.output)


def test_phases_budgeted_apart_on_one_machine_are_not_called_mixed_hardware():
    r = run_cli("plan", "--top", "1", "--max-prefill-cards", "16")
    assert r.exit_code == 0
    assert "mixed hardware" not in r.output and "both kinds of card" not in r.output


def test_a_loads_file_that_is_not_npy_says_so(tmp_path):
    text = tmp_path / "text.npy"
    text.write_text("hello")
    r = run_cli("experts", "--loads", str(text), "--devices", "32", "--slots-per-device", "9")
    assert r.exit_code == 2 and "no numpy header: not a file numpy.save wrote" in _last_line(r.output)
    r = run_cli("plan", "--top", "1", "--loads", str(text))
    assert r.exit_code == 2 and "no numpy header" in _last_line(r.output)


def test_a_link_level_whose_groups_do_not_tile_the_nodes_is_refused(tmp_path):
    doc = yaml.safe_load((REPO / "hardware" / "a2.yaml").read_text())
    doc["levels"][0]["devices_per_group"] = 3
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(doc))
    r = run_cli("plan", "--hardware", str(path), "--top", "1")
    assert r.exit_code == 2
    assert "devices_per_group 3 neither divides devices_per_node 8 nor is a multiple of it" in _last_line(r.output)
