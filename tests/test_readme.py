"""The README's example outputs are the real commands' outputs (benchmarks/update_readme.py)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, load_script

SCRIPT = REPO / "benchmarks" / "update_readme.py"
README = REPO / "README.md"

pytestmark = pytest.mark.skipif(
    not (SCRIPT.is_file() and README.is_file()), reason="README and benchmarks/ are in the source tree only"
)


def _script():
    return load_script(SCRIPT)


def test_every_marked_block_matches_a_fresh_run_of_its_command():
    script = _script()
    seen: set[str] = set()
    for path in script.DOCS:
        present = script.blocks_of(path.read_text(encoding="utf-8"))
        seen |= set(present)
        for name, text in present.items():
            fresh = script.render(name)
            assert script.normalized(text) == script.normalized(fresh), (
                f"{path.name} block '{name}' has drifted from `moeplan {' '.join(script.BLOCKS[name].args)}`: "
                "run python benchmarks/update_readme.py"
            )
    assert {"plan", "evaluate-a2-d70", "fidelity", "whatif-a2-d70-30ms"} <= seen
    assert {"simulate-a2-48", "simulate-a2-48-closed", "fidelity-simulated"} <= seen  # docs/simulate.md


def test_the_script_rewrites_only_the_marked_blocks():
    script = _script()
    readme = "intro\n<!-- moeplan-output: x -->\nold\n<!-- /moeplan-output -->\noutro\n"
    assert script.blocks_of(readme) == {"x": "old\n"}
    assert script.rewritten(readme, {"x": "new\n"}) == readme.replace("old", "new")
    assert script.normalized("OPTIMAL; 10 solves, 0.35 s.") == script.normalized("OPTIMAL; 10 solves, 1.20 s.")


def test_the_readme_is_for_users():
    """Under 350 lines, and no development log: the history is in CHANGELOG.md (issue 22)."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 350
    assert "simulate-a2-48-latency" in text and "docs/simulate-a2-48.png" in text  # one simulated run
    for word in ("issue 1", "issue 2", "commit ", "helper", "merge "):
        assert word not in text.lower(), word
    assert (REPO / "CHANGELOG.md").is_file()


def test_the_cm384_lead_names_what_takes_from_it_as_well_as_what_makes_it():
    """A lead whose biggest part is more than the whole difference says what gives the rest back: the
    parts with a negative difference follow 'against', largest first, and every share is of the total."""
    shares = _script().difference_shares
    diff = {"overlap": 0.15, "attention": 0.01, "launches": -0.03, "comm": -0.02, "moe": 0.0, "mtp": -0.01}
    assert shares(diff) == "overlap (150%), attention (10%), against launches (-30%), comm (-20%), mtp (-10%)"
    assert shares({"a": 0.3, "b": 0.1}) == "a (75%), b (25%)"  # nothing takes from it: no 'against'
    assert shares(diff, top=1) == "overlap (150%), against launches (-30%)"
    with pytest.raises(ValueError, match="no lead"):
        shares({"a": 0.1, "b": -0.2})
