"""The discrete search space: instance sizes, and per size the layout options of every module.

Instance sizes are whole nodes (multiples of devices_per_node) or the sub-node sizes a node
allows (powers of two below it), up to the card budget and the machine's instance limit, and
not below the smallest size whose HBM can hold the weights at all. Every node count is tried up
to 64 nodes; beyond that only node counts that are powers of two, up to MAX_INSTANCE_DEVICES.
These are named limits of the space (planner.candidates.restrictions lists each one, with what
it excludes and why).

Per size, the options of each module are the layouts that tile the devices:
- attention: DP x TP with TP dividing the heads (physics: a head is not split); TP a power of
  two inside a node by default, any size with `any_tp` (--any-tp). For prefill also the hybrid
  of pre-attention DP, attention-core TP and post-attention DP x TP (1 or 2), with the core TP
  any power of two up to the whole instance that divides the heads: a core TP across nodes pays
  its all-reduce on the slower link, which the cost model charges (planner.costmodel.comm);
- dense FFN and LM head: DP x TP with TP dividing the instance, as for attention;
- MoE: expert parallelism over every device of the instance but the dedicated shared-expert
  ones (an engine capability: vLLM splits the experts over its whole DP x TP world,
  vllm/model_executor/layers/fused_moe/config.py, FusedMoEParallelConfig.make). Every EP device
  holds slots_per_device from base (the fewest slots that hold every routed expert) up to
  base + `max_extra_slots` (4 by default), within half the number of experts as redundant
  copies unless the user lifts it (--max-extra-slots); the user may also cap the copies (0:
  none). All2All or AllGather+ReduceScatter (what the engines run). The shared expert is
  replicated on every device, or on dedicated devices, as many as balance the routed and the
  shared-expert devices' loads (`dedicated_shared_devices`: physics, at every instance size
  where one device is enough, not a count any deployment published), or split over the
  attention TP group (one option per attention TP above 1 of the size; `combo_ok` pairs it
  with the plain attention layouts of that TP only: vLLM's TP-sharded shared expert).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec
from planner.specs.plan import AttentionLayout, MoELayout, ParallelLayout, SharedExpertLayout

Phase = Literal["decode", "prefill"]
MAX_EXTRA_SLOTS = 4
MAX_REDUNDANCY = 0.5  # redundant copies at most half the number of routed experts
MAX_INSTANCE_DEVICES = 4096
DENSE_NODE_COUNTS = 64


@dataclass(frozen=True)
class MoEOption:
    """One MoE choice: the EP layout and where the shared expert runs."""

    moe: MoELayout
    shared: SharedExpertLayout

    def short(self) -> str:
        s = self.moe.short()
        if self.shared.placement == "dedicated":
            s += f"+shared x{self.shared.devices}"
        elif self.shared.placement == "split":
            s += f"+shared/TP{self.shared.tp}"
        return s


@dataclass
class SizeOptions:
    """Layout options of every module for one instance size of one phase."""

    devices: int
    attention: list[AttentionLayout]
    dense_ffn: list[ParallelLayout]
    lm_head: list[ParallelLayout]
    moe: list[MoEOption]
    # which (attention, dense FFN, MoE, LM head) combinations can run together: a split shared
    # expert only with the attention TP it is split over, and with an engine what it can combine
    # (planner.engines); None: every combination. With an engine, its prefill micro-batch counts.
    combo_ok: np.ndarray | None = None
    # True when combo_ok holds only the split shared expert's pairing (no engine): dominance may then
    # still prune within the groups of equal pairing (planner.candidates.phase_candidates._pruned)
    combo_split_only: bool = False
    prefill_micro_batches: tuple[int, ...] = (1, 2)
    # with an engine: per MoE option, whether it may run more than one prefill micro-batch
    moe_micro_ok: np.ndarray | None = None
    # with an engine: whether moeplan writes its chunked prefill (colocated instances may use it)
    chunked_prefill: bool = True
    # with an engine: whether a prompt longer than its attention DP rank's share of the prefill batch may take
    # several forwards (False: the engine prefills it whole, so only batches whose shares hold it are searched)
    prompt_over_forwards: bool = True
    # with an engine: whether a colocated instance may run whole prefill forwards apart from its decode steps
    # (False: every step of the engine mixes decodes and prompt tokens, so only chunked instances are searched)
    whole_prefill_forwards: bool = True
    # with an engine: whether its mixed steps keep the decodes' MTP draft tokens (False: chunked instances at MTP 0)
    chunked_mtp: bool = True

    @property
    def count(self) -> int:
        """Number of module-layout combinations (before concurrency and MTP)."""
        n = len(self.attention) * max(1, len(self.dense_ffn)) * len(self.lm_head) * max(1, len(self.moe))
        return n


@dataclass(frozen=True)
class SpaceLimits:
    """What the user pinned or bounded."""

    max_devices: int
    decode_devices: int | None = None
    prefill_devices: int | None = None
    mtp_tokens: tuple[int, ...] | None = None
    allow_alltoall: bool = True
    allow_allgather: bool = True
    max_extra_slots: int = MAX_EXTRA_SLOTS
    max_redundant_experts: int | None = None  # redundant copies per instance (0: none at all)
    engine: str | None = None  # restrict layouts to what this serving engine can run (planner.engines)
    max_redundancy: float | None = MAX_REDUNDANCY  # redundant copies over the routed experts (None: any)
    any_tp: bool = False  # TP of any size dividing the instance and the heads, not only powers of two in a node


def _pow2_upto(n: int) -> list[int]:
    out, p = [], 1
    while p <= n:
        out.append(p)
        p *= 2
    return out


def min_devices_for_weights(
    model: ModelSpec, hw: HardwareSpec, expert_bytes: float, other_bytes: float, hbm_utilization: float = 1.0
) -> int:
    """Fewest devices whose usable HBM (less reserve and buffers) can hold all weights once."""
    usable = hw.hbm_bytes * hbm_utilization - hw.memory.runtime_reserve.value - hw.memory.comm_buffers.value
    if usable <= 0:
        return 10**9
    total = expert_bytes + other_bytes
    return max(1, int(-(-total // usable)))


def instance_sizes(hw: HardwareSpec, max_devices: int, min_devices: int) -> list[int]:
    """Sub-node powers of two and whole-node multiples, within [min_devices, max_devices]."""
    cap = max_devices if hw.max_devices is None else min(max_devices, hw.max_devices)
    cap = min(cap, MAX_INSTANCE_DEVICES)
    node = hw.devices_per_node
    sizes = {s for s in _pow2_upto(node) if s < node}
    sizes.update(range(node, min(cap, DENSE_NODE_COUNTS * node) + 1, node))
    sizes.update(node * p for p in _pow2_upto(max(1, cap // node)))
    lowest = min((s for s in range(node, cap + node, node) if s >= min_devices), default=None)
    if lowest is not None:
        sizes.add(lowest)  # the smallest whole-node instance that holds the weights
    return sorted(s for s in sizes if min_devices <= s <= cap)


def _tp_options(devices: int, hw: HardwareSpec, divides: int | None, any_tp: bool = False) -> list[int]:
    """TP sizes that divide the instance and `divides` (the heads, or the FFN width): powers of
    two inside a node, or with `any_tp` every such divisor up to the instance."""
    sizes = range(1, devices + 1) if any_tp else _pow2_upto(min(devices, hw.devices_per_node))
    return [tp for tp in sizes if devices % tp == 0 and (divides is None or divides % tp == 0)]


def attention_options(
    model: ModelSpec, hw: HardwareSpec, devices: int, phase: Phase, any_tp: bool = False
) -> list[AttentionLayout]:
    """Attention layouts; prefill adds the hybrid with a core TP up to the whole instance."""
    heads = model.attention_tp_divisor()
    tps = _tp_options(devices, hw, heads, any_tp)
    out = [AttentionLayout(dp=devices // tp, tp=tp) for tp in tps]
    if phase == "prefill":
        # the core TP may span nodes: its all-reduce then runs on the slower link (priced)
        core_tps = [t for t in tps if t > 1]
        core_tps += [t for t in _pow2_upto(devices) if t > 1 and devices % t == 0 and heads % t == 0]
        for t in sorted(set(core_tps)):
            for post_tp in (1, 2):
                if devices % post_tp or heads % post_tp or t == 1:
                    continue
                out.append(
                    AttentionLayout(
                        dp=devices // t,
                        tp=t,
                        pre=ParallelLayout(dp=devices, tp=1),
                        post=ParallelLayout(dp=devices // post_tp, tp=post_tp),
                    )
                )
    return out


def parallel_options(hw: HardwareSpec, devices: int, divides: int | None, any_tp: bool = False) -> list[ParallelLayout]:
    """DP x TP layouts (TP sizes as `_tp_options`)."""
    return [ParallelLayout(dp=devices // tp, tp=tp) for tp in _tp_options(devices, hw, divides, any_tp)]


def dedicated_shared_devices(model: ModelSpec, devices: int) -> int | None:
    """How many of an instance's devices run the shared expert when it has its own (None: none).

    Physics: every token goes to top-k routed experts and to the shared ones, and the MoE part of
    a step waits for the busiest device: a routed device receives k / (devices - n) of the tokens'
    assignments, a shared-expert device s / n. The count whose busier group is the least busy is
    one of the two integers around the crossing devices x s / (k + s); of those the better
    balanced one is taken (the other only moves weights between the groups: a named limit,
    planner.candidates.restrictions)."""
    if model.moe is None or not model.moe.shared_experts:
        return None
    k, s = model.moe.experts_per_token, model.moe.shared_experts
    crossing = devices * s / (k + s)
    counts = [n for n in (math.floor(crossing), math.ceil(crossing)) if 1 <= n < devices]
    if not counts:
        return None
    return min(counts, key=lambda n: (max(k / (devices - n), s / n), n))


def moe_options(
    model: ModelSpec, devices: int, limits: SpaceLimits, split_tps: tuple[int, ...] = ()
) -> list[MoEOption]:
    """EP layouts with 0..max_extra_slots redundant slots per device, both comm schemes, shared placements
    (`split_tps`: the attention TPs above 1 a split shared expert may span)."""
    if model.moe is None:
        return []
    experts = model.moe.routed_experts
    comms = [c for c, ok in (("alltoall", limits.allow_alltoall), ("allgather", limits.allow_allgather)) if ok]
    shareds = [SharedExpertLayout()]
    n_sh = dedicated_shared_devices(model, devices)
    if n_sh is not None:
        shareds.append(SharedExpertLayout(placement="dedicated", devices=n_sh))
    if model.moe.shared_experts:
        shareds += [SharedExpertLayout(placement="split", tp=tp) for tp in split_tps if tp > 1]
    out = []
    for shared in shareds:
        ep = devices - shared.dedicated_devices
        base = -(-experts // ep)
        most = experts
        if limits.max_redundancy is not None:
            most = max(base + 1, int((1 + limits.max_redundancy) * experts // ep))
        for slots in range(base, min(experts, base + limits.max_extra_slots, most) + 1):
            if limits.max_redundant_experts is not None and ep * slots - experts > limits.max_redundant_experts:
                continue
            for comm in comms:
                out.append(MoEOption(MoELayout(ep=ep, slots_per_device=slots, comm=comm), shared))  # type: ignore[arg-type]
    return out


def size_options(model: ModelSpec, hw: HardwareSpec, devices: int, phase: Phase, limits: SpaceLimits) -> SizeOptions:
    """Every module's layout options for one instance size."""
    any_tp = limits.any_tp
    dense = parallel_options(hw, devices, model.dense_intermediate_size, any_tp) if model.num_dense_layers else []
    attention = attention_options(model, hw, devices, phase, any_tp)
    split_tps = tuple(sorted({a.tp for a in attention if a.tp > 1 and not a.is_hybrid}))
    opts = SizeOptions(
        devices=devices,
        attention=attention,
        dense_ffn=dense,
        lm_head=parallel_options(hw, devices, None, any_tp),
        moe=moe_options(model, devices, limits, split_tps),
    )
    if limits.engine is not None:
        return restrict_to_engine(opts, model, hw, limits.engine)
    pairing = split_pairing(opts.attention, opts.moe)
    if pairing is not None:
        shape = (len(opts.attention), max(1, len(opts.dense_ffn)), len(opts.moe), len(opts.lm_head))
        opts.combo_ok = np.broadcast_to(pairing[:, None, :, None], shape).copy()
        opts.combo_split_only = True
    return opts


