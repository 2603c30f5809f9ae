"""Decode attention when the kernel gives every (sequence, KV head) pair one core: the busiest core's time.

A decode step's GQA attention reads each sequence's KV cache once. A kernel that splits one sequence's KV
over cores ("flash decoding", split-KV) keeps every core busy at any batch, and the step reads the KV at
the machine's effective KV-read bandwidth (the roofline in `modules.attention_cost`). A kernel that does
not split gives each (sequence, KV head) pair to one core, round robin, and walks that pair's whole
context there; with fewer pairs than cores the other cores idle, and the layer takes as long as the
busiest core's pairs at one core's read rate.

Which stacks split (plans say so with `decode_attention_kv_split`, default true):
- vllm-ascend's GQA decode calls `torch_npu.npu_fused_infer_attention_score` with layout TND, a paged KV
  cache of 128-token blocks and `sparse_mode=3` (vllm_ascend/attention/attention_v1.py, v0.17.0rc1,
  e20f0b1a0d: `full_graph_fia`, `_get_fia_params`). CANN's FIA tiling sends that call to its "split-fuse"
  kernel (ops-transformer v8.5.0, 6ead121a: fused_infer_attention_score_tiling.cpp `IsUsingFAI` ->
  `TilingProcess4SplitFuse`), whose tasks are batch x KV heads for a one-token query
  (op_host/flash_attention_infer_tiling.h), taken round robin by the cores (op_kernel/
  flash_attention_regular.h, `taskIdx += coreNum`), each walking its full KV length; it has no KV-split
  field and no combine step. vllm-ascend's FAQ (docs/source/faqs.md, v0.13.0rc1 to v0.19.x) says as much:
  FIA is slow at small batch "mainly due to the lack of flash decoding function". Its images carried
  CANN 8.3.RC2 (v0.13.0rc1) and 8.5.x (v0.14.0rc1 to v0.19.1rc1): false. (The kernel source read is
  v8.5.0's; 8.3.RC2's routing was not read, the FAQ of its releases is the evidence there.)
- ops-transformer f6ac99f98 ("splitFuse PA FD", 2026-01-31, first in CANN v9.0.0-beta.1) splits the KV
  length of that path when batch x KV heads <= 0.4 of the cores (0.8 for contexts of at least 512 tokens
  a core) and every context of the batch is >= 1024 tokens. vllm-ascend's images carry CANN 9.0.0 from
  v0.20.2rc1 (PR #9085). true models a kernel that always splits: where CANN 9.0 does not (between 0.4
  and 1x the cores, or a batch with a context under 1024 tokens) and the busiest core's bound exceeds
  the roofline, true is optimistic. At the shipped factors that is a2 with 9 to 11 pairs a die, by up to
  25% of the layer's KV read (20 x 0.564 / 9); on a3 the fitted KV-read rate keeps the bound below.
- GPUs' decode kernels split KV (FlashInfer, FlashAttention's split-KV): true.
- SGLang's and MindIE's Ascend decode kernels were not read: their plans keep the default.

One core's read rate: the device's peak HBM bandwidth over its cores (assumption: Ascend publishes no
per-core read rate; a lone core drawing its share of the peak is the even split of the memory system).
The MLA and sparse kinds (DeepSeek, GLM-5, Kimi) run other kernels and are not modelled here: a plan of a
model without GQA layers that says false is refused by name.
"""

from __future__ import annotations

import numpy as np

from planner.errors import BadInputError
from planner.specs.hardware import HardwareSpec
from planner.specs.model import ModelSpec


def check_unsplit_decode_attention(
    model: ModelSpec,
    hw: HardwareSpec,
    *,
    named: str = "decode_attention_kv_split: false",
    drop: str = "the field",
) -> None:
    """Refuse the unsplit kernel where this module cannot model it, in the words of the input that asked for it:
    `named` is how the message names it (the plan field by default, `--no-decode-attention-kv-split` for the
    CLI's flag) and `drop` what to drop ("the field", "the flag")."""
    if hw.ai_cores_per_device is None:
        raise BadInputError(
            f"{named}: hardware '{hw.name}' gives no ai_cores_per_device (the core count the unsplit kernel is "
            f"costed with); add it to the hardware YAML (value and source) or drop {drop}."
        )
    if not any(kind == "gqa" for kind, _ratio, _n in model.attention_groups()):
        raise BadInputError(
            f"{named}: model '{model.name}' has no GQA attention layer (it is modelled for GQA layers only; MLA "
            f"and sparse attention run other kernels); drop {drop}."
        )


def unsplit_kv_read_s(
    hw: HardwareSpec, sequences_per_rank: np.ndarray, kv_heads_per_rank: float, kv_bytes_per_head: float
) -> np.ndarray:
    """The busiest core's KV reads for one layer when each (sequence, KV head) pair is one core's task.

    `sequences_per_rank`: sequences whose KV this rank reads (a DP group's, as every TP rank reads them);
    `kv_heads_per_rank`: the KV heads a rank holds (at least one: TP beyond the KV heads replicates them);
    `kv_bytes_per_head`: one sequence's K and V bytes of one KV head at the mean context.
    """
    assert hw.ai_cores_per_device is not None
    cores = hw.ai_cores_per_device.value
    pairs = np.asarray(sequences_per_rank, dtype=float) * np.ceil(kv_heads_per_rank)
    pairs_on_busiest_core = np.ceil(pairs / cores - 1e-9)
    core_bytes_per_s = hw.hbm_bandwidth_bytes_per_s / cores
    return pairs_on_busiest_core * kv_bytes_per_head / core_bytes_per_s
