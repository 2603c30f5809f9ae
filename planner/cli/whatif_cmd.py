"""`moeplan whatif [BASE_PLAN] --tpot-ms 30`: re-plan under changed assumptions, compare to base.

The flags are always the *new* assumptions, and only the flags given change anything: every
assumption not given is the base's. The base is BASE_PLAN (a plan file or a shipped plan's name:
its model, machine, workload, SLOs and card count), or without one `moeplan plan`'s defaults,
changed where `--base NAME=VALUE` says (NAME is a flag's name without the dashes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from planner.cli.common import check_output, console, run_guarded, write_text_atomic
from planner.cli.options import (
    AcceptanceSpreadOpt,
    DecodeHardwareOpt,
    KvTransferGbpsOpt,
    MaxCostOpt,
    MaxDecodeCardsOpt,
    MaxPrefillCardsOpt,
    PrefillHardwareOpt,
    PrefixHitRateOpt,
    SearchEngineOpt,
    check_spread_needs_simulate,
)
from planner.cli.plan_cmd import build_request, engine_mode, ranked_outcome
from planner.costmodel.context import DEFAULT_HBM_UTILIZATION
from planner.costmodel.evaluate import load_plan_specs
from planner.costmodel.mixed import is_mixed_plan
from planner.errors import BadInputError, InfeasibleError
from planner.ranking.whatif import BaseInfeasibleError, run_whatif
from planner.report.plan_report import infeasible_document
from planner.report.whatif_report import whatif_document, whatif_renderables
from planner.search.plan_search import SearchOutcome, TableCache
from planner.search.request import (
    DEFAULT_HARDWARE,
    DEFAULT_MAX_CARDS,
    DEFAULT_MODEL,
    DEFAULT_SLO,
    DEFAULT_WORKLOAD,
    PlanRequest,
)
from planner.search.runnable import AUTO, NONE
from planner.search.settings import DEFAULT_TIME_LIMIT_S
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.plan import Plan
from planner.specs.quantization import AUTO_QUANTIZATION, QUANTIZATION_SCHEMES

# assumption name (the flag without dashes) -> (type, `moeplan plan` default)
ASSUMPTIONS: dict[str, tuple[type, object]] = {
    "model": (str, DEFAULT_MODEL),
    "hardware": (str, DEFAULT_HARDWARE),
    "quantization": (str, AUTO_QUANTIZATION),
    "input-tokens": (int, DEFAULT_WORKLOAD.input_tokens),
    "output-tokens": (int, DEFAULT_WORKLOAD.output_tokens),
    "mtp-acceptance": (float, DEFAULT_WORKLOAD.mtp_acceptance),
    "tpot-ms": (float, DEFAULT_SLO.tpot_ms),
    "ttft-ms": (float, DEFAULT_SLO.ttft_ms),
    "max-cards": (float, float(DEFAULT_MAX_CARDS)),
    "phase": (str, "both"),
    "decode-devices": (int, None),
    "prefill-devices": (int, None),
    "rate": (float, None),
    "mtp": (str, None),
    "skew-sigma": (float, None),
    "loads": (Path, None),
    "max-redundant-experts": (int, None),
    "colocated": (bool, True),
    "hbm-utilization": (float, DEFAULT_HBM_UTILIZATION),
    "decode-attention-kv-split": (bool, True),
    "max-itl-ms": (float, None),
    "prefill-hardware": (str, None),
    "decode-hardware": (str, None),
    "kv-transfer-gbps": (float, None),
    "max-prefill-cards": (float, None),
    "max-decode-cards": (float, None),
    "max-cost": (float, None),
    "prefix-hit-rate": (float, None),
    "draft-model": (str, None),
    "tpot-at-percentile": (bool, False),
    "engine": (str, AUTO),
}
BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
NULLABLE = {
    "max-itl-ms",
    "tpot-ms",
    "ttft-ms",
    "decode-devices",
    "prefill-devices",
    "rate",
    "mtp",
    "skew-sigma",
    "loads",
    "max-redundant-experts",
    "prefill-hardware",
    "decode-hardware",
    "kv-transfer-gbps",
    "max-prefill-cards",
    "max-decode-cards",
    "max-cost",
    "prefix-hit-rate",
    "draft-model",
}


def parse_base_pairs(pairs: list[str]) -> dict[str, object]:
    """`--base NAME=VALUE` pairs as typed values ('none' clears an optional one)."""
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip().lstrip("-").replace("_", "-")
        text = text.strip()
        if not sep or name not in ASSUMPTIONS:
            known = ", ".join(ASSUMPTIONS)
            hint = "" if sep else " (a plan file is the base as itself: moeplan whatif PLAN_FILE ..., or --base FILE)"
            raise BadInputError(f"--base '{pair}': give NAME=VALUE with NAME one of {known}{hint}.")
        kind = ASSUMPTIONS[name][0]
        if text.lower() == "none" and name in NULLABLE:
            out[name] = None
            continue
        try:
            if kind is bool:
                out[name] = BOOLEANS[text.lower()]
            else:
                out[name] = kind(text)
        except (ValueError, KeyError):
            raise BadInputError(f"--base {name}={text}: '{text}' is not a valid {kind.__name__}.") from None
    return out


def _plan_phase(plan: Plan) -> str:
    decodes = plan.decode_phase is not None or plan.afd is not None  # AFD instances decode
    prefills = plan.prefill_phase is not None or (plan.afd is not None and plan.afd.prefill_batch_tokens is not None)
    if decodes and prefills:
        return "both"
    return "decode" if decodes else "prefill"


def _ref(ref: str, base_dir: Path | None) -> str:
    """A relative model/hardware path in a plan resolves beside the plan (as evaluate does)."""
    p = Path(ref)
    if base_dir is not None and not p.is_absolute() and not p.exists() and (base_dir / p).exists():
        return str(base_dir / p)
    return ref


def plan_assumptions(plan: Plan, base_dir: Path | None) -> dict[str, object]:
    """A plan file's assumptions: model, machine, scheme, workload, SLOs; its cards as the "
    "budget."""
    specs = load_plan_specs(
        plan.model_copy(update={"prefill": None}) if is_mixed_plan(plan) and plan.decode else plan, base_dir
    )
    devices = plan.total_devices  # (a colocated plan's instances serve both phases: counted once)
    out = {k: default for k, (_, default) in ASSUMPTIONS.items()}
    out.update(
        {
            "model": _ref(plan.model, base_dir),
            "hardware": _ref(plan.hardware, base_dir),
            "quantization": plan.quantization,
            "input-tokens": plan.workload.input_tokens,
            "output-tokens": plan.workload.output_tokens,
            "mtp-acceptance": plan.workload.mtp_acceptance,
            "tpot-ms": plan.slo.tpot_ms if plan.slo else None,
            "ttft-ms": plan.slo.ttft_ms if plan.slo else None,
            "max-cards": math.ceil(specs.hw.cards(devices) - 1e-9),
            "phase": _plan_phase(plan),
            "hbm-utilization": plan.hbm_utilization,
            "decode-attention-kv-split": plan.decode_attention_kv_split,
            # a plan without an ITL limit is compared without one (0: none; unset: 3x TPOT)
            "max-itl-ms": (plan.slo.max_itl_ms or 0.0) if plan.slo else 0.0,
            "prefix-hit-rate": plan.workload.prefix_hit_rate,
            "draft-model": _ref(plan.draft_model, base_dir) if plan.draft_model else None,
            "tpot-at-percentile": bool(plan.slo.tpot_at_percentile) if plan.slo else False,
        }
    )
    if is_mixed_plan(plan):
        from planner.costmodel.evaluate import resolve_ref
        from planner.costmodel.mixed import load_mixed_specs

        mixed = load_mixed_specs(plan, base_dir, resolve_ref)
        d_cards = mixed.decode_hw.cards(plan.decode.total_devices) if plan.decode else 0.0
        p_cards = mixed.prefill_hw.cards(plan.prefill.total_devices) if plan.prefill else 0.0
        out["max-cards"] = d_cards + p_cards
        if plan.decode is not None and plan.decode.hardware:
            out["decode-hardware"] = _ref(plan.decode.hardware, base_dir)
        if plan.prefill is not None and plan.prefill.hardware:
            out["prefill-hardware"] = _ref(plan.prefill.hardware, base_dir)
        if plan.prefill is not None and plan.prefill.kv_transfer_bytes_per_s:
            out["kv-transfer-gbps"] = plan.prefill.kv_transfer_bytes_per_s / 1e9
    return out


