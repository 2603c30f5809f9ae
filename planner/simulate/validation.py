"""The store's queueing-dominated figures (`compare: simulated`), judged by simulating their runs.

A figure of the validation/ store marked `compare: simulated` (TTFT at a concurrency cap, anything
of a rate-limited run) is reproduced by running its row's plan under its row's traffic, as the
benchmark client ran it: a closed loop at `concurrency` over `prompts` requests (all ready at
once, the client sending one whenever a slot frees, as `--max-concurrency` does), or arrivals at
`rate_per_s` (with the cap, if the row states one), lengths from the client's random dataset at
the row's `range_ratio` (SGLang's `bench_serving` convention for SGLang rows, vLLM's otherwise).
Requests are routed as the row's engine routes them (SGLang's `--mini-lb` router picks a prefill
instance at random). The figure's `metric` is read from the run's summary by its
`vllm bench serve` name, divided by the cards when it is per card. Each run is simulated with
`SEEDS` seeds and the mean is the prediction (a benchmark run is one draw; the seeds' spread is
reported beside it).

A figure whose TTFT includes prefill queueing cannot be judged on a plan without prefill
instances: it is listed as not simulated, with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from planner.costmodel.acceptance_spread import spread_record
from planner.errors import PlannerError
from planner.simulate.build import RandomDataset, Traffic
from planner.simulate.routing import Routing, engine_routing
from planner.simulate.run import SimResult, simulate_plan
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.validation import StoredFigure, usable_figures

SEEDS = (0, 1, 2)
SPREAD_METRICS = ("median_tpot_ms", "p99_tpot_ms")  # the figures the acceptance spread is fitted on
DEFAULT_PROMPTS_PER_SLOT = 4  # a closed loop that does not state its prompts: this many per concurrency slot


@dataclass
class SimulatedFigure:
    """A `compare: simulated` figure with what the simulator predicts for it (or why it could not)."""

    figure: StoredFigure
    predicted: float | None = None
    per_seed: list[float] = field(default_factory=list)
    reason: str = ""  # why it was not simulated ('' when it was)
    traffic: str = ""

    @property
    def error(self) -> float | None:
        """Relative error against the published figure."""
        return None if self.predicted is None else self.predicted / self.figure.published - 1.0

    @property
    def fitted_parameters(self) -> list[str]:
        """The simulator's parameters fitted on this figure: the acceptance spread, on its fit runs' median and
        P99 TPOT."""
        record = spread_record()
        if self.figure.metric in SPREAD_METRICS and self.figure.row.id in record.get("fitted_on", []):
            return ["simulate.acceptance_spread"]
        return []

    @property
    def static_rows_of_run(self) -> tuple[str, ...]:
        """The static fit rows measured on this figure's run, whose factors the simulation runs on."""
        return static_fit_rows_of_run(self.figure)

    @property
    def fitted_to(self) -> list[str]:
        """Everything fitted or chosen on this figure's run: its `fitted_parameters`, each of its
        `static_rows_of_run` as "static row '<id>'", then each choice made with the run's figures in view
        (the row's `chosen_on`) as "chosen: <choice>"."""
        return (
            self.fitted_parameters
            + [f"static row '{row_id}'" for row_id in self.static_rows_of_run]
            + [f"chosen: {c}" for c in self.figure.row.chosen_on]
        )

    @property
    def within_tolerance(self) -> bool | None:
        """|error| <= the figure's tolerance (None when not simulated)."""
        err = self.error
        return None if err is None else abs(err) <= self.figure.tolerance

    def as_json(self) -> dict[str, object]:
        """The row of `moeplan fidelity --json`'s `simulated_rows`."""
        return {
            "name": self.figure.id,
            "plan": self.figure.plan,
            "metric": self.figure.metric,
            "published": self.figure.published,
            "predicted": None if self.predicted is None else round(self.predicted, 4),
            "error": None if self.error is None else round(self.error, 6),
            "per_seed": [round(v, 4) for v in self.per_seed],
            "tolerance": self.figure.tolerance,
            "within_tolerance": self.within_tolerance,
            "traffic": self.traffic,
            "not_simulated": self.reason or None,
            "known_miss": self.figure.known_miss or None,
            "fitted_to": self.fitted_to,
            "source": self.figure.citation,
        }


@lru_cache(maxsize=1)
def _static_fit_rows_by_run() -> dict[tuple[str, str], tuple[str, ...]]:
    """The static rows the factors are fitted on, by run: (source address, section of the source)."""
    runs: dict[tuple[str, str], set[str]] = {}
    for f in usable_figures(compare="static"):
        if f.role == "fit" and f.row.where:
            runs.setdefault((f.source.url, f.row.where), set()).add(f.row.id)
    return {run: tuple(sorted(ids)) for run, ids in runs.items()}


def static_fit_rows_of_run(figure: StoredFigure) -> tuple[str, ...]:
    """The static fit rows measured on the same run as this figure (same source, same section): a decode TPOT
    or a prefill forward of that run, so the factors the simulation runs on were fitted on it."""
    return _static_fit_rows_by_run().get((figure.source.url, figure.row.where), ())


