"""The store of measured deployments (`validation/`): one YAML file per source, and its loader.

Every figure moeplan is checked or fitted against lives here: `moeplan fidelity`, the factor fit
(planner.costmodel.fitting), the tests that pin published figures, the sweep's published points,
and the serving simulator and AFD validation of later issues all read this one store. The format
is described for contributors in docs/validation.md; in short:

- a file is one *source* (a paper, a blog post, a documentation page at a commit): its title,
  URL, the date it was read, the commit or version where it has one, and how reliable its figures
  are (`controlled`: a benchmark run under stated conditions; `production`: an average over a
  live service; `claim`: a figure stated without its conditions, or an estimate);
- a *row* is one measured deployment: the plan file holding its full configuration (a name in
  plans/ or a path relative to the validation folder), the traffic it ran under (a batch held
  steady, a closed loop at a concurrency cap, an open loop at a rate) and the expert-placement
  condition (the engine's own placement, one made from the served distribution itself, or
  perfect balance);
- a *figure* is one number of that row: its value and unit, what it counts (input or output
  tokens; per die, card, node, GPU, deployment, request or step; prefill cards counted or not),
  a tolerance, a weight in fits, and how it is compared: `static` (the cost model's steady-state
  prediction reproduces it) or `simulated` (queueing-dominated, such as TTFT at a concurrency cap
  or a rate-limited run: only the serving simulator may judge it; until it does, `moeplan
  fidelity` lists it as "needs simulation").

Rows and figures that cannot be used stay in the file with `excluded: <why>` (units or
concurrency unknown, layout not stated, ...), so the reason is written down next to the source.

The loader returns the files as they are (`load_store`) and the usable figures flattened
(`usable_figures`): one `StoredFigure` per figure with its row's and source's fields, which is
what the cost-model side consumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import Field, model_validator

from planner.errors import BadInputError
from planner.specs.catalog import catalog_dir
from planner.specs.files import load_mapping, validate_model
from planner.specs.hardware import Strict

Reliability = Literal["controlled", "production", "claim"]
Compare = Literal["static", "simulated"]
Counted = Literal["die", "card", "node", "gpu", "deployment", "request", "step", "forward"]
TrafficMode = Literal["steady", "closed", "open", "unknown"]
ExpertCondition = Literal["engine", "in_distribution", "balanced", "forced"]
SUFFIXES = (".yaml", ".yml")


class Source(Strict):
    """Where a file's figures come from."""

    title: str = Field(min_length=1)
    url: str = Field(min_length=1)
    read: str = Field(min_length=1, description="when the source was read (YYYY-MM-DD)")
    published: str = Field(default="", description="the source's own date, where it has one")
    commit: str = Field(default="", description="commit, release or version of the page read, where it has one")
    reliability: Reliability = Field(description="default reliability of the file's rows")
    note: str = ""


class Traffic(Strict):
    """What drove the deployment while the figures were measured."""

    mode: TrafficMode = Field(
        description="steady: a batch held at the plan's concurrency (one step or forward measured); closed: a "
        "benchmark client at a concurrency cap; open: arrivals at a rate; unknown: not stated"
    )
    concurrency: int | None = Field(default=None, ge=1, description="closed loop: requests in flight (client cap)")
    mean_running: float | None = Field(default=None, gt=0, description="requests running on average, if published")
    rate_per_s: float | None = Field(default=None, gt=0, description="open loop: requests per second")
    input_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=1)
    range_ratio: float | None = Field(default=None, gt=0, le=1, description="random dataset: min/max length ratio")
    prompts: int | None = Field(default=None, ge=1, description="requests in the run")
    note: str = ""

    @model_validator(mode="after")
    def _mode_fields(self) -> Traffic:
        if self.mode == "closed" and self.concurrency is None:
            raise ValueError("a closed loop states its concurrency (the client's cap)")
        if self.mode == "open" and self.rate_per_s is None:
            raise ValueError("an open loop states its rate_per_s")
        return self


