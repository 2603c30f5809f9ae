"""Calibrate a machine from the user's own measurements (`moeplan calibrate`).

The measurements are a CSV with the columns `plan,metric,value`: a plan file (a path relative to
the CSV, or a shipped plan's name), a dotted figure of its `predicted` block
(`decode.tpot_ms`, `decode.tokens_per_s_per_card`, `prefill.tokens_per_s_per_card`,
`prefill.ttft_ms`, `decode.breakdown_ms.<module>`, `prefill.breakdown_ms.<module>`, ...) and the
measured value. Every row is checked before anything is fitted; each bad row gets its own
message naming the row and the fix, and nothing is written.

The fit (`planner.costmodel.fitting`) covers the machine's efficiency, fixed-cost and overlap
factors, or the ones the user names. Factors no row is sensitive to are left at their values
(and reported): fitting them would only wander. The written hardware file is the input machine
with each fitted factor's value, `source: calibrated from <file>, N rows`, `fitted_on: <file>` and
a range (the fit's two-standard-error interval).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from planner.costmodel.evaluate import PlanSpecs, evaluate_plan, load_plan_specs
from planner.costmodel.fitting import (
    SENSITIVE_ELASTICITY,
    FitResult,
    Observation,
    factor_names,
    factor_spec,
    fit_factors,
    sensitivities,
    with_factors,
)
from planner.costmodel.prediction import Prediction
from planner.errors import BadInputError, PlannerError
from planner.specs.catalog import load_plan, plan_base_dir
from planner.specs.hardware import FactorRange, HardwareSpec
from planner.specs.plan import Plan, check_plan

REQUIRED_COLUMNS = ("plan", "metric", "value")


def available_metrics(prediction: Prediction) -> list[str]:
    """Every numeric figure of a prediction, as dotted paths."""
    out: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif isinstance(node, int | float) and not isinstance(node, bool):
            out.append(prefix)

    walk(prediction.model_dump(exclude={"cost_model", "imbalance_model"}), "")
    return out


def _is_timing(metric: str) -> bool:
    """A time or a rate (what a measurement gives), not a count or a byte figure."""
    last = metric.split(".")[-1]
    return ".breakdown_ms." in metric or last.endswith("_ms") or "_per_s" in last


@dataclass(frozen=True)
class Measurements:
    """The checked rows of a measurements file."""

    path: Path
    observations: list[Observation]


def _load_row_plan(ref: str, csv_dir: Path) -> tuple[Plan, Path | None]:
    beside = csv_dir / ref
    if beside.is_file():
        plan, _ = load_plan(str(beside))
        return plan, beside.resolve().parent
    plan, _ = load_plan(ref)
    return plan, plan_base_dir(ref)


def _specs_on(plan: Plan, base: Path | None, hw: HardwareSpec) -> PlanSpecs:
    """The plan's model and quantization on `hw` (the machine being fitted); BadInputError when the
    plan runs on another device or does not fit `hw`'s rules."""
    specs = load_plan_specs(plan, base)
    if specs.hw.device_name != hw.device_name:
        raise BadInputError(
            f"the plan runs on '{specs.hw.name}' ({specs.hw.device_name}), not on {hw.device_name}; "
            "calibrate one machine at a time"
        )
    check_plan(plan, specs.model, hw)
    return PlanSpecs(specs.model, hw, specs.quant)