def row_routing(engine: str) -> Routing:
    """The routing of the engine the row names (SGLang's `--mini-lb` router: random instances)."""
    text = engine.lower()
    if "sglang" in text:
        routing = engine_routing("sglang")
        return routing.with_overrides("random", None) if "mini-lb" in text or "mini_lb" in text else routing
    if "mindie" in text:
        return engine_routing("mindie")
    return engine_routing("vllm-ascend")


def row_colocated_prefill(engine: str) -> tuple[str, str | None]:
    """How the row's engine forms a colocated instance's prefill forwards, and its prefill delayer: SGLang
    schedules each DP rank on its own ('per-rank'), with the delayer of the run's date when the run turned it
    on (its engine names SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE: PR #14201's; planner.simulate.colocated_instance)."""
    text = engine.lower()
    if "sglang" not in text or "colocated" not in text:
        return "instance", None
    return "per-rank", "pr14201" if "sglang_scheduler_decrease_prefill_idle" in text else None


def row_traffic(figure: StoredFigure, seed: int) -> tuple[Traffic, str]:
    """The simulated client of the figure's row, and a description."""
    t = figure.row.traffic
    plan, _ = load_plan(figure.plan)
    inp = t.input_tokens or plan.workload.input_tokens
    out = t.output_tokens or plan.workload.output_tokens
    convention = "sglang" if "sglang" in figure.row.engine.lower() else "vllm"
    ratio = t.range_ratio if t.range_ratio is not None else (1.0 if convention == "sglang" else 0.0)
    if convention == "vllm" and ratio >= 1.0:
        ratio = 0.0  # vLLM's fixed lengths
    random = RandomDataset(inp, out, ratio, convention)
    if t.mode == "closed":
        prompts = t.prompts or DEFAULT_PROMPTS_PER_SLOT * int(t.concurrency or 1)
        traffic = Traffic(
            requests=prompts, concurrency=t.concurrency, rate_per_s=t.rate_per_s, random=random, seed=seed
        )
    elif t.mode == "open":
        prompts = t.prompts or 1000
        traffic = Traffic(
            requests=prompts, concurrency=t.concurrency, rate_per_s=t.rate_per_s, random=random, seed=seed
        )
    else:
        raise PlannerError(f"traffic mode '{t.mode}' cannot be simulated")
    return traffic, f"{traffic.describe()}, {prompts} prompts, {inp}+{out} ({convention} random, range ratio {ratio:g})"


def _value(summary: dict[str, object], figure: StoredFigure, cards: float) -> float:
    metric = figure.metric
    if metric not in summary:
        raise PlannerError(f"metric '{metric}' is not a figure the simulator reports (vLLM bench serve names)")
    value = float(summary[metric])  # type: ignore[arg-type]
    if figure.figure.per == "card":
        value /= cards
    return value


def simulate_figures(figures: list[StoredFigure]) -> list[SimulatedFigure]:
    """Each figure judged by simulation; the figures of one row share its runs."""
    by_row: dict[str, list[StoredFigure]] = {}
    for f in figures:
        by_row.setdefault(f"{f.file}:{f.row.id}", []).append(f)
    out: list[SimulatedFigure] = []
    for group in by_row.values():
        out.extend(_simulate_row(group))
    return out


def _simulate_row(group: list[StoredFigure]) -> list[SimulatedFigure]:
    first = group[0]
    results = [SimulatedFigure(f) for f in group]
    try:
        plan, _ = load_plan(first.plan)
    except PlannerError as exc:
        for r in results:
            r.reason = f"plan '{first.plan}' cannot be loaded: {exc}"
        return results
    if plan.prefill is None and plan.colocated is None:
        for r in results:
            if "ttft" in r.figure.metric or "e2el" in r.figure.metric:
                r.reason = (
                    "the row's plan has no prefill instances: its TTFT includes prefill queueing, which needs the "
                    "whole deployment's plan"
                )
    todo = [r for r in results if not r.reason]
    if not todo:
        return results
    try:
        runs = row_runs(first)
    except PlannerError as exc:
        for r in todo:
            r.reason = str(exc)
        return results
    for res, text in runs:
        for r in todo:
            r.traffic = text
            try:
                r.per_seed.append(_value(res.summary, r.figure, res.built.cards))
            except PlannerError as exc:
                r.reason = str(exc)
    for r in todo:
        if not r.reason and r.per_seed:
            r.predicted = float(np.mean(r.per_seed))
    return results


def row_runs(figure: StoredFigure, acceptance_spread: float | None = None) -> list[tuple[SimResult, str]]:
    """The figure's row simulated once per seed of `SEEDS`, as its client ran it, with the traffic in words;
    `acceptance_spread`: tau of the requests' own MTP acceptance (None: the shipped fit)."""
    plan, _ = load_plan(figure.plan)
    routing = row_routing(figure.row.engine)
    colocated_prefill, delayer = row_colocated_prefill(figure.row.engine)
    base = plan_base_dir(figure.plan)
    runs = []
    for seed in SEEDS:
        traffic, text = row_traffic(figure, seed)
        res = simulate_plan(
            plan,
            traffic,
            base_dir=base,
            routing=routing,
            series_points=50,
            acceptance_spread=acceptance_spread,
            colocated_prefill=colocated_prefill,
            prefill_delayer=delayer,
        )
        runs.append((res, text))
    return runs


def simulated_fidelity() -> list[SimulatedFigure]:
    """Every usable `compare: simulated` figure of the store, judged."""
    return simulate_figures(usable_figures(compare="simulated"))