class Figure(Strict):
    """One measured number of a row."""

    id: str = Field(default="", description="label in fidelity output; default: the row's id (one figure only)")
    metric: str = Field(
        min_length=1,
        description="static: dotted path into the plan's `predicted` block (decode.tpot_ms, ...); simulated: "
        "the key `vllm bench serve --save-result` uses for the figure (mean_ttft_ms, output_throughput, ...)",
    )
    value: float = Field(gt=0, allow_inf_nan=False)
    unit: str = Field(min_length=1)
    tokens: Literal["input", "output"] | None = Field(default=None, description="for rates: which tokens count")
    per: Counted = Field(description="what one value is per: die, card, node, gpu, deployment, request, step, forward")
    prefill_counted: bool | None = Field(
        default=None, description="per-card rates of a disaggregated deployment: prefill cards in the denominator?"
    )
    tolerance: float = Field(gt=0, lt=1, description="relative")
    weight: float = Field(default=1.0, gt=0, description="weight in fits (estimates and low-latency points: 0.25)")
    compare: Compare = "static"
    ratio_to: str = Field(
        default="",
        description="the value is this figure over the figure with this id (a ratio of two runs of one source, "
        "compared as the ratio of the two predictions); its own id stays unique",
    )
    derived: str = Field(default="", description="how the value was derived from the source's numbers, if it was")
    excluded: str = Field(default="", description="why this figure cannot be used (then it is not)")
    known_miss: str = Field(default="", description="why the model misses this figure today (reported, not hidden)")
    note: str = ""


class ValidationRow(Strict):
    """One measured deployment: its plan, traffic, conditions and figures."""

    id: str = Field(min_length=1)
    plan: str | None = Field(default=None, description="plan name in plans/, or a path relative to validation/")
    model: str = Field(default="", description="catalog model; checked against the plan's")
    hardware: str = Field(default="", description="catalog machine; checked against the plan's")
    engine: str = Field(default="", description="serving engine and version as the source states them")
    reliability: Reliability | None = Field(default=None, description="default: the source's")
    where: str = Field(default="", description="section, table or paragraph of the source")
    measures: str = Field(min_length=1, description="what the run is, in one or two sentences")
    traffic: Traffic
    experts: ExpertCondition = Field(
        default="engine",
        description="engine: the engine's own placement; in_distribution: placed from the served distribution "
        "itself (no drift between windows); balanced: perfect balance (simulated or forced); forced: the "
        "router's choices replaced by a deterministic cycle over forced_experts_per_device experts per device "
        "(every device at the mean load, no sampling spread, only those experts' weights read)",
    )
    forced_experts_per_device: int | None = Field(
        default=None, ge=1, description="experts: forced: how many experts of each device the cycle uses"
    )
    deployment: str = Field(
        default="",
        description="rows measured on one deployment (one launch, several workloads) share this; leave-one-out "
        "leaves them out together (default: the row's plan)",
    )
    role: Literal["fit", "holdout"] = Field(
        default="fit", description="holdout: never fitted to (its error is out-of-sample in every fit)"
    )
    chosen_on: list[str] = Field(
        default_factory=list,
        description="choices made with this row's figures in view, though nothing is fitted on them (each names "
        "the choice): `moeplan fidelity` lists them in the row's fitted_to, so the row is not out-of-sample",
    )
    assumptions: str = Field(default="", description="what the plan assumes where the source is silent")
    excluded: str = Field(default="", description="why the whole row cannot be used")
    figures: list[Figure] = Field(min_length=1)
    note: str = ""

    @model_validator(mode="after")
    def _forced_names_its_experts(self) -> ValidationRow:
        if (self.experts == "forced") != (self.forced_experts_per_device is not None):
            raise ValueError(f"row '{self.id}': experts: forced goes with forced_experts_per_device (and only it does)")
        return self

    @model_validator(mode="after")
    def _usable_rows_have_plans(self) -> ValidationRow:
        if not self.excluded and self.plan is None:
            raise ValueError(f"row '{self.id}' has no plan; give one or say why it is excluded")
        if sum(1 for f in self.figures if not f.id) > 1:
            raise ValueError(f"row '{self.id}': only one figure may leave its id empty (it takes the row's id)")
        return self


