"""The held-out error that widens every band (planner/costmodel/store_fit.py `heldout_errors`, `group_rms`,
`heldout_error`): it is measured on every figure no fit saw (the fit rows' leave-one-out predictions and
the holdout rows'), known misses are named rather than spread, and in `moeplan fidelity` a row's own error
does not widen its own band."""

from __future__ import annotations

import math

import pytest

from planner.costmodel import store_fit
from planner.costmodel.fidelity import _band
from planner.costmodel.store_fit import (
    HELDOUT_MIN_FIGURES,
    fit_config,
    fit_rows,
    group_rms,
    heldout_error,
    shipped_heldout_errors,
)
from planner.specs.validation import usable_figures


def _e(group: str, error: float, known_miss: bool = False) -> dict:
    return {"group": group, "error": error, "kind": "holdout", "known_miss": known_miss}


def test_group_rms_leaves_out_the_named_figure_and_the_known_misses():
    errors = {
        "a": _e("g", 0.03),
        "b": _e("g", -0.04),
        "c": _e("g", 0.12),
        "d": _e("g", 0.50, known_miss=True),
        "e": _e("h", 0.02),
        "f": _e("h", 0.02),
        "x": _e("h", -0.02),
    }
    rms = group_rms(errors)
    assert rms["g"] == pytest.approx(math.sqrt((0.03**2 + 0.04**2 + 0.12**2) / 3))
    assert rms["h"] == pytest.approx(0.02)
    assert rms["*"] == rms["g"]  # the largest group's
    # without 'c', group g is left with two figures: too few to measure a spread, so it has none
    assert HELDOUT_MIN_FIGURES == 3
    without = group_rms(errors, without="c")
    assert "g" not in without
    assert without["*"] == pytest.approx(0.02)
    assert group_rms({}) == {"*": 0.0}


def test_the_shipped_errors_cover_every_usable_static_figure():
    errors = shipped_heldout_errors()
    ids = {r.id for r in fit_rows()}
    assert set(errors) == ids
    config = fit_config()
    for r in fit_rows():
        e = errors[r.id]
        assert e["kind"] == ("leave-one-out" if r.figure.role == "fit" else "holdout"), r.id
        assert e["group"] == (config.group_of(r.machine) or "*"), r.id
        assert e["known_miss"] == bool(r.figure.known_miss), r.id


def test_the_afd_holdouts_widen_the_superpod_bands():
    # the two EP64 fit rows alone measured 3.0%; the AFD holdouts, which test a structure no fit row
    # has, miss by up to 10% and the band says so
    errors = shipped_heldout_errors()
    fit_only = {k: e for k, e in errors.items() if e["kind"] == "leave-one-out"}
    assert heldout_error("a3-superpod") > group_rms(fit_only).get("910c-vllm-ascend", 0.0)


def _figure(name: str):
    return next(f for f in usable_figures(compare="static") if f.id == name)


@pytest.mark.parametrize("name", ["AFD-plugin 64A16F 16K", "CM-D"])
def test_a_rows_own_error_does_not_widen_its_band(name, monkeypatch):
    fig = _figure(name)
    shipped = shipped_heldout_errors()
    band = _band(fig, None)
    assert band is not None
    huge = dict(shipped)
    huge[name] = {**shipped[name], "error": 5.0}
    monkeypatch.setattr(store_fit, "shipped_heldout_errors", lambda: huge)
    assert _band(fig, None) == pytest.approx(band)
    # another figure of the same group does widen it
    group = shipped[name]["group"]
    other = next(k for k, e in shipped.items() if k != name and e["group"] == group and not e["known_miss"])
    huge = dict(shipped)
    huge[other] = {**shipped[other], "error": 0.5}
    monkeypatch.setattr(store_fit, "shipped_heldout_errors", lambda: huge)
    wider = _band(fig, None)
    assert wider is not None
    assert wider[0] < band[0] and wider[1] > band[1]


def test_a_rows_band_is_its_corners_widened_by_the_90_percent_point_of_its_error():
    from planner.costmodel.fidelity import FidelityReport, FidelityRow
    from planner.costmodel.uncertainty import BAND_Z
    from planner.report.fidelity_report import summary_lines

    fig = _figure("CM-D")
    measured = fig.published
    # the corners end 10% below the measured figure; the group's held-out error is 7%
    row = FidelityRow(
        row=fig,
        hardware="cm384",
        plan=fig.plan,
        predicted=0.85 * measured,
        loo_predicted=0.85 * measured,
        fitted_to=[],
        sensitivity={},
        corners=(0.8 * measured, 0.9 * measured),
        heldout_rms=0.07,
    )
    assert row.band_at(0.0) == pytest.approx((0.8 * measured, 0.9 * measured))
    assert row.band == pytest.approx((0.8 * measured * (1 - BAND_Z * 0.07), 0.9 * measured * (1 + BAND_Z * 0.07)))
    # 0.9 x 1.07 = 0.963 falls short of the measured figure; 0.9 x (1 + 1.645 x 0.07) = 1.0036 reaches it
    assert row.in_band_at(0.0) is False and row.in_band_at(1.0) is False
    assert row.in_band is True and row.in_band_at(1.96) is True
    without = FidelityRow(fig, "cm384", fig.plan, measured, measured, [], {})
    assert without.band is None and without.in_band is None
    text = "\n".join(summary_lines(FidelityReport([row, without], {}, [])))
    assert "inside the prediction's 90% band (its corners widened by 1.645 times" in text
    assert "1 of 1 rows (100%); widened by other multiples of that error: 0 at 0, 0 at 1, 1 at 1.96" in text
    assert "(1 without a band: CM-D)" in text
