"""Every phase configuration of one instance size, costed, and the best of them kept.

Given the instance size, a phase's step is a sum of module terms, so the configurations are the
Cartesian product of the module options (attention x dense FFN x MoE x LM head), the MTP depth
or micro-batch count, and the concurrency or batch. `phase_candidates` evaluates the whole
product on the integer tables at once (numpy broadcasting: about 1.5 million points per size in
tens of milliseconds), applies HBM and the phase's SLO, and keeps, for every instance size, the
configurations with the highest throughput per device. A configuration's concurrency or batch
is its best over every value of the tables' axis (every integer from the smallest to past what
HBM holds, planner.search.candidate_spaces), not assumed to be the largest that fits: the
argmax is taken over all of them. These candidates go to the deployment question (planner.
search), which chooses among them, together with instance counts, under the card budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.candidates.space import MoEOption
from planner.candidates.tables import MODULES, IntTables, PhaseTables
from planner.candidates.visit_order import LazyOrder
from planner.specs.plan import AttentionLayout, ParallelLayout, integral_as_int

EMITTED_SCALE = 1000  # tokens per step per sequence, in thousandths
# a TPOT limit on the mean step over the tokens it emits, in us: one for every MTP depth, or one per depth
# of the tables (in `k_values` order; an SLO held at a percentile request's own acceptance, see
# planner.costmodel.acceptance_spread), or None
TpotLimitUs = int | tuple[int, ...] | None


def tpot_limit_at(limit: TpotLimitUs, j: int) -> int | None:
    """The limit at the tables' depth index j."""
    return limit[j] if isinstance(limit, tuple) else limit


# the prefill overlap factor in millionths: the hidden part of a prefill forward is hundreds of ms, and
# thousandths (the earlier scale) lost up to a millisecond of it, enough for the search to refuse a
# batch whose TTFT the evaluation puts 0.7 ms under the SLO
OVERLAP_SCALE = 1_000_000


@dataclass(frozen=True)
class PhaseCandidate:
    """One fully specified phase instance: layouts, MTP/micro-batches, concurrency/batch, costs."""

    phase: str
    devices: int
    attention: AttentionLayout
    dense_ffn: ParallelLayout | None
    moe: MoEOption | None
    lm_head: ParallelLayout
    k: int  # decode: MTP draft tokens; prefill: micro-batches
    x: int | float  # decode: concurrency per device (a fraction below FRACTIONAL_BELOW); prefill: requests per forward
    time_us: int  # decode: step; prefill: forward
    latency_us: int  # decode: TPOT; prefill: TTFT
    hbm_mib: int
    hbm_capacity_mib: int
    num: int  # throughput ratio numerator (decode: B * emitted in thousandths, times tp for a fractional B;
    # prefill: requests)
    den: int  # ... and denominator (the step or forward, us; times tp for a fractional B)
    option_index: tuple[int, ...]  # attention, dense FFN, MoE, LM head option indices
    micro_batches: int = 1  # decode: 1, or 2 with compute/communication overlap

    @property
    def score(self) -> float:
        """Throughput ratio per device used to rank candidates of one size."""
        return self.num / max(self.den, 1) / self.devices

    @property
    def requests_per_s(self) -> float:
        """Requests one instance serves per second (decode: at the workload's output length, see caller)."""
        return self.num / self.den * 1e6

    def key(self) -> tuple:
        """Deterministic order among equals: fewer devices, then option indices, k, micro-batches, larger x."""
        return (self.devices, self.option_index, self.k, self.micro_batches, -self.x)


def decode_ratio(x: int | float, emitted: int, step_us: int, tp: int) -> tuple[int, int]:
    """(num, den) of a decode candidate's throughput ratio x * emitted / step in integers: a fractional
    concurrency (whole sequences per attention TP group, `tp` devices) counts sequences per group."""
    if isinstance(x, int):
        return x * emitted, step_us
    return int(round(x * tp)) * emitted, step_us * tp


def undominated(arrays: list[np.ndarray], groups: np.ndarray | None = None) -> np.ndarray:
    """Indices of the options (axis 0) that no other option beats or ties in every array
    everywhere (time and HBM alike); of identical options the first is kept. Pruning them is
    exact: a dominated option never makes a configuration better. With `groups` (one label per
    option) an option is pruned only by one of its own group, so a search restricted to some
    groups afterwards (say, experts over another device count) stays exact too."""
    n = arrays[0].shape[0]
    flat = np.concatenate([a.reshape(n, -1) for a in arrays], axis=1)
    keep = []
    for i in range(n):
        same = np.ones(n, dtype=bool) if groups is None else groups == groups[i]
        le = np.all(flat <= flat[i], axis=1) & same
        eq = np.all(flat == flat[i], axis=1) & same
        dominated = np.any(le & ~eq) or np.any(eq[:i])
        if not dominated:
            keep.append(i)
    return np.array(keep, dtype=np.int64)


