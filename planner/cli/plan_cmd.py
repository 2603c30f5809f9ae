"""`moeplan plan`: search for the best deployments and print them ranked."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from planner.cli.common import (
    Outputs,
    check_outputs,
    command_line,
    console,
    err_console,
    flag_given,
    run_guarded,
    write_text_atomic,
)
from planner.cli.emit_options import EmitOpt, ForceOpt, check_new_folders, parse_emits, stage_emits
from planner.cli.options import (
    DEFAULT_CURRENCY,
    AcceptanceSpreadOpt,
    AnyTpOpt,
    ColocatedOpt,
    CurrencyOpt,
    DecodeDevicesOpt,
    DecodeHardwareOpt,
    DecodeMicrobatchOpt,
    HbmUtilizationOpt,
    HtmlOpt,
    KvSplitOpt,
    KvTransferGbpsOpt,
    LoadsOpt,
    MaxCostOpt,
    MaxDecodeCardsOpt,
    MaxExtraSlotsOpt,
    MaxItlOpt,
    MaxPrefillCardsOpt,
    MaxRedundantOpt,
    ObjectiveOpt,
    PhaseOpt,
    PlanJobsOpt,
    PrefillDevicesOpt,
    PrefillHardwareOpt,
    PrefixHitRateOpt,
    PricePerCardHourOpt,
    QuantizationOpt,
    SkewSigmaOpt,
    SloPercentileOpt,
    StructureOpt,
    TopOpt,
    TpotAtPercentileOpt,
    WorkersOpt,
    WorkloadFileOpt,
    check_default_itl,
    check_hbm_utilization,
    check_price_names,
    check_spread_needs_simulate,
    imbalance_from_options,
    parse_int_list,
    parse_prices,
    workload_fields,
)
from planner.costmodel.context import DEFAULT_HBM_UTILIZATION
from planner.costmodel.evaluate import attention_machine_notes, evaluation_memo
from planner.errors import BadInputError, InfeasibleError
from planner.ranking.binding import why_line
from planner.report.evaluate_report import evaluate_tables
from planner.report.plan_report import (
    afd_line,
    alternatives_table,
    infeasible_document,
    plans_document,
    ranked_table,
    space_line,
    space_table,
)
from planner.report.uncertainty_report import uncertainty_table
from planner.search.candidate_spaces import Progress as SearchProgress
from planner.search.forked import DEFAULT_JOBS
from planner.search.plan_search import SearchOutcome, TableCache, run_search
from planner.search.request import (
    DEFAULT_HARDWARE,
    DEFAULT_MAX_CARDS,
    DEFAULT_MODEL,
    DEFAULT_SLO,
    DEFAULT_WORKLOAD,
    ITL_TPOT_MULTIPLE,
    MAX_CARDS,
    PlanRequest,
    default_max_itl_ms,
)
from planner.search.runnable import AUTO, NONE, run_runnable
from planner.search.settings import DEFAULT_TIME_LIMIT_S, SolverSettings
from planner.specs.catalog import load_model, with_draft
from planner.specs.files import validate_model
from planner.specs.plan import MAX_DEVICES_PER_INSTANCE, SLO, Plan, Workload
from planner.specs.quantization import AUTO_QUANTIZATION

ModelOpt = Annotated[str, typer.Option("--model", help="Catalog name or path to a YAML / config.json.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help="Catalog name or path to a hardware YAML.")]


def quantization_for(
    quantization: str, hardware: str, prefill_hardware: str | None = None, decode_hardware: str | None = None
) -> tuple[str, str | None]:
    """The scheme a request runs (`auto` resolved on every machine the plan uses) and why, when `auto`
    had to leave the default."""
    from planner.specs.catalog import load_hardware
    from planner.specs.quantization import resolve_quantization

    if quantization != AUTO_QUANTIZATION:
        return quantization, None
    names = {prefill_hardware or hardware, decode_hardware or hardware}
    return resolve_quantization(quantization, [load_hardware(n) for n in sorted(names)])


def build_request(
    *,
    model: str,
    hardware: str,
    quantization: str,
    input_tokens: int,
    output_tokens: int,
    mtp_acceptance: float,
    tpot_ms: float | None,
    ttft_ms: float | None,
    max_cards: float,
    phase: str,
    decode_devices: int | None,
    prefill_devices: int | None,
    rate: float | None,
    top: int,
    mtp: str | None,
    time_limit: float,
    workers: int,
    loads: Path | None,
    skew_sigma: float | None,
    max_redundant_experts: int | None = None,
    colocated: bool = True,
    prefill_hardware: str | None = None,
    max_extra_slots: int | None = None,
    any_tp: bool = False,
    decode_hardware: str | None = None,
    kv_transfer_gbps: float | None = None,
    max_prefill_cards: float | None = None,
    max_decode_cards: float | None = None,
    max_cost: float | None = None,
    workload_file: Path | None = None,
    prefix_hit_rate: float | None = None,
    slo_percentile: float | None = None,
    engine: str | None = None,
    robust: bool = False,
    hbm_utilization: float = DEFAULT_HBM_UTILIZATION,
    decode_attention_kv_split: bool = True,
    max_itl_ms: float | None = None,
    decode_microbatch: bool = True,
    structure: str | None = None,
    objective: str = "tokens-per-card",
    price_per_card_hour: str | None = None,
    currency: str = DEFAULT_CURRENCY,
    simulate: bool = False,
    draft_model: str | None = None,
    tpot_at_percentile: bool = False,
) -> PlanRequest:
    """A PlanRequest from flag values; bad values raise BadInputError naming the flag."""
    extra = workload_fields(workload_file, prefix_hit_rate, slo_percentile)
    fields: dict[str, object] = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "mtp_acceptance": mtp_acceptance,
        **extra,
    }
    if "lengths" in extra:  # the file's means
        del fields["input_tokens"], fields["output_tokens"]
    workload = validate_model(
        Workload,
        fields,
        "flags",
        "workload flags (--input-tokens, --output-tokens, --mtp-acceptance, --workload, --prefix-hit-rate, "
        "--slo-percentile)",
    )
    for flag, value in (
        ("--kv-transfer-gbps", kv_transfer_gbps),
        ("--max-prefill-cards", max_prefill_cards),
        ("--max-decode-cards", max_decode_cards),
        ("--max-cost", max_cost),
    ):
        if value is not None and not (math.isfinite(value) and 0 < value <= 1e12):
            raise BadInputError(f"{flag} must be a finite number > 0; got {value:g}.")
    if max_itl_ms is not None and not (max_itl_ms >= 0 and math.isfinite(max_itl_ms)):
        raise BadInputError(f"--max-itl-ms must be >= 0 ms (0 disables it); got {max_itl_ms:g}.")
    # the default ITL limit follows a valid TPOT SLO only: a bad --tpot-ms is reported alone, not
    # again as a --max-itl-ms the user never gave
    tpot_valid = tpot_ms is not None and math.isfinite(tpot_ms) and tpot_ms > 0
    if max_itl_ms is None and tpot_valid and tpot_ms is not None:
        check_default_itl(tpot_ms)
    itl = (default_max_itl_ms(tpot_ms) if tpot_valid else None) if max_itl_ms is None else (max_itl_ms or None)
    slo = validate_model(
        SLO,
        {"tpot_ms": tpot_ms, "ttft_ms": ttft_ms, "max_itl_ms": itl, "tpot_at_percentile": tpot_at_percentile},
        "flags",
        "SLO flags (--tpot-ms, --ttft-ms, --max-itl-ms)",
    )
    if phase not in ("both", "decode", "prefill"):
        raise BadInputError(f"--phase must be both, decode or prefill; got '{phase}'.")
    if not max_cards > 0:
        raise BadInputError("--max-cards must be > 0.")
    if math.isfinite(max_cards) and max_cards != math.floor(max_cards):
        raise BadInputError(f"--max-cards must be a whole number of cards; got {max_cards:g}.")
    check_hbm_utilization(hbm_utilization)
    if top < 1 or top > 50:
        raise BadInputError("--top must be between 1 and 50.")
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise BadInputError("--rate must be a finite number > 0 of requests per second.")
    if not math.isfinite(max_cards) or max_cards > MAX_CARDS:
        raise BadInputError(f"--max-cards must be a finite number of at most {MAX_CARDS:,} cards.")
    for flag, value in (
        ("--decode-devices", decode_devices),
        ("--prefill-devices", prefill_devices),
    ):
        if value is not None and not 1 <= value <= MAX_DEVICES_PER_INSTANCE:
            raise BadInputError(f"{flag} must be between 1 and {MAX_DEVICES_PER_INSTANCE}; got {value}.")
    mtp_values = parse_int_list(mtp, "--mtp", 0, 4) if mtp is not None else None  # (given empty: refused)
    structures = parse_structures(structure, colocated)
    if structure is not None:
        check_structures_phase(structures, phase)
    if draft_model is not None:
        with_draft(load_model(model), draft_model, field="--draft-model")  # refuses a draft the model cannot take
        if "afd" in structures:
            if structure is not None:
                raise BadInputError(
                    "--structure afd with --draft-model: moeplan does not model a draft model's place in an "
                    "attention-FFN split; drop afd or --draft-model."
                )
            structures = tuple(x for x in structures if x != "afd")
    if engine is not None:
        engine, mtp_values, colocated = _engine_limits(engine, mtp_values, colocated, model, draft_model)
        structures = engine_structures(engine, structures, structure is not None, model, decode_hardware or hardware)
    if simulate and "afd" in structures:
        if structure is not None:
            raise BadInputError(
                "--structure afd with --simulate: the simulator does not model AFD instances; drop afd or --simulate."
            )
        structures = tuple(x for x in structures if x != "afd")  # (--simulate checks what it can simulate)
    objective = check_objective(objective, rate)
    prices = parse_prices(price_per_card_hour)
    if prices:
        from planner.specs.catalog import load_hardware

        runs_on = {prefill_hardware or hardware, decode_hardware or hardware}
        check_price_names(prices, sorted(load_hardware(h).name for h in runs_on))
    if not currency.strip():
        raise BadInputError("--currency: give a unit, e.g. USD.")
    if max_redundant_experts is not None and max_redundant_experts < 0:
        raise BadInputError("--max-redundant-experts must be >= 0.")
    if max_extra_slots is not None and not 0 <= max_extra_slots <= 64:
        raise BadInputError(f"--max-extra-slots must be between 0 and 64; got {max_extra_slots}.")
    spec = load_model(model)
    imbalance = imbalance_from_options(loads, skew_sigma, spec)
    quantization = quantization_for(quantization, hardware, prefill_hardware, decode_hardware)[0]
    request = PlanRequest(
        model=model,
        hardware=hardware,
        quantization=quantization,
        workload=workload,
        slo=slo,
        max_cards=max_cards,
        phase=phase,  # type: ignore[arg-type]
        decode_devices=decode_devices,
        prefill_devices=prefill_devices,
        rate_per_s=rate,
        top=top,
        mtp_tokens=tuple(mtp_values) if mtp_values is not None else None,
        draft_model=draft_model,
        settings=SolverSettings(time_limit_s=time_limit, workers=workers),
        imbalance=imbalance,
        max_redundant_experts=max_redundant_experts,
        max_extra_slots=max_extra_slots,
        any_tp=any_tp,
        colocated=colocated and "colocated" in structures,
        disaggregated="pd" in structures,
        afd="afd" in structures,
        objective=objective,  # type: ignore[arg-type]
        prices=tuple(prices.items()),
        currency=currency.strip(),
        prefill_hardware=prefill_hardware,
        decode_hardware=decode_hardware,
        kv_transfer_bytes_per_s=None if kv_transfer_gbps is None else kv_transfer_gbps * 1e9,
        max_prefill_cards=max_prefill_cards,
        max_decode_cards=max_decode_cards,
        max_cost=max_cost,
        engine=engine,
        pessimistic_factors=robust,
        hbm_utilization=hbm_utilization,
        decode_attention_kv_split=decode_attention_kv_split,
        itl_from_tpot=max_itl_ms is None and tpot_ms is not None,
        decode_micro_batches=(1, 2) if decode_microbatch else (1,),
    )
    if request.is_mixed and structure is not None and "colocated" in structures:
        # (a mixed search costs prefill and decode instances apart: it has no colocated instance to offer)
        raise BadInputError(
            "--structure colocated: a colocated instance runs both phases on one machine and moves no KV cache; "
            "the per-phase flags (--prefill-hardware/--decode-hardware, --max-prefill-cards, --max-decode-cards, "
            "--max-cost, --kv-transfer-gbps) search prefill and decode instances apart. Drop them, or colocated."
        )
    if request.is_mixed and structure is not None and "afd" in structures:
        raise BadInputError(
            "--structure afd: AFD decode instances are searched on one machine with one card budget; drop "
            "--prefill-hardware/--decode-hardware and the per-phase budgets (--max-prefill-cards, --max-decode-cards, "
            "--max-cost, --kv-transfer-gbps), or afd."
        )
    return request


STRUCTURES = ("colocated", "pd", "afd")
# what each structure needs of --phase: a colocated instance runs both phases; AFD splits decode instances
_STRUCTURE_PHASES = {"colocated": ("both",), "afd": ("both", "decode")}


def check_structures_phase(structures: tuple[str, ...], phase: str) -> None:
    """Refuse a --structure the --phase plans none of (a decode-only search has no colocated instance,
    a prefill-only one no colocated or AFD instance), rather than print plans of another structure."""
    for name in structures:
        phases = _STRUCTURE_PHASES.get(name)
        if phases is not None and phase not in phases:
            what = "runs prefill and decode on the same instances" if name == "colocated" else "splits decode instances"
            raise BadInputError(
                f"--structure {name} and --phase {phase} contradict each other: {name} {what}, and --phase {phase} "
                f"plans {phase} instances only; drop {name} from --structure, or --phase {phase}."
            )


OBJECTIVES = ("tokens-per-card", "total", "cost", "energy")


def parse_structures(text: str | None, colocated: bool) -> tuple[str, ...]:
    """--structure as a tuple of colocated, pd, afd (default: all three; --no-colocated drops the
    first); errors name the flag."""
    if text is None:
        return tuple(s for s in STRUCTURES if colocated or s != "colocated")
    out = []
    for part in text.split(","):
        name = part.strip().lower()
        if name not in STRUCTURES:
            raise BadInputError(
                f"--structure: '{part.strip()}' is not a structure; give a list of {', '.join(STRUCTURES)}."
            )
        out.append(name)
    if not out:
        raise BadInputError(f"--structure: give at least one of {', '.join(STRUCTURES)}.")
    if "colocated" in out and not colocated:
        raise BadInputError("--structure colocated and --no-colocated contradict each other; give one.")
    return tuple(s for s in STRUCTURES if s in out)


def engine_structures(
    engine: str, structures: tuple[str, ...], given: bool, model: str, hardware: str
) -> tuple[str, ...]:
    """The structures --engine runs among those asked for (default: every one it runs); a structure
    asked for by name that the engine cannot run is refused naming why."""
    from planner.engines.profiles import afd_refusal, load_profile
    from planner.specs.catalog import load_hardware

    cap = load_profile(engine).capabilities
    reasons: dict[str, str] = {}
    if not cap.colocated:
        reasons["colocated"] = "it cannot run prefill and decode on the same instances"
    if not cap.disaggregated:
        reasons["pd"] = "it cannot disaggregate prefill and decode"
    afd_why = afd_refusal(cap.afd, load_hardware(hardware).name, load_model(model).architectures)
    if afd_why is not None:
        reasons["afd"] = afd_why
    if given:
        for s in structures:
            if s in reasons:
                raise BadInputError(f"--structure {s}: --engine {engine} cannot run it: {reasons[s]}.")
        return structures
    return tuple(s for s in structures if s not in reasons)


def check_objective(objective: str, rate: float | None) -> str:
    """--objective, checked (cost and energy are priced per token; with --rate they pick the
    cheapest or least-energy plan that serves it; total fills the budget, so it takes no --rate)."""
    key = objective.strip().lower()
    if key not in OBJECTIVES:
        raise BadInputError(f"--objective: '{objective}' is not one of {', '.join(OBJECTIVES)}.")
    if key == "total" and rate is not None:
        raise BadInputError(
            "--objective total fills the budget with the most tokens/s; --rate asks for the fewest cards that serve a "
            "rate: give one of them."
        )
    return key


def _engine_limits(
    engine: str, mtp_values: list[int] | None, colocated: bool, model: str, draft_model: str | None = None
) -> tuple[str, list[int], bool]:
    """--engine: its name, the MTP depths it runs (within --mtp), whether it runs colocated instances."""
    from planner.candidates.restrictions import DEFAULT_DRAFT_DEPTHS, DEFAULT_MTP_DEPTHS
    from planner.engines.profiles import engine_name, load_profile

    key = engine_name(engine)
    cap = load_profile(key).capabilities
    if draft_model is not None and "eagle3" not in cap.draft_models:
        raise BadInputError(
            f"--draft-model: {key} runs no EAGLE-3 draft model beside the target; use --engine sglang or "
            "vllm-ascend, or drop --draft-model."
        )
    if mtp_values is None:
        if draft_model is not None:
            mtp_values = list(DEFAULT_DRAFT_DEPTHS)
        else:
            mtp_values = list(DEFAULT_MTP_DEPTHS) if load_model(model).mtp_layers else [0]
    allowed = [k for k in mtp_values if k <= cap.mtp_tokens_max]
    if not allowed:
        raise BadInputError(
            f"--mtp: {key} runs at most {cap.mtp_tokens_max} MTP draft tokens; give depths up to {cap.mtp_tokens_max}."
        )
    return key, allowed, colocated and cap.colocated


NEAR_TIE_FETCH = 15  # plans the near-tie order is settled over (3 x --top when that is more)


def fetch_size(top: int) -> int:
    """Plans to ask the search for first: `NEAR_TIE_FETCH` (the default --top 5's three times), or
    3 x --top when more (so that --top distinct deployments remain once variants fold). Not fewer
    with a smaller --top: the near-tie order among the same plans gives the same first rows,
    whatever --top up to 5."""
    return max(NEAR_TIE_FETCH, 3 * top)


def order_keys(outcome: SearchOutcome) -> dict[str, tuple[float, float]]:
    """Each plan's order key (planner.ranking.rows.OrderKey) by its deployment identity: the search's
    objective figures of its deployment (planner.search.deployment.order_figures); the headline when
    the outcome carries no deployments (an interrupted search's one plan)."""
    from planner.ranking.rows import headline
    from planner.search.deployment import Objective, order_figures

    req = outcome.request
    objective = Objective.for_rate(req.rate_per_s, req.objective == "total")
    if len(outcome.deployments) != len(outcome.plans):
        return {plan_identity(p): (0.0, headline(p)) for p in outcome.plans}
    return {
        plan_identity(p): order_figures(d.rate_milli, d.weight, objective)
        for p, d in zip(outcome.plans, outcome.deployments, strict=True)
    }


def first_plan_outcome(request: PlanRequest, cache: TableCache) -> SearchOutcome:
    """The plan `moeplan plan` ranks first for `request` (its near-tie order included), without a
    display: what `sweep` and `whatif` report as a point's or a column's best plan. The predictions are
    remembered for the point, as for `moeplan plan` (its search, band and lead check ask for some twice)."""
    with evaluation_memo():
        return ranked_outcome(dataclasses.replace(request, top=1), request.engine_mode, cache, quiet=True)


def ranked_outcome(
    request: PlanRequest, mode: str, cache: TableCache | None = None, quiet: bool = False, jobs: int = 1
) -> SearchOutcome:
    """The search's plans as `--top` distinct deployments (planner.ranking.rows), with their bands:
    dense FFN / LM head variants folded under their row, near-ties ordered by TTFT, the band's slow
    end and HBM headroom. The search is asked for `fetch_size` plans (x3 while fewer than --top rows
    remain, up to 27 x --top); the rows kept are the first --top and every later one that could be a
    near-tie of the --top-th. `jobs`: searches run at once (--jobs; planner.search.runnable.searched).
    `near_tie_open`: the last plan fetched could still be one (more plans lie within 0.5% than were
    fetched; the order among those past them is the search's)."""
    from planner.ranking.rows import fold_variants, in_window

    top = request.top
    cache = cache if cache is not None else TableCache()
    fetch = fetch_size(top)
    seconds, solves = 0.0, 0
    while True:
        raw = (
            search_plans(request, cache, mode, fetch, jobs=jobs)
            if quiet
            else search_with_progress(request, cache, mode, fetch, jobs)
        )
        seconds, solves = seconds + raw.seconds, solves + raw.solves
        rows = fold_variants(raw.plans)
        if len(rows) >= top or raw.exhausted or raw.status == "INTERRUPTED" or fetch >= 27 * top:
            break
        fetch *= 3
    keys = order_keys(raw)
    edge = keys[plan_identity(rows[min(top, len(rows)) - 1].plan)]
    kept = [r for i, r in enumerate(rows) if i < top or in_window(keys[plan_identity(r.plan)], edge)]
    runs_on = dict(zip((id(p) for p in raw.plans), raw.runs_on, strict=False))
    trimmed = dataclasses.replace(
        raw,
        seconds=seconds,  # every search this list took
        solves=solves,
        plans=[r.plan for r in kept],
        variants=[r.variants for r in kept],
        runs_on=[runs_on[id(r.plan)] for r in kept] if raw.runs_on else [],
        exhausted=raw.exhausted and len(rows) <= len(kept),
    )
    outcome = ordered_rows(add_bands(trimmed), top, raw.plans[0] if raw.plans else None, keys)
    open_window = not raw.exhausted and raw.status != "INTERRUPTED" and len(kept) == len(rows) > top
    return dataclasses.replace(outcome, near_tie_open=len(raw.plans) if open_window else 0)


def plan_identity(plan: Plan) -> str:
    """A plan as a deployment: every field but its figures and its rank."""
    return plan.model_dump_json(exclude={"predicted", "rank"})


def ordered_rows(
    outcome: SearchOutcome, top: int, first: Plan | None, keys: dict[str, tuple[float, float]] | None = None
) -> SearchOutcome:
    """The rows in their order (the search's objective, `keys` by plan identity: `order_keys`; near-ties
    by TTFT, the band's slow end, HBM headroom; --robust keeps the low-end order) cut to `top`, ranks
    renumbered and the alternatives' ranks pointing at the rows shown. `first`: the search's own best
    plan, which stays in the list (in its last row when the near-tie order would cut it)."""
    from planner.ranking.rows import order_plans, renumbered
    from planner.search.alternatives import for_leader

    extras = {plan_identity(p): (v, r) for p, v, r in zip(
        outcome.plans, outcome.variants or [[]] * len(outcome.plans), outcome.runs_on or [{}] * len(outcome.plans),
        strict=False)}  # fmt: skip
    keys = keys if keys is not None else order_keys(outcome)
    plan_keys = [keys[plan_identity(p)] for p in outcome.plans]
    plans = outcome.plans if outcome.request.pessimistic_factors else order_plans(outcome.plans, plan_keys)
    cut = plans[:top]
    proven = [p for p in plans if first is not None and plan_identity(p) == plan_identity(first)][:1]
    if top > 1 and proven and all(plan_identity(p) != plan_identity(proven[0]) for p in cut):
        # the near-tie order put more than `top` - 1 plans ahead of the search's best: it keeps the last row
        # (a best folded under another row as its variant is shown with that row)
        cut = cut[: top - 1] + proven
    leaders = renumbered(cut)
    variants = [extras[plan_identity(p)][0] for p in leaders]
    # a row by its deployment, not its figures: the rows carry their bands, the alternatives may not
    row_of = {plan_identity(p): i for i, p in enumerate(cut, start=1)}
    for i, more in enumerate(variants, start=1):
        row_of.update({plan_identity(v): i for v in more})

    def rank_of(plan: Plan | None) -> int | None:
        if plan is None:
            return None
        return row_of.get(plan_identity(plan))

    leader_first = first is not None and leaders and plan_identity(leaders[0]) != plan_identity(first)
    alternatives = outcome.alternatives
    if leader_first and first is not None:
        # the alternatives are the search's best plan's: made rank 1's (its rows, if it is one, carry its band)
        best = next((p for p in plans if plan_identity(p) == plan_identity(first)), first)
        alternatives = for_leader(alternatives, leaders[0], best, leaders)
    return dataclasses.replace(
        outcome,
        plans=leaders,
        variants=variants,
        runs_on=[extras[plan_identity(p)][1] for p in leaders] if outcome.runs_on else [],
        alternatives=[dataclasses.replace(a, rank=rank_of(a.plan)) for a in alternatives],
        proven_first=first if leader_first else None,
        exhausted=outcome.exhausted and len(leaders) < top,
    )


def engine_fields(outcome: SearchOutcome) -> list[dict] | None:
    """Per plan, for the JSON: the engines that run it and, per engine that does not, the first field it lacks."""
    from planner.report.launch import engine_verdicts

    if outcome.request.is_mixed:
        return None
    return [engine_verdicts(p, outcome.model, outcome.hw) for p in outcome.plans]


def variant_docs(outcome: SearchOutcome) -> list[list] | None:
    return outcome.variants if any(outcome.variants) else None


def add_bands(outcome: SearchOutcome) -> SearchOutcome:
    """Every ranked plan re-scored on the machine as shipped, with its band; --robust re-ranks by the low end.

    A --robust search ran on the pessimistic machine (every factor at the slow end of its range), so
    its plans are already the best at the low end; they are shown at the predicted factors with their band.
    """
    from planner.costmodel.evaluate import PlanSpecs
    from planner.ranking.robust import rank_by_low_end, with_band
    from planner.specs.catalog import load_hardware
    from planner.specs.quantization import get_quantization

    req = outcome.request
    if req.is_mixed:
        return outcome  # bands are per machine; a mixed plan's phases run on two
    hw = load_hardware(req.hardware) if req.pessimistic_factors else outcome.hw
    specs = PlanSpecs(outcome.model, hw, get_quantization(req.quantization))
    plans = [with_band(p, specs, req.imbalance) for p in outcome.plans]
    if req.pessimistic_factors:
        plans = rank_by_low_end(plans)
        # the other structures' best plans too, so that their prices compare like with like
        alternatives = [
            a if a.plan is None else dataclasses.replace(a, plan=with_band(a.plan, specs, req.imbalance))
            for a in outcome.alternatives
        ]
        return dataclasses.replace(outcome, plans=plans, alternatives=alternatives)
    return dataclasses.replace(outcome, plans=plans)


def lead_lines(outcome: SearchOutcome) -> list[str]:
    """Whether rank 1's lead over rank 2 survives the factor ranges, and the term it rests on."""
    if len(outcome.plans) < 2 or outcome.request.is_mixed:
        return []
    from planner.costmodel.evaluate import PlanSpecs
    from planner.ranking.robust import lead_verdict
    from planner.report.plan_report import cards_of
    from planner.specs.catalog import load_hardware
    from planner.specs.quantization import get_quantization

    req = outcome.request
    first, second = outcome.plans[0], outcome.plans[1]
    cards = (cards_of(first, outcome.hw), cards_of(second, outcome.hw))
    if req.rate_per_s is not None and cards[0] != cards[1]:
        return [
            f"rank 1 serves the rate on {cards[0]:g} cards, rank 2 on {cards[1]:g}: the lead is in cards (whether each "
            "still serves it at the slow end of the factor ranges: --robust ranks by that end)."
        ]
    hw = load_hardware(req.hardware) if req.pessimistic_factors else outcome.hw
    specs = PlanSpecs(outcome.model, hw, get_quantization(req.quantization))
    total = req.objective == "total" and req.rate_per_s is None
    return lead_verdict(first, second, specs, req.imbalance, req.pessimistic_factors, cards if total else None).lines()


def tpot_judged_text(req: PlanRequest) -> str:
    """' of the p90 request' when the TPOT SLO holds the SLO-percentile request's own MTP acceptance."""
    return f" of the p{req.workload.tpot_percentile:g} request" if req.slo.tpot_at_percentile else ""


def itl_text(slo: SLO) -> str:
    """How the ITL limit reads in a title: its value and where it comes from."""
    if slo.max_itl_ms is None:
        return "no ITL limit"
    default = default_max_itl_ms(slo.tpot_ms)
    origin = (
        f" ({ITL_TPOT_MULTIPLE:g}x TPOT, --max-itl-ms)" if default is not None and slo.max_itl_ms == default else ""
    )
    return f"ITL <= {slo.max_itl_ms:g} ms{origin}"


RATE_CARD_CAP = 1024  # cards a --rate search may use when the machine sets no limit and --max-cards is not given


def rate_card_cap(hardware: str) -> float:
    """The card cap of a --rate search without --max-cards: the machine's own limit, else RATE_CARD_CAP."""
    from planner.specs.catalog import load_hardware

    hw = load_hardware(hardware)
    if hw.max_devices is not None:
        return hw.max_devices / hw.devices_per_card
    return float(RATE_CARD_CAP)


def engine_mode(engine: str | None, emits: list[tuple[str, Path]], mixed: bool) -> str:
    """--engine: 'auto' (the default: plans some engine runs), 'none' (the free search), or an engine
    name; without --engine, `--emit E DIR` plans for E. A plan on two machines (no export covers it
    yet) is searched freely."""
    from planner.engines.profiles import engine_name

    given = (engine or "").strip().lower()
    if not given:
        if len(emits) == 1:
            return emits[0][0]
        return NONE if mixed else AUTO
    if given in (AUTO, NONE):
        return NONE if mixed and given == AUTO else given
    from planner.engines.profiles import ENGINES

    try:
        return engine_name(given)
    except BadInputError:
        raise BadInputError(
            f"--engine: unknown engine '{engine}'; choose one of {AUTO}, {NONE}, {', '.join(ENGINES)}."
        ) from None


def search_plans(
    request: PlanRequest,
    cache: TableCache | None,
    mode: str,
    fetch: int,
    progress: SearchProgress | None = None,
    jobs: int = 1,
) -> SearchOutcome:
    """The `fetch` best plans of `request`, with no display: `mode` AUTO the plans some engine runs
    (planner.search.runnable; its searches `jobs` at a time), else the search as the request's engine says."""
    if mode == AUTO:
        return run_runnable(request, fetch, progress, cache, jobs)
    outcome = run_search(dataclasses.replace(request, top=fetch), progress, cache)
    return dataclasses.replace(outcome, engine_mode=mode, request=request)


def search_with_progress(
    request: PlanRequest, cache: TableCache | None = None, mode: str = NONE, fetch: int | None = None, jobs: int = 1
) -> SearchOutcome:
    """Run the search with a progress display on stderr (cost tables from `cache` if given); when
    stderr is not a terminal there is nothing to redraw, and no display (rich would still end it
    with an empty line). `mode` AUTO: the plans some engine runs (planner.search.runnable); `fetch`:
    ask for this many plans (default: --top)."""
    fetch = fetch or request.top

    def search(progress) -> SearchOutcome:
        return search_plans(request, cache, mode, fetch, progress, jobs)

    if not err_console.is_terminal:
        return search(None)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("planning", total=1.0)

        def progress(message: str, fraction: float) -> None:
            bar.update(task, description=message, completed=fraction)

        return search(progress)


def outcome_notes(outcome: SearchOutcome) -> list[str]:
    """Notes of the best plan (announced hardware, mixed hardware, workload percentiles)."""
    if not outcome.plans:
        return []
    return list((outcome.plans[0].predicted or {}).get("notes", []))


def verdict_line(outcome: SearchOutcome) -> str:
    """What the search proved or found, and what it cost (the line under the ranked table)."""
    points = sum(s.points_evaluated for s in (outcome.decode_space, outcome.prefill_space) if s)
    if outcome.optimal:
        verdict = "OPTIMAL: proven best under the cost model (CP-SAT)"
    elif outcome.status == "INTERRUPTED":
        verdict = "INTERRUPTED: best found before the interrupt (not proven optimal)"
    else:
        verdict = f"{outcome.status}: best found in {outcome.seconds:.1f} s (not proven optimal)"
    return f"{verdict}; {points:,} configurations costed, {outcome.solves} CP-SAT solves, {outcome.seconds:.2f} s."


def plan_page_html(
    outcome: SearchOutcome,
    document: str,
    notes: list[str],
    loads: Path | None,
    html: Path,
    command: str,
    checks: tuple[list, list[str]] | None = None,
) -> str:
    """The HTML report of a search (--html): the terminal's lines about it, and what it cannot draw
    (`checks`: `--simulate`'s checks and lines, shown in the ranked table)."""
    from planner.cli.options import loads_array
    from planner.report.html import PlanPage, plan_html
    from planner.report.launch import engines_line

    page = PlanPage(
        outcome=outcome,
        command=command,
        plans_json=document,
        verdict=verdict_line(outcome),
        space=space_line(outcome.space),
        lead=lead_lines(outcome),
        why=why_line(outcome, index=0),
        engines="" if outcome.request.is_mixed else engines_line(outcome.plans[0], outcome.model, outcome.hw),
        notes=notes,
        loads=loads_array(loads) if loads else None,
        html_name=str(html),
        checks=checks[0] if checks is not None else [],
        check_lines=checks[1] if checks is not None else [],
    )
    return plan_html(page)


# flags a search of one phase has no use for (a flag given on the command line, not its default).
# A decode-only search costs no prefill instance: the KV link and the prefix cache only move its TTFT,
# the prefill machine and budget only its instances. A prefill-only search runs no decode step: MTP,
# its acceptance, decode micro-batches and the TPOT percentile only shape those steps.
_PHASE_UNUSED = {
    "decode": (
        ("ttft_ms", "--ttft-ms"),
        ("prefill_devices", "--prefill-devices"),
        ("prefill_hardware", "--prefill-hardware"),
        ("max_prefill_cards", "--max-prefill-cards"),
        ("kv_transfer_gbps", "--kv-transfer-gbps"),
        ("prefix_hit_rate", "--prefix-hit-rate"),
    ),
    "prefill": (
        ("tpot_ms", "--tpot-ms"),
        ("max_itl_ms", "--max-itl-ms"),
        ("decode_devices", "--decode-devices"),
        ("decode_hardware", "--decode-hardware"),
        ("max_decode_cards", "--max-decode-cards"),
        ("mtp", "--mtp"),
        ("mtp_acceptance", "--mtp-acceptance"),
        ("tpot_at_percentile", "--tpot-at-percentile"),
        ("decode_microbatch", "--decode-microbatch/--no-decode-microbatch"),
        ("decode_attention_kv_split", "--decode-attention-kv-split/--no-decode-attention-kv-split"),
    ),
}


def refuse_unused_flags(ctx: typer.Context, phase: str) -> None:
    """Refuse a flag the request would ignore (exit 2 naming it), rather than print a plan as if it held."""

    for name, flag in _PHASE_UNUSED.get(phase.strip().lower(), ()):
        if flag_given(ctx, name):
            on, _, off = flag.partition("/")
            flag = off if off and ctx.params.get(name) is False else on  # the one the user gave
            raise BadInputError(f"{flag}: --phase {phase} plans no phase it applies to; drop {flag} or the --phase.")
    if flag_given(ctx, "workload_file"):
        for name, flag in (("input_tokens", "--input-tokens"), ("output_tokens", "--output-tokens")):
            if flag_given(ctx, name):
                raise BadInputError(f"{flag}: --workload gives every request's lengths; drop {flag} with it.")


def title_of(outcome: SearchOutcome) -> str:
    """The ranked table's title: model, machine, workload, SLOs, and the rate or the card budget."""
    req = outcome.request
    where = outcome.hw.name
    if req.is_mixed and req.prefill_hw_name == req.decode_hw_name:
        where += " (prefill and decode instances apart: per-phase flags)"
    elif req.is_mixed:
        where = f"prefill {req.prefill_hw_name} / decode {req.decode_hw_name}"
    budget = req.budget_text()
    if req.rate_per_s is not None:
        budget = f"{req.rate_per_s:g} requests/s with the fewest cards ({budget})"
    return (
        f"{outcome.model.name} on {where}, {req.workload.input_tokens}+{req.workload.output_tokens} "
        f"tokens, TPOT{tpot_judged_text(req)} <= {req.slo.tpot_ms} ms, TTFT <= {req.slo.ttft_ms} ms, "
        f"{itl_text(req.slo)}, {budget}"
    )


def engine_lines(outcome: SearchOutcome) -> list[str]:
    """Under the table: which engines were searched, their releases, and (auto) the best plan no
    engine runs yet, priced against rank 1."""
    from planner.engines.profiles import ENGINES, load_profile

    mode = outcome.engine_mode
    releases = ", ".join(load_profile(e).label for e in ENGINES)
    if mode == AUTO:
        out = [f"runs on: the engines that run each plan, of {releases} (docs/engines.md; --engine none: every plan)"]
        if len(outcome.engine_failures) == len(ENGINES):  # planner.search.runnable: none runs this machine or format
            out = [f"runs on: none of {releases} runs this request (why, below); the list is the free search's"]
        for engine, why in outcome.engine_failures.items():
            out.append(f"{engine}: {why.rstrip('.')}.")
        beyond = outcome.beyond
        if beyond is not None and outcome.plans:
            what = "; ".join(f"{e}: {problems[0].split(':')[0]}" for e, problems in outcome.beyond_problems.items())
            figure = objective_figure(beyond, outcome.request) + beyond_price(outcome, beyond)
            out.append(
                f"beyond the engines: the best plan no engine runs yet gives {figure} and needs what they lack "
                f"({what}); --engine none lists it."
            )
        return out
    if mode == NONE:
        return [f"--engine none: every plan, whether an engine runs it or not ({releases})"]
    return [f"--engine {mode}: only plans {load_profile(mode).label} runs"]


def beyond_price(outcome: SearchOutcome, beyond: Plan) -> str:
    """ " (... against rank 1)" for the best plan no engine runs, priced as the alternatives table prices:
    cards with a target rate, the deployment's output tokens/s with --objective total, else tokens/s per card."""
    from planner.report.plan_report import alternative_price

    req = outcome.request
    by_cards = req.rate_per_s is not None
    by_total = req.objective == "total" and not by_cards
    price = alternative_price(beyond, outcome.plans[0], outcome.hw, by_cards, by_total)
    if price == "-":
        return ""
    if req.objective in ("cost", "energy") and not by_cards:  # the figure before is not what the % compares
        return f" ({price} tokens/s per card against rank 1)"
    return f" ({price} against rank 1)"


def objective_figure(plan: Plan, request: PlanRequest) -> str:
    """The figure of `plan` the request's objective ranks by, as the tables print it."""
    from planner.ranking.rows import headline

    econ = (plan.predicted or {}).get("economics") or {}
    if request.rate_per_s is not None and econ.get("cards") is not None:
        return f"{econ['cards']:g} cards, {headline(plan):.1f} tok/s/card"
    if request.objective == "total" and request.rate_per_s is None and econ.get("output_tokens_per_s") is not None:
        return f"{econ['output_tokens_per_s']:,.0f} output tok/s in all"
    if request.objective == "cost" and econ.get("cost_per_million_output_tokens") is not None:
        return f"{econ['cost_per_million_output_tokens']:.4g} {econ.get('currency') or ''} per million output tokens"
    if request.objective == "energy" and econ.get("joules_per_output_token") is not None:
        return f"{econ['joules_per_output_token']:.4g} J per output token"
    return f"{headline(plan):.1f} tok/s/card"


def economics_asked(request: PlanRequest) -> bool:
    """Whether the tables show cost and energy columns: when the ranking is by them or a price was given
    (the figures are in every plan's `predicted.economics` and its detail table either way)."""
    return request.objective in ("cost", "energy") or bool(request.prices)


def print_outcome(outcome: SearchOutcome, show_variants: bool = False, explain_space: bool = False) -> None:
    """The ranked table, the status line, and the best plan in detail."""
    req = outcome.request
    from planner.ranking.rows import order_rule

    runs_on = outcome.runs_on if outcome.engine_mode == AUTO else None
    shown = outcome.variants if show_variants else None
    econ = economics_asked(outcome.request)
    console.print(ranked_table(outcome.plans, outcome.hw, title_of(outcome), runs_on, shown, economics=econ))
    console.print(order_rule(req.objective, req.rate_per_s is not None, outcome.weight_unit))
    if outcome.near_tie_open:
        console.print(
            f"near-ties: the order above covers the search's best {outcome.near_tie_open} plans; more lie within "
            f"0.5% of rank {req.top} (past those {outcome.near_tie_open}, the search's order stands)."
        )
    folded = sum(len(v) for v in outcome.variants)
    if folded and not show_variants:
        console.print(
            f"{folded} variant{'s' if folded != 1 else ''} folded under the rows above (--variants lists them)."
        )
    for line in engine_lines(outcome):
        console.print(line)
    if outcome.exhausted:
        console.print(
            f"--top {req.top}: only {len(outcome.plans)} distinct deployment{'s' if len(outcome.plans) != 1 else ''} "
            "fit the budget and SLOs (any other is beaten in every cost by one of these)."
        )
    if outcome.alternatives:
        by_cards = req.rate_per_s is not None
        console.print(
            alternatives_table(
                outcome.alternatives,
                outcome.plans[0],
                outcome.hw,
                by_cards,
                economics_asked(outcome.request),
                by_total=req.objective == "total",
            )
        )
        afd = afd_line(outcome.alternatives, outcome.plans[0])
        if afd:
            console.print(afd)
    console.print(verdict_line(outcome))
    if explain_space:
        console.print(space_table(outcome.space))
    else:
        console.print(space_line(outcome.space))
    if outcome.proven_first is not None:
        proven = plan_identity(outcome.proven_first)
        proven_ranks = [i for i, p in enumerate(outcome.plans, start=1) if plan_identity(p) == proven]
        where = f", rank {proven_ranks[0]}" if proven_ranks else ""
        console.print(
            f"rank 1 is within 0.5% of the search's best plan ({objective_figure(outcome.proven_first, req)}{where}) "
            "and comes first by the near-tie order above."
        )
    if outcome.request.pessimistic_factors:
        console.print(
            "--robust: searched with every factor at the slow end of its range (the SLOs hold there; 'why' below "
            "is at that end); ranked by the low end of the band."
        )
    for line in lead_lines(outcome):
        console.print(line)
    console.print(why_line(outcome, index=0))
    best = outcome.plans[0]
    from planner.report.launch import engines_line

    console.print(engines_line(best, outcome.model, outcome.hw))
    from planner.costmodel.prediction import Prediction

    console.print("\n[bold]Best plan (rank 1) in detail[/]")
    prefill_hw = None
    if req.is_mixed:
        from planner.specs.catalog import load_hardware

        prefill_hw = load_hardware(req.prefill_hw_name)
    best_prediction = Prediction.model_validate(best.predicted)
    for renderable in evaluate_tables(best, best_prediction, outcome.hw, prefill_hw):
        console.print(renderable)
    band = uncertainty_table(best_prediction)
    if band is not None:
        console.print(band)


def simulated_checks(
    outcome: SearchOutcome, mode: str, acceptance_spread: float | None = None, jobs: int = 1
) -> tuple[SearchOutcome, tuple[list, list[str]]]:
    """`--simulate`: the ranked plans checked by simulation; with `--rate`, sized until one meets the SLOs at
    the simulated percentile (planner.ranking.simulated). Returns the outcome kept, its checks and lines.
    `mode`: --engine as resolved (auto and none simulate with the default engine's routing);
    `acceptance_spread`: --acceptance-spread (None: the shipped fit); `jobs`: --jobs, for the searches of sizing."""
    from planner.ranking.simulated import check_plans, size_for_rate
    from planner.simulate.routing import engine_routing

    req = outcome.request
    routing = engine_routing(None if mode in (AUTO, NONE) else mode)
    pct = req.workload.slo_percentile
    if req.rate_per_s is None:
        return outcome, (check_plans(outcome.plans, None, pct, routing, req.imbalance, acceptance_spread), [])
    sized = size_for_rate(
        req,
        lambda r: ranked_outcome(r, mode, jobs=jobs),
        pct,
        routing,
        first=outcome,
        acceptance_spread=acceptance_spread,
    )
    lines = []
    if len(sized.attempts) > 1:
        tried = ", ".join(f"{r:.4g} ({'met' if ok else 'missed'})" for r, ok in sized.attempts)
        lines.append(
            f"--rate {req.rate_per_s:g} sized by simulation: searched for {tried} req/s; the plans below are "
            f"sized for {sized.searched_rate_per_s:.4g} req/s and simulated at {req.rate_per_s:g} req/s"
        )
    return sized.outcome, (sized.checks, lines)


def print_checks(checks: list, lines: list[str]) -> None:
    """The plans' simulated percentiles next to their static figures, and what misses."""
    from planner.report.simulate_report import checks_caption, checks_table, miss_lines

    console.print(checks_table(checks, "Checked by simulation"))
    console.print(checks_caption(checks))
    for line in [*lines, *miss_lines(checks)]:
        console.print(line)


def plan(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    hardware: HardwareOpt = DEFAULT_HARDWARE,
    quantization: QuantizationOpt = AUTO_QUANTIZATION,
    input_tokens: Annotated[int, typer.Option("--input-tokens", help="Prompt length.")] = DEFAULT_WORKLOAD.input_tokens,
    output_tokens: Annotated[
        int, typer.Option("--output-tokens", help="Completion length.")
    ] = DEFAULT_WORKLOAD.output_tokens,
    mtp_acceptance: Annotated[
        float, typer.Option("--mtp-acceptance", help="Acceptance of an MTP draft token.")
    ] = DEFAULT_WORKLOAD.mtp_acceptance,
    tpot_ms: Annotated[
        float | None, typer.Option("--tpot-ms", help="Time per output token SLO.")
    ] = DEFAULT_SLO.tpot_ms,
    ttft_ms: Annotated[float | None, typer.Option("--ttft-ms", help="Time to first token SLO.")] = DEFAULT_SLO.ttft_ms,
    max_cards: Annotated[
        float,
        typer.Option("--max-cards", help="Card budget (A2: 910B cards; CM384: 910C packages)."),
    ] = DEFAULT_MAX_CARDS,
    phase: PhaseOpt = "both",
    decode_devices: DecodeDevicesOpt = None,
    prefill_devices: PrefillDevicesOpt = None,
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Serve this many requests/s with the fewest cards."),
    ] = None,
    top: TopOpt = 5,
    mtp: Annotated[
        str | None,
        typer.Option(help="MTP depths to consider, e.g. '0,1,2' (default: all the model allows)."),
    ] = None,
    draft_model: Annotated[
        str | None,
        typer.Option(
            "--draft-model",
            metavar="DRAFT",
            help="An EAGLE-3 draft head beside the model (catalog name in drafts/, e.g. qwen3-235b-a22b-eagle3, or a "
            "config.json path): --mtp then counts its draft tokens (default 1,2,3).",
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write {'plans': [...]} to FILE ('-' for stdout).")
    ] = None,
    html: HtmlOpt = None,
    emit: EmitOpt = None,
    force: ForceOpt = False,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            metavar="ENGINE",
            help="auto (the default): plans at least one serving engine runs, each row naming them; none: the free "
            "search (what no engine runs yet included); or only what vllm-ascend, sglang or mindie runs. With --emit "
            "E and no --engine, plans for E.",
            show_default=False,
        ),
    ] = None,
    variants: Annotated[
        bool,
        typer.Option(
            "--variants",
            help="Also list each row's variants (the same deployment with another dense FFN or LM head layout, "
            "figures within 0.1%).",
        ),
    ] = False,
    loads: LoadsOpt = None,
    skew_sigma: SkewSigmaOpt = None,
    max_redundant_experts: MaxRedundantOpt = None,
    max_extra_slots: MaxExtraSlotsOpt = None,
    any_tp: AnyTpOpt = False,
    colocated: ColocatedOpt = True,
    hbm_utilization: HbmUtilizationOpt = DEFAULT_HBM_UTILIZATION,
    decode_attention_kv_split: KvSplitOpt = True,
    max_itl_ms: MaxItlOpt = None,
    prefill_hardware: PrefillHardwareOpt = None,
    decode_hardware: DecodeHardwareOpt = None,
    kv_transfer_gbps: KvTransferGbpsOpt = None,
    max_prefill_cards: MaxPrefillCardsOpt = None,
    max_decode_cards: MaxDecodeCardsOpt = None,
    max_cost: MaxCostOpt = None,
    workload_file: WorkloadFileOpt = None,
    prefix_hit_rate: PrefixHitRateOpt = None,
    slo_percentile: SloPercentileOpt = None,
    tpot_at_percentile: TpotAtPercentileOpt = False,
    decode_microbatch: DecodeMicrobatchOpt = True,
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit",
            min=0.1,
            max=86400.0,
            help="CP-SAT's time limit, in seconds, for the search's solves together (the cost tables built "
            "before them are not limited by it: --explain-space lists what sets their size).",
        ),
    ] = DEFAULT_TIME_LIMIT_S,
    workers: WorkersOpt = 2,
    jobs: PlanJobsOpt = DEFAULT_JOBS,
    robust: Annotated[
        bool,
        typer.Option(
            "--robust",
            help="Search with every factor at the slow end of its range and rank by the low end of the band.",
        ),
    ] = False,
    explain_space: Annotated[
        bool,
        typer.Option(
            "--explain-space",
            help="List the named limits of the search space the verdict holds over: what each keeps out, why, "
            "and the flag that lifts it.",
        ),
    ] = False,
    structure: StructureOpt = None,
    objective: ObjectiveOpt = "tokens-per-card",
    price_per_card_hour: PricePerCardHourOpt = None,
    currency: CurrencyOpt = DEFAULT_CURRENCY,
    simulate: Annotated[
        bool,
        typer.Option(
            "--simulate",
            help="Check the ranked plans by simulation at the rate each claims (--rate: at that rate, sizing "
            "until the simulated --slo-percentile of TTFT and TPOT meets the SLOs); see docs/simulate.md.",
        ),
    ] = False,
    acceptance_spread: AcceptanceSpreadOpt = None,
) -> None:
    """Search deployments (instance sizes, per-module layouts, expert slots, concurrency, MTP,
    P:D) under HBM and the SLOs, and print them ranked by output tokens/s per card."""

    def body() -> None:
        with evaluation_memo():  # the search, the bands and the lead check ask for some predictions twice
            _body()

    def _body() -> None:
        check_spread_needs_simulate(acceptance_spread, simulate)
        refuse_unused_flags(ctx, phase)
        emits = parse_emits(emit)
        check_new_folders(emits, force)
        check_outputs({"--json": json_out, "--html": html}, no_stdout=("--html",))
        mode = engine_mode(engine, emits, prefill_hardware is not None or decode_hardware is not None)
        scheme, quant_note = quantization_for(quantization, hardware, prefill_hardware, decode_hardware)
        cards = max_cards
        source = ctx.get_parameter_source("max_cards")
        if rate is not None and (source is None or source.name == "DEFAULT"):
            cards = rate_card_cap(hardware)  # a target rate is served with the fewest cards: 48 would cap it
        request = build_request(
            model=model,
            hardware=hardware,
            quantization=scheme,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            mtp_acceptance=mtp_acceptance,
            tpot_ms=tpot_ms,
            ttft_ms=ttft_ms,
            max_cards=cards,
            phase=phase,
            decode_devices=decode_devices,
            prefill_devices=prefill_devices,
            rate=rate,
            top=top,
            mtp=mtp,
            time_limit=time_limit,
            workers=workers,
            loads=loads,
            skew_sigma=skew_sigma,
            max_redundant_experts=max_redundant_experts,
            max_extra_slots=max_extra_slots,
            any_tp=any_tp,
            colocated=colocated,
            prefill_hardware=prefill_hardware,
            decode_hardware=decode_hardware,
            kv_transfer_gbps=kv_transfer_gbps,
            max_prefill_cards=max_prefill_cards,
            max_decode_cards=max_decode_cards,
            max_cost=max_cost,
            workload_file=workload_file,
            prefix_hit_rate=prefix_hit_rate,
            slo_percentile=slo_percentile,
            engine=None if mode in (AUTO, NONE) else mode,
            robust=robust,
            hbm_utilization=hbm_utilization,
            decode_attention_kv_split=decode_attention_kv_split,
            max_itl_ms=max_itl_ms,
            decode_microbatch=decode_microbatch,
            structure=structure,
            objective=objective,
            price_per_card_hour=price_per_card_hour,
            currency=currency,
            simulate=simulate,
            draft_model=draft_model,
            tpot_at_percentile=tpot_at_percentile,
        )
        try:
            outcome = ranked_outcome(request, mode, jobs=jobs)
            checks: tuple[list, list[str]] | None = None
            if simulate:
                outcome, checks = simulated_checks(outcome, mode, acceptance_spread, jobs)
        except InfeasibleError as exc:
            if json_out is not None:  # scripts read the verdict from the JSON too
                write_text_atomic(json_out, infeasible_document(str(exc)), "--json")
            if html is not None and str(html) != "-":  # a page shows a plan: with none, none is written
                raise InfeasibleError(f"{exc} Not written: {html}.") from None
            raise
        notes = outcome_notes(outcome)
        if quant_note is not None:
            notes = [quant_note, *notes]
            err_console.print(f"note: {quant_note}", highlight=False)
        stack = None
        if mode not in (AUTO, NONE):
            from planner.engines.profiles import engine_machine_note, engine_model_note, kv_split_note

            stack = engine_machine_note(outcome.hw, mode)
            for caution in (
                engine_model_note(outcome.model.name, mode),
                kv_split_note(decode_attention_kv_split, mode),
            ):
                if caution is not None:
                    notes = [*notes, caution]
                    err_console.print(f"[bold yellow]warning:[/] {caution}", markup=True, highlight=False)
        if stack is not None:
            notes = [*notes, stack]
        other_stack = attention_machine_notes(outcome.hw, outcome.model)  # in the notes already (the prediction's)
        for note in notes:
            if "announced" in note or note == stack or note in other_stack:
                err_console.print(f"[bold yellow]warning:[/] {note}", markup=True, highlight=False)
        if outcome.status == "INTERRUPTED":
            print_outcome(outcome, variants, explain_space)
            err_console.print(
                "interrupted: the plans above are the best found so far (not proven); no file was written."
            )
            raise typer.Exit(code=130)
        # every output is checked and built before any is written: a plan an engine cannot run
        # leaves no file behind, the JSON included
        outputs, wrote = Outputs(), []
        if emits:
            if outcome.request.is_mixed:
                raise BadInputError(
                    "--emit: this plan runs prefill and decode on different machines, which no engine "
                    "export covers yet; drop --emit, or plan each machine on its own."
                )
            wrote = stage_emits(outputs, emits, outcome.plans[0], outcome.model, outcome.hw, loads, force)
        simulated = [c.as_dict() for c in checks[0]] if checks is not None else None
        document = plans_document(
            outcome.plans,
            outcome.status,
            notes,
            simulated,
            engine_fields(outcome),
            variant_docs(outcome),
            outcome.space,
        )
        if json_out is not None:
            outputs.text(json_out, document, "--json")
        if html is not None:
            outputs.text(
                html, plan_page_html(outcome, document, notes, loads, html, command_line(ctx), checks), "--html"
            )
        outputs.commit()
        for line in wrote:
            err_console.print(line)
        if json_out is not None and str(json_out) == "-":
            return
        print_outcome(outcome, variants, explain_space)
        if checks is not None:
            print_checks(*checks)

    run_guarded(body)
