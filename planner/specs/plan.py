"""The plan file format (a contract: deployment tools and scripts read these names).

A plan names a model, a machine, a quantization scheme, a workload, optional SLOs, and for each
phase (decode, prefill; either may be absent) how many devices one instance has, how many
instances there are, and the parallel layout of every module. `check_plan` applies the rules that
need the model and the machine (tiling, expert slots, head divisibility); the pydantic models
apply the rules that need nothing else.

Field names carry units. A "device" is one die as the software sees it (see `specs.hardware`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from planner.errors import BadInputError
from planner.specs.hardware import HardwareSpec, Strict
from planner.specs.model import MLA_KINDS, ModelSpec
from planner.specs.workload import Workload

__all__ = ["Workload"]  # the workload section lives in planner.specs.workload (lengths, prefix hits)

# what the decode and prefill sections of a v1 colocated plan had to share (one layout, one set of instances)
COLOCATED_SHARED_FIELDS = (
    "devices",
    "instances",
    "attention",
    "dense_ffn",
    "moe",
    "shared_expert",
    "lm_head",
    "embedding",
)
PLAN_SCHEMA_VERSION = 2
MAX_DEVICES_PER_INSTANCE = 1_000_000
MAX_CONCURRENCY_PER_DEVICE = 10_000_000
_WHOLE_TOLERANCE = 1e-6


def integral_as_int(value: float) -> int | float:
    """A whole number given as a float (8.0) is the integer it names (how a plan states a concurrency)."""
    return int(round(value)) if abs(value - round(value)) < _WHOLE_TOLERANCE else value


# Sequences in flight per (attention) device. A whole number, or a fraction when an attention TP
# group holds fewer sequences than it has devices (one sequence on a TP16 group: 1/16 = 0.0625);
# the phase's validator requires a whole number of sequences per attention TP group.
ConcurrencyPerDevice = Annotated[
    int | float,
    Field(gt=0, le=MAX_CONCURRENCY_PER_DEVICE, allow_inf_nan=False),
    AfterValidator(integral_as_int),
]


def sequences_on(concurrency_per_device: float, devices: int) -> int:
    """Sequences `devices` attention devices hold (an attention TP group: one DP rank's seats; an
    instance: its seats), a whole number for every concurrency a plan validates."""
    return int(round(concurrency_per_device * devices))


def holds_whole_sequences(concurrency_per_device: float, tp: int) -> bool:
    """Whether an attention TP group of `tp` devices holds a whole number of sequences (at least one)."""
    seqs = concurrency_per_device * tp
    return abs(seqs - round(seqs)) < _WHOLE_TOLERANCE * max(1.0, seqs) and round(seqs) >= 1


def check_whole_sequences(field: str, concurrency_per_device: float, tp: int) -> None:
    """Refuse a concurrency that puts a fraction of a sequence on an attention TP group."""
    seqs = concurrency_per_device * tp
    if not holds_whole_sequences(concurrency_per_device, tp):
        step = 1 / tp
        raise ValueError(
            f"{field} = {concurrency_per_device:g} puts {seqs:g} sequences on each attention TP group of {tp} "
            f"devices; give a whole number of sequences per group: a multiple of 1/{tp} = {step:g}"
            + ("" if tp > 1 else " (with attention TP1, a whole number)")
        )


def fits_micro_batches(micro_batches: int, concurrency_per_device: float) -> bool:
    """Each micro-batch needs a sequence per attention device; one micro-batch always runs."""
    return micro_batches == 1 or micro_batches <= math.floor(concurrency_per_device + _WHOLE_TOLERANCE)


class SLO(Strict):
    """Latency targets; either may be absent."""

    ttft_ms: float | None = Field(default=None, gt=0, le=1e9, allow_inf_nan=False)
    tpot_ms: float | None = Field(default=None, gt=0, le=1e9, allow_inf_nan=False)
    max_itl_ms: float | None = Field(
        default=None,
        gt=0,
        le=1e9,
        allow_inf_nan=False,
        description="longest gap between two steps that emit a sequence's tokens (inter-token latency)",
    )
    tpot_at_percentile: bool = Field(
        default=False,
        description="hold to tpot_ms the TPOT of the request at the workload's slo_percentile of its own MTP "
        "acceptance (planner.costmodel.acceptance_spread), not the mean TPOT",
    )


class ParallelLayout(Strict):
    """Data parallel × tensor parallel over the devices of one instance."""

    dp: int = Field(ge=1, le=MAX_DEVICES_PER_INSTANCE)
    tp: int = Field(ge=1, le=MAX_DEVICES_PER_INSTANCE)

    @property
    def devices(self) -> int:
        """Devices this layout occupies."""
        return self.dp * self.tp

    def short(self) -> str:
        """Compact form for tables: DP32, TP8, DP4xTP8."""
        if self.tp == 1:
            return f"DP{self.dp}"
        if self.dp == 1:
            return f"TP{self.tp}"
        return f"DP{self.dp}xTP{self.tp}"


class AttentionLayout(ParallelLayout):
    """Attention layout; `pre`/`post` give the hybrid layouts of the report's A2 prefill.

    `dp`/`tp` lay out the attention core (q_b/kv_b projections, scores, values). `pre` lays out
    the projections before it (norm, q_a, kv_a), `post` the output projection after it. Both
    default to the core layout.
    """

    pre: ParallelLayout | None = None
    post: ParallelLayout | None = None

    @property
    def pre_layout(self) -> ParallelLayout:
        """Layout of the projections before the attention core."""
        return self.pre or ParallelLayout(dp=self.dp, tp=self.tp)

    @property
    def post_layout(self) -> ParallelLayout:
        """Layout of the output projection."""
        return self.post or ParallelLayout(dp=self.dp, tp=self.tp)

    @property
    def is_hybrid(self) -> bool:
        """True when pre or post differ from the core layout."""
        core = (self.dp, self.tp)
        return (self.pre_layout.dp, self.pre_layout.tp) != core or (
            self.post_layout.dp,
            self.post_layout.tp,
        ) != core

    def short(self) -> str:
        core = ParallelLayout(dp=self.dp, tp=self.tp).short()
        if not self.is_hybrid:
            return core
        return f"{self.pre_layout.short()}/{core}/{self.post_layout.short()}"


class MoELayout(Strict):
    """Expert parallelism: `ep` devices hold routed experts in `slots_per_device` slots each."""

    ep: int = Field(ge=1, le=MAX_DEVICES_PER_INSTANCE)
    slots_per_device: int = Field(ge=1, le=65536)
    comm: Literal["allgather", "alltoall"] = "alltoall"

    def short(self) -> str:
        comm = "AG" if self.comm == "allgather" else "A2A"
        return f"EP{self.ep}x{self.slots_per_device}/{comm}"


class SharedExpertLayout(Strict):
    """Where the shared expert runs: on every device for its own tokens (replicated), on dedicated
    devices, or split over the attention TP group (split: each device holds 1/tp of its weights and
    runs them on every token of its TP group, then the group all-reduces the output - vLLM's
    DeepseekV2MLP over the TP group, vllm-ascend's default with attention TP > 1 and expert
    parallelism, vllm_ascend/ops/fused_moe/shared_experts.py SharedExpertParallelMode.TENSOR_PARALLEL)."""

    placement: Literal["replicated", "dedicated", "split"] = "replicated"
    devices: int = Field(default=0, ge=0, le=MAX_DEVICES_PER_INSTANCE)
    tp: int = Field(default=1, ge=1, le=MAX_DEVICES_PER_INSTANCE, description="split: the attention TP it spans")

    @model_validator(mode="after")
    def _devices_match_placement(self) -> SharedExpertLayout:
        if self.placement == "dedicated" and self.devices < 1:
            raise ValueError("a dedicated shared expert needs devices >= 1")
        if self.placement != "dedicated" and self.devices:
            raise ValueError(f"a {self.placement} shared expert takes no devices; drop 'devices'")
        if self.placement == "split" and self.tp < 2:
            raise ValueError("a split shared expert needs tp >= 2 (the attention TP it is split over)")
        if self.placement != "split" and self.tp != 1:
            raise ValueError(f"only a split shared expert takes tp; drop 'tp' from placement: {self.placement}")
        return self

    @property
    def dedicated_devices(self) -> int:
        """Devices used only by the shared expert (0 when replicated or split)."""
        return self.devices if self.placement == "dedicated" else 0

    @property
    def split_tp(self) -> int:
        """Devices one copy of the shared expert's weights is split over (1: not split)."""
        return self.tp if self.placement == "split" else 1

    def short(self) -> str:
        """'replicated', 'dedicated x4', 'split TP16'."""
        if self.placement == "dedicated":
            return f"dedicated x{self.devices}"
        if self.placement == "split":
            return f"split TP{self.tp}"
        return "replicated"


