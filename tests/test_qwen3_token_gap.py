"""docs/fidelity.md's per-token reading of the Qwen3 misses quotes benchmarks/qwen3_token_gap.py: no drift."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import load_script

REPO = Path(__file__).resolve().parent.parent


def test_the_docs_quote_the_script_s_figures():
    script = load_script(REPO / "benchmarks" / "qwen3_token_gap.py")
    rows = script.rows()
    assert len(rows) == 3  # the 480B and 235B PD24 decodes and vllm-ascend's 235B: the store's Qwen3 figures with plans
    text = " ".join((REPO / "docs" / "fidelity.md").read_text(encoding="utf-8").split())
    for r in rows:
        assert r["measured_ms"] > r["modelled_ms"]  # both come out fast
        assert f"{r['gap_us']:.1f} us" in text
        assert f"{r['marginal_us']:.1f} us" in text
