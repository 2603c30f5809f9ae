"""The simulator's HTML pages without a browser: `simulate --html` (what it embeds, that evaluate reads
its plan back, that its command reproduces the run, that its tables are the run's figures) and the
simulated checks of `plan --simulate --html` in the ranked table."""

from __future__ import annotations

import json
import re
import shlex
from html.parser import HTMLParser
from pathlib import Path

import pytest

from planner.report.html.simulated import bound_sentence
from planner.report.simulate_report import PER_REQUEST_KEYS
from planner.specs.files import embedded_json
from tests.conftest import run_cli
from tests.report.conftest import SIMULATE_ARGS, SMALL_PLAN

SIMULATION_ELEMENT = re.compile(r'<script type="application/json" id="moeplan-simulation">(.*?)</script>', re.DOTALL)


def _simulation(path: Path) -> dict:
    found = SIMULATION_ELEMENT.search(path.read_text(encoding="utf-8"))
    assert found is not None
    return json.loads(found.group(1))


class _Text(HTMLParser):
    """The text of the elements with an id, and the cells of every table, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self._open: list[tuple[str, str | None]] = []
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("dt", "dd"):  # (a question's label and its value read apart)
            for _, ident in self._open:
                if ident:
                    self.by_id[ident] = self.by_id.get(ident, "") + " "
        self._open.append((tag, a.get("id")))
        if tag == "table":
            self._table = a.get("id") or f"table-{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data):
        for _, ident in self._open:
            if ident:
                self.by_id[ident] = self.by_id.get(ident, "") + data
        if self._cell is not None:
            self._cell.append(data)


def _read(path: Path) -> _Text:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


# ---- simulate --html ----------------------------------------------------------------------------


def test_evaluate_reads_the_simulated_plan_back_from_the_page(simulate_report):
    from_page = run_cli("evaluate", str(simulate_report.html), "--json", "-")
    from_file = run_cli("evaluate", str(SMALL_PLAN), "--json", "-")
    assert from_page.exit_code == 0 and from_file.exit_code == 0, from_page.output
    assert json.loads(from_page.output) == json.loads(from_file.output)
    doc = json.loads(embedded_json(simulate_report.html.read_text(encoding="utf-8"), "run.html", "plan"))
    assert doc["status"] == "SIMULATED" and len(doc["plans"]) == 1
    assert "uncertainty" in doc["plans"][0]["predicted"]  # the bands the evaluate page shows


def test_the_page_embeds_the_runs_json_without_the_per_request_lists(simulate_report):
    written = json.loads(simulate_report.json.read_text())
    embedded = _simulation(simulate_report.html)
    assert all(len(written[k]) == 180 for k in PER_REQUEST_KEYS)  # 200 requests, 20 of them a warm-up
    assert embedded == {k: v for k, v in written.items() if k not in PER_REQUEST_KEYS}


def test_the_command_on_the_page_reproduces_the_run(simulate_report, tmp_path):
    command = _read(simulate_report.html).by_id["command"]
    folder = str(simulate_report.html.parent)
    assert command == (
        f"moeplan simulate {SMALL_PLAN} {' '.join(SIMULATE_ARGS)} --json {folder}/run.json --html {folder}/run.html"
    )
    words = shlex.split(command.replace(folder, str(tmp_path)))
    html_at = words.index("--html")
    again = run_cli(*words[1:html_at], *words[html_at + 2 :])  # the run again, its --json only (faster)
    assert again.exit_code == 0, again.output
    first, second = json.loads(simulate_report.json.read_text()), json.loads((tmp_path / "run.json").read_text())
    first.pop("date"), second.pop("date")
    assert first == second
    assert first["moeplan"]["goodput_bounds_ms"] == {"ttft": 1500.0, "tpot": 40.0}


def test_the_question_names_the_traffic_and_the_answer_the_verdict(simulate_report):
    text = _read(simulate_report.html)
    run = _simulation(simulate_report.html)
    question = " ".join(text.by_id["question"].split())
    for words in (
        "open loop: 4 requests/s, Poisson arrivals",
        "200 sent; the first 20 a warm-up, left out of every figure",
        "seed 0 ",
        "the plan's workload (1024+512)",
        "SLOs judged at P90",
        "requests meeting ttft ≤ 1500 ms, tpot ≤ 40 ms",
    ):
        assert words in question, words
    verdict = run["moeplan"]["slo_verdict"]
    answer = text.by_id["answer"]
    assert answer.startswith("At P90 of simulated requests the plan " + ("meets" if verdict["met"] else "misses"))
    assert f"TTFT P90 {run['p90_ttft_ms']:,.1f} ms" in answer and f"TPOT P90 {run['p90_tpot_ms']:,.1f} ms" in answer
    assert f"{run['output_throughput']:,.1f} output tokens/s" in answer


def test_the_tables_are_the_runs_figures_next_to_the_static_ones(simulate_report):
    tables = _read(simulate_report.html).tables
    run = _simulation(simulate_report.html)
    static = run["moeplan"]["static"]
    latency = {row[0]: row for row in tables["simulated-2"]}
    assert latency["metric"] == ["metric", "mean", "median", "P90", "P99", "std", "static"]
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2el")):
        cells = latency[name]
        assert cells[1:6] == [f"{run[f'{s}_{key}_ms']:,.1f}" for s in ("mean", "median", "p90", "p99", "std")]
    assert latency["TPOT"][6] == f"{static['tpot_ms']:,.1f}" and latency["TTFT"][6] == f"{static['ttft_ms']:,.1f}"
    figures = {row[0]: row for row in tables["simulated-1"]}
    assert figures["request throughput req/s"][1:] == [
        f"{run['request_throughput']:,.3f}",
        f"{run['moeplan']['request_throughput_per_card']:,.4f}",
        f"{static['request_throughput']:,.3f}",
    ]
    assert figures["request goodput req/s (ttft <= 1500 ms, tpot <= 40 ms)"][1] == f"{run['request_goodput']:,.3f}"


def test_the_page_draws_the_run_and_the_plan(simulate_report):
    html = simulate_report.html.read_text(encoding="utf-8")
    pictures = html.split('id="run-pictures"', 1)[1].split("</section>", 1)[0]
    assert pictures.count("<svg") == 1
    panels = (
        "requests waiting",
        "sequences decoding",
        "KV cache use, % of the pool",
        "latency CDF (measured requests)",
    )
    for title in panels:
        assert f">{title}<" in pictures, title  # the --plot figure's four panels, text kept as text
    devices = re.findall(r'<g class="device[^"]*" data-role="(\w+)" data-instance="([\w-]+)"', html)
    assert sorted({d for d in devices}) == [("decode", "decode-1"), ("prefill", "prefill-1")]
    assert len(devices) == 48
    for section in ("time", "sure", "experts", "bound"):
        assert f'<section id="{section}">' in html
    bound = _read(simulate_report.html).by_id["bound-sentence"]
    counters = _simulation(simulate_report.html)["moeplan"]["bound"]
    assert bound == bound_sentence(counters) and bound.startswith("Neither the seats nor the KV cache")
    assert "concurrency cap" not in bound  # an open loop
    assert counters["seat_blocked_steps"] == counters["kv_blocked_steps"] == counters["preemptions"] == 0


@pytest.mark.parametrize(
    "counters,starts",
    [
        ({"seat_blocked_steps": 30, "kv_blocked_steps": 0, "preemptions": 0}, "The seats bound admission (128 of"),
        ({"seat_blocked_steps": 0, "kv_blocked_steps": 7, "preemptions": 0}, "The KV cache bound admission, not"),
        ({"seat_blocked_steps": 0, "kv_blocked_steps": 0, "preemptions": 3}, "The KV cache bound admission, not"),
        ({"seat_blocked_steps": 30, "kv_blocked_steps": 7, "preemptions": 2}, "Seats and KV cache both bound"),
        ({"seat_blocked_steps": 0, "kv_blocked_steps": 0, "preemptions": 0}, "Neither the seats nor the KV cache"),
    ],
)
def test_what_bound_is_read_from_the_runs_counters(counters, starts):
    bound = {
        "decode_seats": 128,
        "decode_steps": 1000,
        "kv_pool_tokens_per_rank": 300_000.0,
        "peak_kv_fraction": 0.93,
        "mean_running": 100.0,
        "peak_running": 128,
        **counters,
    }
    text = bound_sentence(bound)
    assert text.startswith(starts), text
    if counters["seat_blocked_steps"]:
        assert "at 30 of 1,000 decode steps (3.0%)" in text
    if counters["kv_blocked_steps"]:
        assert "at 7 of 1,000 steps (0.7%) the KV cache refused" in text
    if counters["preemptions"]:
        assert f"{counters['preemptions']} sequences were preempted" in text
    assert bound_sentence({"decode_seats": 0}).startswith("No decode seats or KV cache to bind")
    capped = bound_sentence({**bound, "peak_client_waiting": 900}, concurrency=100, peak_in_system=100)
    assert ("The client's concurrency cap did" in capped) == (not any(counters.values()))
    assert "concurrency cap" not in bound_sentence({**bound, "peak_client_waiting": 0}, 100, 100)


def test_no_page_is_written_when_the_run_is_refused(tmp_path):
    html = tmp_path / "run.html"
    r = run_cli("simulate", str(SMALL_PLAN), "--requests", "10", "--decode-concurrency", "900", "--html", str(html))
    assert r.exit_code == 2 and "--decode-concurrency" in r.output
    assert list(tmp_path.iterdir()) == []


# ---- plan --simulate --html ---------------------------------------------------------------------


def test_plan_simulate_shows_the_checks_in_the_ranked_table(tmp_path):
    html, doc_path = tmp_path / "plan.html", tmp_path / "plan.json"
    small = ("--model", "deepseek-v2-lite", "--input-tokens", "1024", "--output-tokens", "128", "--tpot-ms", "30")
    r = run_cli(
        "plan", *small, "--ttft-ms", "1000", "--no-colocated", "--max-cards", "4", "--top", "2", "--simulate",
        "--json", str(doc_path), "--html", str(html),
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(doc_path.read_text())
    assert json.loads(embedded_json(html.read_text(encoding="utf-8"), "plan.html", "plan")) == doc
    rows = _read(html).tables["plans-table"]
    header = rows[0]
    col = {name: header.index(name) for name in header}
    assert col["TPOT ms simulated p50 / p90 / p99"] == col["TPOT ms"] + 1  # next to the static figure
    assert col["TTFT ms simulated p50 / p90 / p99"] == col["TTFT ms"] + 1
    by_rank = {int(row[0]): row for row in rows[1:]}
    for check in doc["simulated"]:
        row = by_rank[check["rank"]]
        f = check["figures"]
        assert row[col["TPOT ms simulated p50 / p90 / p99"]] == " / ".join(
            f"{f[f'{k}_tpot_ms']:,.1f}" for k in ("median", "p90", "p99")
        )
        assert row[col["TTFT ms simulated p50 / p90 / p99"]] == " / ".join(
            f"{f[f'{k}_ttft_ms']:,.0f}" for k in ("median", "p90", "p99")
        )
        verdict = row[col["meets SLOs at p90, simulated"]]
        assert verdict.startswith("yes" if check["meets_slo"] else "NO: ")
        assert f"at {check['rate_per_s']:.3g} req/s (claimed)" in verdict
    assert "simulated: Poisson arrivals at each plan" in html.read_text(encoding="utf-8")
