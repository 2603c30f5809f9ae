"""Collective communication: an alpha-beta model on the machine's interconnect levels.

A collective over `n` devices takes the devices of one contiguous group (parallel groups are laid
out innermost first, so a TP8 group on an A2 stays inside a node and a TP2 group on CM384 inside a
910C package). For each level the model counts the bytes one device moves over that level's links;
the levels work concurrently (the report's fine-grained hierarchical pipeline: inter-node traffic
hidden under intra-node traffic), so the bandwidth term is the slowest level. On top come one
latency per level crossed and the fixed launch cost of a collective.

The modules count each collective among their operators' launches as well (modules._fixed), so a
collective pays `fixed_costs.collective` twice (an AllReduce, costed here as a ReduceScatter and an
AllGather, pays it twice in its time alone): in effect twice msmodeling's 10 us. This is known and
kept (2026-12-07). Charged once, the refit fitted the measured rows no better (leave-one-out median
|error| 5.07% -> 5.11%, rows beyond 10% 14 -> 18) and put vllm-ascend's runs kept aside (MiniMax-M2.5,
GLM-5.1, Qwen3.5) 3-10 points further on the fast side: the rows carry per-collective time that no
published figure names (docs/model.md, "Fixed costs").

Hierarchical AllGather: a shard crosses into each group once and is replicated inside it. With
m_j devices reached at level j (m_-1 = 1), the bytes a device receives over level j are
    b_j = s * n * (1/m_{j-1} - 1/m_j)            for every level above the innermost,
    b_0 = (n - 1) * s - sum_{j>0} b_j             for the innermost,
where s is the shard one device contributes. ReduceScatter mirrors it. All-to-all moves distinct
data to every peer, so each level carries the share of peers it reaches.

MoE dispatch and combine (`moe_all_to_all_s`) send each token to the devices holding its experts.
The low-latency kernels of decode (DeepEP's, and the fused dispatch/combine of CloudMatrix-Infer) send
one message per expert copy, `copies` per token, over whichever level reaches the expert. The
high-throughput kernels of prefill send a token once to each distinct device; when the instance
spans groups joined by a slower outer level, DeepEP's normal kernels send it once to each remote
group (node) and forward it inside that group over the inner level ("normal kernels with NVLink and
RDMA forwarding", DeepEP README, docs/legacy.md). A group is entered by some of a token's
experts with probability 1 - (1 - 1/G)^k for G groups and k experts; the forwarding then carries the
rest of the token's distinct devices over the inner level. The time is the slower level's; the
kernel takes whichever of the direct and the forwarded route is faster.

All functions take and return numpy-compatible values so that the cost model can evaluate many
concurrencies at once.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from planner.specs.hardware import HardwareSpec


def _levels(hw: HardwareSpec, n: int) -> list[tuple[int, float, float]]:
    """(devices reached cumulatively, effective bandwidth B/s, latency s) per level used by n."""
    eff = hw.efficiency.link_bandwidth.value
    out: list[tuple[int, float, float]] = []
    prev = 1
    for lvl, m in zip(hw.levels, hw.group_sizes(n), strict=True):
        if m > prev:
            out.append((m, lvl.bandwidth_bytes_per_s * eff, lvl.latency_s))
            prev = m
        if m >= n:
            break
    return out


def allgather_s(hw: HardwareSpec, n: int, shard_bytes: ArrayLike) -> np.ndarray:
    """Time of a hierarchical AllGather in which every one of n devices contributes shard_bytes."""
    s = np.asarray(shard_bytes, dtype=float)
    if n <= 1:
        return np.zeros_like(s)
    levels = _levels(hw, n)
    upper = 0.0
    prev_m = 1
    per_level_bytes = []
    for m, _bw, _lat in levels:
        per_level_bytes.append(n * (1.0 / prev_m - 1.0 / m))
        prev_m = m
    # innermost level carries what did not arrive over the device's own upper-level links
    upper = sum(per_level_bytes[1:])
    per_level_bytes[0] = (n - 1) - upper
    t_bw = np.zeros_like(s)
    latency = 0.0
    for (_m, bw, lat), factor in zip(levels, per_level_bytes, strict=True):
        t_bw = np.maximum(t_bw, s * factor / bw)
        latency += lat
    return t_bw + latency + hw.fixed_costs.collective.value


def reduce_scatter_s(hw: HardwareSpec, n: int, shard_bytes: ArrayLike) -> np.ndarray:
    """Time of a ReduceScatter whose output shard per device is shard_bytes (mirror of AllGather)."""
    return allgather_s(hw, n, shard_bytes)


def allreduce_s(hw: HardwareSpec, n: int, buffer_bytes: ArrayLike) -> np.ndarray:
    """Time of an AllReduce of buffer_bytes per device (ReduceScatter then AllGather)."""
    shard = np.asarray(buffer_bytes, dtype=float) / max(n, 1)
    return reduce_scatter_s(hw, n, shard) + allgather_s(hw, n, shard)


def all_to_all_s(hw: HardwareSpec, n: int, bytes_out: ArrayLike) -> np.ndarray:
    """Time of an all-to-all in which a device sends bytes_out, spread evenly over its n-1 peers.

    The data to peers at each level goes over that level's links concurrently; the slowest level
    sets the bandwidth term (the hot receiver's volume is the caller's business: pass it in).
    """
    b = np.asarray(bytes_out, dtype=float)
    if n <= 1:
        return np.zeros_like(b)
    t_bw = np.zeros_like(b)
    latency = 0.0
    prev_m = 1
    for m, bw, lat in _levels(hw, n):
        share = (m - prev_m) / (n - 1)
        t_bw = np.maximum(t_bw, b * share / bw)
        latency = max(latency, lat)
        prev_m = m
    return t_bw + latency + hw.fixed_costs.collective.value


def expected_distinct(groups: int, picks: int) -> float:
    """Distinct groups `picks` uniform draws land in, of `groups` (1 for one group)."""
    if groups <= 1:
        return 1.0
    return groups * (1.0 - (1.0 - 1.0 / groups) ** picks)


def moe_all_to_all_s(
    hw: HardwareSpec, n: int, token_bytes: ArrayLike, per_device_copies: float, experts_per_token: int
) -> np.ndarray:
    """One MoE dispatch (or combine) of a device's tokens: `token_bytes` per device (tokens x payload),
    each token going to `per_device_copies` devices (distinct devices, or one per expert copy).

    The direct route spreads the copies over the levels by their share of peers (as
    `all_to_all_s`); the forwarded route (two or more levels) sends each token once per remote
    outer group and forwards the remaining copies over the level below. The faster one is taken.
    """
    b = np.asarray(token_bytes, dtype=float)
    direct = all_to_all_s(hw, n, b * per_device_copies)
    levels = _levels(hw, n)
    if n <= 1 or len(levels) < 2:
        return direct
    inner_m, inner_bw, _ = levels[-2]
    _, outer_bw, _ = levels[-1]
    groups = max(1, n // inner_m)
    remote = expected_distinct(groups, experts_per_token) * (groups - 1) / groups
    inner_copies = max(per_device_copies - remote, 0.0)
    t_bw = np.maximum(b * remote / outer_bw, b * inner_copies / inner_bw)
    latency = sum(lat for _, _, lat in levels)
    forwarded = t_bw + latency + hw.fixed_costs.collective.value
    out: np.ndarray = np.minimum(direct, forwarded)
    return out
