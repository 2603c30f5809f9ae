"""`moeplan whatif`: re-plan under changed assumptions and compare with the base, three ways.

- base: the base plan (a plan file, scored as written, or the best plan the search finds under
  the base assumptions);
- new: the best plan the search finds under the new assumptions;
- rescored: the base plan kept as it is and scored under the new assumptions (no re-planning:
  "does my current deployment still meet a 30 ms SLO?"). If the base plan cannot run under the
  new assumptions (another machine whose instances cannot hold its layout, another model), the
  column says why instead.

Each column carries its choices, figures and what binds it (planner.ranking.binding). The two
searches share one TableCache: when the new assumptions change only SLOs, the budget or the rate,
the second search reuses every cost table of the first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from planner.costmodel.evaluate import (
    PlanSpecs,
    evaluate_plan,
    load_plan_specs,
    plan_cost_context,
    plan_with_prediction,
)
from planner.costmodel.imbalance import default_imbalance_model
from planner.costmodel.mixed import is_mixed_plan
from planner.engines.profiles import model_engines_that_run, running
from planner.errors import BadInputError, InfeasibleError
from planner.ranking.binding import Binding, mixed_request_bindings, plan_bindings, size_admits
from planner.ranking.compare import (
    Change,
    Delta,
    changed_choices,
    figure_deltas,
    plan_choices,
    plan_figures,
)
from planner.search.plan_search import SearchOutcome, TableCache, run_search
from planner.search.request import PlanRequest
from planner.specs.hardware import HardwareSpec
from planner.specs.plan import Plan, check_plan
from planner.specs.quantization import get_quantization

Search = Callable[[PlanRequest, TableCache], SearchOutcome]


class BaseInfeasibleError(InfeasibleError):
    """The base assumptions (no plan file) have no feasible plan: the fix is to the base, not the new flags."""


@dataclass
class Column:
    """One column of the comparison: a scored plan (or why there is none) and what binds it."""

    title: str
    plan: Plan | None
    hw: HardwareSpec | None
    choices: dict[str, str] = field(default_factory=dict)
    figures: dict[str, float | None] = field(default_factory=dict)
    bindings: list[Binding] = field(default_factory=list)
    error: str = ""
    meets_slo: bool | None = None
    fits_hbm: bool | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (the plan with its `predicted` block)."""
        out: dict[str, object] = {"title": self.title}
        if self.error:
            out["error"] = self.error
        if self.plan is not None:
            out["plan"] = self.plan.model_dump(mode="json", exclude_none=True)
            out["choices"] = self.choices
            out["figures"] = self.figures
            out["binding"] = [b.as_dict() for b in self.bindings]
            out["meets_slo"] = self.meets_slo
            out["fits_hbm"] = self.fits_hbm
        return out


@dataclass
class WhatIfResult:
    """Base, new and rescored columns, what changed between them, and the search's reuse."""

    base_request: PlanRequest
    new_request: PlanRequest
    base_source: str
    base: Column
    new: Column
    rescored: Column
    assumption_changes: list[Change]
    choice_changes: list[Change]
    deltas: list[Delta]
    rescored_deltas: list[Delta]
    notes: list[str]
    cache_hits: int
    cache_misses: int
    seconds: float
    cache_loaded: int = 0  # of `cache_misses`, tables read from the on-disk store (not built)

    def as_dict(self) -> dict[str, object]:
        """The JSON document of `moeplan whatif --json`."""
        return {
            "base_source": self.base_source,
            "assumptions": {
                "base": request_assumptions(self.base_request),
                "new": request_assumptions(self.new_request),
            },
            "changes": {
                "assumptions": [c.as_dict() for c in self.assumption_changes],
                "choices": [c.as_dict() for c in self.choice_changes],
            },
            "base": self.base.as_dict(),
            "new": self.new.as_dict(),
            "rescored": self.rescored.as_dict(),
            "deltas": [d.as_dict() for d in self.deltas],
            "rescored_deltas": [d.as_dict() for d in self.rescored_deltas],
            "binding": {
                "base": [b.as_dict() for b in self.base.bindings],
                "new": [b.as_dict() for b in self.new.bindings],
                "rescored": [b.as_dict() for b in self.rescored.bindings],
            },
            "notes": self.notes,
            "table_cache": {"hits": self.cache_hits, "misses": self.cache_misses, "read_from_disk": self.cache_loaded},
        }


