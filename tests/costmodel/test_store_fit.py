"""The joint fit of the machine groups and the imbalance parameters (planner/costmodel/store_fit.py),
and `moeplan fidelity`'s labels: the shipped values are the fit's output, every row says what was
fitted on it, and leave-one-out refits every parameter, imbalance included."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from planner.costmodel.fitting import factor_value
from planner.costmodel.imbalance import fitted_parameters
from planner.costmodel.store_fit import (
    OUTCOME_FILE,
    Model,
    fit,
    fit_config,
    fit_environment,
    fit_rows,
    parameters,
    shipped_heldout_errors,
    stored_outcome,
)
from planner.specs.catalog import load_hardware
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def model() -> Model:
    config = fit_config()
    rows = [r for r in fit_rows() if r.figure.role == "fit"]
    return Model(config, rows, parameters(config))


@pytest.fixture(scope="module")
def fidelity_doc() -> dict:
    r = run_cli("fidelity", "--json", "--no-simulated")  # the static rows only (the simulator's are issue 19's)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_the_shipped_values_are_what_the_fitter_produces(model):
    # benchmarks/calibrate_factors.py fits from validation/_fit.yaml's start and writes the result into
    # every hardware file of each group and into planner/costmodel/data/imbalance.yaml: re-run it
    out = fit(model, start=model.configured_start(), diagnostics=False)
    assert out.success, out.message
    imb = fitted_parameters()
    for p in model.params:
        got = out.values[p.name]
        if not p.groups:
            shipped = [imb[p.factor]["value"]]
        else:
            shipped = [
                factor_value(load_hardware(m), p.factor) for g in p.groups for m in fit_config().groups[g].machines
            ]
        for s in shipped:
            assert s == pytest.approx(got, rel=1e-4, abs=1e-9), p.name


def test_the_fit_is_checked_on_the_numpy_and_scipy_it_was_made_with():
    # the check above holds to 1e-4 only on the releases that made the shipped fit: the outcome records
    # them, the test extra pins them (a fit made elsewhere fails here, naming the fix)
    import tomllib
    from pathlib import Path

    stored = stored_outcome()
    assert stored is not None
    fix = "install the test extra's pins, or re-run benchmarks/calibrate_factors.py and move the pins"
    assert stored.environment == fit_environment(), fix
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
    extras = project["project"]["optional-dependencies"]
    for extra in ("test", "dev"):
        pins = {d.split("==")[0]: d.split("==")[1] for d in extras[extra] if "==" in d}
        assert pins == stored.environment, (extra, fix)


def test_the_shipped_outcome_matches_the_rows_catalogs_and_code():
    out = stored_outcome()
    assert out is not None and out.current, "run python benchmarks/calibrate_factors.py"


def test_leave_one_out_refits_the_imbalance_parameters_too():
    out = stored_outcome()
    assert out is not None
    undetermined = json.loads(OUTCOME_FILE.read_text())["undetermined"]
    refitted = 0
    for name in ("imbalance.popularity_sigma", "imbalance.drift_sigma", "imbalance.request_correlation"):
        refits = {round(v[name], 6) for v in out.loo_values}
        if name in undetermined:
            # no row's prediction moves with it at the fit (the full fit says so): nothing to refit it on,
            # and its range comes from the near-optimal refits from other starts instead
            continue
        assert len(refits) > 1, f"{name} was never refitted"
        refitted += 1
    assert refitted >= 2


def test_every_row_says_what_was_fitted_on_it(fidelity_doc):
    rows = fidelity_doc["rows"]
    assert len(rows) >= 30
    for r in rows:
        assert r["out_of_sample"] == (not r["fitted_to"]), r["name"]
        assert math.isfinite(r["loo_error"]) and math.isfinite(r["error"])
        if r["role"] == "holdout":
            # nothing is fitted on a holdout; a choice made with it in view still takes it out of sample
            assert all(f.startswith("chosen: ") for f in r["fitted_to"]), r["name"]
            assert r["loo_error"] == pytest.approx(r["error"], abs=1e-6)
    by = {r["name"]: r for r in rows}
    # CM-D pins the expert skew (one routed expert per die): it is fitted on it, not out-of-sample
    assert "imbalance.popularity_sigma" in by["CM-D"]["fitted_to"]
    assert not by["CM-D"]["out_of_sample"]
    # the default-placement prefill rows pin the request correlation
    assert any("imbalance.request_correlation" in by[n]["fitted_to"] for n in ("SGLang-H100-P", "CM-P EPLB"))
    # the 950PR's row: a holdout, but the machine's factors were switched with its miss in view
    v4 = by["V4-Flash-950PR TPOT"]
    assert v4["role"] == "holdout" and not v4["out_of_sample"]
    assert [f for f in v4["fitted_to"] if f.startswith("chosen: ")] == v4["fitted_to"] != []


def test_rows_of_one_deployment_are_left_out_together(fidelity_doc):
    by = {r["name"]: r for r in fidelity_doc["rows"]}
    # A2-D70 and its TPOT are one decode step: one refit, so the two leave-one-out errors mirror
    d70, tpot = by["A2-D70"], by["A2-D70 TPOT"]
    assert d70["loo_error"] == pytest.approx(1 / (1 + tpot["loo_error"]) - 1, abs=1e-3)


def test_the_bands_are_around_the_prediction(fidelity_doc):
    from planner.costmodel.uncertainty import BAND_Z

    assert abs(BAND_Z - 1.6449) < 1e-4  # the two-sided 90% point of a normal error
    inside = 0
    for r in fidelity_doc["rows"]:
        # every row has a band, the AFD plugin's figures per device and the ratios of two runs included
        assert r["band"] is not None, r["name"]
        lo, hi = r["band"]
        assert lo <= r["predicted"] * (1 + 1e-6) and r["predicted"] <= hi * (1 + 1e-6), r["name"]
        # the band is the factor corners widened by BAND_Z times the group's held-out RMS error
        c_lo, c_hi = r["band_corners"]
        e = BAND_Z * r["band_heldout_rms"]
        assert r["band_heldout_rms"] > 0, r["name"]
        assert lo == pytest.approx(c_lo * (1 - e), rel=1e-3) and hi == pytest.approx(c_hi * (1 + e), rel=1e-3)
        assert r["in_band"] == (lo <= r["published"] <= hi), r["name"]
        inside += r["in_band"]
    # the claim the bands carry (a 90% band), checked held out: each row's band is widened without its own
    # error, so the count is not in-sample
    assert inside >= 0.9 * len(fidelity_doc["rows"])
    cover = fidelity_doc["band_coverage"]
    assert cover["level"] == 0.9 and cover["rows"] == len(fidelity_doc["rows"]) and cover["inside"] == inside
    # wider bands hold more: the corners alone, one error, the shipped 1.645, then 1.96
    at = cover["inside_at_z"]
    assert at["0"] <= at["1"] <= inside <= at["1.96"]


def test_a_ratio_is_banded_with_both_runs_on_the_same_corner(fidelity_doc):
    # a ratio of two runs on one machine shares their factor errors: at either corner (every factor at its
    # slow or its fast end) both runs move together, and the ratio there lies inside the row's band, which is
    # narrower than the two runs' own bands divided crosswise (independent errors)
    from planner.costmodel.evaluate import evaluate_plan
    from planner.costmodel.fidelity import _plan_and_specs
    from planner.costmodel.fitting import metric_value
    from planner.costmodel.reference import condition_imbalance, ratio_reference
    from planner.costmodel.uncertainty import corner, imbalance_corner
    from planner.specs.catalog import plan_base_dir
    from planner.specs.validation import all_figures

    by = {r["name"]: r for r in fidelity_doc["rows"]}
    figures = {f.id: f for f, why in all_figures() if not why}
    ratios = [r for r in fidelity_doc["rows"] if r["ratio_to"]]
    assert len(ratios) >= 2
    for r in ratios:
        fig = figures[r["name"]]
        base = ratio_reference(fig)
        lo, hi = r["band"]
        for slow in (True, False):
            values = []
            for f in (fig, base):
                plan, specs = _plan_and_specs(f.plan)
                imb = imbalance_corner(condition_imbalance(f), slow)
                hw_specs = type(specs)(specs.model, corner(specs.hw, slow), specs.quant)
                values.append(metric_value(evaluate_plan(plan, plan_base_dir(f.plan), imb, specs=hw_specs), f.metric))
            ratio = values[0] / values[1]
            assert lo <= ratio * (1 + 1e-6) and ratio <= hi * (1 + 1e-6), (r["name"], slow, ratio)
        # the AFD plugin's "X over EP64" rows have both runs as rows of their own (the context-parallel
        # ratios' 32K base is not a row)
        own = by.get(fig.id.split(" over ")[0]) if " over " in fig.id else None
        ref = by.get(base.id)
        if own is not None and ref is not None:
            crosswise = own["band"][1] / ref["band"][0] - own["band"][0] / ref["band"][1]
            assert hi - lo < crosswise, r["name"]


def test_a_machine_with_a_known_miss_says_so_in_its_plans():
    from planner.specs.validation import known_misses

    misses = known_misses()
    assert misses, "no row is marked known_miss"
    machine, phase = misses[0][0], misses[0][1]
    plan = next(
        f.plan
        for f, why in __import__("planner.specs.validation", fromlist=["all_figures"]).all_figures()
        if not why and f.row.hardware == machine and f.metric.startswith(phase) and f.compare == "static"
    )
    r = run_cli("evaluate", plan, "--json", "-")
    assert r.exit_code == 0, r.output
    notes = json.loads(r.output)["predicted"]["notes"]
    assert any(n.startswith(f"known miss: on {machine}") and phase in n for n in notes)


def test_a_known_miss_note_gives_each_row_its_own_reason():
    """Rows of one machine and phase that miss for different reasons each carry the gist of theirs and
    their models (the note once followed every row's id with the first row's reason); the reasons in
    full are `moeplan fidelity --misses`'s."""
    from planner.costmodel.evaluate import KNOWN_MISS_IDS_SHOWN, known_miss_notes
    from planner.specs.validation import known_misses

    by_place: dict[tuple[str, str], dict[str, list]] = {}
    for miss in known_misses():
        by_place.setdefault((miss.machine, miss.phase), {}).setdefault(miss.why, []).append(miss)
    (machine, phase), reasons = max(by_place.items(), key=lambda kv: len(kv[1]))
    assert len(reasons) >= 2, "no machine and phase has two rows missing for different reasons"
    (note,) = known_miss_notes(machine, (phase,))
    total = sum(len(group) for group in reasons.values())
    assert f"misses {total} measured {phase} figures" in note
    for group in reasons.values():
        fids = [m.figure_id for m in group]
        # a long list is named by its first few rows and a count
        shown = fids if len(fids) <= KNOWN_MISS_IDS_SHOWN else fids[:KNOWN_MISS_IDS_SHOWN]
        more = f" and {len(fids) - len(shown)} more" if len(fids) > len(shown) else ""
        models = ", ".join(sorted({m.model for m in group}))
        assert f"{', '.join(shown)}{more} ({models}: {group[0].gist})" in note
        assert group[0].gist and group[0].why.startswith(group[0].gist)
    assert "moeplan fidelity --misses" in note


