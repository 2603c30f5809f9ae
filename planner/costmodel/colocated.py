"""A colocated instance: the same devices run prefill and decode, in one of two schedules.

Notation: n devices, B decoding sequences per device (N = n B per instance), e tokens emitted per
step per sequence (MTP), `in`/`out` prompt and completion lengths, step = the decode step at B.

**Whole forwards** (`chunk_tokens` unset): prefill forwards take turns with decode steps, and a
forward prefills the prompts admitted since the last one, at most the plan's batch of R requests.
A full instance admits a prompt only when a sequence finishes, a = N e / out of them a decode
step, and the engines prefill what they admit (vLLM's and SGLang's schedulers run a waiting
prompt at the next step, MindIE with supportSelectBatch off, as the launch files set it). With
admissions per step Poisson of mean a and a forward after every step that admitted one, H =
a / (1 - e^-a) prompts wait (the mean of a Poisson count given it is not zero), never fewer than
the fewest requests the search's batch axis holds (`least_requests_per_forward`, R_0).

With attention data parallelism over D ranks each rank prefills its own prompts within its share
R / D of the batch (the engines' per-rank budget: planner.costmodel.prefill), so a prompt longer
than that share takes k = ceil(in D / (R in)) forwards on its rank
(`planner.costmodel.prefill.forwards_per_prompt`; k = 1 when a share holds a prompt), back to back:
the engines run a prompt's next chunk at the next prefill opportunity, before decoding resumes
(SGLang schedules a new prefill batch, the chunked request's rest, before each decode batch; the
serving simulator does the same), and no sequence finishes meanwhile to admit another. The H
prompts thus take k forwards of H / k prompts' tokens each, never more than the batch: a forward
holds R_h = min(R, max(R_0, H) / k) requests' worth, its forward F_h read linearly between the
forwards of the whole batches on either side (below R_0 on the line through R_0 and R_0 + 1,
`forward_below_axis`). Per request an instance spends out * step / (N e) seconds decoding and
F_h / R_h prefilling, so it serves lambda = 1 / (out * step / (N e) + F_h / R_h) requests per
second. A fraction f = lambda * F_h / R_h of its time goes to prefill, during which decoding
stalls: a sequence sees TPOT = (step / e) / (1 - f) on average. The limits stay at the plan's
batch, the largest forward the engine may run: the gap between two of a sequence's tokens is at
most k forwards of R plus a step, and a new request waits for the decode step in flight and the
forward in flight (half a forward on average), then its own k forwards:
TTFT = step + (k + 1/2) F(R) (step + 1.5 F(R) with k = 1), and HBM holds the KV cache and
activations of R prompts. (Checked against the serving simulator, which admits as the engines do:
tests/simulate/test_consistency.py.)

**Chunked prefill** (`chunk_tokens` = C, the prompt tokens one step may carry; vLLM's chunked
prefill: `max_num_batched_tokens` is the "maximum number of tokens to be processed in a single
iteration" (vllm.config.scheduler.SchedulerConfig), and with chunked prefill the scheduler puts
the running decodes first and fills the rest of the budget with prompt chunks (vllm-project/vllm
PR #7874, "the policy is changed to prioritize decode requests")): every step runs the decode
batch, and a fraction phi of the steps also carries C prompt tokens, which lengthens it by t_c.
In steady state the prompts that enter balance the sequences that finish: N e / out requests
finish per step, so

    phi  = in N e / (out C)            (steps carrying a chunk; phi < 1 or prefill cannot keep up)
    t    = step + phi t_c              (mean step), lambda = N e / (out t),  TPOT = t / e
    t_c  = C (F(2X) - F(X)) / X,  X = max(C, in)

where F is the prefill forward of the same layouts (one micro-batch): the marginal time of X more
prompt tokens at a batch of X (the decode step has already streamed the weights, so only the
added work counts; X >= in keeps the causal attention term of whole prompts). The inter-token
latency (ITL: the gap between two steps that emit a sequence's tokens) is `step` on a fraction
1 - phi of the steps and step + t_c on phi of them, so P50 = step + t_c if phi >= 1/2 else step,
P99 = step + t_c if phi > 1/100 else step, and the longest gap is step + t_c: with phi near 1
the gaps are uniform. A new prompt waits for the step in flight, then for the prompt tokens
queued ahead (deterministic service at C per chunk step, load phi: phi / (2 (1 - phi)) chunk
steps on average, M/D/1), then its own ceil(in / C) chunk steps:
TTFT = (step + t_c) (1 + ceil(in / C) + phi / (2 (1 - phi))). HBM adds the KV cache of the
prompts being prefilled (at most C + in tokens: a chunk and one partly prefilled prompt) and the
activations of one chunk.

With attention data parallelism over D ranks each rank schedules its own prompts (vLLM: an engine
core per DP rank; SGLang: a scheduler per DP rank, `--chunked-prefill-size` divided over them), so
a rank's chunk is C / D tokens of its own prompt, and phi above is the fraction of steps one rank
prefills in. A step in which any rank prefills waits for that rank's attention at its chunk (as
long as with every rank prefilling), while the routed experts' part s_e of t_c grows only with the
tokens of the ranks that do. With the ranks prefilling independently, a fraction
busy = 1 - (1 - phi)^D of the steps carry a chunk:

    t    = step + busy (t_c - s_e) + phi s_e,   TTFT = (step + t_c) (1 + ceil(in D / C) + phi / (2 (1 - phi)))

(a prompt's own chunks are C / D tokens), the ITL percentiles take busy as the long gaps'
fraction, and the KV cache of prompts in prefill is a rank's prompt and its next chunk, in + C / D
tokens a rank. With D = 1 this is the model above. A request holds its seat while it prefills
(the engines count it among their running requests), for the TTFT's steps: of N seats,
N out / (out + e s_p) decode at a time, s_p = 1 + ceil(in D / C) + the queue term, and phi,
busy, the mean step and lambda are those of the seats that decode (the queue term is taken at
every seat decoding, a little long).

For whole forwards the ITL percentiles follow the same way from the fraction of a sequence's
gaps that hold a prompt's run of k forwards (runs per second over steps per second), a long gap
being a step and k forwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.costmodel.context import CostContext
from planner.costmodel.decode import decode_step
from planner.costmodel.memory import HbmUse, decode_hbm, prefill_hbm
from planner.costmodel.prefill import forwards_per_prompt, least_requests_per_forward, prefill_forward
from planner.specs.plan import DecodePlan, PrefillPlan


@dataclass
class ColocatedFigures:
    """One colocated instance at its concurrency and batch."""

    requests_per_s: float
    prefill_time_fraction: float
    tpot_s: float
    ttft_s: float
    pause_s: float  # the longest gap between two tokens of a decoding sequence
    hbm: HbmUse
    itl_p50_s: float = 0.0
    itl_p99_s: float = 0.0
    chunk_step_fraction: float = 0.0  # chunked: steps carrying a chunk (phi); whole forwards: 0
    held_requests: float = 0.0  # whole forwards: the requests a forward holds (R_h); chunked: 0
    prompt_forwards: int = 1  # whole forwards: the forwards a prompt takes on its rank (k); chunked: 1


def admitted_per_step(devices: int, concurrency, emitted, output_tokens: int) -> np.ndarray:
    """a = N e / out: the prompts a full instance admits a decode step (the sequences it finishes)."""
    return devices * np.asarray(concurrency, dtype=float) * np.asarray(emitted, dtype=float) / output_tokens


def prompts_per_forward(admitted) -> np.ndarray:
    """H = a / (1 - e^-a): the prompts a forward holds when one follows every decode step that
    admitted any, admissions Poisson of mean a a step (1 as a goes to 0)."""
    a = np.maximum(np.asarray(admitted, dtype=float), 1e-12)
    return a / -np.expm1(-a)


def held_requests(batch_requests, admitted, least_requests: int, prompt_forwards=1.0) -> np.ndarray:
    """R_h = min(R, max(R_0, H) / k): the requests' worth of prompt tokens a whole forward holds (module
    docstring; k the forwards a prompt takes on its rank)."""
    held = np.maximum(float(least_requests), prompts_per_forward(admitted)) / np.asarray(prompt_forwards, dtype=float)
    return np.minimum(np.asarray(batch_requests, dtype=float), held)


def forward_below_axis(held, first_requests, second_requests, first_s, second_s) -> np.ndarray:
    """F(R_h) for R_h below the fewest whole requests a forward holds (R_0, `first_requests`; the search's
    batch axis starts there): read on the line through the forwards of R_0 and the next batch
    (`second_requests`), never below F(R_0) R_h / R_0 (a forward's seconds per request do not fall as
    it shrinks: its weight reads and launches stay)."""
    x = np.asarray(held, dtype=float)
    slope = (np.asarray(second_s) - np.asarray(first_s)) / max(float(second_requests) - float(first_requests), 1e-12)
    line = np.asarray(first_s) + (x - float(first_requests)) * slope
    return np.maximum(line, np.asarray(first_s) * x / float(first_requests))


def colocated_rate_and_latency(
    step_s,
    emitted,
    devices: int,
    concurrency,
    forward_s,
    requests_per_forward,
    output_tokens: int,
    held_forward_s=None,
    held_requests_per_forward=None,
    prompt_forwards=1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(requests/s, prefill time fraction, TPOT s, TTFT s) by the formulas of the module docstring:
    the rate and the stretched TPOT from the forwards the instance runs (`held_forward_s` of
    `held_requests_per_forward`, by default the plan's), the TTFT from the plan's forward and the
    `prompt_forwards` (k) a prompt takes on its rank."""
    decode_s_per_request = output_tokens * np.asarray(step_s) / (devices * np.asarray(concurrency) * emitted)
    if held_forward_s is None:
        held_forward_s, held_requests_per_forward = forward_s, requests_per_forward
    prefill_s_per_request = np.asarray(held_forward_s) / np.asarray(held_requests_per_forward)
    rate = 1.0 / (decode_s_per_request + prefill_s_per_request)
    fraction = rate * prefill_s_per_request
    tpot = np.asarray(step_s) / emitted / np.maximum(1.0 - fraction, 1e-12)
    ttft = np.asarray(step_s) + (np.asarray(prompt_forwards, dtype=float) + 0.5) * np.asarray(forward_s)
    return rate, fraction, tpot, ttft