def request_assumptions(req: PlanRequest) -> dict[str, object]:
    """A request's assumptions by flag name (None: not set), what `changes.assumptions` compares."""
    w, s = req.workload, req.slo
    return {
        "model": req.model,
        "hardware": req.hardware,
        "quantization": req.quantization,
        "input-tokens": w.input_tokens,
        "output-tokens": w.output_tokens,
        "mtp-acceptance": w.mtp_acceptance,
        "tpot-ms": s.tpot_ms,
        "tpot-at-percentile": s.tpot_at_percentile,
        "ttft-ms": s.ttft_ms,
        "max-cards": req.max_cards,
        "phase": req.phase,
        "decode-devices": req.decode_devices,
        "prefill-devices": req.prefill_devices,
        "rate": req.rate_per_s,
        "mtp": ",".join(str(k) for k in req.mtp_tokens) if req.mtp_tokens is not None else "all",
        "max-redundant-experts": req.max_redundant_experts,
        "colocated": req.colocated,
        "hbm-utilization": req.hbm_utilization,
        "decode-attention-kv-split": req.decode_attention_kv_split,
        "max-itl-ms": s.max_itl_ms,
        "imbalance": (req.imbalance or default_imbalance_model()).describe(),
        "prefill-hardware": req.prefill_hardware,
        "decode-hardware": req.decode_hardware,
        "kv-transfer-gbps": None if req.kv_transfer_bytes_per_s is None else req.kv_transfer_bytes_per_s / 1e9,
        "max-prefill-cards": req.max_prefill_cards,
        "max-decode-cards": req.max_decode_cards,
        "max-cost": req.max_cost,
        "prefix-hit-rate": req.workload.prefix_hit_rate,
        "engine": req.engine_mode,
    }


def _column(
    title: str,
    plan: Plan,
    specs: PlanSpecs,
    req: PlanRequest,
    rate: float | None,
    max_cards: float | None,
) -> Column:
    """A scored plan's column; `max_cards` None: no budget to judge it by (a plan file)."""
    ctx = plan_cost_context(plan, specs, req.imbalance)
    pred = plan.predicted or {}
    d, p = pred.get("decode") or {}, pred.get("prefill") or {}
    if plan.is_colocated and pred.get("colocated"):
        # the phases' own figures ignore that they share devices: judge the colocated ones
        d = p = pred["colocated"]
    meets = [x for x in (d.get("meets_tpot_slo"), p.get("meets_ttft_slo")) if x is not None]
    fits = [x for x in (d.get("fits_hbm"), p.get("fits_hbm")) if x is not None]
    choices = plan_choices(plan, specs.hw, specs.model)
    choices["runs on"] = runs_on(plan, specs)
    return Column(
        title=title,
        plan=plan,
        hw=specs.hw,
        choices=choices,
        figures=plan_figures(plan, specs.hw, rate),
        bindings=(
            mixed_request_bindings(plan, req)
            if is_mixed_plan(plan)
            else plan_bindings(plan, ctx, max_cards, req.rate_per_s, size_admits(ctx.model, req))
        ),
        meets_slo=all(meets) if meets else None,
        fits_hbm=all(fits) if fits else None,
    )


def runs_on(plan: Plan, specs: PlanSpecs) -> str:
    """The serving engines that run every field of the plan (planner.engines.profiles), or 'none'."""
    return running(model_engines_that_run(plan, specs.hw, specs.model))


def _notes(
    base: PlanRequest, new: PlanRequest, changes: list[Change], base_hw: HardwareSpec, new_hw: HardwareSpec
) -> list[str]:
    notes = []
    names = {c.name for c in changes}
    if not changes:
        notes.append("no assumption changed: 'new' is what the planner chooses under the base's own assumptions.")
    if "ttft-ms" in names and new.phase == "decode":
        notes.append("--ttft-ms has no effect on a decode-only plan; add --phase both to plan prefill too.")
    if "tpot-ms" in names and new.phase == "prefill":
        notes.append("--tpot-ms has no effect on a prefill-only plan; add --phase both to plan decode too.")
    if "prefill-hardware" in names or "decode-hardware" in names:
        notes.append(
            "one phase's machine changed: each phase is costed on its own machine and cards of both kinds are "
            "summed; the re-scored base keeps its layouts on the new machines."
        )
    if "hardware" in names and (base_hw.card_name, base_hw.devices_per_card) != (
        new_hw.card_name,
        new_hw.devices_per_card,
    ):
        notes.append(
            f"cards differ between the machines ({base_hw.name}: {base_hw.card_name}; {new_hw.name}: "
            f"{new_hw.card_name}); the re-scored base keeps its devices."
        )
    return notes


