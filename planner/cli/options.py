"""Options several commands share, turned into planner objects."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.costmodel.acceptance_spread import MAX_ACCEPTANCE_SPREAD
from planner.costmodel.imbalance import ImbalanceModel, LoadsImbalance, SkewImbalance
from planner.errors import BadInputError
from planner.specs.model import ModelSpec
from planner.specs.quantization import QUANTIZATION_SCHEMES


def imbalance_from_options(loads: Path | None, skew_sigma: float | None, model: ModelSpec) -> ImbalanceModel | None:
    """The imbalance model the flags ask for (None: the default, the engine imbalance model)."""
    if loads is not None and skew_sigma is not None:
        raise BadInputError("--loads and --skew-sigma exclude each other; give one.")
    if loads is not None:
        per_layer = loads_array(loads)
        if model.moe is None:
            raise BadInputError(f"--loads: model '{model.name}' has no experts.")
        if per_layer.shape[1] != model.moe.routed_experts:
            raise BadInputError(
                f"--loads: '{loads}' has {per_layer.shape[1]} experts per layer; model "
                f"'{model.name}' has {model.moe.routed_experts}."
            )
        # one row per MoE layer (a profile may add the MTP layers' MoE after them)
        layers = {model.num_moe_layers, model.num_moe_layers + model.mtp_layers}
        if per_layer.shape[0] not in layers:
            raise BadInputError(
                f"--loads: '{loads}' has {per_layer.shape[0]} layers; model '{model.name}' has "
                f"{model.num_moe_layers} MoE layers: give one row of loads per MoE layer (docs/experts.md)."
            )
        return LoadsImbalance(per_layer, label=str(loads))
    if skew_sigma is not None:
        return SkewImbalance(skew_sigma)
    return None


def parse_int_list(text: str, flag: str, lo: int, hi: int) -> list[int]:
    """'0,1,2' -> [0, 1, 2], each within [lo, hi]; errors name the flag."""
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            raise BadInputError(f"{flag}: '{part}' is not an integer; give a list like 0,1,2.") from None
        if not lo <= v <= hi:
            raise BadInputError(f"{flag}: {v} is outside [{lo}, {hi}].")
        values.append(v)
    if not values:
        raise BadInputError(f"{flag}: give at least one value.")
    return sorted(set(values))


def check_loads_file(path: Path) -> None:
    """What the loads reader cannot say itself: a loads CSV separates its cells with commas (a file of ';' or
    tab separated cells would read as one non-number cell a line), and a .npy file that numpy did not write
    is not one (numpy's own error calls it "pickled data"). Both refused by name."""
    if path.suffix.lower() == ".npy":
        try:
            with path.open("rb") as f:
                magic = f.read(6)
        except OSError:
            return  # the reader names what is wrong with the file
        if magic and magic != b"\x93NUMPY":
            raise BadInputError(
                f"loads file '{path.name}' is not a readable .npy array (no numpy header: not a file numpy.save "
                "wrote); save one with numpy.save, or use CSV or JSON."
            )
        return
    if path.suffix.lower() in (".json", ".npz"):
        return
    try:
        with path.open(encoding="utf-8") as f:
            first = next((ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")), "")
    except (OSError, UnicodeDecodeError):
        return  # the reader names what is wrong with the file
    if "," not in first and any(sep in first for sep in (";", "\t")):
        raise BadInputError(
            f"loads file '{path}': its cells are separated by ';' or tabs; a loads CSV separates them with commas."
        )


def loads_array(path: Path):
    """Per-layer loads [layers, experts] from a loads file (the last window of several)."""
    from planner.placement.loads import read_loads

    check_loads_file(path)
    trace = read_loads(path)
    return trace[-1] if trace.ndim == 3 else trace


# ---- option types shared by `plan` and `sweep` ---------------------------------------------------
QuantizationOpt = Annotated[
    str,
    typer.Option(
        "--quantization",
        help="Number formats of weights, activations and KV cache: auto (a8w8c16 where the machine has INT8 "
        "math, else the first of fp8, mxfp8, hif8, bf16 it runs), "
        + ", ".join(QUANTIZATION_SCHEMES)
        + " (planner/specs/quantization.py describes each; FP8, MX and HiF8 need a machine whose YAML lists "
        "that format's peak_flops_per_s).",
    ),
]
TopOpt = Annotated[int, typer.Option("--top", help="How many ranked plans, 1 to 50.")]
PhaseOpt = Annotated[str, typer.Option(help="both, decode or prefill.")]
DecodeDevicesOpt = Annotated[int | None, typer.Option("--decode-devices", help="Pin the decode instance size.")]
PrefillDevicesOpt = Annotated[int | None, typer.Option("--prefill-devices", help="Pin the prefill instance size.")]
LoadsOpt = Annotated[Path | None, typer.Option("--loads", help="Expert loads: imbalance from the placement for them.")]
SkewSigmaOpt = Annotated[
    float | None,
    typer.Option(
        "--skew-sigma",
        min=0.0,
        max=5.0,
        help="Oracle skew model with this log-normal sigma (default: engine imbalance with drift).",
    ),
]
AcceptanceSpreadOpt = Annotated[
    float | None,
    typer.Option(
        "--acceptance-spread",
        min=0.0,
        max=MAX_ACCEPTANCE_SPREAD,
        help="Spread of each request's own MTP acceptance in the simulation (standard deviation on the logit "
        "scale; 0: every request at the plan's acceptance). Default: the value fitted on SGLang's A3 runs "
        "(planner/costmodel/data/acceptance_spread.json).",
    ),
]


def check_spread_needs_simulate(acceptance_spread: float | None, simulate: bool) -> None:
    """--acceptance-spread only sets how a simulation draws; without --simulate it is refused (exit 2)."""
    if acceptance_spread is not None and not simulate:
        raise BadInputError("--acceptance-spread sets the simulation's spread: add --simulate, or drop it.")


MaxRedundantOpt = Annotated[
    int | None,
    typer.Option(
        "--max-redundant-experts", help="Cap redundant expert copies per instance (0: every expert exactly once)."
    ),
]
MaxExtraSlotsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-extra-slots",
        metavar="SLOTS",
        help="Expert slots per device beyond the fewest that hold every expert (default 4, within 50% redundant "
        "copies); given, it replaces both limits (--explain-space).",
    ),
]
AnyTpOpt = Annotated[
    bool,
    typer.Option(
        "--any-tp",
        help="Tensor parallelism of any size that divides the instance and the heads, not only powers of two "
        "inside a node (--explain-space).",
    ),
]
ColocatedOpt = Annotated[
    bool,
    typer.Option(
        "--colocated/--no-colocated",
        help="Also consider colocated instances (prefill and decode on the same devices; TPOT is then an "
        "average over prefill stalls).",
    ),
]
KvSplitOpt = Annotated[
    bool,
    typer.Option(
        "--decode-attention-kv-split/--no-decode-attention-kv-split",
        help="Whether the decode attention kernel spreads one sequence's KV over the device's cores at small "
        "batches (default: it does, as GPUs' kernels do and CANN 9.0's FIA does for small batches). --no-...: every "
        "(sequence, KV head) is one "
        "core's task, as vllm-ascend's CANN 8.3-8.5 images (v0.13.0rc1 to v0.19.x) run GQA models' decode.",
    ),
]
DecodeMicrobatchOpt = Annotated[
    bool,
    typer.Option(
        "--decode-microbatch/--no-decode-microbatch",
        help="Also consider two decode micro-batches overlapping compute with MoE dispatch/combine "
        "(off: the engine cannot, e.g. no two-batch overlap).",
    ),
]
WorkersOpt = Annotated[
    int, typer.Option("--workers", min=1, max=64, help="CP-SAT worker threads (results do not depend on it).")
]


def _jobs_option(what: str) -> typer.models.OptionInfo:
    """--jobs: `what` runs at once, in worker processes (planner.search.forked)."""
    return typer.Option("--jobs", min=1, max=64, help=f"{what}; results do not depend on it; default: up to 2 cores.")


PlanJobsOpt = Annotated[
    int,
    _jobs_option(
        "Searches run at once: with --engine auto, each engine's and the free one, in worker processes forked "
        "after start-up (one at a time where fork is unavailable)"
    ),
]
SweepJobsOpt = Annotated[
    int,
    _jobs_option(
        "Points searched at once, in worker processes forked after the cost tables are built (threads where "
        "fork is unavailable)"
    ),
]
HbmUtilizationOpt = Annotated[
    float,
    typer.Option(
        "--hbm-utilization",
        metavar="FRACTION",
        help="Fraction of each device's HBM a plan may fill, runtime reserve included (default 0.9); in (0, 1]. "
        "An engine's own memory flag holds less (evaluate and simulate read one: --launch-memory-fraction).",
    ),
]


LaunchMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--launch-memory-fraction",
        metavar="ENGINE=FRACTION",
        help="The memory flag of the launch the plan describes, instead of --hbm-utilization: sglang=F (its "
        "--mem-fraction-static, which holds weights and KV pool only) or vllm-ascend=F (its "
        "--gpu-memory-utilization, v0.15.0rc1 or later: all but the runtime's context and graphs). The plan "
        "fills the HBM that flag gives (the inverse of what --emit writes).",
    ),
]


