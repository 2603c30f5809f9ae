"""A pinned instance size's card-budget diagnosis names the smallest deployment the search can build.

`--decode-devices 33` on a2 (48 cards) was told the smallest deployment needs 33 cards: the
diagnosis costed a 33-device prefill instance too and counted a colocated instance of 33, which
the search never builds (prefill sizes are the search's own; colocated ones need both phases
costed at that size). The search's smallest is 16 prefill + 33 decode devices: 49 cards.
"""

from __future__ import annotations

import re

import pytest

from planner.errors import InfeasibleError
from planner.search.plan_search import TableCache, run_search
from tests.search.test_nearest import _request

CACHE = TableCache()


def _feasible(**flags: object) -> bool:
    try:
        return bool(run_search(_request(top=1, **flags), cache=CACHE).plans)
    except InfeasibleError:
        return False


@pytest.mark.parametrize("pinned", [{"decode_devices": 33}, {"prefill_devices": 33}])
def test_a_pinned_size_names_a_budget_that_works(pinned):
    with pytest.raises(InfeasibleError) as info:
        run_search(_request(top=1, **pinned), cache=CACHE)
    reason = str(info.value)
    assert reason.startswith("card budget:"), reason
    found = re.search(r"Raise --max-cards to at least ([0-9]+)", reason)
    assert found, reason
    cards = int(found.group(1))
    assert cards == 49, reason
    assert "needs 49 devices (49 cards)" in reason
    assert _feasible(max_cards=float(cards), **pinned)
    assert not _feasible(max_cards=float(cards - 1), **pinned)
