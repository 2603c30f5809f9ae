"""A true/false where a spec wants a number is refused naming the field (pydantic reads it as 1 or 0:
`slo: {tpot_ms: true}` was an SLO of 1 ms, `concurrency_per_device: true` one sequence a device)."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import REPO, run_cli


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("slo", "tpot_ms"), True, "slo.tpot_ms"),
        (("decode", "concurrency_per_device"), True, "decode.concurrency_per_device"),
        (("decode", "mtp_tokens"), False, "decode.mtp_tokens"),
    ],
)
def test_a_bool_for_a_number_is_refused(tmp_path, path, value, field):
    plan = yaml.safe_load((REPO / "plans" / "a2-d70.yaml").read_text())
    plan[path[0]][path[1]] = value
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(plan))
    r = run_cli("evaluate", str(bad))
    assert r.exit_code == 2, r.output
    assert field in r.output and f"give a number, not {str(value).lower()}" in r.output


def test_bool_fields_still_take_bools():
    from planner.specs.hardware import _admits_bool

    assert _admits_bool(bool) and _admits_bool(bool | None) and not _admits_bool(float) and not _admits_bool(int | None)