_FLAG_AT_LEAST = re.compile(r"--([a-z][a-z-]*) to at least ([0-9][0-9,]*(?:\.[0-9]+)?)")
_FLAG_VALUE = re.compile(r"--([a-z][a-z-]*) (-?[0-9][0-9,]*(?:\.[0-9]+)?)\b")
_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z-]*)(?![\w-])")


def as_base_flags(message: str) -> str:
    """A search's or a request check's message about the base assumptions, its flags written the way
    the base is given (`--tpot-ms 1` -> `--base tpot-ms=1`; `--max-cards to at least 16` ->
    `--base max-cards=16 or more`): the flags it names are the base's, not the new ones."""

    def known(name: str, text: str) -> str | None:
        return text if name in ASSUMPTIONS else None

    out = _FLAG_AT_LEAST.sub(lambda m: known(m[1], f"--base {m[1]}={m[2]} or more") or m[0], message)
    out = _FLAG_VALUE.sub(lambda m: known(m[1], f"--base {m[1]}={m[2]}") or m[0], out)
    return _FLAG.sub(lambda m: known(m[1], f"--base {m[1]}") or m[0], out)


def _opt(value: object, kind: type) -> Any:
    """An optional assumption as its type (None stays None)."""
    return None if value is None else kind(value)


def request_from(assumptions: dict[str, object], time_limit: float, workers: int) -> PlanRequest:
    """A top-1 PlanRequest from assumptions by flag name (validated as `moeplan plan` does)."""
    a = assumptions
    mode = engine_mode(str(a["engine"]), [], a["prefill-hardware"] is not None or a["decode-hardware"] is not None)
    request = build_request(
        model=str(a["model"]),
        hardware=str(a["hardware"]),
        quantization=str(a["quantization"]),
        input_tokens=_opt(a["input-tokens"], int),
        output_tokens=_opt(a["output-tokens"], int),
        mtp_acceptance=_opt(a["mtp-acceptance"], float),
        tpot_ms=_opt(a["tpot-ms"], float),
        ttft_ms=_opt(a["ttft-ms"], float),
        max_cards=_opt(a["max-cards"], float),
        phase=str(a["phase"]),
        decode_devices=_opt(a["decode-devices"], int),
        prefill_devices=_opt(a["prefill-devices"], int),
        rate=_opt(a["rate"], float),
        top=1,
        mtp=_opt(a["mtp"], str),
        time_limit=time_limit,
        workers=workers,
        loads=_opt(a["loads"], Path),
        skew_sigma=_opt(a["skew-sigma"], float),
        max_redundant_experts=_opt(a["max-redundant-experts"], int),
        colocated=bool(a["colocated"]),
        hbm_utilization=float(a["hbm-utilization"]),  # type: ignore[arg-type]
        decode_attention_kv_split=bool(a["decode-attention-kv-split"]),
        max_itl_ms=_opt(a["max-itl-ms"], float),
        prefill_hardware=_opt(a["prefill-hardware"], str),
        decode_hardware=_opt(a["decode-hardware"], str),
        kv_transfer_gbps=_opt(a["kv-transfer-gbps"], float),
        max_prefill_cards=_opt(a["max-prefill-cards"], float),
        max_decode_cards=_opt(a["max-decode-cards"], float),
        max_cost=_opt(a["max-cost"], float),
        prefix_hit_rate=_opt(a["prefix-hit-rate"], float),
        draft_model=_opt(a["draft-model"], str),
        tpot_at_percentile=bool(a["tpot-at-percentile"]),
        engine=None if mode in (AUTO, NONE) else mode,
    )
    # (a what-if compares rank 1 only: no other-structure plans)
    return dataclasses.replace(request, engine_mode=mode, alternatives=False)


