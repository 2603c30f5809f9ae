"""Fits under changed bounds and shares (planner/costmodel/store_fit.py `with_bounds`, `with_shared`,
`without_share`; benchmarks/fit_whatif.py): equal bounds hold a factor at a value, a share is split
back into each group's own factor or widened to more groups, and unknown names, inverted bounds and
groups that do not fit the factor are refused by name."""

from __future__ import annotations

import pytest

from planner.costmodel.store_fit import (
    Model,
    fit,
    fit_config,
    fit_rows,
    parameters,
    with_bounds,
    with_shared,
    without_share,
)
from tests.conftest import (
    REPO,
    collective_cost_contexts,
    kept_aside_figure,
    kept_aside_row,
    load_script,
    write_kept_aside,
)

SCRIPT = REPO / "benchmarks" / "fit_whatif.py"
HBM = "sglang-weight-reads:efficiency.hbm_bandwidth"
COLLECTIVE = "gh100-nvidia:fixed_costs.collective"


def test_with_bounds_replaces_only_the_named_parameters():
    params = parameters(fit_config())
    out = with_bounds(params, {HBM: (0.7, 0.7)})
    changed = [q for p, q in zip(params, out, strict=True) if (p.low, p.high) != (q.low, q.high)]
    assert [(q.name, q.low, q.high, q.fixed) for q in changed] == [(HBM, 0.7, 0.7, True)]
    assert not any(p.fixed for p in params)


@pytest.mark.parametrize(
    ("bounds", "needle"),
    [
        ({"nope:efficiency.matmul": (0.1, 0.2)}, "no fitted parameter 'nope:efficiency.matmul'"),
        ({HBM: (0.9, 0.2)}, "above"),
    ],
)
def test_with_bounds_refuses_unknown_names_and_inverted_bounds(bounds, needle):
    with pytest.raises(ValueError, match=needle):
        with_bounds(parameters(fit_config()), bounds)


def test_a_parameter_whose_bounds_meet_is_held_while_the_others_are_fitted():
    config = fit_config()
    rows = [r for r in fit_rows() if r.machine == "h200" and r.figure.role == "fit"]
    assert len(rows) >= 2
    model = Model(config, rows, with_bounds(parameters(config), {HBM: (0.7, 0.7)}))
    start = model.configured_start()
    out = fit(model, start=start, free=[HBM, COLLECTIVE], diagnostics=False)
    assert out.values[HBM] == pytest.approx(0.7)
    # the free one moved: at 0.7 of the peak the weight reads are faster than the rows, so the fit
    # adds collective time (the shipped start holds 0.6 and a few microseconds)
    j = [p.name for p in model.params].index(COLLECTIVE)
    assert out.values[COLLECTIVE] > start[j]


SHARE = "sglang-weight-reads"


def test_the_shipped_share_splits_into_each_groups_own_factor():
    config = fit_config()
    split = without_share(config, SHARE)
    assert SHARE not in split.shared
    sh = config.shared[SHARE]
    for g in sh.groups:
        assert split.groups[g].factors["efficiency.hbm_bandwidth"] == sh.factors["efficiency.hbm_bandwidth"]
        assert split.start[f"{g}:efficiency.hbm_bandwidth"] == config.start[f"{SHARE}:efficiency.hbm_bandwidth"]
    assert len(parameters(split)) == len(parameters(config)) + len(sh.groups) - 1
    # the shipped config is untouched
    assert "efficiency.hbm_bandwidth" not in config.groups[sh.groups[0]].factors


def test_a_wider_share_takes_in_the_share_a_group_is_in_and_spans_the_bounds():
    config = fit_config()
    wider = with_shared(config, "efficiency.hbm_bandwidth", ["910c-open", "910c-huawei"])
    assert SHARE not in wider.shared
    ((name, sh),) = [(n, s) for n, s in wider.shared.items() if "efficiency.hbm_bandwidth" in s.factors]
    assert set(sh.groups) == {"910c-open", "gh100-nvidia", "910c-huawei"}
    lows_highs = [config.shared[SHARE].factors["efficiency.hbm_bandwidth"]] + [
        config.groups["910c-huawei"].factors["efficiency.hbm_bandwidth"]
    ]
    assert sh.factors["efficiency.hbm_bandwidth"] == (min(lo for lo, _ in lows_highs), max(h for _, h in lows_highs))
    assert "efficiency.hbm_bandwidth" not in wider.groups["910c-huawei"].factors
    assert sum(p.name.startswith(f"{name}:") for p in parameters(wider)) == 1


def test_a_share_may_name_the_groups_of_the_share_they_are_in():
    # both groups of the shipped share, and a group named twice: one share over the three, no error
    config = fit_config()
    wider = with_shared(config, "efficiency.hbm_bandwidth", ["910c-open", "gh100-nvidia", "910c-huawei", "910c-open"])
    (sh,) = [s for s in wider.shared.values() if "efficiency.hbm_bandwidth" in s.factors]
    assert sorted(sh.groups) == ["910c-huawei", "910c-open", "gh100-nvidia"]  # each group once


