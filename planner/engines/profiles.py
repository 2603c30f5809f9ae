"""Engine capability profiles: what vLLM-Ascend, SGLang and MindIE can run, read from data files.

Each engine has one YAML file in `planner/engines/data/` written from reading that engine's
release (argument parser, config loaders, docs): the flags and config keys it accepts, each with
where it was read, and its `capabilities` (which shared-expert placements, MoE dispatch schemes,
MTP depths, prefill micro-batches, per-module TP layouts, colocated/disaggregated serving and
quantization schemes it can run). This module loads them and answers one question two ways:

- `plan_problems(plan, hw, engine)`: every field of a plan the engine cannot run, each message
  naming the field, the engine release and the fix (the exports refuse such a plan, exit 2);
- the per-layout predicates (`attention_ok`, `moe_ok`, `combo_ok`, `micro_batches`) the
  candidate generator uses to restrict the search to what an engine can run (`plan --engine`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from planner.errors import BadInputError
from planner.specs.hardware import HardwareSpec, Strict
from planner.specs.model import ModelSpec
from planner.specs.plan import (
    AttentionLayout,
    MoELayout,
    ParallelLayout,
    PhasePlan,
    Plan,
    SharedExpertLayout,
    attention_embedding_layout,
)

DATA_DIR = Path(__file__).resolve().parent / "data"
ENGINES: tuple[str, ...] = ("vllm-ascend", "sglang", "mindie")
_FILES = {"vllm-ascend": "vllm_ascend.yaml", "sglang": "sglang.yaml", "mindie": "mindie.yaml"}

TpRule = Literal[
    "attention_or_finegrained",
    "one_or_instance",
    "attention_or_instance",
    "local",
    "mindie_lm_head",
    "mindie_dense",
    "any",
]


class FlagSpec(Strict):
    """One command-line flag: whether it takes a value (and of which kind) and where it was read."""

    value: Literal["none", "str", "int", "float", "json", "list", "append_list"]
    choices: list[Any] | None = None
    source: str = Field(min_length=1)


class CommandSpec(Strict):
    """A program's command line: the launcher words, positional arguments and accepted flags."""

    launcher: list[str] = Field(min_length=1)
    positionals: int = 0
    flags: dict[str, FlagSpec] = Field(default_factory=dict)


def _one_micro_batch() -> list[Literal[1, 2]]:
    return [1]


class AfdCapability(Strict):
    """What an engine's attention-FFN disaggregation (AFD) runs (see the YAML files for the sources)."""

    via: str = Field(min_length=1, description="the code that runs it (plugin or change) and the release read")
    hardware: list[str] = Field(min_length=1, description="machines (catalog names) it runs on")
    architectures: list[str] = Field(min_length=1, description="model classes (config.json 'architectures') it runs")
    micro_batches: list[int] = Field(min_length=1)
    attention_multiple_of_ffn: bool = Field(description="attention devices must be a whole multiple of FFN devices")
    dense_ffn_on: list[Literal["ffn", "attention"]] = Field(min_length=1)
    shared_expert_on: list[Literal["ffn", "attention"]] = Field(min_length=1)
    shared_expert: list[Literal["replicated", "dedicated"]] = Field(min_length=1)
    mtp_tokens_max: int = Field(ge=0, le=16)
    prefill_too: bool = Field(description="AFD instances may also prefill (afd.prefill_batch_tokens)")
    with_prefill_instances: bool = Field(description="AFD decode instances may be fed by prefill instances")
    launch_documented: bool = Field(description="a launch recipe exists: --emit writes its files")
    source: str = Field(min_length=1)


