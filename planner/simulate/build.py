"""A simulation from a plan and a traffic: the instances, their tables, the requests.

The plan's structure decides the instances: prefill and decode instances (disaggregated, each phase
on its own machine when the plan says so), colocated instances, or one phase alone. A decode-only
plan (the report's decode rows) receives prompts as if prefilled elsewhere at no cost: its TTFT is
the wait for admission and the first step. A prefill-only plan's requests end with their first token.

Refused with one line and exit 2 (`BadInputError`): a plan whose decode instances do not fit HBM
at their own concurrency (the simulator would admit what the engine could not hold), a
`--decode-concurrency` above what HBM allows, a request longer than the KV cache of one rank, and
lengths past the model's context.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.costmodel.acceptance_spread import MAX_ACCEPTANCE_SPREAD, default_acceptance_spread
from planner.costmodel.context import CostContext
from planner.costmodel.evaluate import (
    evaluate_mixed_plan,
    evaluate_plan,
    load_plan_specs,
    plan_cost_context,
    resolve_ref,
)
from planner.costmodel.imbalance import ImbalanceModel, default_imbalance_model
from planner.costmodel.memory import max_decode_concurrency
from planner.costmodel.mixed import is_mixed_plan, load_mixed_specs, mixed_contexts
from planner.costmodel.prediction import Prediction
from planner.costmodel.prefill import prefill_forward
from planner.engines.plan_view import plan_view
from planner.errors import BadInputError
from planner.simulate.colocated_instance import PREFILL_DELAYERS, SGLANG_PREFILL_DELAY_PASSES, ColocatedInstance
from planner.simulate.decode_instance import DecodeInstance, DecodeSetup
from planner.simulate.engine import Simulation
from planner.simulate.mtp import request_steps_scale
from planner.simulate.predictor import (
    chunk_times,
    decode_times,
    kv_pool,
    prefill_times,
    prefill_workload,
    with_workload,
)
from planner.simulate.prefill_instance import PrefillInstance
from planner.simulate.records import RequestTable
from planner.simulate.routing import Routing, engine_routing
from planner.simulate.tracefile import load_trace
from planner.simulate.traffic import arrival_times, lengths_from_bins, random_dataset_lengths
from planner.specs.hardware import HardwareSpec
from planner.specs.plan import DecodePlan, Plan, PrefillPlan, sequences_on
from planner.specs.workload import WorkloadFile

MAX_REQUESTS = 10_000_000
SERIES_POINTS = 800
SPREAD_STREAM = 0x5EED  # second key of the random stream of the requests' own acceptance
SPREAD_SOURCE = "fitted by benchmarks/fit_acceptance_spread.py, planner/costmodel/data/acceptance_spread.json"


@dataclass(frozen=True)
class RandomDataset:
    """The benchmark clients' random dataset: lengths, range ratio and whose convention draws them."""

    input_tokens: int
    output_tokens: int
    range_ratio: float
    convention: str = "vllm"


@dataclass(frozen=True)
class Traffic:
    """What the simulated client sends and how (`--requests`, `--concurrency`, `--rate`, ...)."""

    requests: int = 1000
    concurrency: int | None = None
    rate_per_s: float | None = None
    burstiness: float = 1.0
    trace: Path | None = None
    workload: WorkloadFile | None = None
    random: RandomDataset | None = None
    seed: int = 0
    warmup: int = 0
    cooldown: int = 0
    warm_start: bool = False

    def describe(self) -> str:
        """The traffic in words, for the report's title."""
        parts = []
        if self.trace is not None:
            parts.append(f"trace {self.trace.name}")
        elif self.rate_per_s is not None:
            shape = "Poisson" if self.burstiness == 1.0 else f"gamma, burstiness {self.burstiness:g}"
            parts.append(f"{self.rate_per_s:g} req/s ({shape})")
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.trace is None and self.rate_per_s is None and self.concurrency is None:
            parts.append("all requests at once")
        return ", ".join(parts)


@dataclass
class Built:
    """A simulation ready to run, and what the report needs besides its results."""

    sim: Simulation
    plan: Plan
    prediction: Prediction
    routing: Routing
    traffic: Traffic
    structure: str  # disaggregated | colocated | decode-only | prefill-only
    cards: float
    devices: int
    lengths_source: str
    notes: list[str]
    decode_seats: int  # seats of all decode (or colocated) instances
    kv_pool_tokens_per_rank: float