def test_a_known_miss_note_says_whether_a_missed_row_is_of_the_plans_model():
    from planner.costmodel.evaluate import known_miss_notes
    from planner.specs.validation import known_misses

    miss = known_misses()[0]
    (own,) = known_miss_notes(miss.machine, (miss.phase,), miss.model)
    same = sum(1 for m in known_misses() if (m.machine, m.phase, m.model) == (miss.machine, miss.phase, miss.model))
    assert f"{same} of them {'is' if same == 1 else 'are'} of this plan's model ({miss.model})" in own
    (other,) = known_miss_notes(miss.machine, (miss.phase,), "no-such-model")
    assert "none is of this plan's model (no-such-model)" in other


def test_fidelity_misses_prints_every_known_miss_with_its_reason_in_full():
    from planner.specs.validation import known_misses

    r = run_cli("fidelity", "--misses")
    assert r.exit_code == 0, r.output
    for miss in known_misses():
        assert f"  - {miss.figure_id} ({miss.model})" in r.output
        assert f"why: {miss.why}" in r.output
    machine = known_misses()[0].machine
    only = run_cli("fidelity", "--misses", "--hardware", machine)
    assert only.exit_code == 0
    assert all(line.startswith(machine + ",") for line in only.output.splitlines() if not line.startswith(" "))
    missed = {m.machine for m in known_misses()}
    clean = next(m for m in ("h200", "h800", "a2", "cm384", "h100") if m not in missed)
    assert f"no measured figure on {clean}" in run_cli("fidelity", "--misses", "--hardware", clean).output
    bad = run_cli("fidelity", "--misses", "--hardware", "A3")
    assert bad.exit_code == 2 and "did you mean 'a3'" in bad.output
    assert run_cli("fidelity", "--hardware", "a3").exit_code == 2  # --hardware without --misses


