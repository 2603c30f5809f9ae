"""The baselines: DeepSeek's EPLB greedy, global and hierarchical policies.

DeepSeek EPLB (deepseek-ai/EPLB), re-implemented from its published description (no code was
copied). Per MoE layer:

- Replication: start from one replica per logical expert and add replicas one at a time to the
  expert with the highest load per replica until every physical slot is used
  (`replicas.min_max_replica_counts`).
- Packing: physical replicas, heaviest first, each onto the lightest device that still has a
  free slot.
- Hierarchical policy (when the expert groups divide evenly over the nodes): first pack whole
  expert groups onto nodes (heaviest group first to the lightest node with room; every node gets
  the same number of groups), then replicate within each node over the node's slots, then pack
  each node's replicas onto its devices. Otherwise the global policy: one group, one node.

Two deviations, both needed for a deployable map and both documented in docs/experts.md: a device
never receives two replicas of one expert (the packer skips a device already holding that
expert; such a copy would split nothing), so an expert has at most as many replicas as there are
devices (of its node); and the hierarchical policy also falls back to the global one when a
node's share of slots per device exceeds its share of experts (it could not fill its slots).
Ties go to the lowest device index, so results are deterministic.

All layers are processed at once with numpy (the loops run over slots, not over layers).
"""

from __future__ import annotations

import heapq

import numpy as np

from planner.placement.model import Placement
from planner.placement.replicas import min_max_replica_counts


def physical_replicas(counts: np.ndarray) -> np.ndarray:
    """Logical expert id of every physical replica, [layers, sum of counts] (same in every
    layer), experts in id order."""
    layers, experts = counts.shape
    per_layer = [np.repeat(np.arange(experts), counts[layer]) for layer in range(layers)]
    return np.stack(per_layer)


def greedy_pack(loads: np.ndarray, counts: np.ndarray, devices: int, slots_per_device: int) -> np.ndarray:
    """Pack replicas heaviest first onto the lightest device with a free slot that does not hold
    the same expert yet. Returns expert ids [layers, devices, slots]."""
    loads = np.asarray(loads, dtype=np.float64)
    layers, _ = loads.shape
    ids = physical_replicas(counts)
    per_replica = np.take_along_axis(loads / counts, ids, axis=1)
    # Heaviest first; replicas of one expert stay adjacent (ties broken by expert id).
    order = np.lexsort((ids, -per_replica), axis=-1)
    ids = np.take_along_axis(ids, order, axis=1)
    per_replica = np.take_along_axis(per_replica, order, axis=1)
    out = np.empty((layers, devices, slots_per_device), dtype=np.int64)
    if slots_per_device == 1:
        out[:, :, 0] = ids  # every device takes one: the k-th heaviest goes to device k
        return out
    if layers == 1:  # one layer (the cost model's skew model): a heap beats numpy's per-slot overhead
        out[0] = _pack_one_layer(ids[0], per_replica[0], devices, slots_per_device)
        _repair_duplicates(out, loads / counts)
        return out
    rows = np.arange(layers)
    device_load = np.zeros((layers, devices))
    # open_load: the device's load, or inf once it is full (so argmin skips it)
    open_load = np.zeros((layers, devices))
    fill = np.zeros((layers, devices), dtype=np.int64)
    holds = np.zeros((layers, devices), dtype=bool)  # devices holding the current expert
    same = np.zeros_like(ids, dtype=bool)
    same[:, 1:] = ids[:, 1:] == ids[:, :-1]
    any_same = np.asarray(same.any(axis=0))
    for k in range(ids.shape[1]):
        expert = ids[:, k]
        if any_same[k]:  # some layer places another replica of the previous expert
            holds &= same[:, k, None]
            candidate = np.where(holds, np.inf, open_load)
            device = candidate.argmin(axis=1)
            stuck = np.isinf(candidate[rows, device])
            if stuck.any():  # only devices holding this expert have room: repaired below
                device[stuck] = open_load[stuck].argmin(axis=1)
        else:
            if k:
                holds[:] = False
            device = open_load.argmin(axis=1)
        slot = fill[rows, device]
        out[rows, device, slot] = expert
        fill[rows, device] = slot + 1
        new_load = device_load[rows, device] + per_replica[:, k]
        device_load[rows, device] = new_load
        open_load[rows, device] = np.where(slot + 1 >= slots_per_device, np.inf, new_load)
        holds[rows, device] = True
    _repair_duplicates(out, loads / counts)
    return out


def _pack_one_layer(ids: np.ndarray, weights: np.ndarray, devices: int, slots: int) -> np.ndarray:
    """`greedy_pack` for one layer with a heap of open devices: same rule, same ties (lightest
    device, then lowest index; a device holding the expert is skipped unless every open one
    does, which `_repair_duplicates` then fixes)."""
    out = np.empty((devices, slots), dtype=np.int64)
    heap = [(0.0, d) for d in range(devices)]
    fill = [0] * devices
    holds: list[set[int]] = [set() for _ in range(devices)]
    for expert, weight in zip(ids.tolist(), weights.tolist(), strict=True):
        skipped = []
        load, d = heapq.heappop(heap)
        while expert in holds[d] and heap:
            skipped.append((load, d))
            load, d = heapq.heappop(heap)
        if expert in holds[d] and skipped:  # every open device holds it: take the lightest
            skipped.append((load, d))
            skipped.sort()
            load, d = skipped.pop(0)
        out[d, fill[d]] = expert
        fill[d] += 1
        holds[d].add(expert)
        if fill[d] < slots:
            heapq.heappush(heap, (load + weight, d))
        for item in skipped:
            heapq.heappush(heap, item)
    return out