class ValidationFile(Strict):
    """One file of the store: a source and its rows."""

    source: Source
    rows: list[ValidationRow] = Field(min_length=1)


@dataclass(frozen=True)
class StoredFigure:
    """A usable figure with its row's and source's fields (what fidelity and the fitter read)."""

    id: str
    row: ValidationRow
    figure: Figure
    source: Source
    file: str
    plan_path: str

    @property
    def plan(self) -> str:
        """The plan name (in plans/) or path to load."""
        return self.plan_path

    @property
    def metric(self) -> str:
        return self.figure.metric

    @property
    def published(self) -> float:
        return self.figure.value

    @property
    def tolerance(self) -> float:
        return self.figure.tolerance

    @property
    def weight(self) -> float:
        return self.figure.weight

    @property
    def unit(self) -> str:
        return self.figure.unit

    @property
    def compare(self) -> Compare:
        return self.figure.compare

    @property
    def known_miss(self) -> str:
        return self.figure.known_miss

    @property
    def experts(self) -> ExpertCondition:
        return self.row.experts

    @property
    def role(self) -> str:
        return self.row.role

    @property
    def deployment(self) -> str:
        """Rows of one deployment are one measurement for leave-one-out (default: the plan)."""
        return self.row.deployment or self.plan_path

    @property
    def reliability(self) -> Reliability:
        return self.row.reliability or self.source.reliability

    @property
    def citation(self) -> str:
        """Title, date or commit, and section: one line."""
        when = self.source.commit or self.source.published or f"read {self.source.read}"
        where = f", {self.row.where}" if self.row.where else ""
        return f"{self.source.title} ({when}){where}"


def validation_dir() -> Path:
    """The shipped store (planner/_catalog/validation in a wheel, validation/ in a checkout)."""
    return catalog_dir("validation")


def store_files(folder: Path | None = None) -> list[Path]:
    """The store's files, sorted (names starting with '_' are not rows)."""
    folder = folder or validation_dir()
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and not p.stem.startswith("_") and p.is_file())


def load_file(path: Path) -> ValidationFile:
    """One file, checked."""
    data, text = load_mapping(path, "validation rows")
    return validate_model(ValidationFile, data, str(path), "validation rows", text)


def _plan_path(plan: str, folder: Path) -> str:
    """A plan reference as load_plan takes it: a catalog name, or a path relative to the store."""
    if "/" in plan or plan.endswith(SUFFIXES + (".json",)):
        return str((folder / plan).resolve())
    return plan


def _checked(docs: list[tuple[str, ValidationFile]]) -> tuple[tuple[str, ValidationFile], ...]:
    """The files, with every figure id unique across them and every ratio's base among them."""
    seen: dict[str, str] = {}
    for name, doc in docs:
        for row in doc.rows:
            for fig in row.figures:
                fid = fig.id or row.id
                if fid in seen:
                    raise BadInputError(f"{name}: figure id '{fid}' is also used in {seen[fid]}; ids are unique.")
                seen[fid] = name
    for name, doc in docs:
        for row in doc.rows:
            for fig in row.figures:
                if fig.ratio_to and fig.ratio_to not in seen:
                    raise BadInputError(
                        f"{name}: figure '{fig.id or row.id}' is a ratio to unknown figure '{fig.ratio_to}'."
                    )
    return tuple(docs)


def _read_folder(folder: Path) -> tuple[tuple[str, ValidationFile], ...]:
    return _checked([(path.name, load_file(path)) for path in store_files(folder)])


# the shipped store does not change while a process runs; a folder from outside it may (read afresh)
_load_store = lru_cache(maxsize=4)(_read_folder)