class Capabilities(Strict):
    """What an engine can run (see the YAML files for the source of each entry)."""

    devices: list[str] = Field(
        min_length=1, description="the devices the release runs on: prefixes of a machine's device_name"
    )
    devices_source: str = Field(min_length=1, description="where the device list was read")
    disaggregated: bool
    colocated: bool
    shared_expert: list[Literal["replicated", "dedicated", "split"]]
    dedicated_shared_hardware: list[str] | None = None
    dedicated_shared_without_redundancy: bool = False
    attention_hybrid: bool
    dense_ffn_tp: TpRule
    lm_head_tp: TpRule
    embedding_source: str = Field(
        min_length=1,
        description="where the release lays the input embedding over the attention's TP group (the only "
        "embedding layout its launch can say)",
    )
    moe_comm: dict[str, list[Literal["allgather", "alltoall"]]]
    mtp_tokens_max: int = Field(ge=0, le=16)
    draft_models: list[Literal["eagle3"]] = Field(
        default_factory=list, description="separate draft models it runs beside the target (EAGLE-3 heads)"
    )
    prefill_micro_batches: list[int] = Field(min_length=1)
    decode_micro_batches: list[Literal[1, 2]] = Field(
        default_factory=_one_micro_batch, min_length=1, description="decode micro-batch counts (two-batch overlap)"
    )
    micro_batches_need_alltoall: bool = False
    redundant_experts: bool
    quantization: dict[str, str | None]
    multi_node: bool
    max_nodes_per_instance: int | None = Field(default=None, ge=1, description="most nodes one instance may span")
    chunked_prefill: bool = Field(
        default=True,
        description="whether moeplan writes the engine's mixed steps: a decode step that also carries a prompt "
        "chunk (moeplan's chunked colocated schedule)",
    )
    whole_prefill_forwards: str | None = Field(
        default=None,
        description="None: a colocated instance may run prefill forwards apart from its decode steps (moeplan's "
        "whole-forward colocated schedule); else why the engine cannot, and where that was read",
    )
    chunked_mtp: str | None = Field(
        default=None,
        description="None: the decodes of a mixed step keep their MTP draft tokens; else why they do not, and "
        "where that was read (moeplan then keeps the engine's chunked colocated plans to MTP 0)",
    )
    prompt_over_forwards: str | None = Field(
        default=None,
        description="None: a prompt longer than its attention DP rank's share of the prefill batch takes several "
        "forwards (chunked prefill); else why the engine, as moeplan launches it, prefills a prompt whole on its "
        "rank, and where that was read",
    )
    prefill_context_parallel: str = Field(
        min_length=1,
        description="whether the release runs context-parallel prefill on Ascend, and where that was read "
        "(moeplan writes no such launch for any engine yet)",
    )
    afd: AfdCapability | None = Field(default=None, description="attention-FFN disaggregation; None: none")


class EngineProfile(Strict):
    """One engine's data file."""

    engine: str
    display: str
    release: str
    read_from: str
    versions: str
    launcher: list[str]
    positionals: int = 0
    flags: dict[str, FlagSpec]
    env: list[str] | None = None
    recommended_env: dict[str, dict[str, str]] | None = Field(
        default=None, description="per role: the environment the release's own tutorials export on every node"
    )
    compilation_config: dict[str, dict[str, Any]] | None = Field(
        default=None, description="per role: the --compilation-config the release's tutorials pass"
    )
    router: CommandSpec
    config_keys: dict[str, Any]
    capabilities: Capabilities
    machine_cautions: dict[str, str] = Field(
        default_factory=dict,
        description="catalog machine -> what this engine's runs kept aside from the fit (kept-aside/) measured "
        "against moeplan's prediction there, where the machine's factors are another software stack's; printed "
        "when planning for this engine on it",
    )

    model_cautions: dict[str, str] = Field(
        default_factory=dict,
        description="catalog model -> what this engine's runs of that model kept aside from the fit (kept-aside/) "
        "measured against moeplan's prediction, for a model no measured row of the fit checks; printed when "
        "planning that model for this engine",
    )

    def model_caution(self, model: str) -> str | None:
        """The caution for planning `model` for this engine (None when no kept-aside run of it raises one)."""
        text = self.model_cautions.get(model)
        return None if text is None else f"{self.display} with model '{model}': {text}"

    def machine_caution(self, machine: str) -> str | None:
        """The caution for planning this engine on `machine` (None when its runs there raise none)."""
        text = self.machine_cautions.get(machine)
        return None if text is None else f"{self.display} on hardware '{machine}': {text}"

    @property
    def server(self) -> CommandSpec:
        """The server's command line spec."""
        return CommandSpec(launcher=self.launcher, positionals=self.positionals, flags=self.flags)

    @property
    def label(self) -> str:
        """Engine and release, for messages: 'vllm-ascend v0.25.1rc1'."""
        return f"{self.engine} {self.release}"


def engine_machine_note(hw: HardwareSpec, engine: str) -> str | None:
    """What to tell someone who runs `engine` on `hw`: the hardware file's pointer to the factors fitted on that
    engine's runs of it, else the engine's caution for the machine (None when neither applies)."""
    return hw.engine_machine_warning(engine) or load_profile(engine).machine_caution(hw.name)