def test_the_fit_is_bounded_by_its_sources(model):
    # the CloudMatrix384 paper's INT8 GEMM range holds the cm384 matmul wherever the config fits it
    cfg = fit_config()
    for p in model.params:
        lo, hi = p.low, p.high
        v = (
            fitted_parameters()[p.factor]["value"]
            if not p.groups
            else factor_value(load_hardware(cfg.groups[p.groups[0]].machines[0]), p.factor)
        )
        assert lo - 1e-12 <= v <= hi + 1e-12, p.name
    assert np.isfinite([p.low for p in model.params]).all()


def test_a_group_fitted_after_another_takes_its_factors_and_its_rows_cannot_move_them(model):
    # validation/_fit.yaml: 910c-vllm-ascend (a3-superpod) is fitted after 910c-open (a3). Scale its rows'
    # measured values by 1.5: its own factors move, no factor of any other group or of the imbalance model does
    import dataclasses

    from planner.costmodel.store_fit import Row

    config = model.config
    late = config.late_groups()
    assert late == {"910c-vllm-ascend", "950pr-open", "910c-cann", "950dt-cann"}
    assert any(config.group_of(r.machine) in late for r in model.rows)

    def scaled(r: Row) -> Row:
        if config.group_of(r.machine) not in late:
            return r
        fig = dataclasses.replace(r.figure, figure=r.figure.figure.model_copy(update={"value": r.measured * 1.5}))
        return Row(fig, r.machine, r.base)

    moved = Model(config, [scaled(r) for r in model.rows], model.params)
    a = fit(model, start=model.configured_start(), diagnostics=False)
    b = fit(moved, start=model.configured_start(), diagnostics=False)
    own = [p.name for p in model.params if p.groups and set(p.groups) <= late]
    assert own and any(abs(a.values[n] - b.values[n]) > 1e-3 * abs(a.values[n]) for n in own)
    for p in model.params:
        if p.name not in own:
            assert b.values[p.name] == a.values[p.name], p.name
    # the machine of the late group is costed with the early group's values for the factors it takes
    x = np.array([a.values[p.name] for p in model.params])
    superpod = model.machine("a3-superpod", x)
    assert factor_value(superpod, "efficiency.attention_compute") == pytest.approx(
        a.values["910c-open:efficiency.attention_compute"]
    )
    assert factor_value(superpod, "efficiency.hbm_bandwidth") == pytest.approx(
        a.values["910c-vllm-ascend:efficiency.hbm_bandwidth"]
    )
    # and the shipped file holds the taken value
    assert factor_value(load_hardware("a3-superpod"), "efficiency.attention_compute") == pytest.approx(
        factor_value(load_hardware("a3"), "efficiency.attention_compute")
    )
    # a group that fits nothing (950pr-open: the Atlas 350) takes every factor of the group it follows,
    # those that group shares with another (validation/_fit.yaml `shared:`) included
    for factor in ("efficiency.matmul", "efficiency.attention_compute", "efficiency.hbm_bandwidth"):
        (name,) = [p.name for p in model.params if "910c-open" in p.groups and p.factor == factor]
        assert factor_value(model.machine("atlas350", x), factor) == pytest.approx(a.values[name])
        assert factor_value(load_hardware("atlas350"), factor) == pytest.approx(
            factor_value(load_hardware("a3"), factor)
        )
    # CANN's recipes without SuperKernel (910c-cann: a3-cann; 950dt-cann: atlas950) fit their weight reads and
    # GEMMs and take Huawei's stack's links (910c-huawei: cm384), in the fit and in the shipped files
    for machine, group in (("a3-cann", "910c-cann"), ("atlas950", "950dt-cann")):
        hw = model.machine(machine, x)
        assert factor_value(hw, "efficiency.link_bandwidth") == pytest.approx(
            a.values["910c-huawei:efficiency.link_bandwidth"]
        )
        assert factor_value(hw, "efficiency.hbm_bandwidth") == pytest.approx(
            a.values[f"{group}:efficiency.hbm_bandwidth"]
        )
        assert factor_value(load_hardware(machine), "efficiency.link_bandwidth") == pytest.approx(
            factor_value(load_hardware("cm384"), "efficiency.link_bandwidth")
        )


