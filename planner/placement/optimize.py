"""moeplan's placement: better replica counts and a packing improved by local search.

The baseline (DeepSeek EPLB's global greedy, `eplb.global_placement`) fixes the replica counts
that minimise the heaviest replica and packs heaviest first. With several slots per device the
device loads then sit 0.5-11% above the mean. Two things close most of that gap (measured; see
docs/experts.md and benchmarks/bench_experts.py):

1. Replica counts. Minimising the heaviest replica is right when that replica sets the maximum
   (one or two slots per device). When the mean sets it, what matters is that S replicas per
   device can add up to the mean, and min-max counts make dozens of equal, mid-sized replicas that
   do not combine well. So several count rules are tried: the divisor rule "next replica to the
   expert with the highest load / (replicas - 1 + theta)" for theta in `SearchSettings.thetas`
   (theta = 1 is EPLB's rule, 0.5 is Sainte-Lague rounding). Layers still more than
   `refine_above` over the bound afterwards try the finer `refine_thetas` (the best theta varies
   by layer; this matters with three slots per device).
2. Packing. Each candidate is packed (EPLB's greedy for theta = 1, a row-by-row greedy for the
   others) and then improved by a local search of replica swaps, all layers at once in numpy:
   each round (a) pairs the i-th heaviest device with a lighter one (the pairing rotates every
   round) and makes, for every pair, the swap of one replica each that best evens the pair, then
   (b) makes the swap between the heaviest device and any other device that lowers the larger
   of the two loads most. Every accepted swap lowers the larger load of the two devices it
   touches, so a layer's maximum never rises; no swap puts an expert twice on a device. A layer
   stops once it is within `SearchSettings.tolerance` of its lower bound, or when no swap helps.

Per layer the candidate with the lowest maximum device load wins; the theta = 1 candidate starts
from the greedy baseline itself, and the baseline is kept explicitly as a fallback, so a layer
is never worse than the baseline.

Group-limited routing (nodes > 1 with expert groups, e.g. DeepSeek-V3's 8 groups / top-4): a
second family of candidates keeps one replica of every expert on its group's node (groups packed
onto nodes the way EPLB's hierarchical policy does, so a token mostly reaches only its groups'
nodes) while extra replicas go anywhere (that lets the node loads even out). Balance comes first:
per layer, among the candidates within `locality_slack` (1%) of the best balance found that are
also no worse than the baseline, the one whose simulated nodes-per-token
(`metrics.nodes_reached`) is lowest is deployed.

Tried and dropped, by measurement: CP-SAT as a polishing step (one layer at a time, greedy result
as hint, 3 s and 2 workers per layer) ended 4-25% above the mean where this local search reaches
0.7-2.2%; a move that shifts a redundant slot from one expert to another during the search
changed no result on the benchmark grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import BadInputError
from planner.placement.eplb import (
    deal_round_robin,
    greedy_pack,
    hierarchical_applies,
    pack_groups_onto_nodes,
    physical_replicas,
)
from planner.placement.metrics import (
    Routing,
    check_layout,
    imbalance,
    nodes_reached,
    route_tokens,
)
from planner.placement.model import Placement
from planner.placement.replicas import (
    divisor_replica_counts,
    heaviest_replica,
    min_max_replica_counts,
)

_EPS = 1e-12


@dataclass(frozen=True)
class SearchSettings:
    """How hard the search works. `FULL_SEARCH` is what `moeplan experts` deploys;
    `FAST_SEARCH` is what `imbalance_for` uses inside the plan search."""

    thetas: tuple[float, ...] = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
    local_thetas: tuple[float, ...] = (1.0, 0.8)  # for the node-local candidates
    rounds: int = 80
    tolerance: float = 2e-4  # a layer within this relative gap of its bound stops improving
    locality_slack: float = 0.01  # nodes > 1: balance may be this much worse for locality
    locality_tokens: int = 512  # tokens per layer of the nodes-per-token simulation
    seed: int = 0
    theta_by_regime: bool = False  # True: theta = 1 only where the heaviest replica limits
    refine_thetas: tuple[float, ...] = (0.95, 0.85, 0.75, 0.65, 0.55, 0.45, 0.4, 0.35, 0.3)
    refine_above: float = 4e-3  # layers this far above the bound after `thetas` try these too


FULL_SEARCH = SearchSettings()
FAST_SEARCH = SearchSettings(
    thetas=(1.0, 0.8),
    local_thetas=(1.0,),
    refine_thetas=(),
    rounds=14,
    tolerance=1e-3,
    locality_tokens=256,
    theta_by_regime=True,
)


@dataclass(frozen=True)
class OptimizeResult:
    """moeplan's placement and where each layer's choice came from."""

    placement: Placement
    baseline: Placement  # DeepSeek EPLB global greedy on the same loads
    source: list[str]  # per layer: "theta=0.8", "baseline", "node-local theta=1", ...


# ---- packing --------------------------------------------------------------------------------


def _row_pack(loads: np.ndarray, counts: np.ndarray, devices: int, slots_per_device: int) -> np.ndarray:
    """Replicas heaviest first, one row of `devices` at a time: the row's heaviest replica onto the
    currently lightest device, and so on. Cheaper than EPLB's greedy (S sorts instead of one step
    per replica); the local search that follows evens out the difference."""
    layers, _ = loads.shape
    ids = physical_replicas(counts)
    x = np.take_along_axis(loads / counts, ids, axis=1)
    order = np.lexsort((ids, -x), axis=-1)
    ids = np.take_along_axis(ids, order, axis=1)
    x = np.take_along_axis(x, order, axis=1)
    out = np.empty((layers, devices, slots_per_device), dtype=np.int64)
    load = np.zeros((layers, devices))
    rows = np.arange(layers)[:, None]
    for k in range(slots_per_device):
        device = np.argsort(load, axis=1, kind="stable")
        part = slice(k * devices, (k + 1) * devices)
        out[rows, device, k] = ids[:, part]
        load[rows, device] += x[:, part]
    _spread_duplicates(out)
    return out


def _spread_duplicates(ids: np.ndarray) -> None:
    """Swap away a second copy of an expert on one device, in place.

    Row packing keeps the replicas of one expert apart within a row, but an expert straddling two
    rows can land twice on one device. Each fix swaps the copy with a slot of the nearest device
    that does not hold the expert and whose replica is not on this device (same slot index
    first), so it removes one duplicate and creates none; loads change a little and the local
    search follows."""
    layers, devices, slots = ids.shape
    if slots == 1:
        return
    ordered = np.sort(ids, axis=2)
    for layer in np.flatnonzero((ordered[:, :, 1:] == ordered[:, :, :-1]).any(axis=(1, 2))):
        grid = ids[layer]
        while True:
            members = [set(row.tolist()) for row in grid]
            bad = next((d for d in range(devices) if len(members[d]) < slots), None)
            if bad is None:
                break
            row = grid[bad].tolist()
            slot = next(s for s in range(1, slots) if row[s] in row[:s])  # the second copy
            expert = int(row[slot])
            target = _swap_target(grid, members, bad, slot, expert)
            if target is None:  # tight layouts (nearly every device holds every expert)
                deal_round_robin(grid)
                break
            other, other_slot = target
            grid[bad, slot], grid[other, other_slot] = grid[other, other_slot], expert


def _swap_target(grid: np.ndarray, members: list[set[int]], bad: int, slot: int, expert: int) -> tuple[int, int] | None:
    devices, slots = grid.shape
    for step in range(1, devices):
        for other in {(bad + step) % devices, (bad - step) % devices}:
            if expert in members[other]:
                continue
            for s in [slot] + [s for s in range(slots) if s != slot]:
                if int(grid[other, s]) not in members[bad]:
                    return other, s
    return None


# ---- node constraints (group-limited routing) -----------------------------------------------


@dataclass
class _NodeRule:
    """Keep at least one replica of every expert on its home node."""

    home: np.ndarray  # [layers, experts] node each expert belongs to
    node_of_device: np.ndarray  # [devices]
    nodes: int

    def subset(self, layers: np.ndarray) -> _NodeRule:
        """The rule for some layers only."""
        return _NodeRule(self.home[layers], self.node_of_device, self.nodes)

    def counts_on_nodes(self, ids: np.ndarray) -> np.ndarray:
        """Replicas of each expert on each node, [layers, experts, nodes]."""
        layers, devices, slots = ids.shape
        experts = self.home.shape[1]
        out = np.zeros((layers, experts, self.nodes), dtype=np.int64)
        node = np.broadcast_to(self.node_of_device[None, :, None], ids.shape)
        layer = np.broadcast_to(np.arange(layers)[:, None, None], ids.shape)
        np.add.at(out, (layer.ravel(), ids.ravel(), node.ravel()), 1)
        return out


def _node_local_pack(
    loads: np.ndarray, counts: np.ndarray, devices: int, slots_per_device: int, rule: _NodeRule
) -> np.ndarray:
    """Greedy packing (heaviest first, lightest allowed device) where an expert's first replica
    must land on its home node and a node keeps enough free slots for its pending first replicas."""
    layers, experts = loads.shape
    nodes = rule.nodes
    ids = physical_replicas(counts)
    x = np.take_along_axis(loads / counts, ids, axis=1)
    order = np.lexsort((ids, -x), axis=-1)
    ids = np.take_along_axis(ids, order, axis=1)
    x = np.take_along_axis(x, order, axis=1)
    rows = np.arange(layers)
    node_of = rule.node_of_device
    out = np.empty((layers, devices, slots_per_device), dtype=np.int64)
    load = np.zeros((layers, devices))
    fill = np.zeros((layers, devices), dtype=np.int64)
    free_on_node = np.full((layers, nodes), devices // nodes * slots_per_device)
    pending = np.zeros((layers, nodes), dtype=np.int64)  # first replicas still to place
    np.add.at(pending, (np.repeat(rows, experts), rule.home.ravel()), 1)
    placed = np.zeros((layers, experts), dtype=bool)
    holds = np.zeros((layers, devices), dtype=bool)
    previous = np.full(layers, -1)
    for k in range(ids.shape[1]):
        expert = ids[:, k]
        holds &= (expert == previous)[:, None]
        first = ~placed[rows, expert]
        home = rule.home[rows, expert]
        spare = (free_on_node - pending) > 0  # [layers, nodes]
        allowed = np.where(first[:, None], node_of[None, :] == home[:, None], spare[:, node_of])
        allowed &= (fill < slots_per_device) & ~holds
        candidate = np.where(allowed, load, np.inf)
        device = candidate.argmin(axis=1)
        stuck = np.isinf(candidate[rows, device])
        if stuck.any():  # fall back to any device with room (kept valid by _spread_duplicates)
            device[stuck] = np.where(fill[stuck] < slots_per_device, load[stuck], np.inf).argmin(axis=1)
        out[rows, device, fill[rows, device]] = expert
        load[rows, device] += x[:, k]
        fill[rows, device] += 1
        holds[rows, device] = True
        node = node_of[device]
        free_on_node[rows, node] -= 1
        pending[rows, home] -= first
        placed[rows, expert] = True
        previous = expert
    _spread_duplicates(out)
    return out


# ---- local search ---------------------------------------------------------------------------


def _swap(ids: np.ndarray, x: np.ndarray, load: np.ndarray, a, d1, s1, d2, s2) -> None:
    """Swap slot (d1, s1) with (d2, s2) in layers `a` (at most one swap per device per call)."""
    tmp_id = ids[a, d1, s1].copy()
    tmp_x = x[a, d1, s1].copy()
    moved = tmp_x - x[a, d2, s2]
    load[a, d1] -= moved
    load[a, d2] += moved
    ids[a, d1, s1] = ids[a, d2, s2]
    x[a, d1, s1] = x[a, d2, s2]
    ids[a, d2, s2] = tmp_id
    x[a, d2, s2] = tmp_x


def _pair_round(
    ids: np.ndarray,
    x: np.ndarray,
    load: np.ndarray,
    shift: int,
    rule: _NodeRule | None,
    cnt: np.ndarray | None,
    home: np.ndarray | None,
) -> np.ndarray:
    """Pair the p-th heaviest device with the ((p + shift) mod P)-th lightest and make, for every
    pair, the one-for-one swap that best evens it. Returns which layers changed."""
    layers, devices, slots = x.shape
    pairs = devices // 2
    if pairs == 0 or slots == 1:
        return np.zeros(layers, dtype=bool)
    order = np.argsort(load, axis=1)
    light = order[:, (np.arange(pairs) + shift) % pairs]
    heavy = order[:, devices - 1 - np.arange(pairs)]
    r = np.arange(layers)[:, None]
    xh, xl, ih, il = x[r, heavy], x[r, light], ids[r, heavy], ids[r, light]
    half = (0.5 * (load[r, heavy] - load[r, light]))[..., None]  # [layers, pairs, 1]
    a_term, b_term = xh - half, xl
    if rule is not None:
        big = _big(x)
        a_term = a_term + 4.0 * big * _leaves_home(rule, cnt, home, ih, heavy, light)
        b_term = b_term + big * _leaves_home(rule, cnt, home, il, light, heavy)
    # score = |delta - half| - half with delta = xh_i - xl_k: negative iff the swap lowers the
    # pair's larger load; a replica that may not move is pushed so far away the score is huge.
    score = np.abs(a_term[..., :, None] - b_term[..., None, :]) - half[..., None]
    score = score.reshape(layers, pairs, slots * slots)
    best = score.argmin(axis=-1)
    tiny = _EPS * (1.0 + load.max(axis=1))[:, None]
    ok = np.take_along_axis(score, best[..., None], axis=-1)[..., 0] < -tiny
    # A device holds an expert at most once: drop (this round) a best swap that would break it.
    bi, bk = best // slots, best % slots
    moving_in = np.take_along_axis(il, bk[..., None], axis=-1)  # [layers, pairs, 1]
    moving_out = np.take_along_axis(ih, bi[..., None], axis=-1)
    ok &= ~(ih == moving_in).any(axis=-1) & ~(il == moving_out).any(axis=-1)
    a, p = np.nonzero(ok)
    if a.size:
        i, k = best[a, p] // slots, best[a, p] % slots
        hd, ld = heavy[a, p], light[a, p]
        if rule is not None:
            _move_counts(rule, cnt, a, ids[a, hd, i], hd, ld)
            _move_counts(rule, cnt, a, ids[a, ld, k], ld, hd)
        _swap(ids, x, load, a, hd, i, ld, k)
    return ok.any(axis=1)


def _big(x: np.ndarray) -> float:
    return 1e9 * (1.0 + float(x.max(initial=0.0)))


def _max_round(
    ids: np.ndarray,
    x: np.ndarray,
    load: np.ndarray,
    experts: int,
    rule: _NodeRule | None,
    cnt: np.ndarray | None,
    home: np.ndarray | None,
) -> np.ndarray:
    """For the heaviest device of every layer, the swap with any other device that lowers the
    larger of the two loads most. Returns which layers changed."""
    layers, devices, slots = x.shape
    if slots == 1:
        return np.zeros(layers, dtype=bool)
    m = load.argmax(axis=1)
    r = np.arange(layers)
    xm, im, top = x[r, m], ids[r, m], load[r, m]
    # label[l, e] = 1 + slot of expert e on the heaviest device (0: not there)
    label = np.zeros((layers, experts), dtype=np.int64)
    label[r[:, None], im] = np.arange(1, slots + 1)
    at = np.take_along_axis(label, ids.reshape(layers, -1), axis=1).reshape(layers, devices, slots)
    on_max = at > 0  # [layers, devices, slots]: that replica's expert is on the heaviest device
    seen = np.zeros((layers, slots + 1, devices), dtype=bool)
    seen[r[:, None, None], at, np.arange(devices)[None, :, None]] = True
    on_other = seen[:, 1:, :]  # [layers, slots_of_max, devices]: that expert is on device j
    if rule is not None:
        m_all = np.broadcast_to(m[:, None], (layers, devices))
        others = np.broadcast_to(np.arange(devices)[None, :], (layers, devices))
        leave_m = _leaves_home(
            rule,
            cnt,
            home,
            np.broadcast_to(im[:, None, :], (layers, devices, slots)),
            m_all,
            others,
        )  # [layers, devices, slots_of_m]
        on_other = on_other | leave_m.transpose(0, 2, 1)
        on_max = on_max | _leaves_home(rule, cnt, home, ids, others, m_all)
    half = 0.5 * (top[:, None] - load)  # [layers, devices]
    big = _big(x)
    # As in _pair_round: score = |delta - half| - half, negative iff the swap helps.
    a_term = xm[:, :, None] + 4.0 * big * on_other - half[:, None, :]  # [layers, slots, devices]
    b_term = x + big * on_max  # [layers, devices, slots]
    score = a_term[..., None] - b_term[:, None]
    np.abs(score, out=score)
    score -= half[:, None, :, None]
    score = score.reshape(layers, -1)
    best = score.argmin(axis=1)
    ok = score[r, best] < -_EPS * (1.0 + top)
    a = np.flatnonzero(ok)
    if a.size:
        b = best[a]
        i, j, k = b // (devices * slots), (b // slots) % devices, b % slots
        mm = m[a]
        if rule is not None:
            _move_counts(rule, cnt, a, ids[a, mm, i], mm, j)
            _move_counts(rule, cnt, a, ids[a, j, k], j, mm)
        _swap(ids, x, load, a, mm, i, j, k)
    return ok


def _leaves_home(
    rule: _NodeRule,
    cnt: np.ndarray | None,
    home: np.ndarray | None,
    experts_at: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
) -> np.ndarray:
    """True where moving `experts_at` (shape [layers, n, slots]) from device src[l, n] to
    dst[l, n] would take an expert's last replica off its home node."""
    assert cnt is not None and home is not None
    layers = experts_at.shape[0]
    src_node = rule.node_of_device[src][..., None]
    dst_node = rule.node_of_device[dst][..., None]
    r = np.arange(layers).reshape((layers,) + (1,) * (experts_at.ndim - 1))
    expert_home = home[r, experts_at]
    last = cnt[r, experts_at, np.broadcast_to(src_node, experts_at.shape)] <= 1
    return (src_node != dst_node) & (expert_home == src_node) & last