def engine_model_note(model: str, engine: str) -> str | None:
    """What to tell someone who runs `model` on `engine`: the engine's caution for the model, if any."""
    return load_profile(engine).model_caution(model)


def kv_split_note(decode_attention_kv_split: bool, engine: str) -> str | None:
    """What to tell someone who launches `engine` from a plan costed without a decode KV split (None otherwise)."""
    if decode_attention_kv_split:
        return None
    profile = load_profile(engine)
    if engine == "vllm-ascend":
        return (
            f"the plan costs its decode attention as one core per (sequence, KV head) (decode_attention_kv_split: "
            f"false, CANN 8.x); the launch is for {profile.label}, whose images carry CANN 9.0, whose attention "
            "splits one sequence's KV over the cores at small batches: its decode can run faster than planned."
        )
    return (
        f"the plan costs its decode attention as one core per (sequence, KV head) (decode_attention_kv_split: "
        f"false); {profile.display}'s Ascend decode kernel was not read here, so whether {profile.label} runs it "
        "so is not known."
    )


def engine_name(name: str) -> str:
    """Normalise and check an engine name; BadInputError naming the choices otherwise."""
    key = name.strip().lower().replace("_", "-")
    if key not in _FILES:
        raise BadInputError(f"--engine: unknown engine '{name}'; choose one of {', '.join(ENGINES)}.")
    return key


@functools.cache
def load_profile(name: str) -> EngineProfile:
    """The profile of `name` (vllm-ascend, sglang or mindie), read from its data file."""
    from planner.specs.files import load_yaml

    key = engine_name(name)
    text = (DATA_DIR / _FILES[key]).read_text(encoding="utf-8")
    return EngineProfile.model_validate(load_yaml(text))


# ---- per-layout predicates (also used by the candidate generator) ------------------------------


def _tp_ok(rule: TpRule, tp: int, att: AttentionLayout, devices: int, devices_per_node: int) -> bool:
    if rule == "any":
        return True
    if rule == "attention_or_finegrained":
        # vLLM's TP group, or a finegrained group splitting the DP ranks (attention TP 1, divides DP)
        return tp == att.tp or (att.tp == 1 and att.dp % tp == 0)
    if rule == "one_or_instance":
        return tp in (1, devices)
    if rule == "attention_or_instance":
        return tp in (att.tp, devices)
    if rule == "local":
        return tp <= min(devices, devices_per_node) and devices % tp == 0
    if rule == "mindie_lm_head":
        # atb_llm Mapping: the attention's layout (DP_PARTITION_UP_ENABLE), the whole instance (its default),
        # or lm_head_local_tp in [2, 16] within a node and only beside attention TP 1 (mapping.py:442-456)
        local = att.tp == 1 and 1 < tp <= min(16, devices_per_node) and devices % tp == 0
        return tp in (att.tp, devices) or local
    if rule == "mindie_dense":
        # atb_llm Mapping: the attention TP (its default), or dense_mlp_local_tp > 1 within a node (or the
        # whole instance), dividing it, and above an attention TP > 1 (mapping.py:460-479)
        local = tp > 1 and (tp <= devices_per_node or tp == devices) and devices % tp == 0
        return tp == att.tp or (local and (att.tp == 1 or tp > att.tp))
    return False


def attention_ok(profile: EngineProfile, att: AttentionLayout) -> bool:
    """Whether the engine can lay attention out this way."""
    return profile.capabilities.attention_hybrid or not att.is_hybrid


def comm_choices(profile: EngineProfile, hw: HardwareSpec) -> list[str]:
    """MoE dispatch schemes the engine runs on this machine."""
    table = profile.capabilities.moe_comm
    return list(table.get(hw.name, table.get("default", ["allgather", "alltoall"])))


def moe_ok(profile: EngineProfile, hw: HardwareSpec, moe: MoELayout, shared: SharedExpertLayout, experts: int) -> bool:
    """Whether the engine can run this expert layout and shared-expert placement."""
    return not _moe_problems(profile, hw, "", moe, shared, experts)


def combo_ok(
    profile: EngineProfile,
    hw: HardwareSpec,
    devices: int,
    att: AttentionLayout,
    dense: ParallelLayout | None,
    lm_head: ParallelLayout,
) -> bool:
    """Whether the dense FFN and LM head layouts can go with this attention layout."""
    cap = profile.capabilities
    node = hw.devices_per_node
    if dense is not None and not _tp_ok(cap.dense_ffn_tp, dense.tp, att, devices, node):
        return False
    return _tp_ok(cap.lm_head_tp, lm_head.tp, att, devices, node)