EMBEDDING_DESCRIPTION = (
    "input embedding (vocabulary split over tp); default: over the attention's TP group (its 'pre' layout), as "
    "vLLM, vllm-ascend, SGLang and MindIE lay it out, or with the LM head when the model ties the two"
)


def embedding_layout(section: Any, tied: bool) -> ParallelLayout:
    """The input embedding's layout of a phase or an AFD section: the plan's `embedding`; else, for a model
    that ties its embedding to its LM head, the LM head's (one table); else the attention's TP group (its
    'pre' layout, where the tokens enter), as the engines moeplan launches lay it out: vLLM's and
    vllm-ascend's VocabParallelEmbedding over the TP group (vllm-ascend's finegrained embedding TP needs
    recompute_scheduler_enable, ascend_config.py at v0.25.1rc1), SGLang 0.5.23's over the attention-TP
    group (layers/vocab_parallel_embedding.py get_embedding_tp_kwargs), MindIE's word_embed_tp = attn_tp
    (atb_llm/utils/mapping.py at 8b4871ad)."""
    if section.embedding is not None:
        return section.embedding
    if tied:
        return section.lm_head_layout
    return attention_embedding_layout(section.attention)


def attention_embedding_layout(attention: AttentionLayout) -> ParallelLayout:
    """The embedding over the attention's TP group: the layout of its 'pre' part, where the tokens enter."""
    pre = attention.pre_layout
    return ParallelLayout(dp=pre.dp, tp=pre.tp)


