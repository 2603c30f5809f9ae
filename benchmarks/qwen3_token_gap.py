"""The Qwen3 decodes on A3: how far the measured step is from the model's, per routed MoE token and layer.

    python benchmarks/qwen3_token_gap.py

For each Qwen3 figure of validation/ with a plan (SGLang's and vllm-ascend's PD runs on A3), the measured
step is the published TPOT times the tokens a step emits (the model's: 1, or the EAGLE-3 acceptance),
the modelled step is `moeplan evaluate`'s, and the gap is divided by the MoE layers and the tokens each
die routes a step (sequences a die x the tokens a step verifies). Beside it: what one more sequence a die
adds to the modelled step, per routed token and layer (the model's own marginal cost of such a token).
docs/fidelity.md quotes these figures. Two of the rows (the 480B and the vllm-ascend W8A8 235B decodes, no
speculation) are fit rows since 2026-12-05: they set the open engines' decode KV-read factor on 910C.
"""

from __future__ import annotations

from planner.costmodel.evaluate import evaluate_plan
from planner.specs.catalog import load_model, load_plan
from planner.specs.validation import usable_figures


def _step_ms(plan, concurrency: int) -> float:
    decode = plan.decode.model_copy(update={"concurrency_per_device": concurrency})
    prediction = evaluate_plan(plan.model_copy(update={"decode": decode}))
    assert prediction.decode is not None
    return float(prediction.decode.step_ms)


def rows() -> list[dict[str, float | str]]:
    """One row per Qwen3 decode figure with a plan: measured and modelled step, gap and marginal per token-layer."""
    out: list[dict[str, float | str]] = []
    for fig in usable_figures():
        if not fig.row.model.startswith("qwen3") or not fig.plan or fig.metric != "decode.tpot_ms":
            continue
        plan, _ = load_plan(fig.plan)
        prediction = evaluate_plan(plan)
        assert prediction.decode is not None
        step = float(prediction.decode.step_ms)
        measured = fig.published * step / prediction.decode.tpot_ms
        c = plan.decode.concurrency_per_device
        verify = plan.decode.mtp_tokens + 1
        layers = load_model(plan.model).num_moe_layers
        out.append(
            {
                "figure": fig.id,
                "tokens": c * verify,
                "layers": layers,
                "measured_ms": measured,
                "modelled_ms": step,
                "gap_us": (measured - step) / (layers * c * verify) * 1e3,
                "marginal_us": (_step_ms(plan, c + 1) - _step_ms(plan, c)) / (layers * verify) * 1e3,
            }
        )
    return out


def main() -> None:
    print(
        "| figure | tokens a die | MoE layers | measured step ms | modelled step ms | gap per token-layer us "
        "| modelled marginal per token-layer us |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows():
        print(
            f"| {r['figure']} | {r['tokens']} | {r['layers']} | {r['measured_ms']:.1f} | {r['modelled_ms']:.1f} | "
            f"{r['gap_us']:.1f} | {r['marginal_us']:.1f} |"
        )


if __name__ == "__main__":
    main()
