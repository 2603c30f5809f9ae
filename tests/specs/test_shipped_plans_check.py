"""Shipped plans that state an SLO either meet it under the shipped model (`evaluate --check` exits 0)
or say in the file why they are kept although they do not (the report's own deployments, kept as
published). A plan that silently fails its own check would read as a plan to launch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]
KEPT = "# Kept as the report"
SHIPPED = [
    REPO / "plans" / "a2-d-30ms.yaml",
    REPO / "plans" / "cm-d-15ms.yaml",
    REPO / "plans" / "cm-d-max.yaml",
    REPO / "plans" / "a2-d70.yaml",
    REPO / "plans" / "afd-a3-example.yaml",
    REPO / "docs" / "examples" / "plan-a2-48-cards.yaml",
]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_a_shipped_plan_passes_its_check_or_says_why_it_is_kept(path: Path):
    r = run_cli("evaluate", str(path), "--check")
    kept = KEPT in path.read_text()
    assert r.exit_code in (0, 1), r.output
    if kept:
        assert r.exit_code == 1, f"{path.name} passes --check now: drop its 'Kept as' note"
        assert "--check:" in r.output
    else:
        assert r.exit_code == 0, r.output


def test_every_shipped_plan_file_is_in_the_current_schema():
    """No shipped plan loads through the version-1 migration (its note would greet every user of it)."""
    import yaml

    from planner.specs.plan import PLAN_SCHEMA_VERSION

    files = sorted((REPO / "plans").glob("*.yaml")) + sorted((REPO / "docs" / "examples").rglob("*.yaml"))
    plans = [(p, yaml.safe_load(p.read_text())) for p in files]
    plans = [(p, d) for p, d in plans if isinstance(d, dict) and "model" in d and "hardware" in d]
    assert len(plans) > 50
    old = [p.name for p, d in plans if d.get("schema_version") != PLAN_SCHEMA_VERSION]
    assert old == []
