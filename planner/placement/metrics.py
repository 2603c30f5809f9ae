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
            raise BadInputError(
                f"{experts} experts do not split into n_group={self.n_group} equal groups."
            )
        if not 1 <= self.topk_group <= self.n_group:
            raise BadInputError(f"topk_group must be in 1..n_group ({self.n_group}).")
        reachable = self.topk_group * (experts // self.n_group)
        if not 1 <= self.experts_per_token <= reachable:
            raise BadInputError(
                f"experts_per_token must be in 1..{reachable} (the experts of topk_group groups)."
            )


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
            f"--nodes {nodes} must be >= 1 and divide --devices {devices} (devices split evenly "
            f"over nodes)."
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


def slot_aware_lower_bound(
    loads: np.ndarray, devices: int, slots_per_device: int, max_shift: int = 8
) -> np.ndarray:
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
    h = [
        heaviest_replica(loads, min_max_replica_counts(loads, physical - j, devices))
        for j in range(shifts + 1)
    ]
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
       replacement, by Gumbel top-k).
    2. An expert whose replicas all sit on one node sends the token to that node. The others, in
       the order drawn, use a replica on a node the token already reaches when there is one, else
       a replica chosen uniformly (the even split of the load model).

    The random stream of layer i is `default_rng([seed, i])` and depends only on the loads, so
    two placements of the same loads are compared on the same tokens.
    """
    loads = np.asarray(loads, dtype=np.float64)
    layers, experts = loads.shape
    routing.check(experts)
    if nodes <= 1:
        return np.ones(layers)
    devices, slots = placement.devices, placement.slots_per_device
    node_of_slot = np.repeat(np.arange(devices) // (devices // nodes), slots)
    group_size = experts // routing.n_group
    k, kg = routing.experts_per_token, routing.topk_group
    out = np.empty(layers)
    for layer in range(layers):
        rng = np.random.default_rng([seed, layer])
        w = loads[layer]
        if w.sum() <= 0:
            w = np.ones(experts)
        with np.errstate(divide="ignore"):
            log_w = np.log(w)
            log_g = np.log(w.reshape(routing.n_group, group_size).sum(axis=1))
        g_keys = log_g[None, :] + rng.gumbel(size=(tokens, routing.n_group))
        groups = np.argpartition(-g_keys, kg - 1, axis=1)[:, :kg]
        candidates = (groups[:, :, None] * group_size + np.arange(group_size)).reshape(tokens, -1)
        e_keys = log_w[candidates] + rng.gumbel(size=candidates.shape)
        pick = np.argpartition(-e_keys, k - 1, axis=1)[:, :k]
        chosen = np.take_along_axis(candidates, pick, axis=1)  # [tokens, k], in draw order

        ids = placement.device_experts[layer].ravel()
        has_node = np.zeros((experts, nodes), dtype=bool)
        has_node[ids, node_of_slot] = True
        spread = has_node.sum(axis=1)
        order = np.argsort(ids, kind="stable")
        counts = np.bincount(ids, minlength=experts)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        replica_node = node_of_slot[order]  # replicas grouped by expert

        reached = np.zeros((tokens, nodes), dtype=bool)
        rows = np.arange(tokens)
        single = spread[chosen] == 1
        home = has_node[chosen].argmax(axis=2)
        for j in range(k):
            reached[rows[single[:, j]], home[single[:, j], j]] = True
        uniform = rng.random((tokens, k))
        for j in range(k):
            e = chosen[:, j]
            todo = ~single[:, j] & ~(has_node[e] & reached).any(axis=1)
            if not todo.any():
                continue
            et = e[todo]
            pick_replica = starts[et] + np.minimum(
                (uniform[todo, j] * counts[et]).astype(np.int64), counts[et] - 1
            )
            reached[rows[todo], replica_node[pick_replica]] = True
        out[layer] = reached.sum(axis=1).mean()
    return out