def multi_micro_ok(profile: EngineProfile, moe: MoELayout) -> bool:
    """Whether this expert layout may run more than one prefill micro-batch on the engine."""
    return not profile.capabilities.micro_batches_need_alltoall or moe.comm == "alltoall"


def decode_micro_batches(profile: EngineProfile) -> tuple[int, ...]:
    """Decode micro-batch counts the engine runs (2: compute/communication overlap of two halves)."""
    return tuple(sorted(profile.capabilities.decode_micro_batches))


def _decode_micro_problems(profile: EngineProfile, field: str, micro: int, moe: MoELayout | None) -> list[str]:
    cap = profile.capabilities
    if micro not in cap.decode_micro_batches:
        return [
            f"{field}: {micro} decode micro-batches: {profile.label} runs "
            f"{', '.join(map(str, cap.decode_micro_batches))}; plan with --no-decode-microbatch or set it to 1."
        ]
    if micro > 1 and cap.micro_batches_need_alltoall and moe is not None and moe.comm != "alltoall":
        return [
            f"{field}: {profile.label} overlaps two decode micro-batches only with an all-to-all MoE backend "
            f"(moe.comm is '{moe.comm}'); set it to 1."
        ]
    return []


def micro_batches(profile: EngineProfile) -> tuple[int, ...]:
    """Prefill micro-batch counts the engine runs."""
    return tuple(sorted(profile.capabilities.prefill_micro_batches))


# ---- whole-plan check -----------------------------------------------------------------------


def _moe_problems(
    profile: EngineProfile, hw: HardwareSpec, field: str, moe: MoELayout, shared: SharedExpertLayout, experts: int
) -> list[str]:
    cap = profile.capabilities
    out = []
    if shared.placement not in cap.shared_expert:
        if shared.placement == "split":
            out.append(
                f"{field}shared_expert: placement 'split' (over the attention TP{shared.tp} group): {profile.label} "
                f"runs the shared expert {' or '.join(cap.shared_expert)}, not split over the attention TP; use "
                f"placement: replicated, re-plan with --engine {profile.engine}, or export for vllm-ascend."
            )
        else:
            out.append(
                f"{field}shared_expert: placement 'dedicated' ({shared.devices} devices): {profile.label} has no "
                "external shared-expert devices (it runs the shared expert on every device); re-plan with "
                f"--engine {profile.engine}, or export for mindie on cm384."
            )
    elif shared.placement == "dedicated":
        if cap.dedicated_shared_hardware is not None and hw.name not in cap.dedicated_shared_hardware:
            out.append(
                f"{field}shared_expert: {profile.label} runs external shared experts only on "
                f"{', '.join(cap.dedicated_shared_hardware)} (not on {hw.name}); "
                f"re-plan with --engine {profile.engine}."
            )
        if cap.dedicated_shared_without_redundancy and moe.ep * moe.slots_per_device != experts:
            out.append(
                f"{field}moe: {profile.label} runs external shared experts only without load balancing, i.e. "
                f"without redundant experts; ep x slots_per_device = {moe.ep * moe.slots_per_device} is not the "
                f"{experts} routed experts; re-plan with --engine {profile.engine}."
            )
    if moe.comm not in comm_choices(profile, hw):
        out.append(
            f"{field}moe.comm: '{moe.comm}' dispatch cannot be run by {profile.label} on {hw.name} (it runs "
            f"{' or '.join(comm_choices(profile, hw))}); re-plan with --engine {profile.engine}."
        )
    if moe.ep * moe.slots_per_device > experts and not cap.redundant_experts:
        out.append(
            f"{field}moe: {profile.label} cannot load redundant experts; re-plan with --engine {profile.engine}."
        )
    return out


