"""Where the measured rows stand: the load per device at which each phase of a machine has been
checked against a measurement, and a note on a plan outside that range.

The cost model is checked on the figures of validation/ (`moeplan fidelity`). A row checks a phase
at the load its plan puts on a device: a decode step at its sequences per device, a prefill
forward at its prompt tokens per device. Figures the model misses (`known_miss`) check nothing and
are left out. A plan whose phase runs below the lightest or above the heaviest load any remaining
figure of its machine was taken at is an extrapolation: the efficiency factors were fitted where
the rows are, and what changes outside them (a kernel's efficiency at a few tokens, the host's
share of a small step) no row has measured. vllm-ascend's Kimi-K2-Thinking prefill at 64 tokens a
die, 62% slower than modelled, is such a case. A machine without measured figures of a phase (or a
machine file of your own) gets no note here; its factors' sources say where they come from.

A plan's model is checked too (`model_coverage_notes`): a model with no measured figure the cost model
meets is priced with factors fitted on other models' rows, and a layer kind that no checked model has
(Qwen3.5's Gated DeltaNet linear attention, say) is priced with no measured row to say how close a
kernel comes to that price. Runs kept aside from the fit are not read here (they are a folder of
the repository, `moeplan fidelity --rows kept-aside`, not of the installed package).
"""

from __future__ import annotations

import json
from functools import cache

from planner.errors import BadInputError
from planner.specs.model import ModelSpec
from planner.specs.plan import Plan

COVERED_PHASES = ("decode", "prefill")


def phase_load(plan: Plan, phase: str) -> float | None:
    """The load one device of the plan's phase carries: decode sequences in flight per device, or a
    prefill forward's prompt tokens per device (None: the plan has no such phase)."""
    if phase == "decode":
        d = plan.decode_phase
        return None if d is None else float(d.concurrency_per_device)
    if phase == "prefill":
        p = plan.prefill_phase
        return None if p is None else p.batch_tokens / p.devices
    return None


@cache
def measured_loads(machine: str, phase: str) -> tuple[float, ...]:
    """The loads per device of `phase` at which the usable static figures of `machine` that the model
    meets (no `known_miss`) were taken, ascending."""
    from planner.specs.catalog import load_plan
    from planner.specs.validation import figure_phase, usable_figures

    loads = set()
    for fig in usable_figures(compare="static"):
        if fig.row.hardware != machine or fig.known_miss or figure_phase(fig) != phase:
            continue
        try:
            plan, _ = load_plan(fig.plan)
        except BadInputError:
            continue
        load = phase_load(plan, phase)
        if load is not None:
            loads.add(load)
    return tuple(sorted(loads))


# what the note calls a layer kind (planner.specs.model.LayerKind)
LAYER_KIND_WORDS = {
    "mla": "MLA attention",
    "gqa": "GQA attention",
    "dsa": "DSA sparse attention",
    "dsa_shared": "DSA sparse attention (shared indexer)",
    "swa": "sliding-window attention",
    "csa": "compressed sparse attention",
    "hca": "heavily compressed attention",
    "linear": "linear attention",
}


def _architecture(model: ModelSpec) -> str:
    """A model's fields without its name: a config.json folder of a catalog model is that model."""
    return json.dumps(model.model_dump(mode="json", exclude={"name"}), sort_keys=True)


@cache
def _checked() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    from planner.specs.catalog import load_model
    from planner.specs.validation import usable_figures

    names = frozenset(f.row.model for f in usable_figures() if not f.known_miss and f.row.model)
    specs = [load_model(name) for name in names]
    kinds = frozenset(kind for spec in specs for kind, _ratio, _n in spec.attention_groups())
    return names, kinds, frozenset(_architecture(spec) for spec in specs)


def checked_models() -> tuple[frozenset[str], frozenset[str]]:
    """The models with a usable measured figure (static or simulated) that the model meets (no
    `known_miss`), and the layer kinds those models have."""
    names, kinds, _ = _checked()
    return names, kinds


def model_coverage_notes(model: ModelSpec) -> list[str]:
    """A note when no measured figure checks the plan's model: its factors were fitted on other models'
    rows, and the layer kinds no checked model has (named, with their layer counts) meet no row at all."""
    models, kinds, architectures = _checked()
    if model.name in models or _architecture(model) in architectures:
        return []
    layers: dict[str, int] = {}
    for kind, _ratio, n in model.attention_groups():
        if kind not in kinds:
            layers[kind] = layers.get(kind, 0) + n
    unmet = ", ".join(
        f"{LAYER_KIND_WORDS.get(kind, kind)} layers ({n} of its {model.num_layers})" for kind, n in layers.items()
    )
    return [
        f"unchecked model: the cost model meets no measured figure of {model.name} in its validation rows "
        "(moeplan fidelity lists them; a figure it misses, known_miss, checks nothing); its figures rest on "
        "factors fitted on other models' rows"
        + (
            f", and its {unmet} are in no checked model: no measured row has tested how they are priced"
            if unmet
            else ""
        )
        + "; read its figures as unconfirmed"
    ]


def _load_text(phase: str, load: float) -> str:
    """A load as the note states it: sequences as given, prompt tokens as a whole number."""
    return f"{load:g}" if phase == "decode" else f"{load:,.0f}"


def _load_words(phase: str, load: float) -> str:
    if phase == "decode":
        return f"runs {_load_text(phase, load)} sequences per device"
    return f"forward carries {_load_text(phase, load)} prompt tokens per device"


def coverage_notes(plan: Plan, machine: str, phases: tuple[str, ...]) -> list[str]:
    """One note per phase of `phases` whose load per device lies outside the loads the measured
    figures of `machine` were taken at (none for a machine or phase without such figures)."""
    notes = []
    for phase in phases:
        load = phase_load(plan, phase) if phase in COVERED_PHASES else None
        loads = measured_loads(machine, phase) if load is not None else ()
        if load is None or not loads or loads[0] <= load <= loads[-1]:
            continue
        lo, hi = loads[0], loads[-1]
        span = _load_text(phase, lo) if lo == hi else f"{_load_text(phase, lo)} to {_load_text(phase, hi)}"
        side = "below" if load < lo else "above"
        notes.append(
            f"extrapolation: this plan's {phase} {_load_words(phase, load)}, {side} every measured {phase} "
            f"figure on {machine} the model meets ({len(loads)} load{'s' if len(loads) != 1 else ''}, {span} per "
            f"device): no measured row checks its {phase} figures at this load (moeplan fidelity lists the rows)"
        )
    return notes