def rescore(base: Plan, new_request: PlanRequest, specs: PlanSpecs) -> Plan:
    """The base plan's layouts under the new request's model, machine, workload and SLOs, scored.

    Raises BadInputError when the layouts cannot run there (the message says which rule breaks).
    """
    moved = base.model_copy(
        update={
            "model": new_request.model,
            "hardware": new_request.hardware,
            "quantization": new_request.quantization,
            "workload": new_request.workload,
            "slo": new_request.slo,
            "hbm_utilization": new_request.hbm_utilization,
            "decode_attention_kv_split": new_request.decode_attention_kv_split,
            "predicted": None,
            "rank": None,
        }
    )
    if new_request.is_mixed and new_request.prefill_hw_name != new_request.decode_hw_name and moved.is_colocated:
        raise BadInputError(
            "a colocated plan runs both phases on one machine; it cannot be re-scored with prefill on "
            f"{new_request.prefill_hw_name} and decode on {new_request.decode_hw_name}."
        )
    if new_request.is_mixed and moved.decode is not None and moved.prefill is not None:
        # prefill on one machine, decode on another: each section names its own
        top = new_request.hardware
        moved = moved.model_copy(
            update={
                "decode": moved.decode.model_copy(
                    update={"hardware": None if new_request.decode_hw_name == top else new_request.decode_hw_name}
                ),
                "prefill": moved.prefill.model_copy(
                    update={
                        "hardware": None if new_request.prefill_hw_name == top else new_request.prefill_hw_name,
                        "kv_transfer_bytes_per_s": new_request.kv_transfer_bytes_per_s,
                    }
                ),
            }
        )
        prediction = evaluate_plan(moved, imbalance=new_request.imbalance)
        return plan_with_prediction(moved, prediction)
    check_plan(moved, specs.model, specs.hw)
    prediction = evaluate_plan(moved, imbalance=new_request.imbalance, specs=specs)
    return plan_with_prediction(moved, prediction)


def run_whatif(
    base_request: PlanRequest,
    new_request: PlanRequest,
    base_plan: Plan | None = None,
    base_dir: Path | None = None,
    base_source: str = "",
    search: Search | None = None,
) -> WhatIfResult:
    """Base, new and rescored columns (see the module docstring).

    `base_plan` given: it is the base (scored as written); `base_request` then holds its
    assumptions and the budget it is compared at. Otherwise the base is searched. An infeasible
    new request raises InfeasibleError (the search's diagnosis), an infeasible base BaseInfeasibleError.
    """
    start = time.perf_counter()
    # (a what-if compares rank 1 only: no other-structure plans)
    run = search or (lambda req, cache: run_search(replace(req, alternatives=False), cache=cache))
    cache = TableCache()
    if base_plan is None:
        try:
            outcome = run(base_request, cache)
        except InfeasibleError as exc:
            raise BaseInfeasibleError(str(exc)) from None
        base = outcome.plans[0].model_copy(update={"rank": None})
        base_specs = PlanSpecs(outcome.model, outcome.hw, get_quantization(base_request.quantization))
        base_source = base_source or "the best plan under the base assumptions"
    else:
        base_specs = load_plan_specs(base_plan, base_dir)
        prediction = evaluate_plan(base_plan, base_dir, base_request.imbalance, specs=base_specs)
        base = plan_with_prediction(base_plan, prediction)
    new_outcome = run(new_request, cache)
    new = new_outcome.plans[0].model_copy(update={"rank": None})
    new_specs = PlanSpecs(new_outcome.model, new_outcome.hw, get_quantization(new_request.quantization))

    rate = new_request.rate_per_s or base_request.rate_per_s
    base_budget = base_request.max_cards if base_plan is None else None
    base_col = _column("base", base, base_specs, base_request, rate, base_budget)
    new_col = _column("new (re-planned)", new, new_specs, new_request, rate, new_request.max_cards)
    try:
        rescored = rescore(base, new_request, new_specs)
        res_col = _column("base re-scored", rescored, new_specs, new_request, rate, new_request.max_cards)
    except BadInputError as exc:
        res_col = Column(
            "base re-scored",
            None,
            new_specs.hw,
            error=f"the base plan cannot run under the new assumptions: {exc}",
        )

    base_a, new_a = request_assumptions(base_request), request_assumptions(new_request)
    changes = [Change(k, base_a[k], new_a[k]) for k in base_a if base_a[k] != new_a[k]]
    return WhatIfResult(
        base_request=base_request,
        new_request=new_request,
        base_source=base_source,
        base=base_col,
        new=new_col,
        rescored=res_col,
        assumption_changes=changes,
        choice_changes=changed_choices(base_col.choices, new_col.choices),
        deltas=figure_deltas(base_col.figures, new_col.figures),
        rescored_deltas=figure_deltas(base_col.figures, res_col.figures) if res_col.plan else [],
        notes=_notes(base_request, new_request, changes, base_specs.hw, new_specs.hw),
        cache_hits=cache.hits,
        cache_misses=cache.misses,
        seconds=time.perf_counter() - start,
        cache_loaded=cache.loaded,
    )