def check_hbm_utilization(value: float) -> float:
    """The --hbm-utilization value, or a BadInputError naming the flag and its range."""
    if not (0.0 < value <= 1.0):
        raise BadInputError(f"--hbm-utilization must be a fraction in (0, 1], e.g. 0.9; got {value:g}.")
    return value


def check_default_itl(tpot_ms: float, field: str = "--tpot-ms") -> None:
    """Refuse a TPOT SLO whose default ITL limit (3x it, when --max-itl-ms is not given) would pass the
    largest SLO the spec takes: the error names `field`, the value the user gave, not --max-itl-ms."""
    from planner.search.nearest import SLO_LIMIT_MS
    from planner.search.request import ITL_TPOT_MULTIPLE

    if ITL_TPOT_MULTIPLE * tpot_ms > SLO_LIMIT_MS:
        raise BadInputError(
            f"{field}: must be <= {SLO_LIMIT_MS:g}/{ITL_TPOT_MULTIPLE:g} ms (about "
            f"{SLO_LIMIT_MS / ITL_TPOT_MULTIPLE:,.0f} ms) while --max-itl-ms is left at its default "
            f"({ITL_TPOT_MULTIPLE:g}x TPOT, at most {SLO_LIMIT_MS:g} ms); got {tpot_ms:g}. Give a smaller "
            f"{field}, or set --max-itl-ms (0 disables it) to allow a TPOT up to {SLO_LIMIT_MS:g} ms."
        )


