"""How good a placement is: imbalance, lower bounds, and nodes reached per token.

Imbalance of a layer = max device load / mean device load (a replicated expert's load splits
evenly over its replicas; 1.0 is perfect). The MoE layer waits for its slowest device, so this
factor multiplies the expert-compute time of the layer.

Lower bound (`lower_bound`) = max(mean device load, heaviest replica when replica counts minimise
it) / mean device load: no placement of the same slots can do better. It ignores that the device
holding the heaviest replica must also fill its other S - 1 slots; `slot_aware_lower_bound` adds
that (still a valid bound) and is much tighter with 1-3 slots per device on skewed loads, where
the simple bound cannot be reached.

Nodes per token (`nodes_per_token`): with devices split evenly over nodes (device d on node
d // (devices / nodes)), how many nodes one token's dispatch reaches, averaged over a seeded
simulation of `tokens` tokens per layer (see `nodes_per_token` for the routing model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import BadInputError
from planner.placement.model import Placement, device_loads
from planner.placement.replicas import heaviest_replica, min_max_replica_counts


@dataclass(frozen=True)
class Routing:
    """How a token picks experts: `experts_per_token` (top-k) experts, drawn from `topk_group`
    of the `n_group` expert groups (DeepSeek-V3: 8 of 256 experts within 4 of 8 groups)."""

    experts_per_token: int = 8
    n_group: int = 1
    topk_group: int = 1

    def check(self, experts: int) -> None:
        """BadInputError unless this routing fits `experts` logical experts."""
        if self.n_group < 1 or experts % self.n_group:
            raise BadInputError(f"{experts} experts do not split into n_group={self.n_group} equal groups.")
        if not 1 <= self.topk_group <= self.n_group:
            raise BadInputError(f"topk_group must be in 1..n_group ({self.n_group}).")
        reachable = self.topk_group * (experts // self.n_group)
        if not 1 <= self.experts_per_token <= reachable:
            raise BadInputError(f"experts_per_token must be in 1..{reachable} (the experts of topk_group groups).")


def default_routing(experts: int) -> Routing:
    """Routing assumed without a model: top-min(8, experts), no group limit."""
    return Routing(experts_per_token=min(8, experts), n_group=1, topk_group=1)


def check_layout(loads: np.ndarray, devices: int, slots_per_device: int, nodes: int = 1) -> None:
    """BadInputError unless `loads` [layers, experts] fit devices x slots_per_device over nodes."""
    if loads.ndim != 2 or loads.shape[0] < 1 or loads.shape[1] < 1:
        raise BadInputError(f"loads must be [layers, experts]; got shape {list(loads.shape)}.")
    experts = loads.shape[1]
    if devices < 1:
        raise BadInputError(f"--devices must be >= 1; got {devices}.")
    if slots_per_device < 1:
        raise BadInputError(f"--slots-per-device must be >= 1; got {slots_per_device}.")
    if devices * slots_per_device < experts:
        raise BadInputError(
            f"{devices} devices x {slots_per_device} slots = {devices * slots_per_device} slots "
            f"cannot hold {experts} experts; use --slots-per-device >= "
            f"{-(-experts // devices)} or more devices."
        )
    if slots_per_device > experts:
        raise BadInputError(
            f"--slots-per-device {slots_per_device} exceeds the {experts} experts; a device holds "
            f"at most one replica of an expert."
        )
    if nodes < 1 or devices % nodes:
        raise BadInputError(
            f"--nodes {nodes} must be >= 1 and divide --devices {devices} (devices split evenly over nodes)."
        )


def _per_mean(value: np.ndarray, loads: np.ndarray, devices: int) -> np.ndarray:
    mean = loads.sum(axis=1) / devices
    safe = np.where(mean > 0, mean, 1.0)
    return np.where(mean > 0, value / safe, 1.0)


def imbalance(loads: np.ndarray, placement: Placement) -> np.ndarray:
    """Max device load / mean device load per layer, [layers] (1.0 for a layer with no load)."""
    loads = np.asarray(loads, dtype=np.float64)
    return _per_mean(device_loads(loads, placement).max(axis=1), loads, placement.devices)


def lower_bound(loads: np.ndarray, devices: int, slots_per_device: int) -> np.ndarray:
    """max(mean device load, min-max heaviest replica) / mean device load per layer, [layers]."""
    loads = np.asarray(loads, dtype=np.float64)
    counts = min_max_replica_counts(loads, devices * slots_per_device, devices)
    mean = loads.sum(axis=1) / devices
    return _per_mean(np.maximum(mean, heaviest_replica(loads, counts)), loads, devices)


def lower_bound_for(loads: np.ndarray, devices: int, slots_per_device: int) -> np.ndarray:
    """`lower_bound` with the inputs checked (BadInputError on a bad layout)."""
    loads = np.asarray(loads, dtype=np.float64)
    check_layout(loads, devices, slots_per_device)
    return lower_bound(loads, devices, slots_per_device)


def slot_aware_lower_bound(loads: np.ndarray, devices: int, slots_per_device: int, max_shift: int = 8) -> np.ndarray:
    """A tighter valid lower bound per layer, [layers] (relative to the mean device load).

    The device holding the heaviest replica (load M) holds S - 1 other replicas, each at least the
    lightest replica m: max device >= M + (S - 1) m. Let the lightest replica belong to expert b
    with 1 + j replicas, and h(j) the min-max heaviest replica with j fewer slots. If
    load_b < h(j), some other expert carries M >= h(j), and m >= w_min / (1 + j), so the bound is
    h(j) + (S - 1) w_min / (1 + j); otherwise (possible only if (1 + j) w_min >= h(j)),
    M >= h(0) and m >= h(j) / (1 + j). Minimised over j = 0..max_shift; larger j are covered by
    h(max_shift) (or h(0) when the second case cannot be excluded). Equals `lower_bound` with one
    slot per device.
    """
    loads = np.asarray(loads, dtype=np.float64)
    layers, experts = loads.shape
    physical = devices * slots_per_device
    extra = physical - experts
    extra_slots = slots_per_device - 1
    w_min = loads.min(axis=1)
    shifts = min(extra, max_shift, devices - 1)
    h = [heaviest_replica(loads, min_max_replica_counts(loads, physical - j, devices)) for j in range(shifts + 1)]
    best = np.full(layers, np.inf)
    for j in range(shifts + 1):
        regular = h[j] + extra_slots * w_min / (1 + j)
        odd = h[0] + extra_slots * h[j] / (1 + j)
        bound = np.where((1 + j) * w_min < h[j], regular, np.minimum(regular, odd))
        best = np.minimum(best, bound)
    if shifts < min(extra, devices - 1):
        tail_ok = (1 + extra) * w_min < h[shifts]
        best = np.minimum(best, np.where(tail_ok, h[shifts], h[0]))
    mean = loads.sum(axis=1) / devices
    return _per_mean(np.maximum(mean, best), loads, devices)


@dataclass(frozen=True)
class TokenRoutes:
    """Simulated tokens of every layer: the experts each picks and a uniform draw per pick."""

    experts: np.ndarray  # [layers, tokens, experts_per_token] logical expert ids
    uniform: np.ndarray  # [layers, tokens, experts_per_token] in [0, 1): which replica


def route_tokens(loads: np.ndarray, routing: Routing, tokens: int = 1024, seed: int = 0) -> TokenRoutes:
    """Draw `tokens` tokens per layer (see `nodes_per_token`); independent of any placement."""
    loads = np.asarray(loads, dtype=np.float64)
    layers, experts = loads.shape
    routing.check(experts)
    groups, group_size = routing.n_group, experts // routing.n_group
    k, kg = routing.experts_per_token, routing.topk_group
    rng = np.random.default_rng(seed)
    # A tiny floor keeps every expert drawable (a layer with no load becomes uniform).
    w = np.where(loads.sum(axis=1, keepdims=True) > 0, loads, 1.0)
    w = w + 1e-9 * w.mean(axis=1, keepdims=True)
    group_load = w.reshape(layers, groups, group_size).sum(axis=2)
    if kg < groups:  # k of n without replacement, prob. ~ weight: the k smallest Exp(1)/weight
        keys = rng.standard_exponential((layers, tokens, groups)) / group_load[:, None, :]
        chosen_groups = np.argpartition(keys, kg - 1, axis=2)[..., :kg]
    else:
        chosen_groups = np.broadcast_to(np.arange(groups), (layers, tokens, groups))
    rows = layers * tokens
    chosen_groups = chosen_groups.reshape(rows, kg)
    layer_of = np.repeat(np.arange(layers), tokens)
    group_cum = np.cumsum(group_load[layer_of[:, None], chosen_groups], axis=1)
    expert_cum = np.concatenate(([0.0], np.cumsum(w.ravel())))  # rises across all layers
    picks = np.full((rows, k), -1, dtype=np.int64)
    # Draw with replacement (group ~ load, then expert ~ load by inverse CDF) and redraw
    # duplicates: the same distribution as drawing without replacement.
    for j in range(k):
        need = np.arange(rows)
        while need.size:
            u = rng.random(need.size) * group_cum[need, -1]
            slot = np.minimum((group_cum[need] <= u[:, None]).sum(axis=1), kg - 1)
            group = chosen_groups[need, slot]
            first = layer_of[need] * experts + group * group_size
            target = expert_cum[first] + rng.random(need.size) * group_load[layer_of[need], group]
            flat = np.searchsorted(expert_cum, target, side="right") - 1
            expert = np.clip(flat, first, first + group_size - 1) - layer_of[need] * experts
            dup = (picks[need, :j] == expert[:, None]).any(axis=1)
            fresh = ~dup
            picks[need[fresh], j] = expert[fresh]
            need = need[dup]
    chosen = picks.reshape(layers, tokens, k)
    return TokenRoutes(experts=chosen, uniform=rng.random(chosen.shape, dtype=np.float32))


def nodes_reached(routes: TokenRoutes, placement: Placement, nodes: int) -> np.ndarray:
    """Average nodes reached per token of `routes` under `placement`, per layer, [layers]."""
    layers, tokens, k = routes.experts.shape
    if nodes <= 1:
        return np.ones(layers)
    devices, slots = placement.devices, placement.slots_per_device
    experts = placement.num_experts
    ids = placement.device_experts.reshape(layers, -1)
    node_of_slot = np.repeat(np.arange(devices) // (devices // nodes), slots)
    has_node = np.zeros((layers, experts, nodes), dtype=bool)
    has_node[np.arange(layers)[:, None], ids, node_of_slot[None, :]] = True
    spread = has_node.sum(axis=2)  # [layers, experts]
    order = np.argsort(ids, axis=1, kind="stable")
    replica_node = node_of_slot[order]  # [layers, slots in all], replicas grouped by expert
    counts = placement.replica_counts
    starts = np.cumsum(counts, axis=1) - counts
    lrow = np.arange(layers)[:, None]
    reached = np.zeros((layers, tokens, nodes), dtype=bool)
    chosen = routes.experts
    single = np.take_along_axis(spread, chosen.reshape(layers, -1), axis=1).reshape(chosen.shape)
    single = single == 1
    for j in range(k):
        e = chosen[:, :, j]  # [layers, tokens]
        has = has_node[lrow, e]  # [layers, tokens, nodes]
        forced = single[:, :, j]
        reached |= has & forced[..., None]
    for j in range(k):
        e = chosen[:, :, j]
        has = has_node[lrow, e]
        todo = ~single[:, :, j] & ~(has & reached).any(axis=2)
        n = np.take_along_axis(counts, e, axis=1)
        index = np.take_along_axis(starts, e, axis=1) + np.minimum(
            (routes.uniform[:, :, j] * n).astype(np.int64), n - 1
        )
        node = np.take_along_axis(replica_node, index, axis=1)  # [layers, tokens]
        lay, tok = np.nonzero(todo)
        reached[lay, tok, node[lay, tok]] = True
    return reached.sum(axis=2).mean(axis=1)


def nodes_per_token(
    loads: np.ndarray,
    placement: Placement,
    nodes: int,
    routing: Routing,
    tokens: int = 1024,
    seed: int = 0,
) -> np.ndarray:
    """Average number of nodes one token's dispatch reaches, per layer, [layers].

    Seeded simulation, `tokens` tokens per layer, driven by the layer's loads:

    1. A token picks `topk_group` distinct groups with probability proportional to group load
       (the sum of its experts' loads), then `experts_per_token` distinct experts among the
       experts of those groups with probability proportional to expert load (both without
       replacement). A layer with no load is taken as uniform.
    2. An expert whose replicas all sit on one node sends the token to that node. The others, in
       a fixed order, use a replica on a node the token already reaches when there is one, else
       a replica chosen uniformly (the even split of the load model).

    The draws come from `default_rng(seed)` and depend only on the loads (`route_tokens`), so two
    placements of the same loads are compared on the same tokens (`nodes_reached`).
    """
    loads = np.asarray(loads, dtype=np.float64)
    if nodes <= 1:
        return np.ones(loads.shape[0])
    return nodes_reached(route_tokens(loads, routing, tokens, seed), placement, nodes)