def test_late_groups_are_fitted_independently_in_the_fit_and_in_leave_one_out(model):
    # 910c-cann (a3-cann) and 950dt-cann (atlas950) are both fitted after 910c-huawei and share no row: moving
    # the 950DT rows (or leaving one of its launches out) leaves the A3 group's values exactly where they were
    import dataclasses

    from planner.costmodel.store_fit import Row, _best_refit

    config = model.config
    pair = {"910c-cann", "950dt-cann"}
    rows = [r for r in model.rows if config.group_of(r.machine) in pair]
    assert {config.group_of(r.machine) for r in rows} == pair
    own = {g: [p.name for p in model.params if g in p.groups] for g in pair}

    def scaled(r: Row) -> Row:
        if config.group_of(r.machine) != "950dt-cann":
            return r
        fig = dataclasses.replace(r.figure, figure=r.figure.figure.model_copy(update={"value": r.measured * 1.3}))
        return Row(fig, r.machine, r.base)

    alone = Model(config, rows, model.params)
    moved = Model(config, [scaled(r) for r in rows], model.params)
    a = fit(alone, start=alone.configured_start(), diagnostics=False)
    b = fit(moved, start=alone.configured_start(), diagnostics=False)
    assert any(abs(a.values[n] - b.values[n]) > 1e-3 * abs(a.values[n]) for n in own["950dt-cann"])
    assert all(a.values[n] == b.values[n] for n in own["910c-cann"])

    x_full = np.array([a.values[p.name] for p in model.params])
    live = own["910c-cann"] + own["950dt-cann"]
    names = [p.name for p in model.params]
    a3 = [names.index(n) for n in own["910c-cann"]]
    without = [r for r in rows if r.deployment != "cann-950dt-v4pro"]
    assert len(without) < len(rows)
    every = _best_refit(alone, rows, x_full, live, seed=7)
    left_out = _best_refit(alone, without, x_full, live, seed=7)
    assert np.array_equal(every[a3], left_out[a3])