def phase_problems(
    profile: EngineProfile,
    hw: HardwareSpec,
    field: str,
    phase: PhasePlan,
    experts: int | None,
    has_dense: bool,
    micro: int = 1,
    mtp: int = 0,
) -> list[str]:
    """What the engine cannot run of one phase section (`field` like 'decode.')."""
    cap = profile.capabilities
    fix = f"re-plan with --engine {profile.engine}"
    out = []
    att = phase.attention
    if not attention_ok(profile, att):
        out.append(
            f"{field}attention: the hybrid layout {att.short()} (pre/post differ from the core) has no setting in "
            f"{profile.label}; {fix}."
        )
    dense = phase.dense_layout if has_dense else None
    node = hw.devices_per_node
    if dense is not None and not _tp_ok(cap.dense_ffn_tp, dense.tp, att, phase.devices, node):
        out.append(
            f"{field}dense_ffn: {dense.short()} with attention {att.short()} cannot be expressed in {profile.label} "
            f"(rule '{cap.dense_ffn_tp}', see docs/engines.md); {fix}."
        )
    head = phase.lm_head_layout
    if not _tp_ok(cap.lm_head_tp, head.tp, att, phase.devices, node):
        out.append(
            f"{field}lm_head: {head.short()} with attention {att.short()} cannot be expressed in {profile.label} "
            f"(rule '{cap.lm_head_tp}', see docs/engines.md); {fix}."
        )
    emb, engines_emb = phase.embedding, attention_embedding_layout(att)
    if emb is not None and emb != engines_emb:
        out.append(
            f"{field}embedding: {emb.short()} cannot be expressed in {profile.label}, which lays the input embedding "
            f"over the attention's TP group ({engines_emb.short()}: {cap.embedding_source}); drop the plan's "
            f"embedding or {fix}."
        )
    if experts is not None and phase.moe is not None:
        out.extend(_moe_problems(profile, hw, field, phase.moe, phase.shared_expert, experts))
    if micro not in cap.prefill_micro_batches:
        out.append(
            f"{field}micro_batches: {micro} micro-batches: {profile.label} runs "
            f"{', '.join(map(str, cap.prefill_micro_batches))} (the Ascend platform switches dual-batch overlap off); "
            f"{fix}."
        )
    elif micro > 1 and cap.micro_batches_need_alltoall and phase.moe is not None and phase.moe.comm != "alltoall":
        out.append(
            f"{field}micro_batches: {profile.label} overlaps two micro-batches only with an all-to-all MoE backend "
            f"(moe.comm is '{phase.moe.comm}'); {fix}."
        )
    if mtp > cap.mtp_tokens_max:
        out.append(
            f"{field}mtp_tokens: {mtp} draft tokens; {profile.label} runs at most {cap.mtp_tokens_max}; {fix} "
            f"or --mtp 0,{cap.mtp_tokens_max}."
        )
    spans = span_refusal(profile, phase.devices, node)
    if spans is not None:
        out.append(f"{field}devices: {spans}; {fix}.")
    if _part_node(phase.devices, node) or (phase.devices > node and node % att.tp):
        out.append(
            f"{field}devices: an instance of {phase.devices} devices over {node}-device nodes needs whole nodes and an "
            f"attention TP ({att.tp}) that divides a node; {fix}."
        )
    return out


def span_refusal(profile: EngineProfile, devices: int, node: int) -> str | None:
    """Why the engine runs no instance of `devices` devices over `node`-device nodes, whatever its
    layout (it cannot span nodes, or not that many); None when some layout may. (Past a node an
    instance also needs whole nodes and an attention TP that divides one: phase_problems.)"""
    cap = profile.capabilities
    if devices > node and not cap.multi_node:
        return f"{profile.label} cannot span nodes"
    if cap.max_nodes_per_instance is not None and devices > node * cap.max_nodes_per_instance:
        return f"an instance of {devices} devices spans more than {profile.label}'s {cap.max_nodes_per_instance} nodes"
    return None


def _part_node(devices: int, node: int) -> bool:
    """Whether an instance of `devices` spans nodes without filling each of them: no engine layout runs
    it (the whole-node rule `size_refusal` and `phase_problems` apply)."""
    return devices > node and devices % node != 0


def size_refusal(profile: EngineProfile, devices: int, node: int) -> str | None:
    """`span_refusal`, and past a node a size that is not whole nodes (no layout of the engine runs it)."""
    spans = span_refusal(profile, devices, node)
    if spans is not None:
        return spans
    if _part_node(devices, node):
        return f"an instance of {devices} devices over {node}-device nodes needs whole nodes in {profile.label}"
    return None


