"""A failed command writes no file; every usage error is one line naming the flag and the fix; help
names what each argument takes; evaluate judges the default ITL limit as plan searches with it."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from planner.specs.quantization import QUANTIZATION_SCHEMES
from tests.conftest import PLANS, REPO, engines_embedding, run_cli

SWEEP = ("sweep", "--hardware", "a2", "--max-cards", "16", "--tpot-ms", "50:100:50")


def _one_line_error(output: str) -> str:
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output and "Usage:" not in output and "Input should" not in output
    assert lines[0].startswith("error: "), output
    return lines[0]


def _leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---- no partial outputs ------------------------------------------------------------------------


def test_sweep_writes_no_csv_when_the_plot_cannot_be_written(tmp_path):
    csv_path = tmp_path / "f.csv"
    r = run_cli(*SWEEP, "--csv", str(csv_path), "--plot", str(tmp_path / "missing" / "x.png"))
    assert r.exit_code == 2
    assert "--plot" in _one_line_error(r.output) and "missing" in r.output
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("flag", ["--csv", "--json", "--plot"])
def test_sweep_refuses_a_folder_as_an_output_before_the_search(tmp_path, monkeypatch, flag):
    import planner.cli.sweep_cmd as sweep_cmd

    def no_search(*args, **kwargs):
        raise AssertionError("the search ran before the outputs were checked")

    monkeypatch.setattr(sweep_cmd, "_run_with_progress", no_search)
    folder = tmp_path / "out.png"
    folder.mkdir()
    r = run_cli(*SWEEP, flag, str(folder))
    assert r.exit_code == 2
    line = _one_line_error(r.output)
    assert flag in line and "is a folder" in line


def test_sweep_refuses_two_outputs_to_the_same_file(tmp_path):
    same = str(tmp_path / "out")
    r = run_cli(*SWEEP, "--csv", same, "--json", same)
    assert r.exit_code == 2
    assert "--csv and --json both write" in _one_line_error(r.output)


def test_evaluate_writes_no_out_file_when_an_engine_refuses_the_plan(tmp_path):
    out, emit_dir = tmp_path / "f", tmp_path / "D"
    r = run_cli("evaluate", str(PLANS / "a2-d70.yaml"), "--out", str(out), "--emit", "sglang", str(emit_dir))
    assert r.exit_code == 2
    assert "--emit sglang" in _one_line_error(r.output)
    assert _leftovers(tmp_path) == []


def test_evaluate_leaves_an_existing_out_file_as_it_was_when_emit_refuses(tmp_path):
    out = tmp_path / "f.json"
    out.write_text("before\n")
    r = run_cli("evaluate", "a2-d70", "--out", str(out), "--emit", "all", str(tmp_path / "D"))
    assert r.exit_code == 2  # sglang cannot run the report's A2 decode layout
    assert out.read_text() == "before\n"
    assert _leftovers(tmp_path) == ["f.json"]


def test_evaluate_writes_out_and_emit_together_when_both_succeed(tmp_path, tmp_path_factory):
    out, emit_dir = tmp_path / "f.json", tmp_path / "D"
    d70 = engines_embedding(PLANS / "a2-d70.yaml", tmp_path_factory.mktemp("plan"))
    r = run_cli("evaluate", str(d70), "--out", str(out), "--emit", "vllm-ascend", str(emit_dir))
    assert r.exit_code == 0, r.output
    assert "predicted" in json.loads(out.read_text())
    assert (emit_dir / "launch.json").is_file()
    assert _leftovers(tmp_path) == ["D", "f.json"]  # no temporary file or folder left beside them


def test_emit_all_into_a_new_folder_writes_every_engine_or_nothing(tmp_path, tmp_path_factory):
    emit_dir = tmp_path / "D"
    d70 = engines_embedding(PLANS / "a2-d70.yaml", tmp_path_factory.mktemp("plan"))
    r = run_cli("evaluate", str(d70), "--emit", "vllm-ascend,mindie", str(emit_dir))
    assert r.exit_code == 0, r.output
    assert _leftovers(emit_dir) == ["mindie", "vllm-ascend"]
    assert _leftovers(tmp_path) == ["D"]


def test_evaluate_check_failure_writes_no_file(tmp_path):
    out = tmp_path / "f.json"
    r = run_cli("evaluate", "a2-d70", "--check", "--tpot-ms", "50", "--out", str(out))
    assert r.exit_code == 1
    assert "misses the TPOT SLO" in r.output and "Not written: " in r.output
    assert _leftovers(tmp_path) == []


def test_evaluate_refuses_an_out_folder_that_does_not_exist(tmp_path):
    r = run_cli("evaluate", "a2-d70", "--out", str(tmp_path / "no" / "f.json"))
    assert r.exit_code == 2
    assert "--out: folder" in _one_line_error(r.output)


def test_plan_refuses_a_json_path_it_cannot_write_before_the_search(tmp_path, monkeypatch):
    import planner.cli.plan_cmd as plan_cmd

    def no_search(*args, **kwargs):
        raise AssertionError("the search ran before the outputs were checked")

    monkeypatch.setattr(plan_cmd, "search_with_progress", no_search)
    r = run_cli("plan", "--json", str(tmp_path / "no" / "plans.json"))
    assert r.exit_code == 2
    assert "--json: folder" in _one_line_error(r.output)


def test_experts_refuses_an_out_path_it_cannot_write_before_the_placement(tmp_path, monkeypatch):
    import planner.cli.experts_cmd as experts_cmd

    def no_study(*args, **kwargs):
        raise AssertionError("the placement ran before the output was checked")

    monkeypatch.setattr(experts_cmd, "run_study", no_study)
    r = run_cli(
        "experts", "--synthetic", "zipf:1.1", "--devices", "8", "--slots-per-device", "40", "--out", str(tmp_path)
    )
    assert r.exit_code == 2
    assert "--out" in _one_line_error(r.output) and "is a folder" in r.output


# /proc takes no new file, whoever asks: permissions say root may write there, creating a file fails
NO_NEW_FILES = "/proc"
CALIBRATE = ("calibrate", str(REPO / "docs" / "examples" / "calibration" / "measurements.csv"), "--hardware", "a2")


@pytest.mark.skipif(not os.path.isdir(NO_NEW_FILES), reason="needs Linux's /proc")
@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("plan",), "--json"),
        (("plan",), "--html"),
        (("evaluate", "a2-d70"), "--out"),
        (("evaluate", "a2-d70"), "--html"),
        (SWEEP, "--plot"),
        (SWEEP, "--csv"),
        (CALIBRATE, "--out"),
        (("experts", "--synthetic", "zipf:1.1", "--devices", "8", "--slots-per-device", "40"), "--out"),
        (("simulate", "a2-d70", "--requests", "10"), "--json"),
        (("whatif", "a2-d70", "--tpot-ms", "80"), "--json"),
    ],
)
def test_a_folder_that_takes_no_file_is_refused_before_any_work_naming_the_flag(args, flag):
    path = f"{NO_NEW_FILES}/moeplan-out.{'png' if flag == '--plot' else 'json'}"
    r = run_cli(*args, flag, path)
    assert r.exit_code == 2, r.output
    line = _one_line_error(r.output)  # no table printed before it: nothing ran
    assert line.startswith(f"error: {flag}: cannot write '{path}' (")
    assert line.endswith("give a path in an existing, writable folder.")
    assert not os.path.exists(path)


def test_a_non_file_output_is_refused_with_advice_the_flag_takes(tmp_path):
    html = _one_line_error(run_cli("plan", "--html", "/dev/null").output)
    assert "--html: '/dev/null' is not a regular file; give a file name." in html
    assert "stdout" not in html  # --html - is refused
    assert "('-' for stdout)" in _one_line_error(run_cli("plan", "--json", "/dev/null").output)


@pytest.mark.parametrize(("args", "flag"), [(("plan",), "--json"), (("plan",), "--html"), (SWEEP, "--csv")])
def test_an_empty_output_path_is_refused_as_empty(args, flag):
    r = run_cli(*args, flag, "")
    assert r.exit_code == 2
    assert _one_line_error(r.output) == f"error: {flag}: the path is empty; give a file name."


def test_a_bad_choice_names_the_flag_and_the_values():
    r = run_cli("experts", "--format", "foo")
    assert r.exit_code == 2
    assert _one_line_error(r.output) == (
        "error: --format: 'foo' is not one of vllm-ascend, json; give one of them, e.g. --format vllm-ascend."
    )


def test_outputs_are_renamed_into_place_only_when_every_one_is_staged(tmp_path):
    from planner.cli.common import Outputs
    from planner.errors import PlannerError

    class FullDisk:
        destination = tmp_path / "second"

        def stage(self):
            raise OSError(28, "No space left on device")

        def commit(self):
            raise AssertionError("committed after a failed stage")

        def discard(self):
            pass

    first = tmp_path / "first.csv"
    first.write_text("before\n")
    outputs = Outputs()
    outputs.text(first, "after\n")
    outputs.folder(FullDisk())
    with pytest.raises(PlannerError, match="cannot write '.*second': No space left on device; nothing was written"):
        outputs.commit()
    assert first.read_text() == "before\n"
    assert _leftovers(tmp_path) == ["first.csv"]  # the staged copy of first.csv is gone too


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("evaluate", "a2-d70", "--json"), "--json"),
        (("evaluate", "a2-d70", "--out"), "--out"),
        (("experts", "--synthetic", "zipf:1.1", "--devices", "8", "--slots-per-device", "40", "--out"), "--out"),
    ],
)
def test_a_write_that_fails_after_the_early_check_names_its_flag(tmp_path, monkeypatch, args, flag):
    """A disk that fills between the early check and the write: the error names the flag that gave the
    path, exit 2, nothing written."""
    import planner.cli.common as common

    def full_disk(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(common._StagedFile, "stage", full_disk)
    path = tmp_path / "out.json"
    r = run_cli(*args, str(path))
    assert r.exit_code == 2, r.output
    assert f"error: {flag}: cannot write '{path}': No space left on device; nothing was written." in " ".join(
        r.output.split()
    )
    assert _leftovers(tmp_path) == []


# ---- a sweep with no feasible point --------------------------------------------------------------


def test_a_sweep_with_no_feasible_point_exits_1_naming_what_binds(tmp_path):
    csv_path = tmp_path / "s.csv"
    r = run_cli("sweep", "--hardware", "a2", "--max-cards", "8", "--tpot-ms", "50:100:50", "--csv", str(csv_path))
    assert r.exit_code == 1, r.output
    assert "infeasible: no point of the sweep is feasible: card budget binds at every one of the 2 points" in r.output
    assert "Raise --max-cards to at least 16" in r.output
    assert "infeasible [1]" in r.output  # the table still says why at each point
    assert _leftovers(tmp_path) == []


def test_a_sweep_with_some_feasible_points_exits_0_with_the_others_marked():
    r = run_cli("sweep", "--hardware", "a2", "--max-cards", "16", "--tpot-ms", "10,50", "--phase", "decode")
    assert r.exit_code == 0, r.output
    assert "infeasible [1]" in r.output and "2 points (1 feasible)" in r.output


# ---- flag errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "sweep"])
@pytest.mark.parametrize("value", ["-5", "0"])
def test_a_bad_tpot_is_reported_alone(command, value):
    r = run_cli(command, "--tpot-ms", value)
    assert r.exit_code == 2
    line = _one_line_error(r.output)
    assert "--tpot-ms" in line and "--max-itl-ms" not in line


@pytest.mark.parametrize("args", [("plan",), ("sweep",), ("evaluate", "a2-d70")])
def test_a_tpot_whose_default_itl_passes_the_limit_names_tpot_and_its_limit(args):
    r = run_cli(*args, "--tpot-ms", "4e8")  # the default ITL limit, 3x TPOT, would be 1.2e9 ms > 1e9 ms
    assert r.exit_code == 2
    line = _one_line_error(r.output)
    assert line.startswith("error: --tpot-ms: must be <= 1e+09/3 ms (about 333,333,333 ms)")
    assert "got 4e+08" in line and "--max-itl-ms:" not in line


def test_evaluate_takes_the_largest_tpot_it_names_and_max_itl_ms_lifts_the_limit():
    assert "--tpot-ms: must be <= 1e+09/3 ms" in run_cli("evaluate", "a2-d70", "--tpot-ms", "333333334").output
    assert run_cli("evaluate", "a2-d70", "--tpot-ms", "333333333").exit_code == 0
    assert run_cli("evaluate", "a2-d70", "--tpot-ms", "4e8", "--max-itl-ms", "0").exit_code == 0


def test_an_unknown_emit_engine_names_emit_and_the_engines(tmp_path):
    r = run_cli("plan", "--emit", "foo", str(tmp_path / "D"))
    assert r.exit_code == 2
    line = _one_line_error(r.output)
    assert "--emit" in line and "--engine" not in line and "'foo'" in line
    assert all(engine in line for engine in ("vllm-ascend", "sglang", "mindie"))


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (("plan", "--max-cards", "abc"), "--max-cards: 'abc' is not a number; give a number"),
        (("evaluate", "a2-d70", "--rank", "0"), "--rank: 0 is out of range; give a whole number >= 1"),
        (("plan", "--workers", "0"), "--workers: 0 is out of range; give a whole number from 1 to 64"),
        (("plan", "--top", "x"), "--top: 'x' is not a whole number"),
        (("plan", "--no-such-flag"), "no such option: --no-such-flag"),
        (("experts", "--devices", "4"), "--slots-per-device is required"),
        (("hardware", "show"), "missing NAME"),
    ],
)
def test_usage_errors_are_one_line_naming_the_flag_and_the_fix(args, expect):
    r = run_cli(*args)
    assert r.exit_code == 2
    assert expect in _one_line_error(r.output)


# ---- help --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (("hardware", "show"), "hardware show [OPTIONS] NAME"),
        (("models", "show"), "models show [OPTIONS] NAME"),
        (("evaluate",), "evaluate [OPTIONS] PLAN"),
        (("calibrate",), "calibrate [OPTIONS] [MEASUREMENTS]..."),
    ],
)
def test_help_names_arguments_and_options_without_type_labels(args, usage):
    r = run_cli(*args, "--help")
    assert r.exit_code == 0, r.output
    assert usage in r.output
    assert "<" not in r.output.replace("<=", "") and "{" not in r.output, r.output


def test_models_show_context_has_a_metavar():
    assert "--context TOKENS" in run_cli("models", "show", "--help").output


@pytest.mark.parametrize("command", ["plan", "sweep"])
def test_quantization_help_lists_every_scheme(command):
    text = " ".join(run_cli(command, "--help").output.split())
    for name in QUANTIZATION_SCHEMES:
        assert f" {name}," in text or f" {name} (" in text, name


def test_top_help_says_its_range():
    text = " ".join(run_cli("plan", "--help").output.split())
    assert "How many ranked plans, 1 to 50." in text


# ---- evaluate given a document without a plan ---------------------------------------------------


def test_evaluate_of_an_infeasible_plan_export_says_the_search_was_infeasible(tmp_path):
    path = tmp_path / "inf.json"
    r = run_cli("plan", "--max-cards", "8", "--json", str(path))
    assert r.exit_code == 1 and json.loads(path.read_text())["status"] == "INFEASIBLE"
    r = run_cli("evaluate", str(path))
    assert r.exit_code == 2
    line = _one_line_error(r.output)
    assert "holds no plan: the search it was exported from was infeasible (card budget:" in line
    assert "missing" not in line and "unknown field" not in line


@pytest.mark.parametrize(
    ("doc", "expect"),
    [
        ({"plans": []}, "its 'plans' list is empty; the document has no status"),
        ({"status": "OPTIMAL", "plans": []}, "its 'plans' list is empty; the search ended OPTIMAL"),
    ],
)
def test_evaluate_of_an_empty_plan_export_reads_right(tmp_path, doc, expect):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(doc))
    r = run_cli("evaluate", str(path))
    assert r.exit_code == 2
    line = _one_line_error(r.output)
    assert expect in line and "status no status" not in line


# ---- evaluate judges the default ITL limit -------------------------------------------------------


def _v1_colocated(tmp_path):
    """A version 1 colocated plan (no max_itl_ms): whole prefill forwards stall decoding ~1.6 s."""
    layout = {
        "devices": 24,
        "instances": 2,
        "attention": {"dp": 24, "tp": 1},
        "dense_ffn": {"dp": 12, "tp": 2},
        "moe": {"ep": 24, "slots_per_device": 11, "comm": "allgather"},
        "lm_head": {"dp": 12, "tp": 2},
    }
    plan = {
        "schema_version": 1,
        "model": "deepseek-v3",
        "hardware": "a2",
        "workload": {"input_tokens": 2048, "output_tokens": 2048},
        "slo": {"ttft_ms": 3000, "tpot_ms": 100},
        "colocated": True,
        "decode": dict(layout, concurrency_per_device=36, mtp_tokens=1),
        "prefill": dict(layout, batch_tokens=65536, micro_batches=1),
    }
    path = tmp_path / "v1.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def test_evaluate_applies_the_default_itl_limit_of_plan(tmp_path):
    path = _v1_colocated(tmp_path)
    r = run_cli("evaluate", str(path), "--check")
    assert r.exit_code == 1, r.output
    assert re.search(r"breaks the ITL limit in colocated \(a \d+ ms gap", r.output)
    assert "limit 300 ms, 3x the TPOT SLO by default" in r.output
    assert "ITL limit: 300 ms (3x TPOT" in r.output  # said in the report, as plan says it in its title
    assert "(limit 300 ms: NO)" in r.output


def test_evaluate_max_itl_ms_0_lifts_the_default_limit(tmp_path):
    path = _v1_colocated(tmp_path)
    r = run_cli("evaluate", str(path), "--check", "--max-itl-ms", "0")
    assert r.exit_code == 0, r.output
    assert "ITL limit:" not in r.output
    r = run_cli("evaluate", str(path), "--check", "--max-itl-ms", "2000")
    assert r.exit_code == 0 and "(limit 2000 ms: yes)" in r.output


def test_evaluate_json_carries_the_limit_it_judged(tmp_path):
    r = run_cli("evaluate", str(_v1_colocated(tmp_path)), "--json", "-")
    assert r.exit_code == 0
    doc, _ = json.JSONDecoder().raw_decode(r.output[r.output.index("{") :])  # (the migration notes follow)
    assert doc["slo"]["max_itl_ms"] == 300
    assert doc["predicted"]["colocated"]["meets_itl_slo"] is False


@pytest.mark.parametrize(
    "args",
    [("evaluate", ""), ("simulate", ""), ("whatif", ""), ("models", "show", ""), ("plan", "--model", ""),
     ("plan", "--hardware", ""), ("sweep", "--hardware", "")],
)  # fmt: skip
def test_an_empty_name_is_refused_by_name(args):
    # evaluate "" said "plan '' is a folder; give one of its plan files: none" ('' reads as '.')
    r = run_cli(*args)
    assert r.exit_code == 2 and "it is empty; give a catalog name or a file" in r.output, r.output


def test_an_empty_default_is_not_an_empty_name():
    # calibrate's --hardware defaults to '' and is required: its own message, not "it is empty"
    r = run_cli("calibrate")
    assert r.exit_code == 2 and "--hardware is required" in r.output, r.output