def _pruned(
    ints: IntTables,
    names: tuple[str, ...],
    t: PhaseTables | None = None,
    ep_of: np.ndarray | None = None,
    attention_of: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per module, the option indices that survive dominance over the given tables (all of them
    when an engine restricts which combinations may run: a dominating option may be one the
    engine cannot combine, so pruning would not be exact). Expert options are pruned only by
    options over the same device count (`ep_of`, from the tables' options): the alternatives
    search for another EP (`ep_not`) then finds its best exactly. When only a split shared expert
    restricts the pairs, attention and expert options are pruned within their groups of equal
    pairing (`attention_of`, and `ep_of` by EP and split TP): exact as well."""
    if t is not None and t.options.combo_ok is not None and not t.options.combo_split_only:
        return {mod: np.arange(ints.hbm_mib[mod].shape[0]) for mod in MODULES}
    if t is not None:  # the same for every SLO: kept with the tables
        from planner.candidates.space import pairing_groups
        from planner.candidates.table_store import derived

        att_groups, moe_groups = pairing_groups(t.options)
        eps = moe_groups if t.options.moe else None
        atts = att_groups if t.options.combo_split_only else None
        return derived(
            t, ("undominated_within_pairing", names), lambda: _pruned(ints, names, ep_of=eps, attention_of=atts)
        )
    tables = {
        "time": ints.time_us,
        "comm": ints.comm_us,
        "fixed": ints.fixed_us,
        "hbm": ints.hbm_mib,
        # two decode micro-batches (see `_dominance_tables`)
        "time_less_comm": {mod: ints.time_us[mod] - v for mod, v in ints.comm_us.items() if mod in ints.cover_us},
        "time_less_cover": {mod: ints.time_us[mod] - v for mod, v in ints.cover_us.items()},
        # prefill: a prompt's forwards on its rank (attention only; fewer is better, as time)
        "forwards": ints.forwards,
    }
    out = {}
    for mod in MODULES:
        arrays = [tables[n][mod] for n in names if mod in tables[n]]
        arrays = [a for a in arrays if a.shape[0] == ints.hbm_mib[mod].shape[0]]
        groups = ep_of if mod == "moe" and ep_of is not None and ep_of.size == arrays[0].shape[0] else None
        if mod == "attention" and attention_of is not None and attention_of.size == arrays[0].shape[0]:
            groups = attention_of
        out[mod] = undominated(arrays, groups)
    return out


def engine_mask(
    scores: np.ndarray, t: PhaseTables, kept: dict[str, np.ndarray] | None = None, micro: bool = False
) -> np.ndarray:
    """Scores [K, A, F, M, L] with the combinations the engine cannot run set to -1 (unchanged
    without an engine); with `micro`, K is the prefill micro-batch axis and MoE options that may
    not run several micro-batches are masked where K > 1."""
    mask = t.options.combo_ok
    if mask is None:
        return scores
    if kept is not None:
        mask = mask[np.ix_(*(kept[mod] for mod in MODULES))]
    out = np.where(mask[None], scores, -1.0)
    moe_ok = t.options.moe_micro_ok
    if micro and moe_ok is not None:
        if kept is not None:
            moe_ok = moe_ok[kept["moe"]]
        for j, k in enumerate(t.k_values):
            if k > 1:
                out[j] = np.where(moe_ok[None, None, :, None], out[j], -1.0)
    return out


def _combine(parts: list[np.ndarray]) -> np.ndarray:
    """Sum per-module arrays [n_o, X] into [A, F, M, L, X] by broadcasting."""
    a, f, m, l_ = parts
    return (
        a[:, None, None, None, :] + f[None, :, None, None, :] + m[None, None, :, None, :] + l_[None, None, None, :, :]
    )


def _option_lists(t: PhaseTables) -> tuple[list, list, list, list]:
    o = t.options
    return (
        o.attention,
        o.dense_ffn or [None],
        o.moe or [None],
        o.lm_head,
    )


def _candidate(
    t: PhaseTables,
    ints: IntTables,
    idx: tuple[int, ...],
    k: int,
    x: int | float,
    time_us: int,
    latency_us: int,
    hbm: int,
    num: int,
    den: int,
) -> PhaseCandidate:
    att, dense, moe, head = _option_lists(t)
    return PhaseCandidate(
        micro_batches=t.micro_batches if t.phase == "decode" else 1,
        phase=t.phase,
        devices=t.devices,
        attention=att[idx[0]],
        dense_ffn=dense[idx[1]],
        moe=moe[idx[2]],
        lm_head=head[idx[3]],
        k=k,
        x=x,
        time_us=time_us,
        latency_us=latency_us,
        hbm_mib=hbm,
        hbm_capacity_mib=ints.hbm_capacity_mib,
        num=num,
        den=den,
        option_index=idx,
    )


def _top(scores: np.ndarray, keep: int) -> list[tuple[int, ...]]:
    """Indices of the `keep` best finite scores, ties broken by index order (deterministic)."""
    flat = scores.reshape(-1)
    valid = np.flatnonzero(flat > 0)
    if valid.size == 0:
        return []
    order = valid[np.lexsort((valid, -flat[valid]))][:keep]
    return [tuple(int(i) for i in np.unravel_index(j, scores.shape)) for j in order]


def prefill_forward_us(comp_us, comm_us, fixed_us, micro_batches: int, layers: int, efficiency: float):
    """The integer prefill forward (us) from its compute, communication and launch parts (ints or
    arrays): with `micro_batches` > 1 the launches repeat and the overlap hides a share of the
    shorter stream, `efficiency * (1 - 1 / (micro_batches * layers))` in thousandths, rounded down
    (the one place the search computes it: candidates, colocated instances, bounds, oracle)."""
    hidden = 0
    if micro_batches > 1:
        factor = int(np.floor(efficiency * (1.0 - 1.0 / (micro_batches * layers)) * OVERLAP_SCALE))
        hidden = (factor * np.minimum(comp_us, comm_us)) // OVERLAP_SCALE
    return comp_us + comm_us + micro_batches * fixed_us - hidden


def prefill_ttft_us(forward_us, kv_transfer_us: int, own_forwards=1):
    """The integer TTFT (us) of a prefill forward: the wait for the forward in flight (half a
    forward on average), the prompt's own forwards on its attention DP rank (`PhaseTables.forwards`),
    and the KV transfer (planner.costmodel.prefill), as own + 0.5 forwards plus the transfer, rounded up."""
    return -(-((2 * np.asarray(own_forwards) + 1) * forward_us + 2 * kv_transfer_us) // 2)


def attention_forwards(ints: IntTables, index: Any) -> np.ndarray | int:
    """The forwards a prompt takes (`PhaseTables.forwards`) at the attention options and batches `index`
    picks from the [A, X] table: 1 without the table (decode, colocated)."""
    return ints.forwards["attention"][index] if ints.forwards else 1


def engine_runs_forwards(t: PhaseTables, own: np.ndarray | int) -> np.ndarray | bool:
    """Where an engine runs a prompt over `own` forwards on its attention DP rank: everywhere, or, for an
    engine that prefills a prompt whole on its rank (`SizeOptions.prompt_over_forwards` False: MindIE as
    moeplan launches it), only where a rank's share of the batch holds the prompt (one forward)."""
    return True if t.options.prompt_over_forwards else np.asarray(own) == 1


def least_forwards(ints: IntTables, kept: np.ndarray | None = None) -> np.ndarray | int:
    """Per batch, the fewest forwards a prompt takes over the (kept) attention options: 1 without the table."""
    own = ints.forwards.get("attention")
    if own is None:
        return 1
    return own[kept].min(axis=0) if kept is not None else own.min(axis=0)


DECODE_OVERLAP_SCALE = 1_000_000  # the decode overlap factor in millionths (hidden parts are tens of ms)


def overlapped_step_us(step_us, comm_us, cover_us, factor: int):
    """The integer decode step (us) with two micro-batches: the step less the hidden part,
    `factor` millionths of the shorter of the main layers' communication and compute (ints or
    arrays). Every table was rounded up (at most 1 us per module): taking that back before the
    factor rounds the hidden part down, so the integer step is never shorter than the float one."""
    shorter = np.maximum(np.minimum(comm_us, cover_us) - len(MODULES), 0)
    return step_us - (factor * shorter) // DECODE_OVERLAP_SCALE


def decode_micro_batch_factor(layers: int, efficiency: float) -> int:
    """Share (in millionths) of min(compute, communication) two decode micro-batches hide."""
    return int(np.floor(efficiency * (1.0 - 1.0 / (2 * layers)) * DECODE_OVERLAP_SCALE))


def _reachable_concurrencies(
    t: PhaseTables,
    ints: IntTables,
    kept: dict[str, np.ndarray],
    j: int,
    e: int,
    tpot_slo_us: int | None,
    max_step_us: int | None,
    overlap_factor: int,
) -> int:
    """How many of the smallest concurrencies to cost at depth j (at least 1): beyond them even
    every module at its least HBM and step (less the most two micro-batches could hide) misses
    HBM, the TPOT SLO or the step limit, so no combination fits there."""
    key = ("least_per_concurrency", j, overlap_factor)
    if key not in t.memo:  # no SLO in these (and `kept` is the table's own): kept with the tables
        least_hbm = sum(ints.hbm_mib[mod][kept[mod], j, :].min(axis=0) for mod in MODULES)
        least_step = sum(ints.time_us[mod][kept[mod], j, :].min(axis=0) for mod in MODULES) + ints.const_us[j]
        if overlap_factor:
            most_comm = sum(ints.comm_us[mod][kept[mod], j, :].max(axis=0) for mod in MODULES)
            most_cover = sum(ints.cover_us[mod][kept[mod], j, :].max(axis=0) for mod in MODULES)
            least_step = least_step - (overlap_factor * np.minimum(most_comm, most_cover)) // DECODE_OVERLAP_SCALE
        t.memo[key] = (np.asarray(least_hbm), np.asarray(least_step))
    least_hbm, least_step = t.memo[key]
    reach = least_hbm <= ints.hbm_capacity_mib
    if tpot_slo_us is not None or max_step_us is not None:
        if tpot_slo_us is not None:
            reach &= least_step * EMITTED_SCALE <= tpot_slo_us * e
        if max_step_us is not None:
            reach &= least_step <= max_step_us
    return max(1, int(np.flatnonzero(reach).max(initial=-1)) + 1)


def micro_batches_run(concurrency_per_device: np.ndarray, micro_batches: int) -> np.ndarray:
    """Where a decode step of `micro_batches` runs: one runs any concurrency, more give each micro-batch
    at least one sequence a device (planner.specs.plan.fits_micro_batches, the plan format's rule)."""
    return (np.asarray(concurrency_per_device) >= micro_batches) | (micro_batches == 1)


def _best_concurrency(
    summed: Callable[[dict[str, np.ndarray]], np.ndarray],
    ints: IntTables,
    j: int,
    xs: np.ndarray,
    e: int,
    overlap_factor: int | None,
    tpot_slo_us: int | None,
    max_step_us: int | None,
    micro_batches: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(best throughput ratio, step and HBM there, its concurrency index) per layout combination at
    depth j over the concurrencies `xs` (the last axis), -1 where none fits HBM and the SLOs.
    `summed(tables)` adds the combinations' module rows of a table (by broadcasting or gathering);
    `overlap_factor` (two micro-batches) subtracts the hidden part. With two micro-batches a
    concurrency below `micro_batches` is not a layout (each holds at least one sequence per device,
    planner.specs.plan.fits_micro_batches); one runs any concurrency the tables give HBM to (a
    fraction of a sequence a device on a TP group that holds whole ones)."""
    step = summed(ints.time_us) + ints.const_us[j][: xs.size]
    if overlap_factor is not None:
        step = overlapped_step_us(step, summed(ints.comm_us), summed(ints.cover_us), overlap_factor)
    hbm = summed(ints.hbm_mib)
    ok = (hbm <= ints.hbm_capacity_mib) & micro_batches_run(xs, micro_batches)
    if tpot_slo_us is not None:
        ok &= step * EMITTED_SCALE <= tpot_slo_us * e
    if max_step_us is not None:
        ok &= step <= max_step_us
    ratio = np.where(ok, (xs * e) / np.maximum(step, 1), -1.0)
    # best concurrency per layout combination: highest ratio, then the larger concurrency
    b_idx = xs.size - 1 - np.argmax(ratio[..., ::-1], axis=-1)
    at = b_idx[..., None]
    take = [np.take_along_axis(a, at, axis=-1)[..., 0] for a in (ratio, step, hbm)]
    return take[0], take[1], take[2], b_idx


def _decode_scores(
    t: PhaseTables, ints: IntTables, tpot_slo_us: TpotLimitUs, max_step_us: int | None, overlap_factor: int
) -> tuple[np.ndarray, list[tuple], dict[str, np.ndarray]]:
    """Per (MTP depth, undominated layout combination) [K, A, F, M, L]: the best throughput ratio
    over the concurrencies that fit HBM and meet the SLOs (-1 where none does, or the engine cannot
    run it), with each depth's (k, emitted, step and HBM at the best concurrency, its index) and the kept option
    indices. Memoised with the tables: the MTP-filtered alternative asks again with the same SLOs."""
    key = ("decode_scores", tpot_slo_us, max_step_us, overlap_factor)
    if key in t.memo:
        return t.memo[key]
    xs = t.x_values.astype(float)
    best_score = []
    per_k = []
    two = t.micro_batches > 1 and bool(ints.cover_us)
    kept = _pruned(ints, _dominance_tables(t, ints), t)
    for j, k in enumerate(t.k_values):
        e = int(np.floor(t.emitted[j] * EMITTED_SCALE + 1e-9))
        slo_j = tpot_limit_at(tpot_slo_us, j)
        nb = _reachable_concurrencies(t, ints, kept, j, e, slo_j, max_step_us, overlap_factor if two else 0)

        def combined(tables: dict[str, np.ndarray], j: int = j, nb: int = nb) -> np.ndarray:
            return _combine([tables[mod][kept[mod], j, :nb] for mod in MODULES])

        score, step_at, hbm_at, b_idx = _best_concurrency(
            combined, ints, j, xs[:nb], e, overlap_factor if two else None, slo_j, max_step_us, t.micro_batches
        )
        best_score.append(score)
        per_k.append((k, e, step_at, hbm_at, b_idx))
    scores = engine_mask(np.stack(best_score), t, kept)  # [K, A, F, M, L]
    moe_ok = t.options.moe_micro_ok
    if two and t.options.combo_ok is not None and moe_ok is not None:
        # an engine that overlaps two micro-batches only over all-to-all (SGLang's two-batch overlap)
        scores = np.where(moe_ok[kept["moe"]][None, None, None, :, None], scores, -1.0)
    t.memo[key] = (scores, per_k, kept)
    return t.memo[key]


def _decode_bound(t: PhaseTables, ints: IntTables, overlap_factor: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per (MTP depth, undominated layout combination) [K, A, F, M, L]: the best throughput ratio
    over the concurrencies that fit HBM, whatever the SLOs (-1 where none fits or the engine cannot
    run it), and the kept option indices. With SLOs the feasible concurrencies are fewer, so the
    score is never above this: the bound `decode_candidates` visits combinations by. Memoised with
    the tables and kept on disk with them (no SLO in it)."""
    from planner.candidates.table_store import derived

    def compute() -> np.ndarray:
        scores, _, _ = _decode_scores(t, ints, None, None, overlap_factor)
        return scores

    kept = _pruned(ints, _dominance_tables(t, ints), t)
    return derived(t, ("decode_bound_within_ep", overlap_factor), compute), kept


def _dominance_tables(t: PhaseTables, ints: IntTables) -> tuple[str, ...]:
    """The tables a decode option must not exceed anywhere to dominate another.

    One micro-batch: the step is the sum of the options' times, so less time and less HBM is
    better. Two micro-batches: the step is T - hidden, T the sum of the options' times (which
    include their communication C and compute V) and hidden = h(min(sum C, sum V)), h rounding
    a share below 1 down and nondecreasing, so one more microsecond under the min hides at most
    one more. Less communication is then not always better: with more of it the other
    micro-batch may hide more. Option A's step is at most B's, whatever the other modules, when
    T_A + max(0, C_B - C_A, V_B - V_A) <= T_B, which is T_A <= T_B, T_A - C_A <= T_B - C_B and
    T_A - V_A <= T_B - V_B: dominance over those three tables (and HBM) is exact."""
    two = t.micro_batches > 1 and bool(ints.cover_us)
    return ("time", "hbm", "time_less_comm", "time_less_cover") if two else ("time", "hbm")


def _decode_scores_of(
    t: PhaseTables,
    ints: IntTables,
    kept: dict[str, np.ndarray],
    combos: np.ndarray,
    tpot_slo_us: TpotLimitUs,
    max_step_us: int | None,
    overlap_factor: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(score, step and HBM at the best concurrency, its index) of some combinations, `combos`
    [C, 5] as (depth, A, F, M, L) over the kept options: what `_decode_scores` computes for them."""
    xs = t.x_values.astype(float)
    two = t.micro_batches > 1 and bool(ints.cover_us)
    score = np.full(len(combos), -1.0)
    step_at = np.zeros(len(combos), dtype=np.int64)
    hbm_at = np.zeros(len(combos), dtype=np.int64)
    b_at = np.zeros(len(combos), dtype=np.int64)
    for j in np.unique(combos[:, 0]):
        rows = np.flatnonzero(combos[:, 0] == j)
        c = combos[rows]
        e = int(np.floor(t.emitted[j] * EMITTED_SCALE + 1e-9))
        slo_j = tpot_limit_at(tpot_slo_us, int(j))
        nb = _reachable_concurrencies(t, ints, kept, int(j), e, slo_j, max_step_us, overlap_factor if two else 0)
        option_rows = [kept[mod][c[:, 1 + m]] for m, mod in enumerate(MODULES)]

        def gathered(
            tables: dict[str, np.ndarray], j: int = int(j), rows: list = option_rows, nb: int = nb
        ) -> np.ndarray:
            return _rows_summed(tables, rows, j, nb)

        score[rows], step_at[rows], hbm_at[rows], b_at[rows] = _best_concurrency(
            gathered,
            ints,
            int(j),
            xs[:nb],
            e,
            overlap_factor if two else None,
            slo_j,
            max_step_us,
            t.micro_batches,
        )
    return score, step_at, hbm_at, b_at


def _rows_summed(tables: dict[str, np.ndarray], rows: list[np.ndarray], j: int, nb: int) -> np.ndarray:
    """[C, nb]: the sum over the modules of `tables[mod][rows[m], j, :nb]`, each module's option rows of C
    combinations at depth (or micro-batch index) j, added into one buffer (the gathers are the bulk of
    scoring a round of combinations; integer sums, so the order of the additions does not matter)."""
    total = tables[MODULES[0]][:, j, :nb].take(rows[0], axis=0)
    for mod, r in zip(MODULES[1:], rows[1:], strict=True):
        part = tables[mod][:, j, :nb].take(r, axis=0)
        if np.result_type(total, part) == total.dtype:
            np.add(total, part, out=total)
        else:
            total = total + part
    return total


def _branch_and_bound(
    bound: np.ndarray,
    keep: int,
    score_of: Callable[[np.ndarray], tuple[np.ndarray, ...]],
    first_round: int,
) -> list[tuple[tuple[int, ...], tuple]]:
    """The `keep` best combinations of `bound`'s shape [K, A, F, M, L] by their exact score, and
    what `score_of` says of each: combinations are scored (`score_of(combos [C, 5])`, whose first
    array is the score, -1 where nothing fits) best bound first, in rounds of doubling size, until
    no combination left can reach the `keep`-th best score found (a score never exceeds its
    bound). The result is what scoring every combination gives, ties by index order."""
    flat = bound.reshape(-1)
    valid = np.flatnonzero(flat > 0)
    # best bound first, then index order (sorted a head at a time: the visit usually stops early)
    order = LazyOrder(-flat[valid], (valid,), 16 * first_round)
    found: list[tuple[np.ndarray, tuple[np.ndarray, ...]]] = []
    kth = -np.inf
    pos, size = 0, first_round
    while pos < order.size:
        if flat[valid[order.upto(pos + 1)[pos]]] < kth:
            break  # no combination left can reach the keep-th best score (its score <= its bound)
        batch = valid[order.upto(pos + size)[pos:]]
        found.append((batch, score_of(np.stack(np.unravel_index(batch, bound.shape), axis=1))))
        every = np.concatenate([f[1][0] for f in found])
        good = every[every > 0]
        if good.size >= keep:
            kth = float(np.sort(good)[-keep])
        pos += size
        size = min(2 * size, 4096)
    if not found:
        return []
    idx_all = np.concatenate([f[0] for f in found])
    results = [np.concatenate([f[1][k] for f in found]) for k in range(len(found[0][1]))]
    ok = np.flatnonzero(results[0] > 0)
    best = ok[np.lexsort((idx_all[ok], -results[0][ok]))][:keep]  # (as `_top`: ties by index order)
    return [
        (tuple(int(v) for v in np.unravel_index(int(idx_all[r]), bound.shape)), tuple(a[r] for a in results))
        for r in best
    ]


def decode_candidates(
    t: PhaseTables,
    ints: IntTables,
    tpot_slo_us: TpotLimitUs,
    keep: int,
    max_step_us: int | None = None,
    overlap_factor: int = 0,
    mtp: bool | None = None,
    first_round: int = 64,
    ep_not: int | None = None,
) -> list[PhaseCandidate]:
    """The `keep` best decode configurations of one instance size (each at its best concurrency);
    `max_step_us` bounds the step, the gap between two emissions of a sequence (--max-itl-ms);
    `mtp` True or False keeps only configurations with or without MTP draft tokens; `ep_not`
    only those whose experts are not spread over that many devices.

    Tables with two micro-batches subtract the hidden part, `overlap_factor` millionths of the
    shorter of the main layers' communication and compute (`decode_micro_batch_factor`).

    Exact by branch and bound: combinations are scored best bound first (`_decode_bound`, their
    best ratio under HBM alone), in rounds, until no combination left can reach the `keep`-th
    best score found; the result is what scoring every combination gives (ties by index order).
    """
    memo_key = ("decode_top", tpot_slo_us, max_step_us, overlap_factor, keep, mtp, ep_not)
    if memo_key in t.memo:
        return t.memo[memo_key]
    xs = t.x_values.astype(float)
    bound, kept = _decode_bound(t, ints, overlap_factor)
    if mtp is not None:  # only configurations with (True) or without (False) MTP draft tokens
        keep_k = np.array([(k > 0) == mtp for k in t.k_values])
        bound = np.where(keep_k[:, None, None, None, None], bound, -1.0)
    if ep_not is not None and t.options.moe:  # only expert layouts over another device count
        other = np.array([t.options.moe[i].moe.ep != ep_not for i in kept["moe"]])
        bound = np.where(other[None, None, None, :, None], bound, -1.0)

    def score_of(combos: np.ndarray) -> tuple[np.ndarray, ...]:
        return _decode_scores_of(t, ints, kept, combos, tpot_slo_us, max_step_us, overlap_factor)

    out: list[PhaseCandidate] = []
    for (j, *idx), (_, step_at, hbm_at, b_at) in _branch_and_bound(bound, keep, score_of, first_round):
        e = int(np.floor(t.emitted[j] * EMITTED_SCALE + 1e-9))
        x, s_us = integral_as_int(float(xs[int(b_at)])), int(step_at)
        orig = tuple(int(kept[mod][i]) for mod, i in zip(MODULES, idx, strict=True))
        num, den = decode_ratio(x, e, s_us, t.options.attention[orig[0]].tp)
        tpot_us = -(-s_us * EMITTED_SCALE // e)
        out.append(_candidate(t, ints, orig, t.k_values[j], x, s_us, tpot_us, int(hbm_at), num, den))
    t.memo[memo_key] = out
    return out


def _reachable_batches(
    t: PhaseTables,
    ints: IntTables,
    kept: dict[str, np.ndarray],
    ttft_slo_us: int | None,
    layers: int,
    efficiency: float,
    kv_us: int,
) -> int:
    """How many of the smallest batches to combine (at least 1): beyond them even every module at
    its least HBM and its least compute, communication and launch time (a forward grows with
    each) misses HBM or the TTFT SLO at every micro-batch count, so no combination runs there."""
    reach = np.zeros(t.x_values.size, dtype=bool)
    least = {
        name: sum(table[mod][kept[mod], 0, :].min(axis=0) for mod in MODULES)
        for name, table in (("comp", ints.time_us), ("comm", ints.comm_us), ("fixed", ints.fixed_us))
    }
    for j, mb in enumerate(t.k_values):
        ok = sum(ints.hbm_mib[mod][kept[mod], j, :].min(axis=0) for mod in MODULES) <= ints.hbm_capacity_mib
        if ttft_slo_us is not None:
            forward = prefill_forward_us(least["comp"], least["comm"], least["fixed"], mb, layers, efficiency)
            ok = ok & (prefill_ttft_us(forward, kv_us, least_forwards(ints, kept["attention"])) <= ttft_slo_us)
        reach |= ok
    return max(1, int(np.flatnonzero(reach).max(initial=-1)) + 1)


def _prefill_scores_of(
    t: PhaseTables,
    ints: IntTables,
    kept: dict[str, np.ndarray],
    combos: np.ndarray,
    ttft_slo_us: int | None,
    layers: int,
    efficiency: float,
    nr: int,
) -> tuple[np.ndarray, ...]:
    """(best throughput ratio, forward, TTFT and HBM there, its batch index) of some combinations,
    `combos` [C, 5] as (micro-batch index, A, F, M, L) over the kept options, over the first `nr`
    batches (-1 where none fits HBM and the TTFT SLO)."""
    xs = t.x_values.astype(np.int64)[:nr]
    kv_us = int(ints.const_us.reshape(-1)[0])
    out = [np.full(len(combos), -1.0), *(np.zeros(len(combos), dtype=np.int64) for _ in range(4))]
    for j in np.unique(combos[:, 0]):
        rows = np.flatnonzero(combos[:, 0] == j)
        c = combos[rows]
        option_rows = [kept[mod][c[:, 1 + m]] for m, mod in enumerate(MODULES)]

        def gathered(table: dict[str, np.ndarray], k: int, o_rows: list = option_rows, cut: int = nr) -> np.ndarray:
            return _rows_summed(table, o_rows, k, cut)

        mb = t.k_values[int(j)]
        forward = prefill_forward_us(
            gathered(ints.time_us, 0),
            gathered(ints.comm_us, 0),
            gathered(ints.fixed_us, 0, cut=1),
            mb,
            layers,
            efficiency,
        )
        hbm = gathered(ints.hbm_mib, int(j))
        own = attention_forwards(ints, (kept["attention"][c[:, 1]], slice(None, nr)))
        ttft = prefill_ttft_us(forward, kv_us, own)
        ok = (hbm <= ints.hbm_capacity_mib) & engine_runs_forwards(t, own)
        if ttft_slo_us is not None:
            ok &= ttft <= ttft_slo_us
        ratio = np.where(ok, xs / np.maximum(forward, 1), -1.0)
        r_idx = xs.size - 1 - np.argmax(ratio[:, ::-1], axis=-1)  # the best, then the larger batch
        at = r_idx[:, None]
        for k, a in enumerate((ratio, forward, ttft, hbm)):
            out[k][rows] = np.take_along_axis(a, at, axis=-1)[:, 0]
        out[4][rows] = r_idx
    return tuple(out)


def _prefill_bound(
    t: PhaseTables, ints: IntTables, layers: int, efficiency: float
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per (micro-batch count, undominated layout combination) [K, A, F, M, L]: the best throughput
    ratio over the batches that fit HBM, whatever the TTFT SLO (-1 where none fits or the engine
    cannot run it), and the kept option indices: with an SLO the feasible batches are fewer, so
    the score is never above it. Kept on disk with the tables (no SLO in it)."""
    from planner.candidates.table_store import derived

    kept = _pruned(ints, ("time", "comm", "fixed", "hbm", "forwards"), t)

    def compute() -> np.ndarray:
        nr = _reachable_batches(t, ints, kept, None, layers, efficiency, int(ints.const_us.reshape(-1)[0]))
        xs = t.x_values.astype(np.int64)[:nr]
        comp = _combine([ints.time_us[mod][kept[mod], 0, :nr] for mod in MODULES])
        comm = _combine([ints.comm_us[mod][kept[mod], 0, :nr] for mod in MODULES])
        fixed = _combine([ints.fixed_us[mod][kept[mod], 0, :] for mod in MODULES])
        best = []
        for j, mb in enumerate(t.k_values):
            forward = prefill_forward_us(comp, comm, fixed, mb, layers, efficiency)
            hbm = _combine([ints.hbm_mib[mod][kept[mod], j, :nr] for mod in MODULES])
            best.append(np.where(hbm <= ints.hbm_capacity_mib, xs / np.maximum(forward, 1), -1.0).max(axis=-1))
        return engine_mask(np.stack(best), t, kept, micro=True)

    return derived(t, ("prefill_bound_within_ep", layers, efficiency), compute), kept


def prefill_candidates(
    t: PhaseTables,
    ints: IntTables,
    ttft_slo_us: int | None,
    keep: int,
    layers: int,
    overlap_efficiency: float,
    first_round: int = 64,
) -> list[PhaseCandidate]:
    """The `keep` best prefill configurations of one instance size, each at its best batch over
    every batch of the axis (batches beyond the last one that even every module at its least
    time and HBM could run are not costed).

    Exact by branch and bound, as `decode_candidates`: combinations are scored best bound first
    (`_prefill_bound`, their best ratio under HBM alone), in rounds, until no combination left
    can reach the `keep`-th best score found (ties by index order)."""
    bound, kept = _prefill_bound(t, ints, layers, overlap_efficiency)
    kv_us = int(ints.const_us.reshape(-1)[0])
    nr = _reachable_batches(t, ints, kept, ttft_slo_us, layers, overlap_efficiency, kv_us)

    def score_of(combos: np.ndarray) -> tuple[np.ndarray, ...]:
        return _prefill_scores_of(t, ints, kept, combos, ttft_slo_us, layers, overlap_efficiency, nr)

    xs = t.x_values.astype(np.int64)
    out = []
    for (j, *idx), (_, forward, ttft, hbm, r_idx) in _branch_and_bound(bound, keep, score_of, first_round):
        orig = tuple(int(kept[mod][i]) for mod, i in zip(MODULES, idx, strict=True))
        x, f = int(xs[int(r_idx)]), int(forward)
        out.append(_candidate(t, ints, orig, t.k_values[j], x, f, int(ttft), int(hbm), x, f))
    return out


def lowest_latency_us(t: PhaseTables, ints: IntTables, layers: int = 1, overlap_efficiency: float = 1.0) -> int | None:
    """Lowest TPOT (decode) or TTFT (prefill) of any configuration that fits HBM (with two decode
    micro-batches, at a concurrency that gives each one a sequence a device, as `_best_concurrency`);
    None if none fits."""
    best: int | None = None
    if t.phase == "decode":
        runs = micro_batches_run(t.x_values, t.micro_batches)
        for j in range(len(t.k_values)):
            e = int(np.floor(t.emitted[j] * EMITTED_SCALE + 1e-9))
            step = (
                _combine([ints.time_us[mod][:, j, :] for mod in MODULES]) + ints.const_us[j][None, None, None, None, :]
            )
            hbm = _combine([ints.hbm_mib[mod][:, j, :] for mod in MODULES])
            ok = (hbm <= ints.hbm_capacity_mib) & runs
            lat = np.where(ok, -(-step * EMITTED_SCALE // e), np.iinfo(np.int64).max)
            v = int(lat.min())
            if v < np.iinfo(np.int64).max and (best is None or v < best):
                best = v
        return best
    comp = _combine([ints.time_us[mod][:, 0, :] for mod in MODULES])
    comm = _combine([ints.comm_us[mod][:, 0, :] for mod in MODULES])
    fixed = _combine([ints.fixed_us[mod][:, 0, :] for mod in MODULES])
    kv_us = int(ints.const_us.reshape(-1)[0])
    for j, mb in enumerate(t.k_values):
        forward = prefill_forward_us(comp, comm, fixed, mb, layers, overlap_efficiency)
        hbm = _combine([ints.hbm_mib[mod][:, j, :] for mod in MODULES])
        own = attention_forwards(ints, (slice(None), None, None, None, slice(None)))
        runs = (hbm <= ints.hbm_capacity_mib) & engine_runs_forwards(t, own)
        ttft = np.where(runs, prefill_ttft_us(forward, kv_us, own), np.iinfo(np.int64).max)
        v = int(ttft.min())
        if v < np.iinfo(np.int64).max and (best is None or v < best):
            best = v
    return best