def machine_refusal(profile: EngineProfile, hw: HardwareSpec) -> str | None:
    """Why the engine runs nothing on this machine (its device is none the release runs on); None when
    it does. The machine's `device_name` is matched against the profile's `devices` prefixes."""
    cap = profile.capabilities
    if any(hw.device_name.startswith(prefix) for prefix in cap.devices):
        return None
    return (
        f"{profile.label} runs on {', '.join(cap.devices)} devices ({cap.devices_source}); "
        f"hardware '{hw.name}' is {hw.device_name}"
    )


def engine_refusal(engine: str, machines: Sequence[HardwareSpec], quantization: str) -> str | None:
    """Why `engine` runs no plan at all on these machines in this number format (None: it may):
    a device it does not run on, or a quantization scheme its profile writes no launch for."""
    profile = load_profile(engine)
    for hw in machines:
        why = machine_refusal(profile, hw)
        if why is not None:
            return why
    return quantization_refusal(profile, quantization)


def quantization_refusal(profile: EngineProfile, quantization: str) -> str | None:
    """Why the engine's launches cannot hold this number format (None when they can)."""
    formats = profile.capabilities.quantization
    if quantization in formats:
        return None
    return (
        f"moeplan writes {profile.label} launches for {', '.join(formats)} weights, not '{quantization}' "
        "(planner/engines/data)"
    )


def afd_refusal(afd: AfdCapability | None, hardware: str, architectures: Sequence[str]) -> str | None:
    """Why an engine with this AFD capability runs no AFD of a model (its config.json `architectures`;
    empty: not known) on `hardware` (a catalog machine name); None when it does."""
    if afd is None:
        return "it has no attention-FFN disaggregation"
    if hardware not in afd.hardware:
        return f"its AFD runs on {', '.join(afd.hardware)}, not on {hardware}"
    if architectures and not set(architectures) & set(afd.architectures):
        return f"its AFD runs {', '.join(afd.architectures)}, not {', '.join(architectures)}"
    return None


def afd_problems(
    profile: EngineProfile, plan: Plan, hw: HardwareSpec, architectures: tuple[str, ...] | None
) -> list[str]:
    """What `profile` cannot run of the plan's `afd` section (the plan has one)."""
    section = plan.afd
    assert section is not None
    afd = profile.capabilities.afd
    if afd is None:
        return [
            f"afd: {profile.label} has no attention-FFN disaggregation; plan with --structure colocated,pd or for "
            "an engine that runs it (vllm-ascend with the afd-plugin, sglang on NPU for Qwen3-MoE)."
        ]
    via = f"{profile.engine} AFD ({afd.via})"
    out = []
    if hw.name not in afd.hardware:
        out.append(f"afd: {via} runs on {', '.join(afd.hardware)}, not on {hw.name}; plan on one of them.")
    if architectures is not None and not set(architectures) & set(afd.architectures):
        named = ", ".join(architectures) or "no architecture in its config.json"
        out.append(f"afd: {via} runs {', '.join(afd.architectures)}; the model is {named}.")
    if section.micro_batches not in afd.micro_batches:
        out.append(
            f"afd.micro_batches: {section.micro_batches}: {via} runs {' or '.join(map(str, afd.micro_batches))}; "
            "set one of them."
        )
    if afd.attention_multiple_of_ffn and section.attention_devices % section.ffn_devices:
        out.append(
            f"afd.attention_devices: {section.attention_devices} is not a multiple of ffn_devices "
            f"({section.ffn_devices}); {via} maps each FFN device to a whole group of attention devices."
        )
    if section.dense_ffn_on not in afd.dense_ffn_on:
        out.append(f"afd.dense_ffn_on: {via} runs the dense FFN on the {' or '.join(afd.dense_ffn_on)} side.")
    if section.shared_expert_on not in afd.shared_expert_on:
        out.append(
            f"afd.shared_expert_on: {via} runs the shared expert on the {' or '.join(afd.shared_expert_on)} side."
        )
    if section.shared_expert.placement not in afd.shared_expert:
        out.append(f"afd.shared_expert: {via} has no dedicated shared-expert devices; use placement: replicated.")
    if section.mtp_tokens > afd.mtp_tokens_max:
        out.append(
            f"afd.mtp_tokens: {section.mtp_tokens} draft tokens; {via} runs at most {afd.mtp_tokens_max}; set "
            f"mtp_tokens: {afd.mtp_tokens_max}."
        )
    if section.prefill_batch_tokens is not None and not afd.prefill_too:
        out.append(
            f"afd.prefill_batch_tokens: {via} does not prefill on AFD instances; feed them from prefill instances."
        )
    if plan.prefill is not None and not afd.with_prefill_instances:
        out.append(f"prefill: {via} documents no prefill instances feeding AFD decode instances; plan decode only.")
    return out