class PhasePlan(Strict):
    """What both phases share: instance size and count, and one layout per module."""

    devices: int = Field(ge=1, le=MAX_DEVICES_PER_INSTANCE, description="devices in one instance")
    instances: int = Field(default=1, ge=1, le=MAX_DEVICES_PER_INSTANCE)
    attention: AttentionLayout
    dense_ffn: ParallelLayout | None = None
    moe: MoELayout | None = None
    shared_expert: SharedExpertLayout = SharedExpertLayout()
    lm_head: ParallelLayout | None = None
    embedding: ParallelLayout | None = Field(default=None, description=EMBEDDING_DESCRIPTION)

    @property
    def dense_layout(self) -> ParallelLayout:
        """Dense FFN layout; pure data parallel when the plan leaves it out."""
        return self.dense_ffn or ParallelLayout(dp=self.devices, tp=1)

    @property
    def lm_head_layout(self) -> ParallelLayout:
        """LM head layout; pure data parallel when the plan leaves it out."""
        return self.lm_head or ParallelLayout(dp=self.devices, tp=1)

    @property
    def total_devices(self) -> int:
        """Devices of all instances of this phase."""
        return self.devices * self.instances


class DecodePlan(PhasePlan):
    """A decode instance: sequences in flight per device, MTP draft tokens per step, micro-batches.

    `micro_batches: 2` splits each step's batch in two and overlaps one half's compute with the
    other half's dispatch/combine (DeepSeek's and SGLang's two-batch overlap, CloudMatrix-Infer's
    decode micro-batch pipeline).
    """

    concurrency_per_device: ConcurrencyPerDevice = Field(
        description="sequences in flight per device: a whole number, or a multiple of 1/attention.tp below one "
        "(one sequence on a TP16 group: 0.0625)"
    )
    mtp_tokens: int = Field(default=0, ge=0, le=4)
    micro_batches: Literal[1, 2] = Field(
        default=1,
        description="1, or 2: two micro-batches whose compute and MoE communication overlap",
    )

    hardware: str | None = Field(
        default=None, min_length=1, description="machine of the decode instances (overrides the plan's 'hardware')"
    )

    @model_validator(mode="after")
    def _micro_batches_fit_decode(self) -> DecodePlan:
        check_whole_sequences("concurrency_per_device", self.concurrency_per_device, self.attention.tp)
        if not fits_micro_batches(self.micro_batches, self.concurrency_per_device):
            raise ValueError("micro_batches cannot exceed concurrency_per_device; use micro_batches: 1")
        return self


class PrefillPlan(PhasePlan):
    """A prefill instance: tokens in one forward pass of the instance, and micro-batches."""

    batch_tokens: int = Field(ge=1, le=1_000_000_000)
    micro_batches: int = Field(default=1, ge=1, le=16)
    context_parallel: bool = Field(
        default=False,
        description=(
            "each prompt split over every attention DP rank (vllm-ascend's prefill context parallel, SGLang's "
            "NSA prefill context parallelism); false: each prompt whole on one rank, as DP attention runs it"
        ),
    )
    hardware: str | None = Field(
        default=None, min_length=1, description="machine of the prefill instances (overrides the plan's 'hardware')"
    )
    kv_transfer_bytes_per_s: float | None = Field(
        default=None,
        gt=0,
        le=1e15,
        allow_inf_nan=False,
        description="prefill->decode KV link per device (default: the slower machine's kv_transfer_bandwidth)",
    )

    @model_validator(mode="after")
    def _context_parallel_has_ranks(self) -> PrefillPlan:
        if self.context_parallel and self.attention.dp < 2:
            raise ValueError(
                "context_parallel splits each prompt over the attention DP ranks and attention.dp is 1; "
                "set attention.dp >= 2 or context_parallel: false"
            )
        return self

    @model_validator(mode="after")
    def _micro_batches_fit(self) -> PrefillPlan:
        if self.micro_batches > self.batch_tokens:
            raise ValueError("micro_batches cannot exceed batch_tokens")
        return self