def read_measurements(path: Path, hw: HardwareSpec) -> Measurements:
    """Read and check every row; all problems are raised together, one line per bad row."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # spreadsheets often save a byte-order mark
    except OSError as exc:
        raise BadInputError(f"measurements file '{path}' cannot be read ({exc.strerror}); check the path.") from None
    except UnicodeDecodeError:
        raise BadInputError(
            f"measurements file '{path}' is not UTF-8 text; save it as a CSV (UTF-8) with the header "
            "'plan,metric,value'."
        ) from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise BadInputError(
            f"{path}: missing column(s) {', '.join(repr(m) for m in missing)}; the first line must be the header "
            "'plan,metric,value'."
        )
    csv_dir = path.resolve().parent
    errors: list[str] = []
    observations: list[Observation] = []
    cache: dict[str, tuple[Plan, PlanSpecs, Path | None, Prediction] | str] = {}
    n = 0
    for line_no, raw in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not any(row.values()):
            continue
        n += 1
        where = f"{path.name} line {line_no}"
        extra = [cell for cell in raw.get(None) or [] if str(cell).strip()]  # cells past the header's columns
        if extra:
            errors.append(
                f"{where}: {len(extra)} cell(s) more than the header's columns ({', '.join(header)}); quote a value "
                "holding a comma or drop the extra cells."
            )
            continue
        ref, metric, value_text = row.get("plan", ""), row.get("metric", ""), row.get("value", "")
        try:
            value = float(value_text)
        except ValueError:
            errors.append(f"{where}: value '{value_text}' is not a number; give the measured figure (e.g. 99.6).")
            continue
        if not math.isfinite(value) or value <= 0:
            errors.append(f"{where}: value {value_text} must be a positive finite number (times in ms, rates > 0).")
            continue
        if not ref:
            errors.append(f"{where}: the plan column is empty; give a plan file path relative to the CSV.")
            continue
        if ref not in cache:
            try:
                plan, base = _load_row_plan(ref, csv_dir)
                specs = _specs_on(plan, base, hw)
                cache[ref] = (plan, specs, base, evaluate_plan(plan, base, specs=specs))
            except PlannerError as exc:
                cache[ref] = str(exc).rstrip(".")
        entry = cache[ref]
        if isinstance(entry, str):
            errors.append(
                f"{where}: plan '{ref}' does not load: {entry}. Fix the path (relative to the CSV) or the file."
            )
            continue
        plan, specs, base, prediction = entry
        if metric not in available_metrics(prediction):  # a figure: not a section, a flag or a name
            known = ", ".join(m for m in available_metrics(prediction) if _is_timing(m))
            errors.append(f"{where}: plan '{ref}' has no metric '{metric}'; use one of: {known}.")
            continue
        observations.append(Observation(f"{ref} {metric}", plan, specs, metric, value, 1.0, None, base))
    if errors:
        raise BadInputError("\n".join(errors))
    if not n:
        raise BadInputError(f"{path}: no measurement rows under the header; add rows 'plan,metric,value'.")
    return Measurements(path, observations)


# a benchmark run measures the plan's own workload when its lengths and concurrency are the plan's
BENCH_MATCH = 0.05


def acceptance_from_tokens_per_step(tokens_per_step: float, mtp_tokens: int) -> float:
    """The draft acceptance a with 1 + a + ... + a^k = tokens per step (the cost model's
    `emitted_tokens_per_step`), solved by bisection on [0, 1]."""
    from planner.costmodel.decode import emitted_tokens_per_step

    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if emitted_tokens_per_step(mtp_tokens, mid) < tokens_per_step:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _bench_rows(plan: Plan, result: Any, where: str) -> tuple[Plan, list[tuple[str, float]], list[str]]:
    """The plan as measured (a measured MTP acceptance replaces its own), its (metric, value) rows,
    and the reasons the run does not measure the plan's workload."""
    from planner.engines.plan_view import decode_slots, plan_view

    w = plan.workload
    problems = []
    for name, measured, planned in (
        ("prompt length", result.mean_input_tokens, w.input_tokens),
        ("completion length", result.mean_output_tokens, w.output_tokens),
        ("concurrency", result.max_concurrency, decode_slots(plan)),
    ):
        if measured is not None and abs(measured / planned - 1) > BENCH_MATCH:
            problems.append(
                f"{where}: the run's {name} is {measured:g}, the plan's {planned:g}; run the plan's bench/ command "
                "(its workload) or give the plan that was measured"
            )
    view = plan_view(plan)
    mtp = view.colocated.mtp_tokens if view.colocated is not None else (view.decode.mtp_tokens if view.decode else 0)
    steps = result.tokens_per_step
    if steps is not None and (steps < 1 or steps > 1 + mtp + 1e-6):
        problems.append(
            f"{where}: the run's accepted length is {steps:g} tokens per step, where a step of the plan's {mtp} "
            f"draft token(s) emits 1 to {1 + mtp}; give the plan that was measured (its MTP depth) or the run of "
            "this plan"
        )
    elif mtp and steps is not None and steps > 1:
        a = acceptance_from_tokens_per_step(steps, mtp)
        plan = plan.model_copy(update={"workload": w.model_copy(update={"mtp_acceptance": round(a, 4)})})
    # TPOT: the decode steps at the plan's concurrency. TTFT only from a run at a request rate: in a
    # closed loop every slot's prompt arrives at once and the TTFT is mostly queueing, which the
    # static TTFT (a prefill batch at capacity) does not model
    timed = result.request_rate_per_s is not None
    rows = []
    if view.colocated is not None:
        rows = [("colocated.tpot_ms", result.mean_tpot_ms)]
        rows += [("colocated.ttft_ms", result.mean_ttft_ms)] if timed else []
    else:
        if view.decode is not None:
            rows.append(("decode.tpot_ms", result.mean_tpot_ms))
        if view.prefill is not None and timed:
            rows.append(("prefill.ttft_ms", result.mean_ttft_ms))
    if not rows:
        problems.append(
            f"{where}: a prefill-only plan's TTFT needs a run at a request rate (--request-rate), not a closed loop"
        )
    return plan, rows, problems