def _afd_attention_side_problems(profile: EngineProfile, plan: Plan, hw: HardwareSpec) -> list[str]:
    """The engine's layout rules on an AFD instance's attention side (a DP/TP server of its own)."""
    section = plan.afd
    assert section is not None
    side = PhasePlan(
        devices=section.attention_devices,
        attention=section.attention,
        lm_head=section.lm_head_layout,
        embedding=section.embedding,
    )
    return phase_problems(profile, hw, "afd.", side, None, False, 1, 0)


def plan_problems(
    plan: Plan,
    hw: HardwareSpec,
    engine: str,
    experts: int | None,
    has_dense: bool,
    architectures: tuple[str, ...] | None = None,
) -> list[str]:
    """Every field of `plan` that `engine` cannot run (empty: it can run the plan).

    `architectures`: the model's classes (config.json), which an AFD plan's engine must register.
    """
    from planner.engines.plan_view import plan_view

    profile = load_profile(engine)
    cap = profile.capabilities
    view = plan_view(plan)
    out = []
    off_machine = machine_refusal(profile, hw)
    if off_machine is not None:
        out.append(f"hardware: {off_machine}; plan on a machine it runs on, or export for another engine.")
    wrong_format = quantization_refusal(profile, plan.quantization)
    if wrong_format is not None:
        out.append(f"quantization: {wrong_format}; plan with --quantization {' or '.join(cap.quantization)}.")
    if plan.draft_model is not None and "eagle3" not in cap.draft_models:
        out.append(
            f"draft_model: {profile.label} runs no EAGLE-3 draft model beside the target (only its MTP layers); "
            "plan without --draft-model or export for sglang or vllm-ascend."
        )
    if plan.afd is not None:
        out += afd_problems(profile, plan, hw, architectures)
        out += _afd_attention_side_problems(profile, plan, hw)
        if plan.prefill is not None and not cap.disaggregated:
            out.append(f"prefill/afd: {profile.label} cannot disaggregate prefill and decode.")
    if cap.prompt_over_forwards is not None:
        out += _whole_prompt_problems(profile, plan)
    if view.colocated is not None:
        if not cap.colocated:
            out.append(f"colocated: {profile.label} cannot run prefill and decode on the same instances.")
        c = view.colocated
        out += phase_problems(profile, hw, "colocated.", c.phase, experts, has_dense, c.micro_batches, c.mtp_tokens)
        out += _colocated_schedule_problems(profile, c.chunk_tokens, c.prefill_batch_tokens, c.mtp_tokens)
        if plan.colocated is not None:
            mb = plan.colocated.decode_micro_batches
            out += _decode_micro_problems(profile, "colocated.decode_micro_batches", mb, plan.colocated.moe)
        return out
    if view.decode is not None and view.prefill is not None and not cap.disaggregated:
        out.append(f"prefill/decode: {profile.label} cannot disaggregate prefill and decode.")
    if view.decode is not None:
        out += phase_problems(profile, hw, "decode.", view.decode, experts, has_dense, 1, view.decode.mtp_tokens)
        if plan.decode is not None:
            out += _decode_micro_problems(profile, "decode.micro_batches", plan.decode.micro_batches, plan.decode.moe)
    if view.prefill is not None:
        p = view.prefill
        out += phase_problems(profile, hw, "prefill.", p, experts, has_dense, p.micro_batches, 0)
    if plan.prefill is not None and plan.prefill.context_parallel:
        out.append(
            f"prefill.context_parallel: moeplan writes no context-parallel prefill launch for {profile.label} "
            f"({profile.capabilities.prefill_context_parallel}); set it false to export whole prompts per DP rank."
        )
    return out