@pytest.mark.parametrize(
    ("after", "needle"),
    [("nowhere", "'nowhere', which is not a group here"), ("b", "'b', which is itself fitted after another")],
)
def test_after_must_name_a_first_stage_group(after, needle):
    from pydantic import ValidationError

    from planner.costmodel.store_fit import FitConfig

    groups = {
        "a": {"machines": ["a2"], "factors": {}},
        "b": {"machines": ["a3"], "factors": {}, "after": "a"},
        "c": {"machines": ["cm384"], "factors": {}, "after": after},
    }
    with pytest.raises(ValidationError) as err:
        FitConfig.model_validate({"groups": groups, "imbalance": {}})
    assert needle in str(err.value)


def test_a_row_of_a_late_group_says_it_fitted_only_its_own_groups_factors(fidelity_doc):
    rows = {r["name"]: r for r in fidelity_doc["rows"]}
    ep64 = rows["AFD-plugin EP64 16K"]
    assert ep64["role"] == "fit"
    assert ep64["fitted_to"], ep64
    assert all(k.startswith("910c-vllm-ascend:") for k in ep64["fitted_to"]), ep64["fitted_to"]
    # it is sensitive to the decode KV-read factor it takes from 910c-open (its sparse attention's reads),
    # which it did not fit
    assert "910c-open:efficiency.decode_kv_read_bandwidth" in ep64["sensitivity"]


