"""docs/afd.md's 'when does AFD win' table is the search's (benchmarks/afd_when.py): one point is
re-searched on every run (the whole grid takes minutes: `python benchmarks/afd_when.py --check`),
and the summary under the table is recomputed from its rows."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, load_script

SCRIPT = REPO / "benchmarks" / "afd_when.py"
DOC = REPO / "docs" / "afd.md"

pytestmark = pytest.mark.skipif(
    not (SCRIPT.is_file() and DOC.is_file()), reason="docs and benchmarks/ are in the source tree only"
)


def _script():
    return load_script(SCRIPT)


def test_the_table_covers_the_grid_and_its_summary_is_its_rows():
    script = _script()
    block = script.block_of(DOC.read_text(encoding="utf-8"))
    rows = script.rows_of(block)
    assert len(rows) == len(script.grid())
    table_rows = [line for line in block.splitlines() if line in rows.values()]
    assert block.endswith(script.summary(table_rows))


def test_one_point_of_the_table_is_what_the_search_finds_now():
    script = _script()
    rows = script.rows_of(script.block_of(DOC.read_text(encoding="utf-8")))
    point = script.Point("a3", 48, "qwen3-235b-a22b", 4096, 50.0)
    key = "|".join(["a3 (48)", point.model, str(point.input_tokens), f"{point.tpot_ms:g}"])
    assert rows[key] == script.row(point), "docs/afd.md has drifted: run python benchmarks/afd_when.py --write"
