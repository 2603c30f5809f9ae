"""The named limits of the search space: what each keeps out, why, and how to lift it.

A proof of optimality holds over a space. Every axis the search treats as continuous -- decode
concurrency, prefill batch -- is searched at every integer value (planner.search.
candidate_spaces; the decode concurrency below FRACTIONAL_BELOW a device also at every whole number
of sequences per attention TP group), so what remains are these discrete rules (and that the decode
concurrency is a whole number per device from FRACTIONAL_BELOW on, where a plan file may state any
whole number of sequences per attention TP group). Each
stands on physics, on what the serving engines run, on what the cost model can represent, or is a
choice made to keep the space finite; each says which. `moeplan plan` prints the short names under
its verdict, and `--explain-space` prints this table. tests/candidates/test_restrictions.py checks that each rule
keeps out what it says (and nothing the description does not name), or that its flag lifts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.candidates.colocated_candidates import CHUNK_TOKENS_PER_DEVICE
from planner.candidates.space import DENSE_NODE_COUNTS, MAX_EXTRA_SLOTS, MAX_INSTANCE_DEVICES, MAX_REDUNDANCY
from planner.candidates.tables import FRACTIONAL_BELOW, MAX_CONCURRENCY, MAX_REQUESTS_PER_FORWARD

DEFAULT_MTP_DEPTHS = (0, 1, 2)  # what a model with MTP layers is searched at without --mtp
DEFAULT_DRAFT_DEPTHS = (1, 2, 3)  # what a model with a draft model (--draft-model) is searched at without --mtp


@dataclass(frozen=True)
class Restriction:
    """One named limit of the space."""

    key: str
    short: str  # a few words for the line under the verdict
    keeps_out: str  # precisely what is not searched
    basis: str  # physics, engine, model or choice, and why
    lift: str  # the flag that lifts it, or "-"


EP_INSTANCE = Restriction(
    "ep-instance",
    "EP = instance size",
    "expert parallelism over fewer devices than the instance (experts replicated across groups of it)",
    "engine: vLLM splits the experts over the whole DP x TP world of an instance "
    "(vllm/model_executor/layers/fused_moe/config.py, FusedMoEParallelConfig.make); the plan format "
    "requires EP + dedicated shared-expert devices = the instance",
    "-",
)
EXTRA_SLOTS = Restriction(
    "extra-slots",
    f"<= {MAX_EXTRA_SLOTS} extra slots, <= {MAX_REDUNDANCY:.0%} copies",
    f"more than {MAX_EXTRA_SLOTS} expert slots per device beyond the fewest that hold every expert, and more "
    f"redundant copies than {MAX_REDUNDANCY:.0%} of the routed experts (the first slot beyond the fewest is "
    "always searched)",
    "choice: beyond it the placement's balance improves by < 0.1% under the imbalance models (docs/experts.md)",
    "--max-extra-slots N",
)
TP_POWERS = Restriction(
    "tp-powers",
    "TP powers of two in a node",
    "tensor parallelism (attention, dense FFN, LM head) of a size that is not a power of two or spans nodes; "
    "the prefill attention core's TP may span nodes in powers of two",
    "choice: the engines' usual sizes, and TP's per-layer all-reduce is cheapest inside a node",
    "--any-tp",
)
INSTANCE_SIZES = Restriction(
    "instance-sizes",
    f"sizes 2^k below a node, 2^k nodes past {DENSE_NODE_COUNTS}",
    f"instances of a size below one node that is not a power of two, of more than {DENSE_NODE_COUNTS} nodes "
    f"whose node count is not a power of two, or of more than {MAX_INSTANCE_DEVICES} devices",
    "choice: sub-node groups follow the node's link topology; beyond 64 nodes more instances of a smaller "
    "size add the capacity one large instance would",
    "-",
)
MTP_DEPTHS = Restriction(
    "mtp-depths",
    f"MTP <= {max(DEFAULT_MTP_DEPTHS)}",
    f"MTP draft depths above {max(DEFAULT_MTP_DEPTHS)} (the engines run up to 3-4)",
    "choice: each deeper draft is accepted less often (planner.costmodel.decode)",
    "--mtp 0,1,2,3",
)
DRAFT_DEPTHS = Restriction(
    "draft-depths",
    f"draft {min(DEFAULT_DRAFT_DEPTHS)}-{max(DEFAULT_DRAFT_DEPTHS)} tokens",
    f"with --draft-model: no drafting (depth 0: the loaded draft model would never run) and draft depths above "
    f"{max(DEFAULT_DRAFT_DEPTHS)}",
    "choice: SGLang's Ascend best-practice EAGLE-3 runs use 3 and 4 steps; each deeper draft is accepted less often",
    "--mtp 1,2,3,4",
)
MICRO_BATCHES = Restriction(
    "micro-batches",
    "<= 2 micro-batches",
    "more than two decode or prefill micro-batches per step or forward",
    "engine: two-batch overlap is what the engines run (DeepSeek's and SGLang's two micro-batches)",
    "-",
)
SHARED_COUNTS = Restriction(
    "shared-count",
    "1 dedicated shared-expert count",
    "dedicated shared-expert device counts other than the best balanced one: of the two integers around "
    "devices x shared / (top-k + shared), the one whose busier group (routed or shared) has the lighter load",
    "physics: the MoE step waits for the busier group, and the loads cross there; the other neighbour moves "
    "weights between the groups, which may change what fits HBM (planner.candidates.space."
    "dedicated_shared_devices)",
    "-",
)
HYBRID_POST_TP = Restriction(
    "hybrid-post-tp",
    "hybrid post-TP <= 2",
    "the prefill hybrid attention with a post-attention TP other than 1 or 2",
    "choice: the post-attention projection is small next to the core; its TP only trades an all-reduce",
    "-",
)
CHUNK_SIZES = Restriction(
    "chunk-sizes",
    f"{len(CHUNK_TOKENS_PER_DEVICE)} chunk sizes",
    "chunked prefill with a chunk other than "
    + ", ".join(str(c) for c in CHUNK_TOKENS_PER_DEVICE)
    + " prompt tokens per device and step",
    "choice: powers of two around vLLM's default per-engine budget of 2048 tokens "
    "(SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS, v0.11)",
    "-",
)
COLOCATED_MICRO_BATCH = Restriction(
    "colocated-micro-batch",
    "colocated decode 1 micro-batch",
    "colocated instances whose decode steps run two micro-batches",
    "model: the colocated schedule (planner.costmodel.colocated) has no overlap of decode micro-batches",
    "-",
)
WHOLE_CONCURRENCY = Restriction(
    "whole-concurrency",
    f"B whole per device from {FRACTIONAL_BELOW}",
    f"decode and AFD concurrencies of {FRACTIONAL_BELOW} sequences per (attention) device or more that are not a "
    "whole number per device "
    "(a plan file may state any whole number of sequences per attention TP group: 4.5 on a TP2 group), and "
    "fractions of a sequence per device on an attention TP that is not a power of two (--any-tp); below "
    f"{FRACTIONAL_BELOW} every whole number of sequences per attention TP group of a power of two is searched "
    "(1/16, 2/16, ... on TP16)",
    f"choice: from {FRACTIONAL_BELOW} sequences a device on, the next whole number is at most 25% more "
    "sequences, and the axis stays one value per sequence a device (a TP16 group's every sequence would make "
    "the tables 16 times wider)",
    "-",
)
CONCURRENCY_CAP = Restriction(
    "concurrency-cap",
    f"B <= {MAX_CONCURRENCY}",
    f"more than {MAX_CONCURRENCY} decoding sequences per device (HBM would hold more for this model)",
    "choice: a bound on the tables' size",
    "-",
)
BATCH_CAP = Restriction(
    "batch-cap",
    f"R <= {MAX_REQUESTS_PER_FORWARD}",
    f"prefill forwards of more than {MAX_REQUESTS_PER_FORWARD} requests (HBM would hold more for this model)",
    "choice: a bound on the tables' size",
    "-",
)

ALL = (
    EP_INSTANCE,
    EXTRA_SLOTS,
    TP_POWERS,
    INSTANCE_SIZES,
    MTP_DEPTHS,
    DRAFT_DEPTHS,
    MICRO_BATCHES,
    SHARED_COUNTS,
    HYBRID_POST_TP,
    CHUNK_SIZES,
    COLOCATED_MICRO_BATCH,
    WHOLE_CONCURRENCY,
    CONCURRENCY_CAP,
    BATCH_CAP,
)