def _colocated_schedule_problems(
    profile: EngineProfile, chunk_tokens: int | None, prefill_batch_tokens: int, mtp_tokens: int
) -> list[str]:
    """A colocated schedule the engine does not run as moeplan costs it: whole prefill forwards on an engine
    whose every step mixes decodes and prompt tokens, mixed steps on one whose mixed steps moeplan does not
    write, or mixed steps with MTP on one whose mixed steps drop the draft tokens."""
    cap = profile.capabilities
    if chunk_tokens is None:
        if cap.whole_prefill_forwards is None:
            return []
        return [
            f"colocated.chunk_tokens: {cap.whole_prefill_forwards}; this plan's whole prefill forwards "
            f"({prefill_batch_tokens:,} tokens between decode steps) would run as mixed steps, not as costed; "
            f"re-plan with --engine {profile.engine} (its search keeps to chunked prefill) or export for another "
            "engine."
        ]
    if not cap.chunked_prefill:
        return [
            f"colocated.chunk_tokens: chunked prefill ({chunk_tokens}-token chunks riding along decode steps) is "
            f"not written for {profile.label} by moeplan (its SplitFuse plugin and Mix template are not "
            "modelled); re-plan with whole-prompt prefill or export for another engine."
        ]
    if mtp_tokens > 0 and cap.chunked_mtp is not None:
        return [
            f"colocated.mtp_tokens: {cap.chunked_mtp}; this plan's chunked prefill ({chunk_tokens}-token chunks "
            f"riding along decode steps) with {mtp_tokens} MTP token(s) a step would emit fewer tokens a step than "
            f"costed; re-plan with --engine {profile.engine} (its search keeps chunked plans to MTP 0) or export "
            "for another engine."
        ]
    return []


def colocated_schedule_refusal(engine: str, plan: Plan) -> str | None:
    """Why `engine` does not run a colocated plan's schedule as moeplan costs it (whole prefill forwards on vLLM,
    whose steps all mix; mixed steps on MindIE, or with MTP on SGLang), or None: what `simulate --engine` says
    when it serves the plan's own schedule for an engine that would run another."""
    from planner.engines.plan_view import plan_view

    c = plan_view(plan).colocated
    if c is None:
        return None
    problems = _colocated_schedule_problems(load_profile(engine), c.chunk_tokens, c.prefill_batch_tokens, c.mtp_tokens)
    return problems[0] if problems else None


def _whole_prompt_problems(profile: EngineProfile, plan: Plan) -> list[str]:
    """For an engine that prefills a prompt whole on its attention DP rank (`prompt_over_forwards`): a prefill
    batch whose rank share is below the TTFT-percentile prompt's computed tokens (the cost model then counts
    the prompt's forwards on its rank, planner.costmodel.prefill.forwards_per_prompt; the engine would run
    a prompt a rank instead, a larger forward than the plan's)."""
    w = plan.workload
    prompt = w.slo_input_tokens * (1.0 - w.hit_rate)
    batches: list[tuple[str, PhasePlan, int]] = []
    if plan.prefill is not None and not plan.prefill.context_parallel:
        batches.append(("prefill.batch_tokens", plan.prefill, plan.prefill.batch_tokens))
    if plan.colocated is not None and plan.colocated.chunk_tokens is None:
        c = plan.colocated
        batches.append(("colocated.prefill_batch_tokens", c.prefill_section(), c.prefill_batch_tokens))
    out = []
    for field, phase, batch in batches:
        dp = phase.attention.dp
        if prompt > batch / dp + 1e-9:
            out.append(
                f"{field}: {profile.capabilities.prompt_over_forwards}; this batch gives each of its {dp} DP ranks "
                f"{batch / dp:,.0f} tokens a forward, below a {prompt:,.0f}-token prompt, so {profile.label} would "
                f"run larger forwards than the plan costs; set {field} to {math.ceil(dp * prompt)} or more, or "
                "export for another engine."
            )
    return out


def engines_that_run(
    plan: Plan, hw: HardwareSpec, experts: int | None, has_dense: bool, architectures: tuple[str, ...] | None = None
) -> dict[str, list[str]]:
    """For each engine, the problems it has with `plan` (an empty list: it runs it)."""
    return {e: plan_problems(plan, hw, e, experts, has_dense, architectures) for e in ENGINES}


def model_engines_that_run(plan: Plan, hw: HardwareSpec, model: ModelSpec) -> dict[str, list[str]]:
    """`engines_that_run` with the model's routed experts, dense layers and architectures."""
    experts = model.moe.routed_experts if model.moe is not None else None
    return engines_that_run(plan, hw, experts, model.num_dense_layers > 0, model.architectures)


def running(problems: dict[str, list[str]], sep: str = ", ") -> str:
    """The engines of an `engines_that_run` answer that run the plan, joined, or 'none'."""
    return sep.join(e for e, found in problems.items() if not found) or "none"