def _search_with_progress(request: PlanRequest, cache: TableCache) -> SearchOutcome:
    """Rank 1 as `moeplan plan` lists it (its near-tie order: the base column is plan's rank 1)."""
    outcome = ranked_outcome(dataclasses.replace(request, top=1), request.engine_mode, cache)
    if outcome.status == "INTERRUPTED":
        # a what-if needs both searches complete; stop as an interrupt does elsewhere (exit 130)
        raise KeyboardInterrupt
    return outcome


def simulate_columns(
    result: Any, request: PlanRequest, acceptance_spread: float | None = None
) -> list[tuple[str, Any]]:
    """`--simulate`: each column's plan simulated at the new --rate, or at the rate it claims
    (planner.ranking.simulated), judged at the new workload's SLO percentile; `acceptance_spread`:
    --acceptance-spread (None: the shipped fit)."""
    from planner.ranking.simulated import simulate_check

    out = []
    for column in (result.base, result.new, result.rescored):
        if column is not None and column.plan is not None:
            check, _ = simulate_check(
                column.plan,
                request.rate_per_s,
                request.workload.slo_percentile,
                imbalance=request.imbalance,
                acceptance_spread=acceptance_spread,
            )
            out.append((column.title, check))
    return out


def whatif(
    base_plan: Annotated[
        str | None,
        typer.Argument(
            metavar="BASE_PLAN",
            help="The base: a plan YAML/JSON (e.g. an exported plan) or a shipped plan's name "
            "(a2-d70). Without it the base is `moeplan plan`'s defaults, changed by --base.",
        ),
    ] = None,
    rank: Annotated[
        int | None,
        typer.Option("--rank", min=1, help="Which plan of a `moeplan plan --json` export is the base (default 1)."),
    ] = None,
    base: Annotated[
        list[str] | None,
        typer.Option(
            "--base",
            metavar="NAME=VALUE",
            help="A base assumption when there is no BASE_PLAN (repeat it): e.g. "
            "--base hardware=cm384 --base max-cards=384. NAME is any flag below without its "
            "dashes.",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="New model (catalog name or path).")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", help="New machine (catalog name or path).")] = None,
    quantization: Annotated[
        str | None,
        typer.Option(help="New scheme: " + ", ".join(QUANTIZATION_SCHEMES) + " (planner/specs/quantization.py)."),
    ] = None,
    input_tokens: Annotated[int | None, typer.Option("--input-tokens", help="New prompt length.")] = None,
    output_tokens: Annotated[int | None, typer.Option("--output-tokens", help="New completion length.")] = None,
    mtp_acceptance: Annotated[float | None, typer.Option("--mtp-acceptance", help="New MTP acceptance.")] = None,
    tpot_ms: Annotated[float | None, typer.Option("--tpot-ms", help="New TPOT SLO, ms.")] = None,
    ttft_ms: Annotated[float | None, typer.Option("--ttft-ms", help="New TTFT SLO, ms.")] = None,
    max_cards: Annotated[
        float | None,
        typer.Option(
            "--max-cards",
            help="New card budget (default: the base's; a plan file's own card count).",
        ),
    ] = None,
    phase: Annotated[str | None, typer.Option(help="New phases to plan: both, decode or prefill.")] = None,
    decode_devices: Annotated[
        int | None, typer.Option("--decode-devices", help="Pin the new decode instance size.")
    ] = None,
    prefill_devices: Annotated[
        int | None, typer.Option("--prefill-devices", help="Pin the new prefill instance size.")
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Serve this many requests/s with the fewest cards."),
    ] = None,
    mtp: Annotated[str | None, typer.Option(help="MTP depths to consider, e.g. '0,1'.")] = None,
    draft_model: Annotated[
        str | None,
        typer.Option("--draft-model", metavar="DRAFT", help="New EAGLE-3 draft head beside the model ('none': none)."),
    ] = None,
    skew_sigma: Annotated[
        float | None, typer.Option("--skew-sigma", min=0.0, max=5.0, help="New expert skew sigma.")
    ] = None,
    loads: Annotated[Path | None, typer.Option("--loads", help="New expert loads file.")] = None,
    max_redundant_experts: Annotated[
        int | None,
        typer.Option("--max-redundant-experts", help="New cap on redundant expert copies per instance."),
    ] = None,
    colocated: Annotated[
        bool | None,
        typer.Option(
            "--colocated/--no-colocated",
            help="Whether the new plan may use colocated instances (default: as the base).",
        ),
    ] = None,
    decode_attention_kv_split: Annotated[
        bool | None,
        typer.Option(
            "--decode-attention-kv-split/--no-decode-attention-kv-split",
            help="Whether the decode attention kernel splits one sequence's KV over cores (default: as the base; "
            "moeplan plan --help).",
        ),
    ] = None,
    tpot_at_percentile: Annotated[
        bool | None,
        typer.Option(
            "--tpot-at-percentile/--tpot-at-mean",
            help="Hold --tpot-ms to the TPOT of the p90 request at its own MTP acceptance, or to the mean "
            "(default: as the base).",
        ),
    ] = None,
    max_itl_ms: Annotated[
        float | None,
        typer.Option("--max-itl-ms", help="New limit on the longest gap between two tokens, ms (0: none)."),
    ] = None,
    hbm_utilization: Annotated[
        float | None,
        typer.Option(
            "--hbm-utilization",
            metavar="FRACTION",
            help="New fraction of each device's HBM a plan may fill (default: the base's; 0.9).",
        ),
    ] = None,
    prefill_hardware: PrefillHardwareOpt = None,
    decode_hardware: DecodeHardwareOpt = None,
    kv_transfer_gbps: KvTransferGbpsOpt = None,
    max_prefill_cards: MaxPrefillCardsOpt = None,
    max_decode_cards: MaxDecodeCardsOpt = None,
    max_cost: MaxCostOpt = None,
    prefix_hit_rate: PrefixHitRateOpt = None,
    engine: SearchEngineOpt = None,
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write base, new, rescored, changes, deltas and binding as JSON to FILE ('-': stdout).",
        ),
    ] = None,
    time_limit: Annotated[
        float,
        typer.Option(
            "--time-limit",
            min=0.1,
            max=86400.0,
            help="CP-SAT's time limit per solve, in seconds (the cost tables are not limited by it).",
        ),
    ] = DEFAULT_TIME_LIMIT_S,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="CP-SAT worker threads.")] = 2,
    simulate: Annotated[
        bool,
        typer.Option(
            "--simulate",
            help="Also simulate each column's plan at the new --rate (else at the rate it claims): simulated "
            "percentiles of TTFT and TPOT and whether they meet the SLOs at the workload's SLO percentile.",
        ),
    ] = False,
    acceptance_spread: AcceptanceSpreadOpt = None,
) -> None:
    """Re-plan under changed assumptions and compare with the base, side by side.

    The flags are the NEW assumptions; anything not given stays as in the base. The base is
    BASE_PLAN (its model, machine, workload, SLOs; its own card count as the budget), or without
    it `moeplan plan`'s defaults changed by --base NAME=VALUE ('none' clears a value).

    \b
    Examples:
      moeplan whatif plans/a2-d70.yaml --tpot-ms 30    # the report's A2 decode at 30 ms
      moeplan whatif --tpot-ms 50                      # plan defaults, TPOT 100 -> 50 ms
      moeplan whatif --base hardware=cm384 --base max-cards=384 --input-tokens 8192

    Columns: the base plan; the best plan under the new assumptions; and the base plan kept as it
    is but scored under the new assumptions (does the current deployment still meet them?). Every
    column says what binds it: HBM, TPOT, TTFT, the card budget or the search space.
    """

    def body() -> None:
        check_spread_needs_simulate(acceptance_spread, simulate)
        changes = {
            "model": model,
            "hardware": hardware,
            "quantization": quantization,
            "input-tokens": input_tokens,
            "output-tokens": output_tokens,
            "mtp-acceptance": mtp_acceptance,
            "tpot-ms": tpot_ms,
            "ttft-ms": ttft_ms,
            "max-cards": max_cards,
            "phase": phase,
            "decode-devices": decode_devices,
            "prefill-devices": prefill_devices,
            "rate": rate,
            "mtp": mtp,
            "draft-model": draft_model,
            "skew-sigma": skew_sigma,
            "loads": loads,
            "max-redundant-experts": max_redundant_experts,
            "colocated": colocated,
            "decode-attention-kv-split": decode_attention_kv_split,
            "tpot-at-percentile": tpot_at_percentile,
            "hbm-utilization": hbm_utilization,
            "max-itl-ms": max_itl_ms,
            "prefill-hardware": prefill_hardware,
            "decode-hardware": decode_hardware,
            "kv-transfer-gbps": kv_transfer_gbps,
            "max-prefill-cards": max_prefill_cards,
            "max-decode-cards": max_decode_cards,
            "max-cost": max_cost,
            "prefix-hit-rate": prefix_hit_rate,
            "engine": engine,
        }
        changes = {k: v for k, v in changes.items() if v is not None}
        if str(changes.get("draft-model", "")).lower() == "none":  # --draft-model none: drop the base's head
            changes["draft-model"] = None
        plan = base_dir = None
        base_ref, pairs = base_plan, list(base or [])
        if base_ref is None and len(pairs) == 1 and "=" not in pairs[0] and Path(pairs[0]).is_file():
            # `--base plan.json`: a plan file (or a `plan --json` export) as the base, as BASE_PLAN
            base_ref, pairs = pairs[0], []
        for pair in pairs:
            name = pair.strip().lstrip("-").replace("_", "-")
            if "=" not in pair and name in ASSUMPTIONS:
                # `--base hardware cm384`: the value became BASE_PLAN
                value = f" {base_ref}" if base_ref is not None else ""
                raise BadInputError(
                    f"--base {pair}{value}: write --base {name}={base_ref or 'VALUE'} (NAME=VALUE, no space)."
                )
        if base_ref is not None:
            if pairs:
                raise BadInputError(
                    "--base sets the base when there is no BASE_PLAN; with a plan file the base "
                    "is the file. Drop --base, or drop BASE_PLAN."
                )
            plan, _ = load_plan(base_ref, rank)
            base_dir = plan_base_dir(base_ref)
            base_a = plan_assumptions(plan, base_dir)
            source = base_ref
        else:
            base_a = {k: default for k, (_, default) in ASSUMPTIONS.items()}
            overrides = parse_base_pairs(pairs)
            base_a.update(overrides)
            source = "moeplan plan defaults" + (
                " with " + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in overrides.items())
                if overrides
                else ""
            )
        check_output("--json", json_out)  # (before the searches: a path it cannot write fails now)
        new_a = {**base_a, **changes}
        try:
            base_request = request_from(base_a, time_limit, workers)
        except BadInputError as exc:
            if plan is not None:
                raise
            raise BadInputError(f"the base assumptions: {as_base_flags(str(exc))}") from None
        new_request = request_from(new_a, time_limit, workers)
        try:
            result = run_whatif(base_request, new_request, plan, base_dir, source, _search_with_progress)
        except InfeasibleError as exc:
            if isinstance(exc, BaseInfeasibleError):
                constraint, sep, rest = as_base_flags(str(exc)).partition(":")
                exc = InfeasibleError(f"{constraint} (of the base assumptions){sep}{rest}")
            if json_out is not None:  # as `plan --json`: the status, the reason and the nearest point
                write_text_atomic(json_out, infeasible_document(str(exc)), "--json")
            raise exc from None
        checks = simulate_columns(result, new_request, acceptance_spread) if simulate else []
        if json_out is not None:
            text = whatif_document(result)
            if checks:
                doc = json.loads(text)
                doc["simulated"] = {label: c.as_dict() for label, c in checks}
                text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
            write_text_atomic(json_out, text, "--json")
            if str(json_out) == "-":
                return
        for renderable in whatif_renderables(result):
            console.print(renderable)
        if checks:
            from planner.report.simulate_report import checks_caption, checks_table, miss_lines

            labels = [k for k, _ in checks]
            console.print(checks_table([c for _, c in checks], "Checked by simulation", labels))
            console.print(checks_caption([c for _, c in checks]))
            for line in miss_lines([c for _, c in checks], labels):
                console.print(line, highlight=False)

    run_guarded(body)
