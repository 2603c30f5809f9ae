"""The alternatives table is about rank 1. When the near-tie order puts another plan than the search's best
first, the rows the search made for its best (each the best plan of a structure that plan lacks) are made
rank 1's: on cm384 at 128 cards rank 1 (EP128, no MTP) was shown a "without MTP" row and a "decode EP other
than 64" row, both about the search's best (rank 3: EP64, MTP 1)."""

from __future__ import annotations

from planner.search.alternatives import Alternative, for_leader
from planner.specs.catalog import load_plan
from tests.conftest import run_cli


def _decode(plan, mtp: int, ep: int):
    decode = plan.decode.model_copy(update={"mtp_tokens": mtp, "moe": plan.decode.moe.model_copy(update={"ep": ep})})
    return plan.model_copy(update={"decode": decode})


def test_rows_along_which_rank_1_differs_from_the_searchs_best_become_rank_1s():
    base, _ = load_plan("a2-d70")
    best = _decode(base, 1, 64)  # the search's best: MTP on, EP64
    leader = _decode(base, 0, 128)  # first by the near-tie order: no MTP, EP128
    between = _decode(base, 1, 128)  # shown between them: MTP on, EP128
    elsewhere = _decode(base, 0, 32)
    colocated = Alternative("colocated", elsewhere, None)
    alternatives = [
        Alternative("without MTP", elsewhere, None),
        Alternative("decode EP other than 64", elsewhere, None),
        colocated,
    ]
    got = {a.label: a for a in for_leader(alternatives, leader, best, [leader, between, best])}
    assert set(got) == {"with MTP", "decode EP other than 128", "colocated"}
    assert got["with MTP"].plan is between  # the first row with MTP, in the list's order
    assert got["decode EP other than 128"].plan is best  # (between has EP128 too)
    assert got["colocated"] is colocated  # rank 1 and the search's best are both disaggregated: the row stands
    # rank 1 the search's best: the rows stand as the search made them
    assert for_leader(alternatives, best, best, [best, leader]) == alternatives


def test_structure_colocated_shows_no_disaggregated_row():
    """--structure colocated leaves disaggregated plans out of the search: the table has no row for them
    (it said "none fits: no deployment of it within the card budget", false at the same budget)."""
    r = run_cli("plan", "--structure", "colocated", "--top", "1")
    assert r.exit_code == 0, r.output
    table = r.output.split("Best plan of each other structure")[1]
    assert "disaggregated" not in table.split("price:")[0]
    assert "without MTP" in table or "with MTP" in table
