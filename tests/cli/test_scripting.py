"""The CLI in scripts and pipelines: exit codes, JSON on failure, exports as input, readable errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from planner.ranking.compare import Delta
from tests.conftest import PLANS, REPO, run_cli


def _one_line_error(output: str) -> str:
    lines = [ln for ln in output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


# ---- evaluate --check -----------------------------------------------------------------------------


def test_check_passes_a_plan_that_fits_and_meets_its_slos():
    assert run_cli("evaluate", "a2-d70", "--check").exit_code == 0


def test_check_fails_a_missed_slo_given_on_the_command_line():
    r = run_cli("evaluate", "a2-d70", "--check", "--tpot-ms", "50")
    assert r.exit_code == 1
    assert "TPOT" in r.output
    # without --check the same evaluation is a report, not a verdict
    assert run_cli("evaluate", "a2-d70", "--tpot-ms", "50").exit_code == 0


def test_check_fails_the_plans_own_slo_and_hbm(tmp_path):
    plan = (PLANS / "a2-d70.yaml").read_text()
    slo = tmp_path / "slo.yaml"
    slo.write_text(
        plan.replace("tpot_ms: 100", "tpot_ms: 40") if "tpot_ms: 100" in plan else plan + "slo: {tpot_ms: 40}\n"
    )
    r = run_cli("evaluate", str(slo), "--check")
    assert r.exit_code == 1 and "TPOT" in r.output
    hbm = tmp_path / "hbm.yaml"
    hbm.write_text(plan.replace("concurrency_per_device: 72", "concurrency_per_device: 400"))
    r = run_cli("evaluate", str(hbm), "--check", "--json")
    assert r.exit_code == 1 and "HBM" in r.output
    assert run_cli("evaluate", str(hbm)).exit_code == 0


# ---- plan --json when nothing is feasible ------------------------------------------------------------


def test_infeasible_json_names_reason_and_nearest_point(tmp_path):
    out = tmp_path / "p.json"
    r = run_cli("plan", "--tpot-ms", "5", "--json", str(out))
    assert r.exit_code == 1
    doc = json.loads(out.read_text())
    assert doc["status"] == "INFEASIBLE"
    assert "TPOT" in doc["reason"]
    assert doc["nearest"]["flag"] == "--tpot-ms" and doc["nearest"]["value"] > 5


def test_infeasible_json_to_stdout():
    r = run_cli("plan", "--max-cards", "4", "--json", "-")
    assert r.exit_code == 1
    start = r.stdout.index("{")
    doc = json.loads(r.stdout[start:])
    assert doc["status"] == "INFEASIBLE" and doc["nearest"]["flag"] == "--max-cards"


@pytest.mark.skipif(not hasattr(signal, "SIGPIPE"), reason="POSIX pipes")
def test_a_closed_pipe_ends_quietly():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "planner", "plan", "--top", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader (`head`) is gone before anything is printed
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert err.strip() == ""  # (the progress display leaves a newline on a non-terminal stderr)
    assert code == -signal.SIGPIPE  # as `cat` does; before: exit 1 (an error code)


# ---- exports as input -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "plans.json"
    r = run_cli("plan", "--top", "3", "--json", str(path))
    assert r.exit_code == 0, r.output
    return path


def test_evaluate_reads_a_plan_export_by_rank(export):
    doc = json.loads(export.read_text())
    for rank in (1, 3):
        r = run_cli("evaluate", str(export), "--rank", str(rank), "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["predicted"] == doc["plans"][rank - 1]["predicted"]
    first = run_cli("evaluate", str(export), "--json")
    assert json.loads(first.output)["predicted"] == doc["plans"][0]["predicted"]
    bad = run_cli("evaluate", str(export), "--rank", "9")
    assert bad.exit_code == 2 and "--rank 9" in bad.output


def test_whatif_takes_a_plan_export_as_base(export):
    r = run_cli("whatif", str(export), "--rank", "2", "--tpot-ms", "80", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    want = json.loads(export.read_text())["plans"][1]
    base = doc["base"]["plan"]
    for key in ("decode", "prefill", "colocated"):
        assert base.get(key) == want.get(key)


def test_evaluate_a_folder_lists_its_plan_files_only():
    r = run_cli("evaluate", str(PLANS))
    assert r.exit_code == 2
    line = _one_line_error(r.output)
    assert "a2-d70.yaml" in line
    assert "schema" not in line and "published" not in line
    unknown = run_cli("evaluate", "no-such-plan")
    assert "plan.schema" not in unknown.output and "published" not in unknown.output


# ---- model configs ------------------------------------------------------------------------------------


def _hf_folder(tmp_path, drop: str | None = None, rename: tuple[str, str] | None = None):
    cfg = json.loads((REPO / "models" / "deepseek-v3.json").read_text())
    if drop:
        cfg.pop(drop)
    if rename:
        cfg[rename[1]] = cfg.pop(rename[0])
    folder = tmp_path / "DeepSeek-V3"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize(
    ("drop", "rename", "key"),
    [
        (None, ("n_routed_experts", "n_routed_expert"), "n_routed_experts"),
        ("moe_intermediate_size", None, "moe_intermediate_size"),
        ("num_experts_per_tok", None, "num_experts_per_tok"),
        # read as 0 they changed the model silently (no shared expert; 61 MoE layers, 704 B params)
        ("n_shared_experts", None, "n_shared_experts"),
        (None, ("first_k_dense_replace", "first_k_dense"), "first_k_dense_replace"),
    ],
)
def test_moe_model_missing_an_expert_key_is_an_error_naming_it(tmp_path, drop, rename, key):
    folder = _hf_folder(tmp_path, drop, rename)
    r = run_cli("models", "show", str(folder))
    assert r.exit_code == 2
    assert key in _one_line_error(r.output)


def test_a_hugging_face_model_folder_is_a_model(tmp_path):
    folder = _hf_folder(tmp_path)
    r = run_cli("plan", "--model", str(folder), "--top", "1", "--json", "-")
    assert r.exit_code == 0, r.output
    default = run_cli("plan", "--top", "1", "--json", "-")
    assert json.loads(r.output)["plans"][0]["predicted"] == json.loads(default.output)["plans"][0]["predicted"]


# ---- flags, help and errors -------------------------------------------------------------------------


def test_card_counts_are_whole_numbers():
    r = run_cli("plan", "--max-cards", "12.5")
    assert r.exit_code == 2
    assert "--max-cards" in _one_line_error(r.output)


@pytest.mark.parametrize("command", ["plan", "evaluate", "whatif", "sweep", "experts"])
def test_help_shows_metavars_not_type_labels(command):
    r = run_cli(command, "--help")
    assert r.exit_code == 0
    assert "<" not in r.output.replace("<=", "")
    if command == "plan":
        assert "--max-cards CARDS" in r.output and "--emit ENGINE DIR" in r.output
    if command == "sweep":
        assert "--jobs PROCESSES" in r.output and "processes" in r.output


def test_validation_errors_are_one_line_without_pydantic_wording(tmp_path):
    r = run_cli("plan", "--input-tokens", "0")
    line = _one_line_error(r.output)
    assert r.exit_code == 2 and "--input-tokens" in line and "Input should" not in line
    bad = tmp_path / "bad.yaml"
    bad.write_text((PLANS / "a2-d70.yaml").read_text().replace("mtp_tokens: 1", "mtp_tokens: 9"))
    r = run_cli("evaluate", str(bad))
    line = _one_line_error(r.output)
    assert r.exit_code == 2 and "decode.mtp_tokens" in line and "<= 4" in line and "Input should" not in line


def test_whatif_base_with_a_space_says_name_equals_value():
    r = run_cli("whatif", "--base", "hardware", "cm384")
    assert r.exit_code == 2
    assert "--base hardware=cm384" in _one_line_error(r.output)


def test_delta_from_a_near_zero_base_is_absolute():
    assert Delta("decode_hbm_headroom_gib", "headroom", 0.001, -0.7).relative is None
    assert Delta("tokens_per_s_per_card", "tok/s", 0.5, 400.0).relative is None
    assert Delta("tokens_per_s_per_card", "tok/s", 400.0, 500.0).relative == pytest.approx(0.25)


# ---- output text ---------------------------------------------------------------------------------------


def test_pd_column_counts_cards_on_a_two_die_machine():
    from planner.ranking.compare import pd_cards
    from planner.specs.catalog import load_hardware, load_plan

    plan, _ = load_plan("cm-d")  # 288 dies = 144 cards
    assert pd_cards(plan, load_hardware("cm384")) == "- : 1x144"
    r = run_cli("plan", "--hardware", "cm384", "--max-cards", "48", "--top", "1", "--no-colocated")
    assert r.exit_code == 0, r.output
    assert "P:D cards" in r.output


def test_fidelity_marks_the_fitted_rows():
    r = run_cli("fidelity", "--markdown")
    assert r.exit_code == 0
    rows = {ln.split("|")[1].strip(): ln for ln in r.output.splitlines() if ln.startswith("| ") and "%" in ln}
    assert "hbm_bandwidth" in rows["A2-D70"]  # the A2 factors it determines (fitted to it)
    assert "skew sigma (chosen on it" in rows["CM-D"] and "(in-sample)" in rows["CM-D"]
    assert "(oos)" in rows["CM 15 ms"]
    assert "| CM-D-max |" in r.output and "excluded: a theoretical figure" in r.output


# Where a figure comes from is a public document (a paper, a vendor page or repository, a blog post);
# never a notes file that does not ship with the tool, nor a path outside the repository.
_UNSHIPPED_MARKERS = ("facts.md", "../shared", "/shared/reference", "seeds/", "/work/")


def _shipped_files() -> list:
    files = [REPO / "README.md"]
    for folder in ("hardware", "models", "plans", "validation", "docs"):
        files += [p for p in sorted((REPO / folder).rglob("*")) if p.is_file()]
    files += [p for p in sorted((REPO / "planner").rglob("*")) if p.suffix in (".py", ".yaml", ".yml", ".json")]
    return files


def test_sources_cite_public_documents_not_unshipped_files():
    from planner.specs.catalog import catalog_names

    machines = catalog_names("hardware")
    assert {"a2", "a3", "cm384", "atlas350", "atlas950"} <= set(machines)
    shown = {name: run_cli("hardware", "show", name) for name in machines}
    assert all(r.exit_code == 0 for r in shown.values())
    texts = {f"hardware show {name}": r.output for name, r in shown.items()}
    texts["hardware list"] = run_cli("hardware", "list").output
    for path in _shipped_files():
        texts[str(path.relative_to(REPO))] = path.read_bytes().decode("utf-8", errors="replace")
    assert len(texts) > len(machines) + 20
    cited = {where: marker for where, text in texts.items() for marker in _UNSHIPPED_MARKERS if marker in text}
    assert not cited, cited
    assert all("msmodeling" in texts[f"hardware show {name}"] for name in ("a2", "a3", "cm384", "atlas350"))


def test_check_fails_a_broken_itl_limit():
    # the report's decode deployment steps every ~168 ms (MTP 1 at 99 ms per token)
    assert run_cli("evaluate", "a2-d70", "--check", "--max-itl-ms", "300").exit_code == 0
    r = run_cli("evaluate", "a2-d70", "--check", "--max-itl-ms", "100")
    assert r.exit_code == 1 and "ITL" in r.output


def test_evaluate_shows_a_colocated_plan_once_with_its_own_figures(tmp_path):
    """A colocated plan's layouts, TTFT, tokens/s and HBM are the colocated instance's: the decode
    and prefill tables are its steps and forwards alone, without figures of their own that
    contradict it (a prefill TTFT with a KV transfer, a prefill HBM 12 GiB below the real one)."""
    base = tmp_path / "p.json"
    assert run_cli("plan", "--max-cards", "24", "--top", "1", "--json", str(base)).exit_code == 0
    doc = json.loads(base.read_text())
    assert doc["plans"][0].get("colocated"), "the a2 24-card plan is no longer colocated: pick another"
    r = run_cli("evaluate", str(base), "--json")
    predicted = json.loads(r.output)["predicted"]
    hbm_gib = predicted["colocated"]["hbm_bytes_per_device"] / 1024**3
    text = run_cli("evaluate", str(base)).output
    assert text.count("HBM per device") == 1 and f"{hbm_gib:.2f} of" in text
    assert "KV transfer" not in text and "Prefill HBM" not in text and "Decode HBM" not in text
    assert "Colocated HBM" in text and "prefill kv cache" in text
    assert text.count("layouts") == 1  # one layout, in the colocated table
    assert "alone: prefill left out" in text and "alone: decode left out" in text
    band_rows = [ln for ln in text.splitlines() if ln.startswith(("│ decode    │", "│ prefill   │"))]
    assert band_rows and all("step ms" in ln or "forward ms" in ln for ln in band_rows)