ITL_P50, ITL_P99 = 0.5, 0.01  # a gap class sets a percentile once it is this common


def itl_percentiles(step_s, long_s, long_fraction) -> tuple[np.ndarray, np.ndarray]:
    """(P50, P99) of gaps that are `step_s`, or `long_s` on a fraction `long_fraction` of them."""
    step, long, frac = np.asarray(step_s), np.asarray(long_s), np.asarray(long_fraction)
    return np.where(frac >= ITL_P50, long, step), np.where(frac > ITL_P99, long, step)


def whole_forward_long_gap_fraction(
    step_s, emitted, rate, forward_s, requests_per_forward, fraction, prompt_forwards=1.0
) -> np.ndarray:
    """Fraction of a sequence's gaps with whole forwards in them: runs of `prompt_forwards` forwards
    (a prompt's forwards on its rank, back to back) per step taken."""
    runs_per_s = np.asarray(rate) / np.asarray(requests_per_forward) / np.asarray(prompt_forwards, dtype=float)
    steps_per_s = (1.0 - np.asarray(fraction)) / np.asarray(step_s)
    return np.minimum(1.0, runs_per_s / np.maximum(steps_per_s, 1e-12))


def forward_held_s(
    forward_at,
    held: float,
    batch_requests: float,
    batch_forward_s: float,
    tokens_per_request: int,
    least_requests: int = 1,
) -> float:
    """F_h: the forward of `held` requests, read linearly between the forwards of the whole
    batches on either side (`forward_at` maps prompt tokens to seconds), below the fewest whole
    requests a forward holds (`least_requests`) by `forward_below_axis`; the plan's own forward
    when the forward holds its whole batch."""
    if held >= batch_requests - 1e-9:
        return batch_forward_s
    if held < least_requests - 1e-9:
        pair = np.array([least_requests, least_requests + 1], dtype=float)
        f0, f1 = (float(x) for x in np.asarray(forward_at(pair * tokens_per_request)))
        return float(forward_below_axis(held, least_requests, least_requests + 1, f0, f1))
    lo = math.floor(held + 1e-9)
    hi = min(lo + 1.0, batch_requests)
    if held - lo <= 1e-9:
        return float(np.asarray(forward_at(np.array([lo * tokens_per_request], dtype=float)))[0])
    f_lo, f_hi = (float(x) for x in np.asarray(forward_at(np.array([lo, hi], dtype=float) * tokens_per_request)))
    return f_lo + (held - lo) / (hi - lo) * (f_hi - f_lo)