def load_store(folder: Path | None = None) -> list[tuple[str, ValidationFile]]:
    """Every file of the store, as (file name, contents)."""
    return list(_load_store((folder or validation_dir()).resolve()))


def _figures(docs: tuple[tuple[str, ValidationFile], ...], folder: Path) -> list[tuple[StoredFigure, str]]:
    out = []
    for name, doc in docs:
        for row in doc.rows:
            for fig in row.figures:
                why = row.excluded or fig.excluded
                stored = StoredFigure(fig.id or row.id, row, fig, doc.source, name, _plan_path(row.plan or "", folder))
                out.append((stored, why))
    return out


def all_figures(folder: Path | None = None) -> list[tuple[StoredFigure, str]]:
    """Every figure of the store with why it is not usable ('' when it is)."""
    folder = (folder or validation_dir()).resolve()
    return _figures(_load_store(folder), folder)


def figures_at(path: Path) -> list[tuple[StoredFigure, str]]:
    """Every figure of a file or folder of rows in the store's format from outside the store (runs kept
    aside from it: `moeplan fidelity --rows`), with why it is not usable ('' when it is). Plans are
    catalog names or paths relative to the file; a ratio's base figure is one of the same rows."""
    path = path.expanduser()
    if path.is_dir():
        if not store_files(path):
            raise BadInputError(f"--rows: folder '{path}' holds no .yaml file of rows; give a file or a folder of them")
        path = path.resolve()
        return _figures(_read_folder(path), path)
    if not path.is_file():
        raise BadInputError(
            f"--rows: no file or folder '{path}'; give a YAML file of measured rows in validation/'s format "
            "(docs/validation.md) or a folder of them"
        )
    path = path.resolve()
    return _figures(_checked([(path.name, load_file(path))]), path.parent)


def usable_figures(folder: Path | None = None, compare: Compare | None = None) -> list[StoredFigure]:
    """The figures that can be used (row and figure not excluded), optionally of one comparison kind."""
    return [f for f, why in all_figures(folder) if not why and (compare is None or f.compare == compare)]


# the phase a simulated run's figure judges (vLLM bench serve names): TTFT is the prefill's (its queueing
# included), TPOT and ITL the decode's; a run's throughput is the whole deployment's, no one phase's
SIMULATED_METRIC_PHASE = {
    "mean_ttft_ms": "prefill",
    "median_ttft_ms": "prefill",
    "p99_ttft_ms": "prefill",
    "mean_tpot_ms": "decode",
    "median_tpot_ms": "decode",
    "mean_itl_ms": "decode",
}


def figure_phase(fig: StoredFigure) -> str | None:
    """The plan phase a figure judges: a static figure's metric names it ('decode.tpot_ms'); a simulated
    one's by SIMULATED_METRIC_PHASE (None: no single phase)."""
    if fig.compare == "static":
        return fig.metric.split(".", 1)[0]
    return SIMULATED_METRIC_PHASE.get(fig.metric)


class KnownMiss(NamedTuple):
    """A usable figure the store marks `known_miss`: where it is, whose it is and why the model misses it."""

    machine: str
    phase: str
    figure_id: str
    model: str
    why: str

    @property
    def gist(self) -> str:
        """The reason's first clause (up to its first ': ', '; ' or '. '), for one-line notes."""
        cuts = [i for i in (self.why.find(": "), self.why.find("; "), self.why.find(". ")) if i > 0]
        return self.why[: min(cuts)] if cuts else self.why


@lru_cache(maxsize=1)
def known_misses() -> tuple[KnownMiss, ...]:
    """Every usable figure the store marks `known_miss`, static or simulated (a simulated run's TTFT is a
    prefill miss, its TPOT a decode one)."""
    out = []
    for fig in usable_figures():
        phase = figure_phase(fig)
        if fig.known_miss and fig.row.hardware and phase:
            out.append(KnownMiss(fig.row.hardware, phase, fig.id, fig.row.model or "", fig.known_miss))
    return tuple(out)
