"""Link factors implied by measured MoE dispatch and combine kernels: sources for the link bounds.

A machine's `link_bandwidth` factor scales every link level's bandwidth in the alpha-beta model of
planner.costmodel.comm. Where an engine's own dispatch and combine kernels have been timed on the
machine's links, the factor at which the model's all-to-all takes exactly the measured time is what
that kernel reaches, in the model's own terms (its latencies and fixed collective cost included).
validation/_fit.yaml bounds a group's fitted link factor by those values: the fit may choose within
what the engine's kernels reach, not beyond.

SGLang's decode on Ascend 910C (`--moe-a2a-backend deepep`, low-latency mode) runs DeepEP-Ascend's
low-latency kernels, which sgl-kernel-npu's README times over HCCS ("DeepEP-Ascend Performance",
"Low-Latency Kernels with Pure HCCS", commit b2e93094, 2025-09-26; the same table at f425bdf,
2026-08-21): 128 tokens per die, hidden 7168, top-8 experts, INT8 dispatch, BF16 combine, on an A3
SuperPoD. EP8 and EP16 stay inside one 16-die server; EP32 crosses two servers over the supernode's
HCCS, as the A3 machine's outer level does (hardware/a3.yaml). The model's levels work concurrently,
so its EP32 all-to-all is no slower than its EP16 one, where the kernel measured 10% slower: EP32
implies the lowest factors.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.costmodel import comm
from planner.costmodel.fitting import with_factors
from planner.specs.hardware import HardwareSpec

LINK_FACTOR = "efficiency.link_bandwidth"

SGL_KERNEL_NPU_SOURCE = (
    "sgl-kernel-npu README, DeepEP-Ascend Performance, Low-Latency Kernels with Pure HCCS "
    "(github.com/sgl-project/sgl-kernel-npu, commit b2e93094, 2025-09-26)"
)


@dataclass(frozen=True)
class KernelTime:
    """One measured dispatch or combine: what it moved and how long it took."""

    kernel: str  # "dispatch" or "combine"
    ep: int
    tokens_per_device: int
    hidden_size: int
    experts_per_token: int
    bytes_per_element: float
    measured_s: float
    source: str

    @property
    def bytes_out(self) -> float:
        """Bytes one device sends: one message per expert copy of each of its tokens."""
        return self.tokens_per_device * self.hidden_size * self.bytes_per_element * self.experts_per_token


def _deepep_ascend_ll(kernel: str, ep: int, measured_us: float) -> KernelTime:
    return KernelTime(
        kernel=kernel,
        ep=ep,
        tokens_per_device=128,
        hidden_size=7168,
        experts_per_token=8,
        bytes_per_element=1.0 if kernel == "dispatch" else 2.0,
        measured_s=measured_us * 1e-6,
        source=SGL_KERNEL_NPU_SOURCE,
    )


# The open engines' (SGLang's) low-latency kernels on A3 dies over HCCS (group 910c-open).
DEEPEP_ASCEND_LOW_LATENCY_HCCS: tuple[KernelTime, ...] = (
    _deepep_ascend_ll("dispatch", 8, 132.0),
    _deepep_ascend_ll("dispatch", 16, 139.0),
    _deepep_ascend_ll("dispatch", 32, 153.0),
    _deepep_ascend_ll("combine", 8, 126.0),
    _deepep_ascend_ll("combine", 16, 135.0),
    _deepep_ascend_ll("combine", 32, 151.0),
)


def model_time_s(hw: HardwareSpec, kernel: KernelTime, link_factor: float) -> float:
    """The model's time for the kernel's all-to-all on `hw` with its link factor at `link_factor`."""
    at = with_factors(hw, {LINK_FACTOR: link_factor})
    return float(comm.all_to_all_s(at, kernel.ep, kernel.bytes_out))


def implied_link_factor(hw: HardwareSpec, kernel: KernelTime) -> float:
    """The link factor at which the model's all-to-all takes the kernel's measured time.

    The model's time is bandwidth / factor + a latency that the factor does not touch, so two
    evaluations give both parts and the factor follows exactly. A kernel slower than the latency alone
    cannot be matched at any factor: ValueError.
    """
    t1 = model_time_s(hw, kernel, 1.0)
    t2 = model_time_s(hw, kernel, 2.0)
    bandwidth_s = 2.0 * (t1 - t2)
    latency_s = t1 - bandwidth_s
    if kernel.measured_s <= latency_s:
        raise ValueError(
            f"the {kernel.kernel} at EP{kernel.ep} took {kernel.measured_s * 1e6:.0f} us, no more than the "
            f"model's latency alone ({latency_s * 1e6:.1f} us): no link factor reproduces it"
        )
    return bandwidth_s / (kernel.measured_s - latency_s)


def link_factor_bounds(hw: HardwareSpec, kernels: tuple[KernelTime, ...]) -> tuple[float, float]:
    """(slowest, fastest) implied link factor over the kernels: the range the engine's kernels reach."""
    factors = [implied_link_factor(hw, k) for k in kernels]
    return min(factors), max(factors)
