"""A phase's candidates over its instance sizes, with the cost tables they came from.

Its own module so that planner.search.diagnose (which reads it) and planner.search.plan_search
(which builds it and calls diagnose) import it without importing each other; the weights' bytes
both need live here for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.candidates.phase_candidates import PhaseCandidate
from planner.candidates.tables import IntTables, PhaseTables
from planner.costmodel.context import CostContext


@dataclass
class PhaseSpace:
    """A phase's candidates over all its instance sizes, and what was evaluated."""

    phase: str
    sizes: list[int]
    candidates: list[PhaseCandidate]
    points_evaluated: int
    tables: dict[int, tuple[PhaseTables, IntTables]] = field(default_factory=dict)


def weights_bytes(ctx: CostContext) -> tuple[float, float]:
    """(routed and shared expert weights, all other weights) of the model, bytes per instance."""
    m, q = ctx.model, ctx.quant
    experts = 0.0
    if m.moe is not None:
        layers = m.num_moe_layers + m.mtp_layers
        experts = layers * (
            m.moe.routed_experts * m.expert_params() * ctx.routed_expert_weight_bytes
            + m.moe.shared_experts * m.shared_expert_params() * q.expert_weight_bytes
        )
    attn = m.attention_params_all() * q.linear_weight_bytes
    dense = m.num_dense_layers * m.dense_ffn_params() * q.dense_weight_bytes
    vocab = (1 if m.tie_word_embeddings else 2) * m.vocab_params() * q.vocab_weight_bytes
    return experts, attn + dense + vocab