def split_pairing(attention: list[AttentionLayout], moe: list[MoEOption]) -> np.ndarray | None:
    """[attention, MoE] True where the pair can run: a split shared expert only with a plain attention
    layout of the TP it is split over (None when no option is split)."""
    if not any(o.shared.placement == "split" for o in moe):
        return None
    return np.array(
        [[o.shared.placement != "split" or (a.tp == o.shared.tp and not a.is_hybrid) for o in moe] for a in attention],
        dtype=bool,
    ).reshape(len(attention), len(moe))


def pairing_groups(opts: SizeOptions) -> tuple[np.ndarray, np.ndarray]:
    """Attention and MoE option groups of equal pairing under `split_pairing` (attention: its TP when
    plain, -1 when hybrid; MoE: its EP and the TP its shared expert is split over)."""
    att = np.array([-1 if a.is_hybrid else a.tp for a in opts.attention])
    keys = sorted({(o.moe.ep, o.shared.split_tp) for o in opts.moe})
    moe = np.array([keys.index((o.moe.ep, o.shared.split_tp)) for o in opts.moe])
    return att, moe


def restrict_to_engine(opts: SizeOptions, model: ModelSpec, hw: HardwareSpec, engine: str) -> SizeOptions:
    """Keep the layouts `engine` can run: per-module options it cannot run at all are dropped, and
    `combo_ok` marks the combinations whose layouts it can run together (e.g. vLLM-Ascend's LM-head
    TP must equal the attention TP or split its DP ranks)."""
    from planner.engines.profiles import attention_ok, combo_ok, load_profile, micro_batches, moe_ok, multi_micro_ok

    profile = load_profile(engine)
    experts = model.moe.routed_experts if model.moe is not None else 0
    att = [a for a in opts.attention if attention_ok(profile, a)]
    moe = [o for o in opts.moe if moe_ok(profile, hw, o.moe, o.shared, experts)]
    dense: list[ParallelLayout | None] = list(opts.dense_ffn) or [None]
    mask = np.zeros((len(att), len(dense), max(1, len(moe)), len(opts.lm_head)), dtype=bool)
    for a, al in enumerate(att):
        for f, fl in enumerate(dense):
            for h, hl in enumerate(opts.lm_head):
                mask[a, f, :, h] = combo_ok(profile, hw, opts.devices, al, fl, hl)
    pairing = split_pairing(att, moe)
    if pairing is not None:
        mask &= pairing[:, None, :, None]
    return SizeOptions(
        devices=opts.devices,
        attention=att,
        dense_ffn=opts.dense_ffn,
        lm_head=opts.lm_head,
        moe=moe,
        combo_ok=mask,
        prefill_micro_batches=micro_batches(profile),
        moe_micro_ok=np.array([multi_micro_ok(profile, o.moe) for o in moe] or [True], dtype=bool),
        chunked_prefill=profile.capabilities.chunked_prefill,
        prompt_over_forwards=profile.capabilities.prompt_over_forwards is None,
        whole_prefill_forwards=profile.capabilities.whole_prefill_forwards is None,
        chunked_mtp=profile.capabilities.chunked_mtp is None,
    )