def read_bench(pairs: list[str], hw: HardwareSpec) -> Measurements:
    """Measurements from benchmark result files, each paired with the plan it measured
    (`PLAN=RESULT`: a plan file or `plan --json` export, and a client's result file). Every pair is
    checked before anything is fitted; all problems are raised together."""
    from planner.specs.bench_results import read_bench_result

    errors: list[str] = []
    observations: list[Observation] = []
    for pair in pairs:
        if "=" not in pair:
            errors.append(f"--bench {pair!r}: give PLAN=RESULT (a plan file and the result file that measured it).")
            continue
        ref, result_path = (part.strip() for part in pair.split("=", 1))
        where = f"--bench {ref}={result_path}"
        try:
            result = read_bench_result(Path(result_path))
            plan, _ = load_plan(ref)
            base = plan_base_dir(ref)
            specs = _specs_on(plan, base, hw)
        except PlannerError as exc:
            said = str(exc).rstrip(".")
            errors.append(f"{where}: {said}{'' if said.endswith('?') else '.'}")
            continue
        plan, rows, problems = _bench_rows(plan, result, where)
        errors += problems
        if problems:
            continue
        label = f"{Path(ref).name} ({result.client})"
        for metric, value in rows:
            observations.append(Observation(f"{label} {metric}", plan, specs, metric, value, 1.0, None, base))
    if errors:
        raise BadInputError("\n".join(errors))
    name = Path(pairs[0].split("=", 1)[-1]).name if len(pairs) == 1 else f"{len(pairs)} benchmark runs"
    return Measurements(Path(name), observations)


@dataclass
class Calibration:
    """The fit, the factors left alone, and the machine written."""

    fit: FitResult
    insensitive: list[str]
    hw: HardwareSpec
    rows: int
    observations: list[Observation]


def calibrate(
    measurements: Measurements, hw: HardwareSpec, names: list[str] | None = None, new_name: str | None = None
) -> Calibration:
    """Fit the factors (default: all of the machine's) that at least one row is sensitive to."""
    candidates = names or factor_names(hw)
    for n in candidates:
        factor_spec(hw, n)
    obs = measurements.observations
    sens = sensitivities(obs, hw, candidates)
    live = [n for j, n in enumerate(candidates) if float(abs(sens[:, j]).max()) >= SENSITIVE_ELASTICITY]
    insensitive = [n for n in candidates if n not in live]
    fit = fit_factors(obs, hw, live)
    rows = f"{len(obs)} row{'s' if len(obs) != 1 else ''}"
    label = f"calibrated from {measurements.path.name}, {rows}"
    updates: dict[str, dict[str, Any]] = {}
    for n in live:
        lo, hi = fit.intervals[n]
        v = fit.values[n]
        note = f"; {fit.undetermined[n]}" if n in fit.undetermined else ""
        updates[n] = {
            "source": label + note,
            "fitted_on": measurements.path.name,
            "range": FactorRange(
                low=min(lo, v),
                high=max(hi, v),
                derived=f"two standard errors of the fit to {measurements.path.name} ({rows})"
                if n not in fit.undetermined
                else "the fit's bounds: the rows do not determine it",
            ),
        }
    calibrated = with_factors(fit.hw, {}, updates)
    if new_name:
        calibrated = calibrated.model_copy(
            update={"name": new_name, "description": f"{hw.description} ({label})".strip()}
        )
    calibrated = HardwareSpec.model_validate(calibrated.model_dump())
    return Calibration(fit, insensitive, calibrated, len(obs), list(obs))


def hardware_yaml(hw: HardwareSpec, header: str) -> str:
    """The machine as a hardware YAML file that `load_hardware` reads back."""
    body = yaml.safe_dump(hw.model_dump(mode="json", exclude_none=True), sort_keys=False, allow_unicode=True, width=120)
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return comment + body