class ColocatedPlan(PhasePlan):
    """Colocated instances: prefill forwards and decode steps take turns on the same devices.

    One layout per module, one instance size and count, the decode concurrency and MTP depth, and
    the prefill batch of one forward. `decode_section()` / `prefill_section()` are the views of
    the two phases the cost model scores (same devices, same layouts).
    """

    concurrency_per_device: ConcurrencyPerDevice = Field(
        description="decode sequences in flight per device (a multiple of 1/attention.tp below one)"
    )
    mtp_tokens: int = Field(default=0, ge=0, le=4)
    prefill_batch_tokens: int = Field(ge=1, le=1_000_000_000, description="tokens of one prefill forward")
    prefill_micro_batches: int = Field(default=1, ge=1, le=16)
    decode_micro_batches: Literal[1, 2] = Field(
        default=1,
        description="1, or 2: decode steps split in two micro-batches whose compute and MoE communication overlap",
    )
    chunk_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000,
        description="chunked prefill: prompt tokens one step of the instance may carry along with its decode "
        "batch (vLLM's chunked prefill, a per-step token budget); unset: prefill runs as whole forwards of "
        "prefill_batch_tokens between decode steps",
    )

    @model_validator(mode="before")
    @classmethod
    def _chunk_is_the_batch(cls, data: Any) -> Any:
        # with chunked prefill a prefill forward is one chunk: prefill_batch_tokens may be left out
        if isinstance(data, dict) and data.get("chunk_tokens") is not None and "prefill_batch_tokens" not in data:
            data = {**data, "prefill_batch_tokens": data["chunk_tokens"]}
        return data

    @model_validator(mode="after")
    def _micro_batches_fit(self) -> ColocatedPlan:
        if self.prefill_micro_batches > self.prefill_batch_tokens:
            raise ValueError("prefill_micro_batches cannot exceed prefill_batch_tokens")
        check_whole_sequences("concurrency_per_device", self.concurrency_per_device, self.attention.tp)
        if not fits_micro_batches(self.decode_micro_batches, self.concurrency_per_device):
            raise ValueError("decode_micro_batches cannot exceed concurrency_per_device; use decode_micro_batches: 1")
        if self.chunk_tokens is not None:
            if self.prefill_batch_tokens != self.chunk_tokens:
                raise ValueError(
                    f"chunk_tokens = {self.chunk_tokens} but prefill_batch_tokens = {self.prefill_batch_tokens}: "
                    "with chunked prefill one forward is one chunk; drop prefill_batch_tokens"
                )
            if self.prefill_micro_batches != 1:
                raise ValueError("a prefill chunk rides along a decode step: set prefill_micro_batches: 1")
        return self

    def _layout_fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in COLOCATED_SHARED_FIELDS}

    def decode_section(self) -> DecodePlan:
        """The decode phase of these instances, as the cost model scores it."""
        return DecodePlan(
            concurrency_per_device=self.concurrency_per_device,
            mtp_tokens=self.mtp_tokens,
            micro_batches=self.decode_micro_batches,
            **self._layout_fields(),
        )

    def prefill_section(self) -> PrefillPlan:
        """The prefill phase of these instances, as the cost model scores it."""
        return PrefillPlan(
            batch_tokens=self.prefill_batch_tokens, micro_batches=self.prefill_micro_batches, **self._layout_fields()
        )

    @classmethod
    def from_sections(cls, decode: DecodePlan, prefill: PrefillPlan) -> ColocatedPlan:
        """One colocated section from a decode and a prefill section that share devices and layouts."""
        for name in COLOCATED_SHARED_FIELDS:
            if getattr(decode, name) != getattr(prefill, name):
                raise ValueError(
                    f"colocated: decode.{name} and prefill.{name} differ; colocated instances run both "
                    "phases with one layout, so give them the same value"
                )
        return cls(
            concurrency_per_device=decode.concurrency_per_device,
            mtp_tokens=decode.mtp_tokens,
            decode_micro_batches=decode.micro_batches,
            prefill_batch_tokens=prefill.batch_tokens,
            prefill_micro_batches=prefill.micro_batches,
            **{name: getattr(decode, name) for name in COLOCATED_SHARED_FIELDS},
        )


AFD_MAX_MICRO_BATCHES = 4


class AfdPlan(Strict):
    """Attention-FFN disaggregated (AFD) instances: attention on some devices, experts on others.

    One instance is `attention_devices` devices that run attention (with the KV cache), the
    embedding, the LM head and the MTP module, and `ffn_devices` devices that hold the routed
    experts (`moe`: EP over the FFN devices, slots and redundancy as in any plan). Every layer
    ships its activations from the attention side to the FFN side and back over `link`, and
    `micro_batches` micro-batches ping-pong so that both sides stay busy. Where the dense FFN
    layers and the shared expert run is a choice (`dense_ffn_on`, `shared_expert_on`); the
    default, both on the FFN side, is what vLLM's afd-plugin runs (its Ascend runtime refuses
    `compute_gate_on_attention`, so the gate, the shared expert and the dense MLP stay with the
    experts: vllm-project/afd-plugin afd_plugin/compat/npu/feature_validation.py,
    docs/design/module/model_integration.md).

    Without `prefill_batch_tokens` the instances decode (fed by the plan's `prefill` section, or
    alone: a decode-only plan); with it they also prefill, whole forwards of that many tokens
    between decode steps (AFD for both phases, as the afd-plugin's prefill/decode colocation
    recipes).
    """

    attention_devices: int = Field(ge=1, le=MAX_DEVICES_PER_INSTANCE, description="attention devices of one instance")
    ffn_devices: int = Field(ge=1, le=MAX_DEVICES_PER_INSTANCE, description="FFN (expert) devices of one instance")
    instances: int = Field(default=1, ge=1, le=MAX_DEVICES_PER_INSTANCE)
    micro_batches: int = Field(
        default=2,
        ge=1,
        le=AFD_MAX_MICRO_BATCHES,
        description="micro-batches that ping-pong between the attention and the FFN side (1: none)",
    )
    link: str = Field(
        default="auto",
        min_length=1,
        description="the machine's link level that carries the per-layer activations between the two sides "
        "(a level name of the hardware file, or its first word: hccs, ub, roce, ...); auto: the level the "
        "instance's devices span, FFN devices first then attention devices",
    )
    attention: AttentionLayout = Field(description="attention layout over the attention devices")
    dense_ffn: ParallelLayout | None = Field(
        default=None, description="dense FFN layout over the devices of the side it runs on (default: DP)"
    )
    dense_ffn_on: Literal["ffn", "attention"] = "ffn"
    moe: MoELayout | None = Field(default=None, description="experts over the FFN devices")
    shared_expert: SharedExpertLayout = SharedExpertLayout()
    shared_expert_on: Literal["ffn", "attention"] = "ffn"
    lm_head: ParallelLayout | None = Field(default=None, description="LM head over the attention devices (default: DP)")
    embedding: ParallelLayout | None = Field(default=None, description=EMBEDDING_DESCRIPTION)
    concurrency_per_device: ConcurrencyPerDevice = Field(
        description="sequences in flight per attention device (a multiple of 1/attention.tp below one)"
    )
    mtp_tokens: int = Field(
        default=0, ge=0, le=4, description="MTP draft tokens (the MTP module runs on the attention side)"
    )
    prefill_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000,
        description="the instances also prefill: tokens of one prefill forward between decode steps "
        "(unset: decode only)",
    )

    @model_validator(mode="after")
    def _micro_batches_fit(self) -> AfdPlan:
        check_whole_sequences("concurrency_per_device", self.concurrency_per_device, self.attention.tp)
        if not fits_micro_batches(self.micro_batches, self.concurrency_per_device):
            raise ValueError(
                f"micro_batches ({self.micro_batches}) cannot exceed concurrency_per_device "
                f"({self.concurrency_per_device}): each micro-batch needs a sequence per attention device"
            )
        if self.shared_expert.placement == "split":
            raise ValueError(
                "shared_expert.placement: split is not modelled across attention-FFN disaggregation; "
                "use placement: replicated (or dedicated on the FFN side)"
            )
        if self.shared_expert_on == "attention" and self.shared_expert.placement == "dedicated":
            raise ValueError(
                "shared_expert_on: attention runs the shared expert on every attention device; "
                "drop shared_expert.placement: dedicated (dedicated devices are FFN-side devices)"
            )
        return self

    @property
    def devices(self) -> int:
        """Devices of one instance (both sides)."""
        return self.attention_devices + self.ffn_devices

    @property
    def total_devices(self) -> int:
        """Devices of all instances."""
        return self.devices * self.instances

    @property
    def dense_side_devices(self) -> int:
        """Devices of the side the dense FFN layers run on."""
        return self.attention_devices if self.dense_ffn_on == "attention" else self.ffn_devices

    @property
    def dense_layout(self) -> ParallelLayout:
        """Dense FFN layout; pure data parallel over its side when the plan leaves it out."""
        return self.dense_ffn or ParallelLayout(dp=self.dense_side_devices, tp=1)

    @property
    def lm_head_layout(self) -> ParallelLayout:
        """LM head layout; pure data parallel over the attention devices when left out."""
        return self.lm_head or ParallelLayout(dp=self.attention_devices, tp=1)

    @property
    def ffn_per_attention(self) -> float:
        """Attention devices per FFN device (each FFN device serves this many attention devices)."""
        return self.attention_devices / self.ffn_devices

    def short(self) -> str:
        """Compact form for tables: 64A16F mb2."""
        return f"{self.attention_devices}A{self.ffn_devices}F mb{self.micro_batches}"