def held_forward(
    ctx: CostContext,
    devices: int,
    concurrency,
    emitted,
    batch_requests: float,
    batch_forward_s: float,
    forward_at,
    prompt_forwards: float = 1.0,
) -> tuple[float, float]:
    """(R_h, F_h): the requests' worth of prompt tokens a whole forward of an instance of `devices` at
    `concurrency` holds, and that forward's seconds (`forward_at` maps prompt tokens to seconds; the
    plan's batch of `batch_requests` takes `batch_forward_s`; a prompt takes `prompt_forwards` on its
    rank), by the module docstring."""
    admitted = admitted_per_step(devices, concurrency, emitted, ctx.workload.output_tokens)
    least = least_requests_per_forward(ctx)
    held = float(held_requests(batch_requests, admitted, least, prompt_forwards))
    tokens = ctx.prefill_tokens_per_request
    return held, forward_held_s(forward_at, held, batch_requests, batch_forward_s, tokens, least)


def chunk_time_s(forward_x_s, forward_2x_s, chunk_tokens, x_tokens) -> np.ndarray:
    """t_c: the time C prompt tokens add to a decode step (module docstring)."""
    slope = np.maximum(np.asarray(forward_2x_s) - np.asarray(forward_x_s), 0.0) / np.asarray(x_tokens)
    return np.asarray(chunk_tokens) * slope