def test_restarts_fit_from_the_start_and_from_seeded_perturbations_of_it(model):
    from planner.costmodel.store_fit import restarts, weighted_sse

    start = model.configured_start()
    tried = restarts(model, start, 1, seed=0)
    assert len(tried) == 2
    shipped = fit(model, start=start, diagnostics=False)
    x = np.array([shipped.values[p.name] for p in model.params])
    assert tried[0][0] == pytest.approx(weighted_sse(model, x), rel=1e-12)
    for sse, values in tried:
        assert math.isfinite(sse) and sse >= 0
        for p, v in zip(model.params, values, strict=True):
            assert p.low <= v <= p.high, p.name
    # seeded: the same restart twice gives the same fit
    again = restarts(model, start, 1, seed=0)
    assert again[1][0] == tried[1][0]
    # without the start's own fit (the caller has it): the same perturbed fits
    perturbed = restarts(model, start, 1, seed=0, include_start=False)
    assert len(perturbed) == 1 and perturbed[0][0] == tried[1][0]
    # the objective is the weighted sum of squared relative errors
    measured = np.array([r.measured for r in model.rows])
    weights = np.array([r.weight for r in model.rows])
    assert weighted_sse(model, x) == pytest.approx(
        float(np.sum(weights * (model.predict_all(x) / measured - 1) ** 2)), rel=1e-12
    )


def test_holdout_errors_are_the_fidelity_tables_errors(fidelity_doc):
    # a holdout row's error at the full fit, stored for the bands (store_fit.heldout_errors), is the error
    # `moeplan fidelity` prints for it (the fit times a prefill figure from the forward alone, fidelity from
    # the whole evaluation: they agree to 0.1%)
    rows = {row["name"]: row for row in fidelity_doc["rows"]}
    errors = shipped_heldout_errors()
    holdouts = [k for k, e in errors.items() if e["kind"] == "holdout"]
    assert len(holdouts) >= 10
    for k in holdouts:
        assert errors[k]["error"] == pytest.approx(rows[k]["error"], abs=1e-3), k
        assert errors[k]["error"] == pytest.approx(rows[k]["loo_error"], abs=1e-3), k


def test_fidelity_coverage_counts_the_bands_by_group(fidelity_doc):
    r = run_cli("fidelity", "--coverage")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split()[:4] == ["group", "rows", "held-out", "RMS"] and "x1.645" in lines[0]
    # the store's line agrees with the JSON's band_coverage block: at x0, x1, x1.645 and x1.96
    cover = fidelity_doc["band_coverage"]
    n = cover["rows"]
    every = next(line for line in lines if line.startswith("every group")).split()
    at = cover["inside_at_z"]
    counts = [at["0"], at["1"], cover["inside"], at["1.96"]]
    assert every[2] == str(n) and every[-4:] == [f"{c}/{n}" for c in counts]
    # the group lines add up to the store's, and every row outside its band is named
    end = next(i for i, line in enumerate(lines) if line.startswith("every group"))
    groups = [line.split() for line in lines[1:end]]
    assert sum(int(g[1]) for g in groups) == n
    outside = [row["name"] for row in fidelity_doc["rows"] if not row["in_band"]]
    assert len(outside) == n - cover["inside"]
    for name in outside:
        assert f"outside its band: {name} (" in r.output
    bad = run_cli("fidelity", "--coverage", "--json")
    assert bad.exit_code == 2 and "--coverage" in bad.output