def _repair_duplicates(ids: np.ndarray, per_replica: np.ndarray) -> None:
    """Swap away a second copy of an expert on one device, in place (rare: greedy packing only
    gets stuck when the last free slots sit on devices that already hold the expert)."""
    layers, devices, slots = ids.shape
    for layer in range(layers):
        while True:
            ordered = np.sort(ids[layer], axis=1)
            dup_rows = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
            if dup_rows.size == 0:
                break
            d = int(dup_rows[0])
            row = ordered[d]
            expert = int(row[1:][row[1:] == row[:-1]][0])
            slot = int(np.flatnonzero(ids[layer, d] == expert)[-1])
            best: tuple[float, int, int] | None = None
            for other in range(devices):
                if other == d or expert in ids[layer, other]:
                    continue
                for s in range(slots):
                    candidate = int(ids[layer, other, s])
                    if candidate in ids[layer, d]:
                        continue
                    change = abs(per_replica[layer, candidate] - per_replica[layer, expert])
                    if best is None or change < best[0]:
                        best = (change, other, s)
            if best is None:  # tight layouts (nearly every device holds every expert)
                deal_round_robin(ids[layer], per_replica[layer])
                break
            _, other, s = best
            ids[layer, d, slot], ids[layer, other, s] = ids[layer, other, s], expert


def deal_round_robin(grid: np.ndarray, per_replica: np.ndarray | None = None) -> None:
    """Re-deal the replicas of one layer's grid [devices, slots] in place, heaviest expert first,
    replica k to device k mod devices: never two replicas of an expert on one device (an expert
    has at most `devices` replicas). The fallback when swapping cannot remove a duplicate."""
    devices, slots = grid.shape
    experts = grid.ravel()
    weight = per_replica[experts] if per_replica is not None else np.zeros(experts.size)
    ordered = experts[np.lexsort((experts, -weight))]
    dealt = np.empty((slots, devices), dtype=grid.dtype)
    dealt.ravel()[:] = ordered
    grid[:] = dealt.T


def global_placement(loads: np.ndarray, devices: int, slots_per_device: int) -> Placement:
    """DeepSeek EPLB, global policy: replicate over all slots, pack over all devices."""
    loads = np.asarray(loads, dtype=np.float64)
    counts = min_max_replica_counts(loads, devices * slots_per_device, devices)
    ids = greedy_pack(loads, counts, devices, slots_per_device)
    return Placement(ids, loads.shape[1])


def hierarchical_applies(experts: int, devices: int, slots_per_device: int, nodes: int, groups: int) -> bool:
    """True when the hierarchical policy runs (otherwise it falls back to the global one)."""
    return (
        nodes > 1
        and groups >= nodes
        and groups % nodes == 0
        and experts % groups == 0
        and devices % nodes == 0
        and experts // nodes >= slots_per_device
    )


def pack_groups_onto_nodes(group_loads: np.ndarray, nodes: int) -> np.ndarray:
    """Node of every expert group, [layers, groups]: heaviest group first onto the lightest node
    that has room; every node takes groups / nodes groups."""
    layers, groups = group_loads.shape
    per_node = groups // nodes
    order = np.argsort(-group_loads, axis=1, kind="stable")
    rows = np.arange(layers)
    node_load = np.zeros((layers, nodes))
    fill = np.zeros((layers, nodes), dtype=np.int64)
    node_of_group = np.empty((layers, groups), dtype=np.int64)
    for k in range(groups):
        g = order[:, k]
        node = np.where(fill >= per_node, np.inf, node_load).argmin(axis=1)
        node_of_group[rows, g] = node
        node_load[rows, node] += group_loads[rows, g]
        fill[rows, node] += 1
    return node_of_group


def hierarchical_placement(
    loads: np.ndarray, devices: int, slots_per_device: int, nodes: int, groups: int
) -> Placement:
    """DeepSeek EPLB, hierarchical policy; the global policy when it does not apply.

    Devices are split evenly over nodes: device d sits on node d // (devices / nodes).
    """
    loads = np.asarray(loads, dtype=np.float64)
    layers, experts = loads.shape
    if not hierarchical_applies(experts, devices, slots_per_device, nodes, groups):
        return global_placement(loads, devices, slots_per_device)
    group_size = experts // groups
    node_of_group = pack_groups_onto_nodes(loads.reshape(layers, groups, group_size).sum(axis=2), nodes)
    node_of_expert = np.repeat(node_of_group, group_size, axis=1)
    # Experts ordered by node (ids ascending within a node): the node's local expert list.
    by_node = np.argsort(node_of_expert, axis=1, kind="stable")
    local_experts = experts // nodes
    devices_per_node = devices // nodes
    out = np.empty((layers, devices, slots_per_device), dtype=np.int64)
    for node in range(nodes):
        members = by_node[:, node * local_experts : (node + 1) * local_experts]
        local_loads = np.take_along_axis(loads, members, axis=1)
        counts = min_max_replica_counts(local_loads, devices_per_node * slots_per_device, devices_per_node)
        local_ids = greedy_pack(local_loads, counts, devices_per_node, slots_per_device)
        global_ids = np.take_along_axis(members, local_ids.reshape(layers, -1), axis=1)
        out[:, node * devices_per_node : (node + 1) * devices_per_node] = global_ids.reshape(
            layers, devices_per_node, slots_per_device
        )
    return Placement(out, experts)