def plan_structure(plan: Plan) -> str:
    """disaggregated, colocated, decode-only or prefill-only."""
    if plan.colocated is not None:
        return "colocated"
    if plan.decode is not None and plan.prefill is not None:
        return "disaggregated"
    return "decode-only" if plan.decode is not None else "prefill-only"


def length_sampler(plan: Plan, traffic: Traffic, rng: np.random.Generator) -> tuple[Callable[[int], Any], str]:
    """A function drawing `count` (input, output) pairs as the traffic says, and where they come from."""
    if traffic.random is not None:
        r = traffic.random

        def draw_random(count: int) -> Any:
            return random_dataset_lengths(r.input_tokens, r.output_tokens, r.range_ratio, r.convention, count, rng)

        return (
            draw_random,
            f"{r.convention} random dataset {r.input_tokens}+{r.output_tokens}, range ratio {r.range_ratio:g}",
        )
    if traffic.workload is not None:
        bins = traffic.workload.bins()
        source = f"--workload ({len(bins)} bins{', ' + traffic.workload.source if traffic.workload.source else ''})"
    else:
        w = plan.workload
        bins = w.lengths or [_one_bin(w.input_tokens, w.output_tokens)]
        source = f"the plan's workload ({w.input_tokens}+{w.output_tokens}" + (
            f", {len(bins)} bins)" if w.lengths else ")"
        )
    return (lambda count: lengths_from_bins(bins, count, rng)), source


