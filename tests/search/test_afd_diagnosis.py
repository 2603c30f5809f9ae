"""A request for AFD deployments alone is diagnosed over AFD deployments: the feasibility re-check the
diagnosis runs counts them (it counted prefill-decode and colocated ones only), and the advice names
a value at which an AFD deployment exists, with one step nearer checked infeasible."""

from __future__ import annotations

import json
import re

import pytest

from planner.errors import InfeasibleError
from planner.report.plan_report import infeasible_document
from planner.search.plan_search import TableCache, is_feasible, run_search
from tests.conftest import plan_request

CACHE = TableCache()
# Qwen3-235B at 39K of context on A3 for SGLang's AFD (three micro-batches): a 50 ms TPOT is out of reach
# (a 4 s TTFT: a 39K prompt spans forwards on its prefill DP rank, and 2 s is out of reach too)
FLAGS = dict(
    model="qwen3-235b-a22b",
    hardware="a3",
    input_tokens=39000,
    output_tokens=1000,
    tpot_ms=50.0,
    ttft_ms=4000.0,
    top=1,
    engine="sglang",
    structure="afd",
)


def _request(**flags: object):
    return plan_request(**{**FLAGS, **flags})


def _found(**flags: object) -> bool:
    try:
        return bool(run_search(_request(**flags), cache=CACHE).plans)
    except InfeasibleError:
        return False


@pytest.mark.parametrize("tpot_ms", [50.0, 100.0])
def test_the_feasibility_check_counts_afd_deployments(tpot_ms):
    assert is_feasible(_request(tpot_ms=tpot_ms), CACHE) == _found(tpot_ms=tpot_ms)
    assert _found(tpot_ms=100.0)  # the check is exercised on a feasible AFD-only request


def test_an_afd_only_request_names_the_nearest_tpot_that_works():
    with pytest.raises(InfeasibleError) as info:
        run_search(_request(), cache=CACHE)
    reason = str(info.value)
    assert reason.startswith("AFD: no attention-FFN disaggregated deployment"), reason
    assert "card budget" not in reason  # the budget is not what binds: 48 cards hold AFD instances
    near = json.loads(infeasible_document(reason))["nearest"]
    assert near is not None and near["flag"] == "--tpot-ms", reason
    value = float(near["value"])
    assert _found(tpot_ms=value)
    assert not _found(tpot_ms=round(value - 0.1, 1))
    assert re.search(rf"{value - 0.1:.1f} is still infeasible", reason)