def chunked_reference_tokens(chunk_tokens, input_tokens: int) -> np.ndarray:
    """X = max(C, in): the prefill batch the chunk's marginal cost is taken at."""
    return np.maximum(np.asarray(chunk_tokens, dtype=float), float(input_tokens))


def chunked_rate_and_latency(
    step_s,
    emitted,
    devices: int,
    concurrency,
    chunk_s,
    chunk_tokens,
    input_tokens: int,
    output_tokens: int,
    dp: int = 1,
    shared_chunk_s=0.0,
) -> tuple[np.ndarray, ...]:
    """(requests/s, phi, TPOT s, TTFT s, ITL P50 s, ITL P99 s, longest gap s) of chunked prefill over
    `dp` attention DP ranks, each prefilling its own prompts in chunks of C / dp (module docstring);
    `shared_chunk_s`: the part of `chunk_s` (t_c) the ranks' chunks share, the routed experts'.

    Where phi >= 1 (the chunks cannot keep up with the sequences finishing) rate is 0 and the
    latencies infinite.
    """
    step, c_s = np.asarray(step_s, dtype=float), np.asarray(chunk_s, dtype=float)
    shared = np.minimum(np.asarray(shared_chunk_s, dtype=float), c_s)
    seats = devices * np.asarray(concurrency, dtype=float)
    chunk = np.asarray(chunk_tokens, dtype=float)
    full = input_tokens * seats * emitted / (output_tokens * chunk)  # phi were every seat decoding
    ok = full < 1.0
    queue = np.where(ok, full / (2.0 * np.maximum(1.0 - full, 1e-12)), np.inf)
    # steps a request holds its seat before it decodes: the step in flight, its queue, its own chunks
    held = 1.0 + np.ceil(input_tokens * dp / chunk - 1e-9) + queue
    sequences = decoding_seats(seats, output_tokens / emitted, held)
    phi = input_tokens * sequences * emitted / (output_tokens * chunk)
    busy = steps_with_a_chunk(phi, dp)
    mean_step = step + busy * (c_s - shared) + np.minimum(phi, 1.0) * shared
    rate = np.where(ok, sequences * emitted / (output_tokens * mean_step), 0.0)
    tpot = np.where(ok, mean_step / emitted, np.inf)
    mixed = step + c_s
    ttft = mixed * held
    p50, p99 = itl_percentiles(step, mixed, busy)
    return rate, np.where(ok, phi, full), tpot, ttft, p50, p99, mixed


def decoding_seats(seats, decode_steps, held_steps) -> np.ndarray:
    """Seats that decode at a time when each request holds its seat for `held_steps` steps of prefill (the
    engines count a request in prefill among their running ones: vLLM's max_num_seqs, SGLang's
    --max-running-requests) and then `decode_steps`: seats x decode / (decode + held)."""
    d = np.asarray(decode_steps, dtype=float)
    return np.asarray(seats, dtype=float) * d / (d + np.where(np.isfinite(held_steps), held_steps, np.inf))


def chunked_prefill_tokens(chunk_tokens, input_tokens: int, dp: int) -> np.ndarray:
    """The two batches whose prefill HBM a chunked instance adds, in tokens spread over its `dp` ranks:
    the KV cache of a rank's prompt in prefill and its chunk's next (in + C / dp a rank), and the
    activations of one chunk (C over the instance)."""
    c = np.atleast_1d(np.asarray(chunk_tokens, dtype=float))
    return np.concatenate([c + float(input_tokens) * dp, c])