def _move_counts(
    rule: _NodeRule,
    cnt: np.ndarray | None,
    a: np.ndarray,
    experts: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
) -> None:
    assert cnt is not None
    np.add.at(cnt, (a, experts, rule.node_of_device[src]), -1)
    np.add.at(cnt, (a, experts, rule.node_of_device[dst]), 1)


_CHUNK_ELEMENTS = 4_000_000  # largest [layers, slots, devices, slots] array one round builds


def _local_search(
    ids: np.ndarray,
    x: np.ndarray,
    target: np.ndarray,
    settings: SearchSettings,
    experts: int,
    rule: _NodeRule | None = None,
) -> None:
    """Improve every layer in place until it reaches `target` (max device load) or stalls."""
    layers, devices, slots = x.shape
    active = np.flatnonzero(x.sum(axis=2).max(axis=1) > target)
    chunk = max(1, _CHUNK_ELEMENTS // (slots * devices * slots))
    cnt = rule.counts_on_nodes(ids) if rule is not None else None
    for begin in range(0, active.size, chunk):
        part = active[begin : begin + chunk]
        ia, xa = ids[part], x[part]
        ca = cnt[part] if cnt is not None else None
        ha = rule.home[part] if rule is not None else None
        _search_rounds(ia, xa, target[part], settings, experts, rule, ca, ha, part, ids, x)


def _search_rounds(
    ia: np.ndarray,
    xa: np.ndarray,
    ta: np.ndarray,
    settings: SearchSettings,
    experts: int,
    rule: _NodeRule | None,
    ca: np.ndarray | None,
    ha: np.ndarray | None,
    active: np.ndarray,
    ids: np.ndarray,
    x: np.ndarray,
) -> None:
    """The rounds of the local search on the layers `active` (copies ia, xa), written back."""
    la = xa.sum(axis=2)
    for rnd in range(settings.rounds):
        if active.size == 0:
            break
        changed = _pair_round(ia, xa, la, rnd, rule, ca, ha)
        changed |= _max_round(ia, xa, la, experts, rule, ca, ha)
        keep = changed & (la.max(axis=1) > ta)
        if not keep.all():  # write back the layers that are done, keep working on the rest
            done = ~keep
            ids[active[done]], x[active[done]] = ia[done], xa[done]
            active, ia, xa, la, ta = active[keep], ia[keep], xa[keep], la[keep], ta[keep]
            if ca is not None and ha is not None:
                ca, ha = ca[keep], ha[keep]
    if active.size:
        ids[active], x[active] = ia, xa


# ---- the search -----------------------------------------------------------------------------


@dataclass
class _Best:
    """The best placement found so far, per layer."""

    ids: np.ndarray  # [layers, devices, slots]
    max_load: np.ndarray  # [layers]
    source: list[str]

    def offer(self, layers: np.ndarray, ids: np.ndarray, max_load: np.ndarray, name: str) -> None:
        better = max_load < self.max_load[layers]
        for n, layer in enumerate(layers):
            if better[n]:
                self.ids[layer] = ids[n]
                self.max_load[layer] = max_load[n]
                self.source[layer] = name


def _slot_loads(loads: np.ndarray, counts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    layers = ids.shape[0]
    per_replica = loads / counts
    flat = np.take_along_axis(per_replica, ids.reshape(layers, -1), axis=1)
    return flat.reshape(ids.shape)


def _counts_of(ids: np.ndarray, experts: int) -> np.ndarray:
    layers = ids.shape[0]
    offsets = (np.arange(layers) * experts)[:, None]
    flat = (ids.reshape(layers, -1) + offsets).ravel()
    return np.bincount(flat, minlength=layers * experts).reshape(layers, experts)


def _improve(
    best: _Best,
    loads: np.ndarray,
    layers: np.ndarray,
    devices: int,
    slots_per_device: int,
    theta: float,
    target: np.ndarray,
    settings: SearchSettings,
    rule: _NodeRule | None,
    start: np.ndarray | None = None,
) -> None:
    """Build the theta candidate for `layers`, run the local search, offer it to `best`."""
    if layers.size == 0:
        return
    sub = loads[layers]
    experts = sub.shape[1]
    physical = devices * slots_per_device
    if start is not None:
        ids = start.copy()
        counts = _counts_of(ids, experts)
    else:
        counts = divisor_replica_counts(sub, physical, devices, theta)
        sub_rule = rule.subset(layers) if rule is not None else None
        if sub_rule is not None:
            ids = _node_local_pack(sub, counts, devices, slots_per_device, sub_rule)
        elif theta == 1.0:
            ids = greedy_pack(sub, counts, devices, slots_per_device)
        else:
            ids = _row_pack(sub, counts, devices, slots_per_device)
    x = _slot_loads(sub, counts, ids)
    if slots_per_device > 1:
        _local_search(
            ids,
            x,
            target[layers],
            settings,
            experts,
            rule.subset(layers) if rule is not None else None,
        )
    name = ("node-local " if rule is not None else "") + f"theta={theta:g}"
    best.offer(layers, ids, x.sum(axis=2).max(axis=1), name)


def _search(
    loads: np.ndarray,
    devices: int,
    slots_per_device: int,
    settings: SearchSettings,
    baseline_ids: np.ndarray,
    base_max: np.ndarray,
    heaviest: np.ndarray,
    rule: _NodeRule | None,
) -> _Best:
    """Best candidate per layer over the replica-count rules (never worse than the baseline)."""
    layers, experts = loads.shape
    mean = loads.sum(axis=1) / devices
    target = np.maximum(mean, heaviest) * (1.0 + settings.tolerance)
    best = _Best(baseline_ids.copy(), base_max.copy(), ["baseline"] * layers)
    if rule is not None:  # node-local candidates compete among themselves first
        best.max_load[:] = np.inf
    if slots_per_device == 1 and rule is None:
        return best  # one replica per device: min-max counts are optimal, nothing to pack
    todo = np.flatnonzero(base_max > target) if rule is None else np.arange(layers)
    if todo.size == 0:
        return best
    redundant = devices * slots_per_device > experts
    thetas = (settings.thetas if rule is None else settings.local_thetas) if redundant else (1.0,)
    # The heaviest replica limits a layer when it cannot share a device with S - 1 of the
    # lightest replicas and stay under the mean; then theta = 1 (min-max) is the right rule.
    limited = heaviest + (slots_per_device - 1) * loads.min(axis=1) >= mean
    for theta in thetas:
        if settings.theta_by_regime and len(thetas) > 1:
            use = todo[limited[todo]] if theta == 1.0 else todo[~limited[todo]]
        else:
            use = todo
        start = baseline_ids[use] if (theta == 1.0 and rule is None) else None
        _improve(best, loads, use, devices, slots_per_device, theta, target, settings, rule, start)
    if redundant and rule is None:
        # Layers still well above the bound: the best count rule varies by layer; try more.
        limit = np.maximum(mean, heaviest) * (1.0 + settings.refine_above)
        for theta in settings.refine_thetas:
            hard = todo[(best.max_load[todo] > limit[todo]) & ~limited[todo]]
            _improve(best, loads, hard, devices, slots_per_device, theta, target, settings, None)
    return best


def _node_rule(
    loads: np.ndarray, devices: int, slots_per_device: int, nodes: int, routing: Routing | None
) -> _NodeRule | None:
    """Home nodes for the node-local candidates, or None when locality cannot be helped."""
    if routing is None or nodes <= 1:
        return None
    layers, experts = loads.shape
    groups = routing.n_group
    if not hierarchical_applies(experts, devices, slots_per_device, nodes, groups):
        return None
    group_size = experts // groups
    node_of_group = pack_groups_onto_nodes(loads.reshape(layers, groups, group_size).sum(axis=2), nodes)
    home = np.repeat(node_of_group, group_size, axis=1)
    node_of_device = np.arange(devices) // (devices // nodes)
    return _NodeRule(home=home, node_of_device=node_of_device, nodes=nodes)


def optimize_placement(
    loads: np.ndarray,
    devices: int,
    slots_per_device: int,
    nodes: int = 1,
    routing: Routing | None = None,
    settings: SearchSettings = FULL_SEARCH,
) -> OptimizeResult:
    """moeplan's placement of `loads` [layers, experts] onto devices x slots_per_device.

    With nodes > 1 and a `routing` whose expert groups divide over the nodes, node-local
    candidates compete on nodes reached per token among those within
    `settings.locality_slack` of the best balance. Never worse than the EPLB global greedy
    on any layer.
    """
    loads = _as_loads(loads)
    check_layout(loads, devices, slots_per_device, nodes)
    if routing is not None:
        routing.check(loads.shape[1])
    layers, experts = loads.shape
    counts = min_max_replica_counts(loads, devices * slots_per_device, devices)
    baseline_ids = greedy_pack(loads, counts, devices, slots_per_device)
    base_max = _slot_loads(loads, counts, baseline_ids).sum(axis=2).max(axis=1)
    heaviest = heaviest_replica(loads, counts)
    best = _search(loads, devices, slots_per_device, settings, baseline_ids, base_max, heaviest, None)
    chosen, best_max, source = best.ids, best.max_load, best.source

    rule = _node_rule(loads, devices, slots_per_device, nodes, routing)
    if rule is not None and routing is not None:
        local = _search(loads, devices, slots_per_device, settings, baseline_ids, base_max, heaviest, rule)
        limit = np.minimum(best_max * (1.0 + settings.locality_slack), base_max)
        eligible = local.max_load <= limit * (1.0 + _EPS)
        if eligible.any():
            trial_ids = np.where(eligible[:, None, None], local.ids, chosen)
            routes = route_tokens(loads, routing, settings.locality_tokens, settings.seed)
            reach_now = nodes_reached(routes, Placement(chosen, experts), nodes)
            reach_local = nodes_reached(routes, Placement(trial_ids, experts), nodes)
            better = eligible & (reach_local < reach_now)
            chosen = np.where(better[:, None, None], local.ids, chosen)
            best_max = np.where(better, local.max_load, best_max)
            source = [local.source[n] if better[n] else source[n] for n in range(layers)]

    worse = best_max > base_max  # cannot happen (the baseline is the starting point); a guard
    if worse.any():
        chosen[worse] = baseline_ids[worse]
        source = ["baseline" if worse[n] else source[n] for n in range(layers)]
    return OptimizeResult(Placement(chosen, experts), Placement(baseline_ids, experts), source)


def imbalance_for(
    loads: np.ndarray,
    devices: int,
    slots_per_device: int,
    nodes: int = 1,
    routing: Routing | None = None,
) -> np.ndarray:
    """Per-layer imbalance (max device load / mean device load) of moeplan's placement, [layers].

    The fast variant of `optimize_placement` (`FAST_SEARCH`: theta = 1 where the heaviest replica
    limits, 0.8 elsewhere, at most 14 swap rounds, stops 0.1% above the bound; typically within
    0.15% of the full search on the median layer, see docs/experts.md); never worse than the
    EPLB global greedy. `nodes` matters only with a `routing` whose expert groups divide over
    the nodes (then node-local candidates may trade up to 1% balance for locality). Raises
    BadInputError when the layout cannot hold the experts (devices x slots < experts, slots >
    experts, nodes not dividing devices). Pure function of its arguments; nothing is cached.
    """
    loads = _as_loads(loads)
    result = optimize_placement(loads, devices, slots_per_device, nodes, routing, FAST_SEARCH)
    return imbalance(loads, result.placement)


def _as_loads(loads: np.ndarray) -> np.ndarray:
    arr = np.asarray(loads, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise BadInputError(f"loads must be [layers, experts]; got shape {list(arr.shape)}.")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise BadInputError("loads must be finite and non-negative.")
    return arr