def _lengths(plan: Plan, traffic: Traffic, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(input, output, ready seconds, where the lengths come from)."""
    if traffic.trace is not None:
        arrival, inp, out = load_trace(traffic.trace)
        n = min(traffic.requests, inp.size) if traffic.requests else inp.size
        return inp[:n], out[:n], arrival[:n], f"trace {traffic.trace} ({n:,} requests)"
    draw, source = length_sampler(plan, traffic, rng)
    inp, out = draw(traffic.requests)
    ready = arrival_times(traffic.requests, traffic.rate_per_s, traffic.burstiness, rng)
    return inp, out, ready, source


def _one_bin(i: int, o: int):
    from planner.specs.workload import LengthBin

    return LengthBin(input_tokens=i, output_tokens=o)


def _check_traffic(traffic: Traffic) -> None:
    if not 1 <= traffic.requests <= MAX_REQUESTS and not (traffic.trace is not None and traffic.requests == 0):
        raise BadInputError(f"--requests must be between 1 and {MAX_REQUESTS:,}; got {traffic.requests}.")
    if traffic.concurrency is not None and not 1 <= traffic.concurrency <= MAX_REQUESTS:
        raise BadInputError(
            f"--concurrency must be a whole number from 1 to {MAX_REQUESTS:,}; got {traffic.concurrency}."
        )
    if traffic.rate_per_s is not None and not (traffic.rate_per_s > 0 and math.isfinite(traffic.rate_per_s)):
        raise BadInputError(f"--rate must be a finite number of requests per second > 0; got {traffic.rate_per_s:g}.")
    if not traffic.burstiness > 0:
        raise BadInputError(f"--burstiness must be > 0 (1: Poisson arrivals); got {traffic.burstiness:g}.")
    if not traffic.warmup >= 0:
        raise BadInputError(f"--warmup must be >= 0 requests; got {traffic.warmup}.")
    if traffic.trace is not None and (traffic.rate_per_s is not None or traffic.random is not None):
        raise BadInputError("--trace gives arrival times and lengths; drop --rate and --random-* with it.")
    if traffic.cooldown < 0 or traffic.warmup + traffic.cooldown >= max(traffic.requests, 1) and traffic.trace is None:
        raise BadInputError(
            f"--warmup {traffic.warmup} and cool-down {traffic.cooldown} leave no measured request of "
            f"{traffic.requests}; send more requests or warm up less."
        )
    if traffic.warm_start and (traffic.rate_per_s is None or traffic.trace is not None):
        raise BadInputError("a warm start needs an open loop at a --rate (it fills decode as that rate would).")


COLOCATED_PREFILL = ("instance", "per-rank")


def engine_colocated_prefill(engine: str | None, plan: Plan) -> tuple[str, str | None]:
    """How `engine`, as moeplan launches it, forms a colocated plan's prefill forwards, and its prefill delayer:
    SGLang with attention DP and whole forwards per rank with sglang 0.5.23's delayer
    (planner/report/launch/sglang.py turns it on); everything else the instance's batch."""
    co = plan_view(plan).colocated
    if (engine or "").lower() != "sglang" or co is None or not co.whole_forwards_over_dp_ranks:
        return "instance", None
    return "per-rank", "sglang-0.5.23"


def _check_colocated_prefill(plan: Plan, mode: str, delayer: str | None, delay_passes: int) -> None:
    """Per-rank forwards and the prefill delayer act on a colocated instance's whole prefill forwards;
    asked of any other plan they would change nothing, so they are refused there."""
    if mode not in COLOCATED_PREFILL:
        raise BadInputError(f"--colocated-prefill: '{mode}' is not one of {', '.join(COLOCATED_PREFILL)}.")
    if delayer is not None:
        if delayer not in PREFILL_DELAYERS:
            raise BadInputError(
                f"--prefill-delayer: '{delayer}' is not one of {', '.join(PREFILL_DELAYERS)} (or none, for off)."
            )
        if mode != "per-rank":
            raise BadInputError(
                "--prefill-delayer: SGLang's prefill delayer holds back per-rank forwards; add "
                "--colocated-prefill per-rank."
            )
        if delay_passes < 1:
            raise BadInputError(f"--prefill-delay-passes must be >= 1 pass; got {delay_passes}.")
    if mode == "instance":
        return
    co = plan.colocated
    if co is None or co.chunk_tokens is not None:
        raise BadInputError(
            "--colocated-prefill per-rank: it forms a colocated instance's whole prefill forwards; this plan has "
            + ("no colocated section" if co is None else "chunk_tokens (chunked prefill)")
            + ". Drop the option."
        )


def with_decode_concurrency(plan: Plan, per_device: int | None) -> Plan:
    """The plan with its decode (or colocated) concurrency per device replaced (None: as it is)."""
    if per_device is None:
        return plan
    if per_device < 1:
        raise BadInputError(f"--decode-concurrency must be >= 1 sequence per device; got {per_device}.")
    if plan.colocated is not None:
        return plan.model_copy(
            update={"colocated": plan.colocated.model_copy(update={"concurrency_per_device": per_device})}
        )
    if plan.decode is None:
        raise BadInputError("--decode-concurrency: the plan has no decode instances; drop the flag.")
    return plan.model_copy(update={"decode": plan.decode.model_copy(update={"concurrency_per_device": per_device})})


def _check_holds(
    ctx: CostContext, phase: DecodePlan, section: str, override: bool, prediction: Prediction
) -> str | None:
    """A `--decode-concurrency` HBM cannot hold is refused (exit 2) naming the most it holds; a plan's own
    concurrency past it is simulated (its KV cache then binds admission) and a note says so."""
    block = prediction.colocated if section == "colocated" else prediction.decode
    fits = block.fits_hbm if block is not None else True
    if fits:
        return None
    most = max_decode_concurrency(ctx, phase)
    where = f"({ctx.hbm_utilization:g} of {ctx.hw.hbm_bytes / 2**30:.0f} GiB)"
    if override:
        raise BadInputError(
            f"--decode-concurrency = {phase.concurrency_per_device}: the plan cannot hold it; HBM per device holds "
            f"at most {most:g} sequences per device at this workload {where}; "
            + (f"give {most:g} or fewer." if most else "no concurrency fits next to the weights.")
        )
    return (
        f"{section}.concurrency_per_device = {phase.concurrency_per_device} is more than HBM holds at the cost "
        f"model's steady-state KV estimate ({most:g} per device {where}): the KV cache, not the seats, binds admission"
    )


def _recompute(ctx: CostContext, phase: DecodePlan):
    """Seconds a decode instance takes to recompute one preempted sequence of n tokens (a prefill
    forward of those tokens on its own layout), built on first use."""
    cache: dict[int, float] = {}
    section = PrefillPlan(
        devices=phase.devices,
        instances=1,
        attention=phase.attention,
        dense_ffn=phase.dense_ffn,
        moe=phase.moe,
        shared_expert=phase.shared_expert,
        lm_head=phase.lm_head,
        batch_tokens=1,
    )

    def seconds(tokens: float) -> float:
        n = max(1, int(tokens))
        if n not in cache:
            c = with_workload(ctx, prefill_workload(n, ctx.workload))
            cache[n] = float(prefill_forward(c, section, np.array([float(n)])).forward_s[0])
        return cache[n]

    return seconds


def build_simulation(
    plan: Plan,
    traffic: Traffic,
    *,
    base_dir: Path | None = None,
    routing: Routing | None = None,
    imbalance: ImbalanceModel | None = None,
    decode_concurrency: int | None = None,
    prediction: Prediction | None = None,
    series_points: int = SERIES_POINTS,
    acceptance_spread: float | None = None,
    colocated_prefill: str = "instance",
    prefill_delayer: str | None = None,
    prefill_delay_passes: int = SGLANG_PREFILL_DELAY_PASSES,
) -> Built:
    """Everything `run` needs; bad input raises BadInputError naming the field or flag.

    `acceptance_spread`: tau, the spread of each request's own MTP acceptance on the logit scale
    (planner.simulate.mtp; None: the shipped fit, 0: every request at the workload's acceptance).
    `colocated_prefill`: how a colocated plan's whole forwards form their batch, 'instance' or 'per-rank'
    (SGLang with DP attention); `prefill_delayer`: SGLang's prefill delayer on per-rank forwards, 'pr14201'
    or 'sglang-0.5.23' (None: off), holding prefill back `prefill_delay_passes` passes at most
    (planner.simulate.colocated_instance)."""
    _check_traffic(traffic)
    if acceptance_spread is not None and not 0.0 <= acceptance_spread <= MAX_ACCEPTANCE_SPREAD:
        raise BadInputError(
            f"--acceptance-spread {acceptance_spread:g} is out of range: give tau between 0 and "
            f"{MAX_ACCEPTANCE_SPREAD:g} (the standard deviation of a request's acceptance on the logit scale)."
        )
    if plan.afd is not None:
        raise BadInputError(
            "afd: the simulator does not model attention-FFN disaggregated instances (micro-batches ping-ponging "
            "between attention and FFN devices); `moeplan evaluate` scores the plan, or simulate one without afd."
        )
    _check_colocated_prefill(plan, colocated_prefill, prefill_delayer, prefill_delay_passes)
    routing = routing or engine_routing(None)
    plan = with_decode_concurrency(plan, decode_concurrency)
    imb = imbalance or default_imbalance_model()
    structure = plan_structure(plan)
    if is_mixed_plan(plan):
        mixed = load_mixed_specs(plan, base_dir, resolve_ref)
        d_ctx, p_ctx = mixed_contexts(plan, mixed, imb)
        d_hw, p_hw = mixed.decode_hw, mixed.prefill_hw
        if prediction is None:
            prediction = evaluate_mixed_plan(plan, base_dir, imb, specs=mixed)
    else:
        specs = load_plan_specs(plan, base_dir)
        d_ctx = p_ctx = plan_cost_context(plan, specs, imb)
        d_hw = p_hw = specs.hw
        if prediction is None:
            prediction = evaluate_plan(plan, base_dir, imb, specs=specs)
    model = d_ctx.model

    rng = np.random.default_rng(traffic.seed)
    inp, out, ready, source = _lengths(plan, traffic, rng)
    longest = int((inp + out).max())
    if longest > model.max_context_tokens:
        raise BadInputError(
            f"a request of {longest:,} tokens (input + output) exceeds the model's context of "
            f"{model.max_context_tokens:,} tokens; shorten the lengths."
        )
    table = RequestTable(inp, out, ready)
    hit = plan.workload.hit_rate
    if hit:
        table.cached_tokens[:] = np.minimum((hit * inp).astype(np.int64), inp - 1)

    est_rate = prediction.system.requests_per_s if prediction.system is not None else None
    if est_rate is None and prediction.colocated is not None:
        est_rate = prediction.colocated.requests_per_s_per_instance * plan.colocated.instances  # type: ignore[union-attr]
    if traffic.rate_per_s is not None:
        est_rate = min(traffic.rate_per_s, est_rate) if est_rate else traffic.rate_per_s
    span = float(ready[-1]) if traffic.trace is not None else 0.0
    duration = max(span, inp.size / est_rate if est_rate else 1.0)
    sim = Simulation(
        table,
        rng,
        traffic.concurrency,
        min(traffic.warmup, inp.size - 1),
        traffic.cooldown,
        routing.instances,
        1.0,
        lambda n: 0.0,
        duration / series_points,
    )
    notes: list[str] = []
    max_prompt = float(inp.max())
    decode_phase = plan.decode_phase
    mtp = decode_phase.mtp_tokens if decode_phase is not None else 0
    max_context = float(longest + mtp)
    tau = default_acceptance_spread() if acceptance_spread is None else acceptance_spread
    # a stream of its own: the spread leaves every other draw of a seed as it was
    spread_rng = np.random.default_rng([traffic.seed, SPREAD_STREAM])

    def steps_scale(count: int) -> np.ndarray:
        return request_steps_scale(mtp, plan.workload.mtp_acceptance, tau, count, spread_rng)

    table.steps_scale[:] = steps_scale(table.count)
    if mtp and tau > 0.0 and 0.0 < plan.workload.mtp_acceptance < 1.0:
        notes.append(
            f"MTP acceptance per request: logit-normal about the workload's {plan.workload.mtp_acceptance:g}, "
            f"spread tau = {tau:.3g} ({'--acceptance-spread' if acceptance_spread is not None else SPREAD_SOURCE}); "
            "the mean TPOT is the workload's, the tail is wider"
        )
    pool_tokens = 0.0
    seats = 0

    if structure in ("disaggregated", "prefill-only"):
        assert plan.prefill is not None
        pt = prefill_times(p_ctx, plan.prefill, max_prompt, float(plan.workload.input_tokens))
        ranks = 1 if plan.prefill.context_parallel else plan.prefill.attention.dp
        sim.prefill = [
            PrefillInstance(k, sim, pt, plan.prefill.batch_tokens, ranks) for k in range(plan.prefill.instances)
        ]
        sim.kv_bytes = pt.prompt_kv_bytes
        sim.kv_link_bytes_per_s = d_ctx.kv_link_bytes_per_s
    if decode_phase is not None:
        section = "colocated" if plan.colocated is not None else "decode"
        over = _check_holds(d_ctx, decode_phase, section, decode_concurrency is not None, prediction)
        if over:
            notes.append(over)
        dt = decode_times(d_ctx, decode_phase, max_context, d_ctx.mean_decode_context_tokens)
        other: dict[str, float] = {}
        if plan.colocated is not None and prediction.colocated is not None:
            other = {
                "prefill_activations": float(prediction.colocated.hbm_breakdown_bytes.get("prefill_activations", 0))
            }
        pool = kv_pool(d_ctx, decode_phase, other)
        tp = decode_phase.attention.tp
        dp = decode_phase.attention.dp
        seats_per_rank = sequences_on(decode_phase.concurrency_per_device, tp)
        per_rank_tokens = pool.tokens_for(1)
        pool_tokens = per_rank_tokens
        if per_rank_tokens < max_context:
            raise BadInputError(
                f"a request of {int(max_context):,} tokens does not fit the KV cache one DP rank of the "
                f"{section} instance has ({max(per_rank_tokens, 0):,.0f} tokens next to its weights at "
                f"concurrency_per_device = {decode_phase.concurrency_per_device}); shorten the lengths or lower "
                "the concurrency."
            )
        setup = DecodeSetup(
            dt,
            pool,
            dp,
            seats_per_rank,
            mtp,
            plan.workload.mtp_acceptance,
            routing.dp_ranks,
            _recompute(d_ctx, decode_phase),
        )
        instances = decode_phase.instances if plan.colocated is None else plan.colocated.instances
        if plan.colocated is not None:
            co = plan.colocated
            prefill_section = co.prefill_section()
            chunk = None
            if co.chunk_tokens is not None:
                one = prefill_section.model_copy(update={"micro_batches": 1})
                forward = prefill_times(p_ctx, one, max_prompt, float(plan.workload.input_tokens))
                chunk = chunk_times(p_ctx, prefill_section, co.chunk_tokens, max_prompt)
            else:
                forward = prefill_times(p_ctx, prefill_section, max_prompt, float(plan.workload.input_tokens))
            sim.colocated = True
            sim.decode = [
                ColocatedInstance(
                    k,
                    sim,
                    setup,
                    forward,
                    co.prefill_batch_tokens,
                    chunk,
                    co.chunk_tokens,
                    per_rank=colocated_prefill == "per-rank",
                    prefill_delayer=prefill_delayer,
                    prefill_delay_passes=prefill_delay_passes,
                )
                for k in range(instances)
            ]
        else:
            sim.decode = [DecodeInstance(k, sim, setup) for k in range(instances)]
        seats = seats_per_rank * dp * instances
    if traffic.warm_start and sim.decode:
        preloaded = _preload(plan, prediction, traffic, sim, rng, steps_scale)
        notes.append(
            f"warm start: {preloaded:,} sequences decoding at time 0, at random points of their outputs (as the "
            f"rate fills decode at steady state); not measured"
        )
    if structure == "decode-only":
        notes.append(
            "decode-only plan: prompts arrive as if prefilled elsewhere at no cost; TTFT is the wait for "
            "admission (a seat, KV room, the next step) and the first decode step"
        )
    if structure == "prefill-only":
        notes.append("prefill-only plan: a request ends with its first token (TTFT = E2E); no decode")
    if colocated_prefill == "per-rank":
        notes.append(
            "per-rank prefill (SGLang with DP attention): each DP rank prefills its own prompts, up to "
            "prefill_batch_tokens / dp a forward, and a forward lasts as long as its busiest rank; the static "
            "prediction spreads each forward over the ranks"
        )
    if prefill_delayer is not None:
        notes.append(
            f"prefill delayer {prefill_delayer}: "
            + (
                "SGLang's SGLANG_SCHEDULER_DECREASE_PREFILL_IDLE (sgl-project/sglang PR #14201): while some DP ranks "
                "have every seat taken and others do not"
                if prefill_delayer == "pr14201"
                else "SGLang's --enable-prefill-delayer (PrefillDelayer, sglang 0.5.23): while some DP ranks have a "
                "prompt to prefill and others do not"
            )
            + f", no prefill for up to {prefill_delay_passes} passes in a row"
        )
    devices, cards = _size(plan, d_hw, p_hw)
    return Built(
        sim=sim,
        plan=plan,
        prediction=prediction,
        routing=routing,
        traffic=traffic,
        structure=structure,
        cards=cards,
        devices=devices,
        lengths_source=source,
        notes=notes,
        decode_seats=seats,
        kv_pool_tokens_per_rank=pool_tokens,
    )


def _size(plan: Plan, d_hw: HardwareSpec, p_hw: HardwareSpec) -> tuple[int, float]:
    """(devices, cards) of the whole deployment, each phase counted on its own machine."""
    if plan.colocated is not None:
        return plan.colocated.total_devices, d_hw.cards(plan.colocated.total_devices)
    devices, cards = 0, 0.0
    if plan.decode is not None:
        devices += plan.decode.total_devices
        cards += d_hw.cards(plan.decode.total_devices)
    if plan.prefill is not None:
        devices += plan.prefill.total_devices
        cards += p_hw.cards(plan.prefill.total_devices)
    return devices, cards


def with_seed(traffic: Traffic, seed: int) -> Traffic:
    """The same traffic drawn with another seed."""
    return dataclasses.replace(traffic, seed=seed)


def _preload(
    plan: Plan,
    prediction: Prediction,
    traffic: Traffic,
    sim: Simulation,
    rng: np.random.Generator,
    steps_scale: Callable[[int], np.ndarray],
) -> int:
    """Fill the decode instances as the traffic's rate fills them at steady state: rate x the time a request
    decodes (its output at the static TPOT) sequences, at most the seats, each at a random point of its
    output; lengths drawn as the traffic's, weighted by output length (a long request stays longer)."""
    tpot_ms = (
        prediction.colocated.tpot_ms
        if prediction.colocated is not None
        else (prediction.decode.tpot_ms if prediction.decode is not None else 0.0)
    )
    draw, _ = length_sampler(plan, traffic, rng)
    probe_in, probe_out = draw(4096)
    mean_out = float(np.mean(probe_out))
    seats = sum(d.seats * d.dp for d in sim.decode)
    count = int(min(seats, round((traffic.rate_per_s or 0.0) * mean_out * tpot_ms / 1e3)))
    if count <= 0:
        return 0
    pick = rng.choice(probe_in.size, size=count, p=probe_out / probe_out.sum())
    inp, out = probe_in[pick], probe_out[pick]
    rows = sim.table.add_preloaded(inp, out)
    sim.table.steps_scale[rows] = steps_scale(count)
    done = np.minimum((rng.random(count) * out).astype(np.int64), out - 1)
    # each seat of each rank of each instance, in a random order: the first `count` are taken
    seat_inst = np.concatenate([np.full(d.seats * d.dp, k) for k, d in enumerate(sim.decode)])
    seat_rank = np.concatenate([np.repeat(np.arange(d.dp), d.seats) for d in sim.decode])
    order = rng.permutation(seat_inst.size)[:count]
    inst_of, rank_of = seat_inst[order], seat_rank[order]
    sim.table.decode_instance[rows] = inst_of
    sim.table.dp_rank[rows] = rank_of
    sim.table.delivered_tokens[rows] = done
    for k, inst in enumerate(sim.decode):
        mine = inst_of == k
        inst.preload(rows[mine], rank_of[mine], (inp + done)[mine].astype(float), (out - done)[mine])
    return count