HtmlOpt = Annotated[
    Path | None,
    typer.Option(
        "--html",
        help="Also write a self-contained HTML report to FILE: the plans with every layout, the cluster drawn, "
        "where the time and HBM go, how sure each figure is; `moeplan evaluate FILE --rank N` reads its plans.",
    ),
]
MaxItlOpt = Annotated[
    float | None,
    typer.Option(
        "--max-itl-ms",
        help="Longest gap between two tokens of a sequence (inter-token latency), ms; default 3x --tpot-ms, "
        "0 disables. Colocated prefill stalls decoding: this bounds the stall.",
    ),
]

# ---- mixed hardware and workload options (issue 13) ----------------------------------------------
PrefillHardwareOpt = Annotated[
    str | None, typer.Option("--prefill-hardware", help="Machine of the prefill instances (default: --hardware).")
]
DecodeHardwareOpt = Annotated[
    str | None, typer.Option("--decode-hardware", help="Machine of the decode instances (default: --hardware).")
]
KvTransferGbpsOpt = Annotated[
    float | None,
    typer.Option(
        "--kv-transfer-gbps",
        help="Prefill->decode KV link per device, GB/s (default: the slower machine's kv_transfer_bandwidth).",
    ),
]
MaxPrefillCardsOpt = Annotated[
    int | None, typer.Option("--max-prefill-cards", help="Cards of the prefill machine (replaces --max-cards).")
]
MaxDecodeCardsOpt = Annotated[
    int | None, typer.Option("--max-decode-cards", help="Cards of the decode machine (replaces --max-cards).")
]
MaxCostOpt = Annotated[
    float | None,
    typer.Option(
        "--max-cost",
        help="Budget on what the cards cost to buy, in cost units (needs price_per_card in the hardware YAMLs; "
        "--price-per-card-hour prices tokens, not this budget).",
    ),
]
PrefixHitRateOpt = Annotated[
    float | None,
    typer.Option(
        "--prefix-hit-rate",
        help="Share of input tokens found in a prefix cache (skip prefill compute, still hold KV); DeepSeek "
        "reports 0.563.",
    ),
]
WorkloadFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--workload",
        help="YAML/JSON of (input, output) pairs or a histogram; its means replace --input-tokens/--output-tokens.",
    ),
]
SloPercentileOpt = Annotated[
    float | None,
    typer.Option(
        "--slo-percentile",
        help="Share of requests, %, whose TTFT and TPOT must meet the SLOs (default 90): the cost model judges "
        "the TTFT of that percentile's prompt and the mean TPOT, and reports the TPOT of that percentile's request "
        "at its own MTP acceptance; with --simulate the simulated TTFT and TPOT percentiles are judged.",
    ),
]

TpotAtPercentileOpt = Annotated[
    bool,
    typer.Option(
        "--tpot-at-percentile",
        help="Hold --tpot-ms to the TPOT of the request at --slo-percentile (default p90) of its own MTP "
        "acceptance, not to the mean TPOT (planner/costmodel/acceptance_spread.py; no effect without MTP).",
    ),
]


