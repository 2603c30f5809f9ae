"""Ctrl-C and SIGTERM: the best plan so far is printed, nothing half-written, exit 130."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from planner.search import cpsat_model
from tests.conftest import run_cli, wait_until_it_catches_sigterm


def test_interrupt_during_the_solve_prints_the_best_so_far(tmp_path, monkeypatch):
    calls = {"n": 0}
    real_run = cpsat_model.DeploymentModel._run

    def flaky_run(self, deadline):
        calls["n"] += 1
        if calls["n"] == 2:  # the Dinkelbach round done (from the enumerator's start): a deployment is known
            raise KeyboardInterrupt
        return real_run(self, deadline)

    monkeypatch.setattr(cpsat_model.DeploymentModel, "_run", flaky_run)
    out = tmp_path / "plans.json"
    r = run_cli("plan", "--json", str(out))
    assert r.exit_code == 130
    assert "INTERRUPTED: best found before the interrupt" in r.output
    assert "Best plan (rank 1) in detail" in r.output
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_sigterm_mid_search_leaves_no_file(tmp_path):
    out = tmp_path / "plans.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "planner",
            "plan",
            "--hardware",
            "cm384",
            "--max-cards",
            "384",
            "--tpot-ms",
            "50",
            "--json",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until_it_catches_sigterm(proc)
    time.sleep(0.2)  # tables being built or the solve under way
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    if proc.returncode == 0:  # the machine was fast enough to finish first: the file is whole
        assert out.exists()
        return
    assert proc.returncode == 130, stderr
    assert "interrupted" in (stdout + stderr)
    assert "Traceback" not in stderr
    assert not out.exists()
    assert [p for p in tmp_path.iterdir()] == []