def steps_with_a_chunk(phi, dp: int) -> np.ndarray:
    """Fraction of steps in which at least one of `dp` DP ranks prefills a chunk, each rank doing so on a
    fraction phi of the steps, independently of the others: 1 - (1 - phi)^dp (phi with one rank)."""
    p = np.minimum(np.asarray(phi, dtype=float), 1.0)
    return -np.expm1(dp * np.log1p(-np.minimum(p, 1.0 - 1e-15))) if dp > 1 else p


def colocated_figures(
    ctx: CostContext, decode: DecodePlan, prefill: PrefillPlan, chunk_tokens: int | None = None
) -> ColocatedFigures:
    """Figures of one colocated instance: its decode and prefill views, and the chunk size if the
    prefill is chunked (then `prefill` is one chunk's forward)."""
    step = decode_step(ctx, decode)
    step_s = float(step.step_s[0])
    emitted = float(step.step_s[0] / step.tpot_s[0])
    d_use = decode_hbm(ctx, decode)
    parts = dict(d_use.breakdown_bytes)
    w = ctx.workload
    if chunk_tokens is not None:
        one = prefill.model_copy(update={"micro_batches": 1})
        x = float(chunked_reference_tokens(chunk_tokens, w.input_tokens))
        fwd = prefill_forward(ctx, one, np.array([x, 2.0 * x]))
        chunk_s = float(chunk_time_s(fwd.forward_s[0], fwd.forward_s[1], chunk_tokens, x))
        experts = fwd.breakdown_s.get("moe", np.zeros(2))
        shared_s = float(chunk_time_s(experts[0], experts[1], chunk_tokens, x))
        rate, phi, tpot, ttft, p50, p99, longest = chunked_rate_and_latency(
            step_s,
            emitted,
            decode.devices,
            decode.concurrency_per_device,
            chunk_s,
            chunk_tokens,
            w.input_tokens,
            w.output_tokens,
            decode.attention.dp,
            shared_s,
        )
        tokens = chunked_prefill_tokens(chunk_tokens, w.input_tokens, decode.attention.dp)
        p_use = prefill_hbm(ctx, one, tokens, carried_prompt=False)
        parts["prefill_kv_cache"] = p_use.breakdown_bytes["kv_cache"][:1]
        parts["prefill_activations"] = p_use.breakdown_bytes["activations"][1:]
        busy = float(steps_with_a_chunk(phi, decode.attention.dp))
        prefill_s = busy * (chunk_s - shared_s) + min(float(phi), 1.0) * shared_s
        return ColocatedFigures(
            requests_per_s=float(rate),
            prefill_time_fraction=prefill_s / (step_s + prefill_s),
            tpot_s=float(tpot),
            ttft_s=float(ttft),
            pause_s=float(longest),
            hbm=HbmUse(parts, d_use.role, ctx.hbm_capacity_bytes),
            itl_p50_s=float(p50),
            itl_p99_s=float(p99),
            chunk_step_fraction=busy,
        )
    fwd = prefill_forward(ctx, prefill)
    forward_s = float(fwd.forward_s[0])
    batch = float(fwd.requests_per_forward[0])
    # the forwards a prompt takes on its rank (module docstring)
    own = float(forwards_per_prompt(ctx, prefill.batch_tokens, prefill.attention.dp, prefill.context_parallel))
    held, held_s = held_forward(
        ctx,
        decode.devices,
        decode.concurrency_per_device,
        emitted,
        batch,
        forward_s,
        lambda tokens: prefill_forward(ctx, prefill, tokens).forward_s,
        own,
    )
    rate, fraction, tpot, ttft = colocated_rate_and_latency(
        step_s,
        emitted,
        decode.devices,
        decode.concurrency_per_device,
        forward_s,
        batch,
        w.output_tokens,
        held_s,
        held,
        own,
    )
    p_use = prefill_hbm(ctx, prefill)
    parts["prefill_kv_cache"] = p_use.breakdown_bytes["kv_cache"]
    parts["prefill_activations"] = p_use.breakdown_bytes["activations"]
    long_share = whole_forward_long_gap_fraction(step_s, emitted, rate, held_s, held, fraction, own)
    p50, p99 = itl_percentiles(step_s, own * held_s + step_s, long_share)
    return ColocatedFigures(
        requests_per_s=float(rate),
        prefill_time_fraction=float(fraction),
        tpot_s=float(tpot),
        ttft_s=float(ttft),
        pause_s=own * forward_s + step_s,
        hbm=HbmUse(parts, d_use.role, ctx.hbm_capacity_bytes),
        itl_p50_s=float(p50),
        itl_p99_s=float(p99),
        held_requests=held,
        prompt_forwards=int(own),
    )