def migrate_plan_document(data: Any) -> tuple[Any, list[str]]:
    """A plan document in the current format, and notes on what was changed to get there.

    Version 1 wrote a colocated plan as `colocated: true` with identical `decode` and `prefill`
    sections; version 2 gives it one `colocated` section. Documents of other versions are left
    for validation to judge.
    """
    if not isinstance(data, dict) or data.get("schema_version", 1) != 1:
        return data, []
    out = dict(data)
    out["schema_version"] = PLAN_SCHEMA_VERSION
    notes = ["plan file is schema_version 1; read as version 2 (moeplan schema prints the current format)"]
    if out.get("colocated") is True:
        d, p = out.pop("decode", None), out.pop("prefill", None)
        if not isinstance(d, dict) or not isinstance(p, dict):
            raise ValueError("a colocated plan needs both a 'decode' and a 'prefill' section")
        decode, prefill = DecodePlan.model_validate(d), PrefillPlan.model_validate(p)
        out["colocated"] = ColocatedPlan.from_sections(decode, prefill).model_dump(mode="json", exclude_none=True)
        notes.append(
            "version 1 colocated plan (colocated: true + decode/prefill sections) migrated to one 'colocated' section"
        )
    elif out.get("colocated") is False:
        out.pop("colocated")
    return out, notes


