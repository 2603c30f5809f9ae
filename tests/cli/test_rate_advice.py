"""A rate beyond the budget: the advice holds under the request's engine mode, and its rate is the search's.

Under --engine auto (the default) the plans listed are those some engine runs, but the advice was
the free search's (--engine none): `--rate 381.049 --max-cards 1024` said "lower --rate to at most
381.048", and that command then exited 1 (no engine runs a plan). The values are now found over
the plans an engine runs, and the message says so. The rate the search counts is each instance's
requests/s rounded down to 0.001, summed: a plan's detail prints it unrounded (cm384 at 394.128:
394.136), so the message says it holds to the search's count. a2 with 48 cards at 20 requests/s is
the small case: 13.146 requests/s and 64 cards over every plan, 12.022 and 72 over those an engine
runs.
"""

from __future__ import annotations

import json
import re

from tests.conftest import run_cli

BASE = ("plan", "--rate", "20", "--max-cards", "48", "--top", "1")


def _advice() -> tuple[str, int, float]:
    r = run_cli(*BASE)
    assert r.exit_code == 1, r.output
    text = " ".join(r.output.split())
    cards = re.search(r"Raise --max-cards to at least ([0-9]+)", text)
    rate = re.search(r"lower --rate to at most ([0-9]+(?:\.[0-9]+)?)", text)
    assert cards and rate, text
    return text, int(cards.group(1)), float(rate.group(1))


def test_the_advice_under_engine_auto_works_under_engine_auto():
    text, cards, rate = _advice()
    assert "counted over the plans a serving engine runs" in text
    assert run_cli("plan", "--rate", "20", "--max-cards", str(cards), "--top", "1").exit_code == 0
    r = run_cli("plan", "--rate", f"{rate:g}", "--max-cards", "48", "--top", "1", "--json", "-")
    assert r.exit_code == 0, r.output
    # the search's count of the plan's rate (each instance rounded down) reaches the rate; the
    # detail's unrounded figure is at least that
    system = json.loads(r.output)["plans"][0]["predicted"]["system"]
    assert system["requests_per_s"] >= rate


def test_the_most_served_rate_is_named_as_the_search_counts_it():
    text, _, rate = _advice()
    assert f"the most it serves so counted is {rate:g} requests/s" in text
    assert "rounded down to 0.001" in text


def test_engine_none_counts_every_plan():
    r = run_cli(*BASE, "--engine", "none")
    assert r.exit_code == 1, r.output
    text = " ".join(r.output.split())
    assert "counted over the plans a serving engine runs" not in text
    assert "rounded down to 0.001" in text
    rate = float(re.search(r"lower --rate to at most ([0-9]+(?:\.[0-9]+)?)", text).group(1))  # type: ignore[union-attr]
    assert run_cli("plan", "--rate", f"{rate:g}", "--max-cards", "48", "--top", "1", "--engine", "none").exit_code == 0
