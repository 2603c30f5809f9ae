"""The ranked list's order is the search's objective and does not depend on --top: near-ties
(planner.ranking.rows) are ordered over the same fetched plans whatever --top asks for, and
--objective total ranks by the deployment's tokens/s, not per card."""

from __future__ import annotations

import json

from planner.ranking.rows import order_rule
from tests.conftest import run_cli

LITE = ("plan", "--model", "deepseek-v2-lite", "--max-cards", "8")


def _plans(tmp_path, *args: str) -> list[dict]:
    out = tmp_path / "p.json"
    result = run_cli(*args, "--json", str(out))
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())["plans"]


def _deployment(plan: dict) -> str:
    return json.dumps({k: v for k, v in plan.items() if k not in ("predicted", "rank")}, sort_keys=True)


def test_rank_1_is_the_same_plan_whatever_top(tmp_path):
    # before: --top 1 and 2 gave one plan (49,509 tokens/s), --top 3 and 5 another (49,352, shorter TTFT)
    firsts = {_deployment(_plans(tmp_path, *LITE, "--top", str(top))[0]) for top in (1, 2, 3, 5)}
    assert len(firsts) == 1
    # and the first rows of a longer list are the shorter list's rows
    three = [_deployment(p) for p in _plans(tmp_path, *LITE, "--top", "3")]
    five = [_deployment(p) for p in _plans(tmp_path, *LITE, "--top", "5")]
    assert five[:3] == three


def test_objective_total_ranks_by_the_deployments_tokens_per_s(tmp_path):
    args = (*LITE[:3], "--max-cards", "11", "--objective", "total", "--structure", "colocated", "--engine", "none")
    plans = _plans(tmp_path, *args, "--top", "4")
    totals = [p["predicted"]["economics"]["output_tokens_per_s"] for p in plans]
    # rank 1 is the search's best (11 x 1 device, 62.1k tokens/s) or within the near-tie tolerance of it
    # (then first by its shorter TTFT); per card it is the lowest of the four
    assert totals[0] * 1.005 >= max(totals)
    per_card = [p["predicted"]["system"]["output_tokens_per_s_per_card"] for p in plans]
    assert per_card[0] == min(per_card)
    # the rows are in total tokens/s order, up to the near-tie tolerance
    assert all(b <= a * 1.005 for a, b in zip(totals, totals[1:], strict=False))
    assert _deployment(plans[0]) == _deployment(_plans(tmp_path, *args, "--top", "1")[0])
    # --engine auto merges the engines' lists in the search's order too (it had merged them per card: 5 x 2)
    auto = _plans(tmp_path, *args[:-2], "--top", "1")[0]
    assert auto["predicted"]["economics"]["output_tokens_per_s"] == totals[0]
    page = tmp_path / "p.html"
    text = run_cli(*args, "--top", "4", "--html", str(page)).output
    # the page prices the other structures as the terminal does (it priced them per card)
    assert "price: output tokens/s of the whole deployment against rank 1 (--objective total)" in page.read_text()
    assert "order: output tokens/s of the whole deployment (--objective total)" in " ".join(text.split())
    # the sentence on rank 1 (its lead over rank 2, or its near-tie with the search's best) counts whole
    # deployments' tokens/s, not per card
    flat = " ".join(text.split())
    said = [
        flat.split(lead, 1)[1].split(")")[0]
        for lead in ("rank 1's lead over rank 2", "rank 1 is within")
        if lead in flat
    ]
    assert said and all("tok/s" in s and "tok/s/card" not in s for s in said)


def test_the_order_line_names_the_objective():
    assert order_rule("tokens-per-card", False, "device").startswith("order: tokens/s per card;")
    assert order_rule("cost", False, "cost unit").startswith("order: tokens/s per cost unit (--objective cost);")
    assert order_rule("energy", False, "mW").startswith("order: tokens/s per watt (--objective energy);")
    assert order_rule("tokens-per-card", False, "cost unit").startswith(
        "order: tokens/s per cost unit (the machines' price_per_card);"
    )
    assert order_rule("tokens-per-card", True, "card").startswith(
        "order: fewest cards for the rate, then tokens/s per card"
    )
    assert order_rule("cost", True, "cost unit").startswith(
        "order: least cost per hour (--objective cost) for the rate"
    )


def test_afd_decode_only_plans_rank_by_their_own_figure(tmp_path):
    # an AFD decode-only plan has no system or decode block: its figures are the afd block's (the
    # headline was 0 for all of them, the order was by TTFT alone and the engines line divided by it)
    args = ("plan", "--model", "qwen3-235b-a22b", "--hardware", "a3", "--structure", "afd", "--phase", "decode")
    plans = _plans(tmp_path, *args, "--top", "3")
    heads = [p["predicted"]["afd"]["tokens_per_s_per_card"] for p in plans]
    assert all(b <= a * 1.005 for a, b in zip(heads, heads[1:], strict=False)), heads
    # the export names what each other engine lacks as the engines line does: vLLM-Ascend's AFD plugin
    # registers DeepSeek classes only
    assert "Qwen3MoeForCausalLM" in plans[0]["cannot_run"]["vllm-ascend"]
    text = " ".join(run_cli(*args, "--top", "3").output.split())
    assert "beyond the engines: the best plan no engine runs yet gives" in text
    assert "internal error" not in text


def test_the_space_line_names_the_limits_the_users_flags_set():
    # a proof holds over the request's own pins and caps too: they are named with the built-in limits
    out = run_cli(
        "plan", "--model", "deepseek-v2-lite", "--max-cards", "8", "--max-extra-slots", "0", "--decode-devices",
        "2", "--mtp", "0", "--structure", "pd", "--top", "1",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    line = text.split("over: ")[1].split("(--explain-space lists them)")[0]
    for named in ("<= 0 extra slots (yours)", "decode instances of 2 devices (yours)", "MTP depths 0 (yours)",
                  "no colocated (yours)"):  # fmt: skip
        assert named in line, line
    plain = " ".join(run_cli("plan", "--model", "deepseek-v2-lite", "--max-cards", "8", "--top", "1").output.split())
    assert "(yours)" not in plain.split("over: ")[1].split("(--explain-space lists them)")[0]


def test_beyond_the_engines_is_priced_by_the_objective(tmp_path):
    # the best plan no engine runs was priced in tokens/s per card whatever the objective; with
    # --objective total it is the deployment's output tokens/s, as the alternatives table prices it
    import re

    out = tmp_path / "p.json"
    result = run_cli("plan", "--objective", "total", "--top", "1", "--json", str(out))
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    found = re.search(r"no engine runs yet gives ([\d,]+) output tok/s in all \(([+-][\d.]+)% against rank 1\)", text)
    assert found, text
    beyond = float(found.group(1).replace(",", ""))
    top = json.loads(out.read_text())["plans"][0]["predicted"]["economics"]["output_tokens_per_s"]
    assert abs((beyond - top) / top * 100 - float(found.group(2))) < 0.1