class Plan(Strict):
    """A deployment: model, machine, scheme, workload, SLOs, and the phases' layouts."""

    schema_version: Literal[2] = 2
    model: str = Field(min_length=1, description="catalog name or path to YAML / config.json")
    hardware: str = Field(min_length=1, description="catalog name or path to YAML")
    quantization: str = "a8w8c16"
    workload: Workload
    slo: SLO | None = None
    decode: DecodePlan | None = None
    prefill: PrefillPlan | None = None
    colocated: ColocatedPlan | None = Field(
        default=None,
        description="prefill and decode take turns on the same instances (instead of 'decode'/'prefill')",
    )
    afd: AfdPlan | None = Field(
        default=None,
        description="attention-FFN disaggregated decode instances (instead of 'decode'; with 'prefill' "
        "or alone, or prefilling too with afd.prefill_batch_tokens)",
    )
    hbm_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="fraction of each device's HBM the engine may fill (vLLM's gpu_memory_utilization; "
        "default 0.9 as engines default)",
    )
    decode_attention_kv_split: bool = Field(
        default=True,
        description="whether the decode attention kernel spreads one sequence's KV cache over the device's cores "
        "when a batch has fewer (sequence, KV head) pairs than cores (GPUs' split-KV decoding; on Ascend, FIA's "
        "flash decoding from CANN 9.0: vllm-ascend v0.20.2rc1 on). false: every pair is one core's task, as "
        "CANN 8.3-8.5 run vllm-ascend's GQA decode (its v0.13.0rc1 to v0.19.x images); GQA layers only, on "
        "hardware that gives ai_cores_per_device (planner/costmodel/kv_split.py)",
    )
    draft_model: str | None = Field(
        default=None,
        min_length=1,
        description="a draft model (catalog name in drafts/ or a config.json path: an EAGLE-3 head) that drafts "
        "the decode's mtp_tokens instead of MTP layers; for models without MTP layers",
    )
    rank: int | None = Field(default=None, ge=1, description="position in a ranked export")
    predicted: dict[str, Any] | None = Field(default=None, description="filled in by evaluate/plan; ignored on input")

    @property
    def is_afd(self) -> bool:
        """True when the decode instances are attention-FFN disaggregated (an `afd` section)."""
        return self.afd is not None

    @property
    def is_colocated(self) -> bool:
        """True when prefill and decode share instances (a `colocated` section)."""
        return self.colocated is not None

    @property
    def decode_phase(self) -> DecodePlan | None:
        """The decode phase the cost model scores: the decode section or the colocated instances' decode."""
        return self.colocated.decode_section() if self.colocated is not None else self.decode

    @property
    def prefill_phase(self) -> PrefillPlan | None:
        """The prefill phase the cost model scores: the prefill section or the colocated instances' prefill."""
        return self.colocated.prefill_section() if self.colocated is not None else self.prefill

    @property
    def total_devices(self) -> int:
        """Devices of the whole deployment (colocated instances count once)."""
        if self.colocated is not None:
            return self.colocated.total_devices
        return sum(p.total_devices for p in (self.decode, self.prefill, self.afd) if p is not None)

    @model_validator(mode="before")
    @classmethod
    def _migrate_v1(cls, data: Any) -> Any:
        migrated, _ = migrate_plan_document(data)
        return migrated

    @model_validator(mode="after")
    def _has_a_phase(self) -> Plan:
        if self.afd is not None:
            if self.decode is not None or self.colocated is not None:
                raise ValueError(
                    "an AFD plan's decode instances are its 'afd' section: remove the 'decode'/'colocated' section "
                    "(or remove 'afd')"
                )
            if self.afd.prefill_batch_tokens is not None and self.prefill is not None:
                raise ValueError(
                    "afd.prefill_batch_tokens makes the AFD instances prefill their own requests: remove the "
                    "'prefill' section, or drop afd.prefill_batch_tokens to feed them from prefill instances"
                )
            return self
        if self.colocated is not None:
            if self.decode is not None or self.prefill is not None:
                raise ValueError(
                    "a colocated plan has one 'colocated' section and no 'decode'/'prefill' sections; "
                    "remove them (or remove 'colocated' for a disaggregated plan)"
                )
            return self
        if self.decode is None and self.prefill is None:
            raise ValueError(
                "a plan needs a 'decode' or a 'prefill' section (or both), a 'colocated' section or an 'afd' section"
            )
        return self


def _tiles(field: str, layout: ParallelLayout, devices: int) -> None:
    if layout.devices != devices:
        raise BadInputError(
            f"{field}: dp × tp = {layout.dp} × {layout.tp} = {layout.devices} does not tile the "
            f"instance's {devices} devices; choose dp × tp = {devices}."
        )


def _divides(field: str, tp: int, size: int, what: str) -> None:
    if size % tp:
        raise BadInputError(
            f"{field}: tp = {tp} does not divide the model's {what} ({size}); choose a tp that divides it."
        )