@pytest.mark.parametrize(
    ("groups", "needle"),
    [
        (["nope", "910c-open"], "no group 'nope'"),
        (["950pr-open", "910c-open"], "does not fit"),
        (["910c-huawei"], "two groups"),
    ],
)
def test_a_share_refuses_unknown_groups_and_groups_without_the_factor(groups, needle):
    with pytest.raises(ValueError, match=needle):
        with_shared(fit_config(), "efficiency.hbm_bandwidth", groups)


@pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/ is in the source tree only")
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bound", "910c-huawei:efficiency.hbm_bandwidth"], "write NAME=LOW,HIGH"),
        (["--bound", "910c-huawei:efficiency.hbm_bandwidth=a,b"], "must be numbers"),
        (["--bound", "nope=0.1,0.2"], "no fitted parameter 'nope'"),
        (["--loo", "nope"], "--loo 'nope' is no deployment"),
        (["--share", "efficiency.hbm_bandwidth=910c-open"], "write FACTOR=GROUP,GROUP"),
        (["--unshare", "nope"], "no share 'nope'"),
        (["--kept-aside", "no/such/folder"], "--kept-aside 'no/such/folder' does not exist"),
        (["--kept-aside", str(REPO / "tests" / "costmodel")], "holds no .yaml file of rows"),
    ],
)
def test_the_script_refuses_bad_arguments_with_exit_2(argv, needle, capsys):
    assert load_script(SCRIPT).main(argv) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/ is in the source tree only")
def test_collective_once_charges_each_collective_once_inside_and_twice_after():
    """The what-if model of `--collective-once` (comm.py's docstring: the shipped model charges
    `fixed_costs.collective` twice): inside it a TP2 dense FFN (two collectives) and the embedding (one
    AllReduce) gain d each per collective when the cost rises by d, and nothing among the launches;
    on leaving, the shipped double charge is back."""
    import numpy as np

    from planner.costmodel.modules import dense_ffn_cost, embedding_cost
    from planner.specs.plan import ParallelLayout

    d = 5e-6
    ctx, ctx_raised = collective_cost_contexts(d)
    t, tp2 = np.array([8.0]), ParallelLayout(dp=1, tp=2)

    def gains() -> tuple[float, float, float]:
        ffn = dense_ffn_cost(ctx_raised, tp2, t).total_s - dense_ffn_cost(ctx, tp2, t).total_s
        emb = embedding_cost(ctx_raised, tp2, t).total_s - embedding_cost(ctx, tp2, t).total_s
        launches = dense_ffn_cost(ctx_raised, tp2, t).fixed_s - dense_ffn_cost(ctx, tp2, t).fixed_s
        return float(ffn[0]), float(emb[0]), float(launches)

    with load_script(SCRIPT).collective_charged_once():
        assert gains() == pytest.approx((2 * d, d, 0.0), abs=1e-12)
    assert gains() == pytest.approx((4 * d, 4 * d, 2 * d), abs=1e-12)


@pytest.mark.skipif(not SCRIPT.is_file(), reason="benchmarks/ is in the source tree only")
def test_the_script_takes_the_static_kept_aside_rows_that_fidelity_compares(tmp_path, capsys):
    """`--kept-aside` reads its rows with `moeplan fidelity --rows`'s own function: the static figure
    is a row, the excluded and the simulated ones are not, and a row its plan contradicts is refused
    (exit 2, naming the field) rather than fitted against another machine's prediction."""
    from planner.costmodel.fidelity import kept_aside_rows
    from planner.specs.validation import figures_at

    plan = str(REPO / "plans" / "a2-d70.yaml")
    rows = [
        kept_aside_row("static", plan, [kept_aside_figure("decode.tpot_ms", 90.0, id="static TPOT")]),
        kept_aside_row("left out", plan, [kept_aside_figure("decode.tpot_ms", 50.0)], excluded="batch not stated"),
        kept_aside_row("queued", plan, [kept_aside_figure("decode.tpot_ms", 95.0, id="queued", compare="simulated")]),
    ]
    path = write_kept_aside(tmp_path, rows)
    script_rows = load_script(SCRIPT).kept_aside_rows(path)
    assert [r.id for r in script_rows] == ["static TPOT"]
    fidelity_rows, not_compared = kept_aside_rows(figures_at(path))
    assert [r.id for r in fidelity_rows] == ["static TPOT"]
    assert sorted(why.split(":")[0] for _, why in not_compared) == ["excluded", "needs simulation"]

    wrong_row = kept_aside_row("wrong", plan, [kept_aside_figure("decode.tpot_ms", 90.0)], hardware="cm384")
    wrong = write_kept_aside(tmp_path, [wrong_row], "wrong.yaml")
    # `--loo nope` would also exit 2, after the rows are read: the message says which check refused
    assert load_script(SCRIPT).main(["--kept-aside", str(wrong), "--loo", "nope"]) == 2
    err = capsys.readouterr().err
    assert "--kept-aside" in err and "hardware is 'cm384'" in err and "--loo" not in err
