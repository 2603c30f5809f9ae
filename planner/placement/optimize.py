"""moeplan's placement: better replica counts and a packing improved by local search.

The baseline (DeepSeek EPLB's global greedy, `eplb.global_placement`) fixes the replica counts
that minimise the heaviest replica and packs heaviest first. With several slots per device the
device loads then sit 0.5-5% above the mean. Two things close most of that gap (measured; see
docs/experts.md and benchmarks/bench_experts.py):

1. Replica counts. Minimising the heaviest replica is right when that replica sets the maximum
   (one or two slots per device). When the mean sets it, what matters is that S replicas per
   device can add up to the mean, and min-max counts make dozens of equal, mid-sized replicas that
   do not combine well. So several count rules are tried: the divisor rule "next replica to the
   expert with the highest load / (replicas - 1 + theta)" for theta in `SearchSettings.thetas`
   (theta = 1 is EPLB's rule, 0.5 is Sainte-Lague rounding).
2. Packing. Each candidate is packed (EPLB's greedy for theta = 1, a row-by-row greedy for the
   others) and then improved by a local search of replica swaps, all layers at once in numpy:
   each round (a) pairs the i-th heaviest device with a lighter one (the pairing rotates every
   round) and makes, for every pair, the swap of one replica each that best evens the pair, then
   (b) makes the swap between the heaviest device and any other device that lowers the larger
   of the two loads most. Every accepted swap lowers the larger load of the two devices it
   touches, so a layer's maximum never rises. A layer stops once it is within
   `SearchSettings.tolerance` of its lower bound, or when no swap helps.

Per layer the candidate with the lowest maximum device load wins; the theta = 1 candidate starts
from the greedy baseline itself, and the baseline is kept explicitly as a fallback, so a layer
is never worse than the baseline.

Group-limited routing (nodes > 1 with expert groups, e.g. DeepSeek-V3's 8 groups / top-4): a
second family of candidates keeps one replica of every expert on its group's node (groups packed
onto nodes the way EPLB's hierarchical policy does, so a token mostly reaches only its groups'
nodes) while extra replicas go anywhere (that lets the node loads even out). Balance comes first:
per layer, among the candidates within `locality_slack` (1%) of the best balance found that are
also no worse than the baseline, the one whose simulated nodes-per-token
(`metrics.nodes_per_token`) is lowest is deployed.

CP-SAT was measured as an extra polishing step (one layer, 96 devices x 3 slots, greedy result
as hint, 3 s, 2 workers): it ended 4-22% above the mean where this local search reaches 0.7-2%,
so it is not used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import BadInputError
from planner.placement.eplb import (
    global_placement,
    greedy_pack,
    hierarchical_applies,
    pack_groups_onto_nodes,
    physical_replicas,
)
from planner.placement.metrics import (
    Routing,
    check_layout,
    imbalance,
    lower_bound,
    nodes_per_token,
)
from planner.placement.model import Placement, slot_loads
from planner.placement.replicas import divisor_replica_counts

_EPS = 1e-12


@dataclass(frozen=True)
class SearchSettings:
    """How hard the search works. `FULL_SEARCH` is what `moeplan experts` deploys;
    `FAST_SEARCH` is what `imbalance_for` uses inside the plan search."""

    thetas: tuple[float, ...] = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
    rounds: int = 80
    tolerance: float = 2e-4  # a layer within this relative gap of its bound stops improving
    locality_slack: float = 0.01  # nodes > 1: balance may be this much worse for locality
    locality_tokens: int = 1024  # tokens per layer of the nodes-per-token simulation
    seed: int = 0


FULL_SEARCH = SearchSettings()
FAST_SEARCH = SearchSettings(thetas=(1.0, 0.7), rounds=20, tolerance=1e-3, locality_tokens=256)


@dataclass(frozen=True)
class OptimizeResult:
    """moeplan's placement and where each layer's choice came from."""

    placement: Placement
    baseline: Placement  # DeepSeek EPLB global greedy on the same loads
    source: list[str]  # per layer: "theta=0.8", "baseline", "node-local theta=1", ...


# ---- packing --------------------------------------------------------------------------------


def _row_pack(
    loads: np.ndarray, counts: np.ndarray, devices: int, slots_per_device: int
) -> np.ndarray:
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
    """Swap a second copy of an expert on one device with a slot elsewhere, in place.

    Row packing keeps the replicas of one expert apart within a row, but an expert straddling
    two rows can land twice on one device; this moves the copy to the slot of the same row on
    the nearest device that can take it (loads change a little; the local search follows)."""
    layers, devices, slots = ids.shape
    if slots == 1:
        return
    ordered = np.sort(ids, axis=2)
    bad_layers = np.flatnonzero((ordered[:, :, 1:] == ordered[:, :, :-1]).any(axis=(1, 2)))
    for layer in bad_layers:
        grid = ids[layer]
        for _ in range(devices * slots):
            members = [set(row.tolist()) for row in grid]
            bad = next((d for d in range(devices) if len(members[d]) < slots), None)
            if bad is None:
                break
            values, first = np.unique(grid[bad], return_index=True)
            slot = next(s for s in range(slots) if s not in set(first.tolist()))
            expert = int(grid[bad, slot])
            done = False
            for step in range(1, devices):
                for other in ((bad + step) % devices, (bad - step) % devices):
                    partner = int(grid[other, slot])
                    if expert not in members[other] and partner not in members[bad]:
                        grid[bad, slot], grid[other, slot] = partner, expert
                        done = True
                        break
                    for s in range(slots):
                        partner = int(grid[other, s])
                        if expert not in members[other] and partner not in members[bad]:
                            grid[bad, slot], grid[other, s] = partner, expert
                            done = True
                            break
                    if done:
                        break
                if done:
                    break
            if not done:  # slots <= experts makes this unreachable; never loop forever
                break
            del values


# ---- node constraints (group-limited routing) -----------------------------------------------


@dataclass
class _NodeRule:
    """Keep at least one replica of every expert on its home node."""

    home: np.ndarray  # [layers, experts] node each expert belongs to
    node_of_device: np.ndarray  # [devices]
    nodes: int

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
        allowed = np.where(
            first[:, None], node_of[None, :] == home[:, None], spare[:, node_of]
        )
        allowed &= (fill < slots_per_device) & ~holds
        candidate = np.where(allowed, load, np.inf)
        device = candidate.argmin(axis=1)
        stuck = np.isinf(candidate[rows, device])
        if stuck.any():  # fall back to any device with room (kept valid by _spread_duplicates)
            device[stuck] = np.where(
                fill[stuck] < slots_per_device, load[stuck], np.inf
            ).argmin(axis=1)
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


def _swap(ids: np.ndarray, x: np.ndarray, a, d1, s1, d2, s2) -> None:
    tmp_id = ids[a, d1, s1].copy()
    tmp_x = x[a, d1, s1].copy()
    ids[a, d1, s1] = ids[a, d2, s2]
    x[a, d1, s1] = x[a, d2, s2]
    ids[a, d2, s2] = tmp_id
    x[a, d2, s2] = tmp_x


def _pair_round(ids: np.ndarray, x: np.ndarray, shift: int, rule: _NodeRule | None,
                cnt: np.ndarray | None, home: np.ndarray | None) -> np.ndarray:
    """Pair the p-th heaviest device with the ((p + shift) mod P)-th lightest and make, for every
    pair, the one-for-one swap that best evens it. Returns which layers changed."""
    layers, devices, slots = x.shape
    pairs = devices // 2
    if pairs == 0 or slots == 1:
        return np.zeros(layers, dtype=bool)
    load = x.sum(axis=2)
    order = np.argsort(load, axis=1)
    light = order[:, (np.arange(pairs) + shift) % pairs]
    heavy = order[:, devices - 1 - np.arange(pairs)]
    r = np.arange(layers)[:, None]
    xh, xl, ih, il = x[r, heavy], x[r, light], ids[r, heavy], ids[r, light]
    gap = (load[r, heavy] - load[r, light])[..., None, None]
    delta = xh[..., :, None] - xl[..., None, :]  # [layers, pairs, slots, slots]
    same = ih[..., :, None] == il[..., None, :]
    bad = same.any(axis=-1)[..., :, None] | same.any(axis=-2)[..., None, :]
    if rule is not None:
        bad |= _leaves_home(rule, cnt, home, ih, heavy, light)[..., :, None]
        bad |= _leaves_home(rule, cnt, home, il, light, heavy)[..., None, :]
    bad |= (delta <= _EPS) | (delta >= gap - _EPS)
    score = np.abs(delta - 0.5 * gap)
    score[bad] = np.inf
    score = score.reshape(layers, pairs, slots * slots)
    best = score.argmin(axis=-1)
    ok = np.isfinite(np.take_along_axis(score, best[..., None], axis=-1)[..., 0])
    a, p = np.nonzero(ok)
    if a.size:
        i, k = best[a, p] // slots, best[a, p] % slots
        hd, ld = heavy[a, p], light[a, p]
        if rule is not None:
            _move_counts(rule, cnt, a, ids[a, hd, i], hd, ld)
            _move_counts(rule, cnt, a, ids[a, ld, k], ld, hd)
        _swap(ids, x, a, hd, i, ld, k)
    return ok.any(axis=1)


def _max_round(ids: np.ndarray, x: np.ndarray, experts: int, rule: _NodeRule | None,
               cnt: np.ndarray | None, home: np.ndarray | None) -> np.ndarray:
    """For the heaviest device of every layer, the swap with any other device that lowers the
    larger of the two loads most. Returns which layers changed."""
    layers, devices, slots = x.shape
    if slots == 1:
        return np.zeros(layers, dtype=bool)
    load = x.sum(axis=2)
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
    half = 0.5 * (top[:, None] - load)  # [layers, devices]
    delta = xm[:, :, None, None] - x[:, None, :, :]  # [layers, slots, devices, slots]
    bad = on_other[..., None] | on_max[:, None]
    if rule is not None:
        m_all = np.broadcast_to(m[:, None], (layers, devices))
        others = np.broadcast_to(np.arange(devices)[None, :], (layers, devices))
        leave_m = _leaves_home(
            rule, cnt, home, np.broadcast_to(im[:, None, :], (layers, devices, slots)),
            m_all, others,
        )  # [layers, devices, slots_of_m]
        bad |= leave_m.transpose(0, 2, 1)[..., None]
        bad |= _leaves_home(rule, cnt, home, ids, others, m_all)[:, None]
    bad |= (delta <= _EPS) | (delta >= 2.0 * half[:, None, :, None] - _EPS)
    score = np.abs(delta - half[:, None, :, None]) - half[:, None, :, None]
    score[bad] = np.inf
    score = score.reshape(layers, -1)
    best = score.argmin(axis=1)
    ok = np.isfinite(score[r, best])
    a = np.flatnonzero(ok)
    if a.size:
        b = best[a]
        i, j, k = b // (devices * slots), (b // slots) % devices, b % slots
        mm = m[a]
        if rule is not None:
            _move_counts(rule, cnt, a, ids[a, mm, i], mm, j)
            _move_counts(rule, cnt, a, ids[a, j, k], j, mm)
        _swap(ids, x, a, mm, i, j, k)
    return ok


def _leaves_home(rule: _NodeRule, cnt: np.ndarray | None, home: np.ndarray | None,
                 experts_at: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
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


def _move_counts(rule: _NodeRule, cnt: np.ndarray | None, a: np.ndarray, experts: np.ndarray,
                 src: np.ndarray, dst: np.ndarray) -> None:
    assert cnt is not None
    np.add.at(cnt, (a, experts, rule.node_of_device[src]), -1)
    np.add.at(cnt, (a, experts, rule.node_of_device[dst]), 1)


def _local_search(ids: np.ndarray, x: np.ndarray, target: np.ndarray, settings: SearchSettings,
                  experts: int, rule: _NodeRule | None = None) -> None:
    """Improve every layer in place until it reaches `target` (max device load) or stalls."""
    active = np.flatnonzero(x.sum(axis=2).max(axis=1) > target)
    cnt = rule.counts_on_nodes(ids) if rule is not None else None
    for rnd in range(settings.rounds):
        if active.size == 0:
            break
        ia, xa = ids[active], x[active]
        ca = cnt[active] if cnt is not None else None
        ha = rule.home[active] if rule is not None else None
        changed = _pair_round(ia, xa, rnd, rule, ca, ha)
        changed |= _max_round(ia, xa, experts, rule, ca, ha)
        ids[active], x[active] = ia, xa
        if cnt is not None and ca is not None:
            cnt[active] = ca
        keep = changed & (xa.sum(axis=2).max(axis=1) > target[active])
        active = active[keep]


# ---- the search -----------------------------------------------------------------------------


def _candidates(
    loads: np.ndarray,
    devices: int,
    slots_per_device: int,
    settings: SearchSettings,
    baseline: Placement,
    rule: _NodeRule | None,
) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Improved placements (name, ids [layers, devices, slots], max device load [layers])."""
    layers, experts = loads.shape
    physical = devices * slots_per_device
    mean = loads.sum(axis=1) / devices
    target = lower_bound(loads, devices, slots_per_device) * mean * (1.0 + settings.tolerance)
    thetas = settings.thetas if physical > experts else (1.0,)
    out: list[tuple[str, np.ndarray, np.ndarray]] = []
    for theta in thetas:
        if rule is None and theta == 1.0:
            ids = baseline.device_experts.copy()  # start from the baseline: never worse
        else:
            counts = divisor_replica_counts(loads, physical, devices, theta)
            if rule is not None:
                ids = _node_local_pack(loads, counts, devices, slots_per_device, rule)
            elif theta == 1.0:
                ids = greedy_pack(loads, counts, devices, slots_per_device)
            else:
                ids = _row_pack(loads, counts, devices, slots_per_device)
        x = slot_loads(loads, Placement(ids, experts))
        if slots_per_device > 1:
            _local_search(ids, x, target, settings, experts, rule)
        name = ("node-local " if rule is not None else "") + f"theta={theta:g}"
        out.append((name, ids, x.sum(axis=2).max(axis=1)))
    return out


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
    node_of_group = pack_groups_onto_nodes(
        loads.reshape(layers, groups, group_size).sum(axis=2), nodes
    )
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
    loads = np.asarray(loads, dtype=np.float64)
    check_layout(loads, devices, slots_per_device, nodes)
    layers, experts = loads.shape
    baseline = global_placement(loads, devices, slots_per_device)
    base_max = slot_loads(loads, baseline).sum(axis=2).max(axis=1)
    cands = _candidates(loads, devices, slots_per_device, settings, baseline, None)
    stack_max = np.stack([c[2] for c in cands])  # [candidates, layers]
    pick = stack_max.argmin(axis=0)  # ties: the earliest (theta = 1, from the baseline)
    best_max = stack_max[pick, np.arange(layers)]
    chosen = np.stack([c[1] for c in cands])[pick, np.arange(layers)]
    source = [cands[int(p)][0] for p in pick]

    rule = _node_rule(loads, devices, slots_per_device, nodes, routing)
    if rule is not None and routing is not None:
        local = _candidates(loads, devices, slots_per_device, settings, baseline, rule)
        local_max = np.stack([c[2] for c in local])
        lpick = local_max.argmin(axis=0)
        lbest = local_max[lpick, np.arange(layers)]
        lids = np.stack([c[1] for c in local])[lpick, np.arange(layers)]
        limit = np.minimum(best_max * (1.0 + settings.locality_slack), base_max)
        eligible = lbest <= limit + _EPS * np.maximum(limit, 1.0)
        if eligible.any():
            current = Placement(chosen, experts)
            trial = Placement(np.where(eligible[:, None, None], lids, chosen), experts)
            reach_now = nodes_per_token(loads, current, nodes, routing,
                                        settings.locality_tokens, settings.seed)
            reach_local = nodes_per_token(loads, trial, nodes, routing,
                                          settings.locality_tokens, settings.seed)
            better = eligible & (reach_local < reach_now)
            chosen = np.where(better[:, None, None], lids, chosen)
            best_max = np.where(better, lbest, best_max)
            for layer in np.flatnonzero(better):
                source[layer] = local[int(lpick[layer])][0]

    worse = best_max > base_max  # cannot happen (theta = 1 starts from it); kept as a guard
    if worse.any():
        chosen[worse] = baseline.device_experts[worse]
        for layer in np.flatnonzero(worse):
            source[layer] = "baseline"
    return OptimizeResult(Placement(chosen, experts), baseline, source)


def imbalance_for(
    loads: np.ndarray,
    devices: int,
    slots_per_device: int,
    nodes: int = 1,
    routing: Routing | None = None,
) -> np.ndarray:
    """Per-layer imbalance (max device load / mean device load) of moeplan's placement, [layers].

    The fast variant of `optimize_placement` (`FAST_SEARCH`: replica-count rules theta = 1 and
    0.7, at most 20 local-search rounds, stops within 0.1% of the bound); never worse than the
    EPLB global greedy. Typically within 0.1-0.3% of `optimize_placement`'s result (see
    docs/experts.md). Pure function of its arguments; nothing is cached.
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