def workload_fields(
    workload_file: Path | None, prefix_hit_rate: float | None, slo_percentile: float | None
) -> dict[str, object]:
    """Workload-section fields from --workload, --prefix-hit-rate and --slo-percentile (flags win)."""
    out: dict[str, object] = {}
    if workload_file is not None:
        from planner.specs.workload import load_workload_file

        wf = load_workload_file(workload_file)
        out["lengths"] = [b.model_dump() for b in wf.bins()]
        if wf.prefix_hit_rate is not None:
            out["prefix_hit_rate"] = wf.prefix_hit_rate
        if wf.slo_percentile is not None:
            out["slo_percentile"] = wf.slo_percentile
    if prefix_hit_rate is not None:
        out["prefix_hit_rate"] = prefix_hit_rate
    if slo_percentile is not None:
        out["slo_percentile"] = slo_percentile
    return out


# ---- the user's price of a card-hour ------------------------------------------------------------

PricePerCardHourOpt = Annotated[
    str | None,
    typer.Option(
        "--price-per-card-hour",
        metavar="PRICE|MACHINE=PRICE,...",
        help="Your price of one card-hour (every machine of the run, or per machine: a2=1.2,cm384=3.1): "
        "cost per million tokens and --objective cost. Overrides price_per_card_hour in the hardware files.",
    ),
]
CurrencyOpt = Annotated[
    str,
    typer.Option("--currency", help="Unit of --price-per-card-hour (USD, CNY, credits, ...)."),
]
DEFAULT_CURRENCY = "units"


def parse_prices(text: str | None) -> dict[str | None, float]:
    """--price-per-card-hour as {machine name or None (every machine): price}; errors name the flag."""
    if text is None:
        return {}
    out: dict[str | None, float] = {}
    for part in text.split(","):
        name, sep, value = part.strip().rpartition("=")
        key = name.strip() if sep else None
        if sep and not key:
            raise BadInputError(f"--price-per-card-hour: '{part}' names no machine; give PRICE or MACHINE=PRICE.")
        try:
            price = float(value)
        except ValueError:
            raise BadInputError(
                f"--price-per-card-hour: '{value.strip()}' is not a number; give the price of one card-hour, e.g. 2.5."
            ) from None
        if not (price > 0 and price < float("inf")):
            raise BadInputError(
                f"--price-per-card-hour: {value.strip()} is not a positive price; "
                "give what one card-hour costs you (> 0)."
            )
        out[key] = price
    return out


def priced(hw, prices: dict[str | None, float], currency: str):
    """`hw` with the price the flag gives it (unchanged when the flag names other machines only)."""
    from planner.specs.hardware import PricePerCardHour

    price = prices.get(hw.name, prices.get(None))
    if price is None:
        return hw
    if not currency.strip():
        raise BadInputError("--currency: give a unit, e.g. USD.")
    spec = PricePerCardHour(value=price, currency=currency.strip(), source="--price-per-card-hour")
    return hw.model_copy(update={"price_per_card_hour": spec})


def check_price_names(prices: dict[str | None, float], machines: list[str]) -> None:
    """Every machine a --price-per-card-hour entry names is one of the run's machines."""
    for key in prices:
        if key is not None and key not in machines:
            raise BadInputError(
                f"--price-per-card-hour: '{key}' is not a machine of this run ({', '.join(machines)}); "
                "name one of them or give one PRICE for all."
            )


StructureOpt = Annotated[
    str | None,
    typer.Option(
        "--structure",
        metavar="LIST",
        help="Structures to search, a list of colocated, pd (prefill and decode instances apart) and afd "
        "(attention-FFN disaggregated decode instances fed by prefill instances); default: all that the engine "
        "runs (all three without --engine).",
    ),
]
SearchEngineOpt = Annotated[
    str | None,
    typer.Option(
        "--engine",
        metavar="ENGINE",
        help="Which plans the searches return, as `moeplan plan --engine`: auto (the default: plans at least one "
        "serving engine runs), none (the free search, what no engine runs yet included), or only what "
        "vllm-ascend, sglang or mindie runs.",
        show_default=False,
    ),
]
ObjectiveOpt = Annotated[
    str,
    typer.Option(
        "--objective",
        metavar="OBJECTIVE",
        help="What the search optimises: tokens-per-card (output tokens/s per card), total (the most tokens/s "
        "within --max-cards), cost (the least cost per token: needs --price-per-card-hour) or energy (the least "
        "joules per token). With --rate: the fewest cards, the cheapest or the least-energy plan that serves it.",
    ),
]
YAxisOpt = Annotated[
    str,
    typer.Option(
        "--y-axis",
        metavar="AXIS",
        help="The frontier's y axis: tokens-per-card (output tokens/s per card), cost (cost per million output "
        "tokens: needs a price, --price-per-card-hour) or energy (joules per output token: needs power_w_per_card).",
    ),
]