def check_phase(phase_name: str, phase: PhasePlan, model: ModelSpec, hw: HardwareSpec) -> None:
    """The rules of one phase that need the model and the machine; raises BadInputError."""
    n = phase.devices
    if hw.max_devices is not None and n > hw.max_devices:
        raise BadInputError(
            f"{phase_name}.devices = {n} exceeds the {hw.max_devices} devices one {hw.name} "
            f"instance can span; use at most {hw.max_devices}."
        )
    att = phase.attention
    _tiles(f"{phase_name}.attention", att, n)
    if att.pre is not None:
        _tiles(f"{phase_name}.attention.pre", att.pre, n)
    if att.post is not None:
        _tiles(f"{phase_name}.attention.post", att.post, n)
    heads = model.attention_tp_divisor()
    # compressed and linear attention split their output groups / key heads over TP as well
    heads_what = "attention heads" if heads == model.attention.num_heads else "attention head groups"
    for label, lay in (("", att), (".pre", att.pre_layout), (".post", att.post_layout)):
        _divides(f"{phase_name}.attention{label}", lay.tp, heads, heads_what)
    if model.num_dense_layers:
        _tiles(f"{phase_name}.dense_ffn", phase.dense_layout, n)
        _divides(
            f"{phase_name}.dense_ffn",
            phase.dense_layout.tp,
            model.dense_intermediate_size,
            "dense intermediate size",
        )
    elif phase.dense_ffn is not None:
        raise BadInputError(f"{phase_name}.dense_ffn: model '{model.name}' has no dense FFN layers; remove it.")
    _tiles(f"{phase_name}.lm_head", phase.lm_head_layout, n)
    if phase.embedding is not None:
        _tiles(f"{phase_name}.embedding", phase.embedding, n)
    shared = phase.shared_expert
    if model.moe is None:
        if phase.moe is not None and not (phase.moe.ep == 1 and phase.moe.slots_per_device == 1):
            raise BadInputError(f"{phase_name}.moe: model '{model.name}' has no MoE layers; remove the moe section.")
        if shared.placement != "replicated":
            raise BadInputError(
                f"{phase_name}.shared_expert: model '{model.name}' has no experts; use placement: replicated."
            )
        return
    moe = phase.moe
    if moe is None:
        raise BadInputError(
            f"{phase_name}.moe is missing: model '{model.name}' has MoE layers; add "
            f"moe: {{ep: N, slots_per_device: S, comm: alltoall|allgather}}."
        )
    if shared.placement != "replicated" and model.moe.shared_experts == 0:
        raise BadInputError(
            f"{phase_name}.shared_expert: model '{model.name}' has no shared expert; use placement: replicated."
        )
    if shared.placement == "split" and (att.is_hybrid or shared.tp != att.tp):
        what = "a hybrid attention layout" if att.is_hybrid else f"attention TP {att.tp}"
        raise BadInputError(
            f"{phase_name}.shared_expert: split over tp = {shared.tp} needs a plain DP x TP attention of the same "
            f"TP (this phase has {what}); set shared_expert.tp to the attention TP or use placement: replicated."
        )
    if moe.ep + shared.dedicated_devices != n:
        raise BadInputError(
            f"{phase_name}.moe: ep ({moe.ep}) + dedicated shared-expert devices "
            f"({shared.dedicated_devices}) = {moe.ep + shared.dedicated_devices} does not tile the "
            f"instance's {n} devices; make them add up to {n}."
        )
    slots = moe.ep * moe.slots_per_device
    experts = model.moe.routed_experts
    if slots < experts:
        need = -(-experts // moe.ep)
        raise BadInputError(
            f"{phase_name}.moe: ep × slots_per_device = {moe.ep} × {moe.slots_per_device} = "
            f"{slots} leaves {experts - slots} of the {experts} routed experts without a slot; "
            f"use slots_per_device >= {need}."
        )
    if moe.slots_per_device > experts:
        raise BadInputError(
            f"{phase_name}.moe: slots_per_device = {moe.slots_per_device} exceeds the model's "
            f"{experts} routed experts; a device holds each expert at most once."
        )


def _level_short(name: str) -> str:
    """A link level's first word, lower case: 'HCCS (server)' -> 'hccs'."""
    return name.split()[0].lower() if name.split() else name.lower()


def afd_auto_link_level(hw: HardwareSpec, section: AfdPlan) -> int:
    """Index of the outermost link level an AFD instance's attention-FFN pairs cross.

    The instance's devices are laid out contiguously, FFN devices first, then attention devices
    (the afd-plugin's recipes put the FFN ranks on their own node: recipe/npu/CAMP2pAFDConnector/
    deepseek_v3_2/README.md), and attention device i sends to FFN device floor(i F / A).
    """
    import numpy as np

    a, f = section.attention_devices, section.ffn_devices
    att_pos = f + np.arange(a)
    ffn_pos = (np.arange(a) * f) // a
    sizes = hw.group_sizes(section.devices)
    for index, size in enumerate(sizes):
        if np.all(att_pos // size == ffn_pos // size):
            return index
    return len(sizes) - 1


def afd_link_level(hw: HardwareSpec, section: AfdPlan, field: str = "afd.link") -> int:
    """Index of the link level that carries an AFD instance's activations (BadInputError if it cannot)."""
    auto = afd_auto_link_level(hw, section)
    want = section.link.strip()
    if want.lower() == "auto":
        return auto
    names = [lvl.name for lvl in hw.levels]
    exact = [i for i, n in enumerate(names) if n.lower() == want.lower()]
    short = [i for i, n in enumerate(names) if _level_short(n) == want.lower()]
    choices = ", ".join(f"'{n}'" for n in names)
    if exact:
        index = exact[0]
    elif len(short) == 1:
        index = short[0]
    elif len(short) > 1:
        raise BadInputError(
            f"{field}: '{want}' names {len(short)} levels of {hw.name} ({', '.join(repr(names[i]) for i in short)}); "
            "give the full level name, or auto."
        )
    else:
        raise BadInputError(f"{field}: {hw.name} has no link level '{want}'; choose auto or one of {choices}.")
    if index < auto:
        raise BadInputError(
            f"{field}: '{names[index]}' cannot carry this instance's activations: its {section.ffn_devices} FFN and "
            f"{section.attention_devices} attention devices ({section.devices}) span {hw.name}'s "
            f"'{names[auto]}' level; use auto or a level at least that wide."
        )
    return index


def check_afd(section: AfdPlan, model: ModelSpec, hw: HardwareSpec, field: str = "afd") -> None:
    """The rules of an AFD section that need the model and the machine; raises BadInputError."""
    a, f = section.attention_devices, section.ffn_devices
    if hw.max_devices is not None and section.devices > hw.max_devices:
        raise BadInputError(
            f"{field}: attention_devices + ffn_devices = {a} + {f} = {section.devices} exceeds the "
            f"{hw.max_devices} devices one {hw.name} instance can span; use at most {hw.max_devices}."
        )
    if model.moe is None:
        raise BadInputError(
            f"{field}: model '{model.name}' has no experts; attention-FFN disaggregation moves the experts to their "
            "own devices, so plan it with a 'decode' section."
        )
    att = section.attention
    _tiles(f"{field}.attention", att, a)
    if att.pre is not None:
        _tiles(f"{field}.attention.pre", att.pre, a)
    if att.post is not None:
        _tiles(f"{field}.attention.post", att.post, a)
    heads = model.attention_tp_divisor()
    heads_what = "attention heads" if heads == model.attention.num_heads else "attention head groups"
    for label, lay in (("", att), (".pre", att.pre_layout), (".post", att.post_layout)):
        _divides(f"{field}.attention{label}", lay.tp, heads, heads_what)
    _tiles(f"{field}.lm_head", section.lm_head_layout, a)
    if section.embedding is not None:
        _tiles(f"{field}.embedding", section.embedding, a)
    if model.num_dense_layers:
        _tiles(
            f"{field}.dense_ffn (on the {section.dense_ffn_on} side)", section.dense_layout, section.dense_side_devices
        )
        _divides(
            f"{field}.dense_ffn", section.dense_layout.tp, model.dense_intermediate_size, "dense intermediate size"
        )
    elif section.dense_ffn is not None:
        raise BadInputError(f"{field}.dense_ffn: model '{model.name}' has no dense FFN layers; remove it.")
    moe = section.moe
    if moe is None:
        raise BadInputError(
            f"{field}.moe is missing: the FFN devices hold the routed experts; add "
            f"moe: {{ep: {f}, slots_per_device: {-(-model.moe.routed_experts // f)}, comm: alltoall}}."
        )
    shared = section.shared_expert
    if shared.placement == "dedicated" and model.moe.shared_experts == 0:
        raise BadInputError(
            f"{field}.shared_expert: model '{model.name}' has no shared expert; use placement: replicated."
        )
    if section.shared_expert_on == "attention" and model.moe.shared_experts == 0:
        raise BadInputError(f"{field}.shared_expert_on: model '{model.name}' has no shared expert; remove it.")
    if moe.ep + shared.dedicated_devices != f:
        raise BadInputError(
            f"{field}.moe: ep ({moe.ep}) + dedicated shared-expert devices ({shared.dedicated_devices}) = "
            f"{moe.ep + shared.dedicated_devices} does not tile the instance's {f} FFN devices; "
            f"make them add up to {f}."
        )
    experts = model.moe.routed_experts
    slots = moe.ep * moe.slots_per_device
    if slots < experts:
        need = -(-experts // moe.ep)
        raise BadInputError(
            f"{field}.moe: the {f} FFN devices hold ep x slots_per_device = "
            f"{moe.ep} x {moe.slots_per_device} = {slots} "
            f"expert slots, {experts - slots} short of the model's {experts} routed experts; use slots_per_device >= "
            f"{need} (or more FFN devices)."
        )
    if moe.slots_per_device > experts:
        raise BadInputError(
            f"{field}.moe: slots_per_device = {moe.slots_per_device} exceeds the model's {experts} routed experts; "
            "a device holds each expert at most once."
        )
    if model.draft is not None:
        raise BadInputError(
            f"draft_model = '{model.draft.name}' with an afd section: moeplan does not model a draft model's place "
            "in an attention-FFN split; drop draft_model (or the afd section)."
        )
    if section.mtp_tokens and model.mtp_layers == 0:
        raise BadInputError(
            f"{field}.mtp_tokens = {section.mtp_tokens}: model '{model.name}' has no MTP layers; set mtp_tokens: 0."
        )
    afd_link_level(hw, section, f"{field}.link")


# the full-attention kinds whose KV entries the ranks gather: MLA and its DSA variants, and GQA
CONTEXT_PARALLEL_KINDS = (*MLA_KINDS, "gqa")


def check_context_parallel(model: ModelSpec) -> None:
    """Context-parallel prefill is costed for full-attention layers whose KV entries the ranks gather
    (MLA, GQA, DSA's latent and indexer keys); a linear-attention state passes from rank to rank in order,
    and sliding-window and compressed layers keep other entries than the ones gathered: refused by name."""
    other = sorted({kind for kind, _, _ in model.attention_groups()} - set(CONTEXT_PARALLEL_KINDS))
    if other:
        raise BadInputError(
            f"prefill.context_parallel: model '{model.name}' has {', '.join(other)} attention layers, whose "
            "context-parallel prefill moeplan cannot cost (it costs MLA, GQA and DSA layers); set "
            "context_parallel: false."
        )


def check_plan(plan: Plan, model: ModelSpec, hw: HardwareSpec) -> None:
    """Every rule of a plan that needs the model and the machine; raises BadInputError."""
    w = plan.workload
    context = w.longest_context_tokens
    if context > model.max_context_tokens:
        what = "the longest request of workload.lengths" if w.lengths else "workload: input_tokens + output_tokens"
        raise BadInputError(
            f"{what} = {context} tokens exceeds the model's context of {model.max_context_tokens} tokens; "
            "shorten the workload."
        )
    if plan.afd is not None:
        check_afd(plan.afd, model, hw)
    if plan.colocated is not None:
        check_phase("colocated", plan.colocated, model, hw)
    if plan.prefill is not None:
        check_phase("prefill", plan.prefill, model, hw)
        if plan.prefill.context_parallel:
            check_context_parallel(model)
    decode = plan.decode_phase
    if decode is not None:
        section = "colocated" if plan.is_colocated else "decode"
        if plan.decode is not None:
            check_phase("decode", plan.decode, model, hw)
        if decode.mtp_tokens and not model.speculates:
            raise BadInputError(
                f"{section}.mtp_tokens = {decode.mtp_tokens}: model '{model.name}' has no MTP layers; "
                "set mtp_tokens: 0 (or name an EAGLE-3 head in draft_model)."
            )
        if model.draft is not None and not decode.mtp_tokens:
            raise BadInputError(
                f"draft_model = '{model.draft.name}' but {section}.mtp_tokens = 0: the draft model would be loaded "
                "and never run; set mtp_tokens (the draft tokens per step) or drop draft_model."
            )
