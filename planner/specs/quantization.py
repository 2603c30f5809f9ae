"""Quantization schemes: the number format of weights, activations and KV cache, per module.

A scheme names, for each module (attention projections, dense FFN, experts, embedding/LM head),
the format of its weights and of its activations, and the format of the KV cache. From those
follow the bytes the cost model moves and stores, and the math format each GEMM runs in, whose
peak (`peak_flops_per_s.<format>` of the hardware YAML) the cost model uses. A scheme that needs
a math format the chip does not list is refused, naming that field (`check_scheme_on_hardware`).

`a8w8c16` is the report's scheme (SmoothQuant INT8 weights and activations in every linear layer,
experts included; BF16 intermediates and KV cache). The embedding and LM head stay BF16 in all
schemes, as in the deployed DeepSeek checkpoints. The attention core (scores, softmax, values)
runs in BF16 in all schemes.

Formats: INT8/INT4 (910B/910C); FP8 (E4M3), MXFP8 and MXFP4 (OCP Microscaling v1.0: 32-element
blocks sharing one 8-bit E8M0 scale, so 8.25 and 4.25 bits per element) and HiF8 (Huawei's
HiFloat8, 8 bits, arXiv 2409.16626) on Ascend 950 (Huawei Connect 2025 keynote, Ascend
roadmap). W4A8 (INT4 weights, INT8 activations) dequantises the weights and runs the INT8 cube
path, so its math is `int8`; MXFP4 weights with MXFP8 activations likewise run the MXFP8 path.
W4A16 (`int4g32`: INT4 weights with one BF16 scale per 32 weights, 4.5 bits per weight, as the
compressed-tensors "pack-quantized" INT4 QAT checkpoints of Kimi-K2-Thinking store them) is
dequantised inside the grouped matmul and runs the BF16 cube path, so its math is `bf16`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from planner.errors import BadInputError
from planner.specs.hardware import HardwareSpec, Strict

NumberFormat = Literal["bf16", "fp16", "int8", "int4", "int4g32", "fp8", "mxfp8", "hif8", "mxfp4"]

# bytes per element, block scales included (MX: one 1-byte scale per 32 elements)
FORMAT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "int8": 1.0,
    "int4": 0.5,
    "int4g32": 0.5 + 2.0 / 32,
    "fp8": 1.0,
    "mxfp8": 1.0 + 1.0 / 32,
    "hif8": 1.0,
    "mxfp4": 0.5 + 1.0 / 32,
}
# 4-bit weights are dequantised to the activation's format; other pairs must agree
_DEQUANTISED_WEIGHTS = {"int4": {"int8"}, "int4g32": {"bf16"}, "mxfp4": {"mxfp8", "mxfp4"}}


class ModuleFormats(Strict):
    """Formats of one module's weights and input activations; `math` is the GEMM's format."""

    weight: NumberFormat
    activation: NumberFormat

    @model_validator(mode="after")
    def _pair_runs(self) -> ModuleFormats:
        w, a = self.weight, self.activation
        if w != a and a not in _DEQUANTISED_WEIGHTS.get(w, set()) and not {w, a} <= {"bf16", "fp16"}:
            raise ValueError(
                f"weight format {w} with activation format {a} has no GEMM path; use the same format for both, "
                "INT4 weights with INT8 activations (W4A8), group-quantised INT4 (int4g32) with BF16 activations "
                "(W4A16), or MXFP4 weights with MXFP8 activations"
            )
        return self

    @property
    def math(self) -> str:
        """Format the GEMM runs in (W4A8: int8)."""
        return self.activation

    def short(self) -> str:
        """W8A8-style label with format names: 'int4/int8'."""
        return f"{self.weight}/{self.activation}"


class QuantizationScheme(Strict):
    """Formats per module and the byte counts and math kinds the cost model reads from them."""

    name: str
    description: str
    attention: ModuleFormats = Field(description="attention projections (and the MTP projection)")
    dense_ffn: ModuleFormats
    experts: ModuleFormats = Field(description="routed experts (and the shared experts unless `shared_experts`)")
    shared_experts: ModuleFormats | None = Field(
        default=None,
        description="shared experts when their format differs from the routed experts' (same math format)",
    )
    lm_head: ModuleFormats = Field(description="embedding and LM head")
    kv_format: NumberFormat = Field(description="KV cache")
    dispatch_format: NumberFormat = Field(description="tokens sent to experts (and TP all-gathers)")
    combine_format: NumberFormat = Field(description="expert outputs sent back")

    @property
    def linear_weight_bytes(self) -> float:
        """Bytes per attention-projection weight."""
        return FORMAT_BYTES[self.attention.weight]

    @property
    def dense_weight_bytes(self) -> float:
        """Bytes per dense-FFN weight."""
        return FORMAT_BYTES[self.dense_ffn.weight]

    @model_validator(mode="after")
    def _shared_same_math(self) -> QuantizationScheme:
        if self.shared_experts is not None and self.shared_experts.math != self.experts.math:
            raise ValueError("shared_experts must run the routed experts' math format")
        return self

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes per routed-expert weight."""
        return FORMAT_BYTES[self.experts.weight]

    @property
    def shared_expert_weight_bytes(self) -> float:
        """Bytes per shared-expert weight."""
        return FORMAT_BYTES[(self.shared_experts or self.experts).weight]

    @property
    def vocab_weight_bytes(self) -> float:
        """Bytes per embedding / LM head weight."""
        return FORMAT_BYTES[self.lm_head.weight]

    @property
    def dispatch_bytes_per_element(self) -> float:
        """Bytes per element of a token sent to the experts."""
        return FORMAT_BYTES[self.dispatch_format]

    @property
    def combine_bytes_per_element(self) -> float:
        """Bytes per element of an expert output sent back."""
        return FORMAT_BYTES[self.combine_format]

    @property
    def activation_bytes_per_element(self) -> float:
        """Hidden states kept in HBM (BF16 in every scheme)."""
        return 2.0

    @property
    def kv_bytes_per_element(self) -> float:
        """Bytes per KV-cache element."""
        return FORMAT_BYTES[self.kv_format]

    @property
    def linear_math(self) -> str:
        """Math format of the attention projections."""
        return self.attention.math

    def math_formats(self) -> dict[str, str]:
        """Math format of each module's GEMMs (the LM head always runs BF16, see the docstring)."""
        return {"attention": self.attention.math, "dense_ffn": self.dense_ffn.math, "experts": self.experts.math}

    def summary(self) -> str:
        """One line: formats per module."""
        return (
            f"attention {self.attention.short()}, dense FFN {self.dense_ffn.short()}, experts "
            f"{self.experts.short()}"
            + ("" if self.shared_experts is None else f", shared experts {self.shared_experts.short()}")
            + f", LM head {self.lm_head.short()}, KV {self.kv_format}"
        )


def _scheme(
    name: str,
    description: str,
    linear: tuple[str, str],
    experts: tuple[str, str] | None = None,
    kv: str = "bf16",
    dispatch: str | None = None,
    shared_experts: tuple[str, str] | None = None,
) -> QuantizationScheme:
    lin = ModuleFormats(weight=linear[0], activation=linear[1])  # type: ignore[arg-type]
    exp = lin if experts is None else ModuleFormats(weight=experts[0], activation=experts[1])  # type: ignore[arg-type]
    shared = None if shared_experts is None else ModuleFormats(weight=shared_experts[0], activation=shared_experts[1])  # type: ignore[arg-type]
    return QuantizationScheme(
        name=name,
        description=description,
        attention=lin,
        dense_ffn=lin,
        experts=exp,
        shared_experts=shared,
        lm_head=ModuleFormats(weight="bf16", activation="bf16"),
        kv_format=kv,  # type: ignore[arg-type]
        dispatch_format=dispatch or exp.activation,  # type: ignore[arg-type]
        combine_format="bf16",
    )


QUANTIZATION_SCHEMES: dict[str, QuantizationScheme] = {
    s.name: s
    for s in (
        _scheme(
            "a8w8c16",
            "INT8 weights and activations in linear layers and experts, BF16 KV cache (the report's A8W8C16; default)",
            ("int8", "int8"),
        ),
        _scheme("bf16", "BF16 everywhere", ("bf16", "bf16")),
        _scheme(
            "a8w4c16",
            "INT4 expert weights (INT8 math after dequantisation), INT8 other linear layers, BF16 KV cache",
            ("int8", "int8"),
            experts=("int4", "int8"),
        ),
        _scheme(
            "w4a16",
            "W4A16: INT4 routed-expert weights with a BF16 scale per 32 weights (BF16 math after "
            "dequantisation; Kimi-K2-Thinking's INT4 checkpoint), BF16 shared experts, other linear layers and KV",
            ("bf16", "bf16"),
            experts=("int4g32", "bf16"),
            shared_experts=("bf16", "bf16"),
        ),
        _scheme(
            "w4a8",
            "W4A8: INT4 weights and INT8 activations in every linear layer and expert (INT8 math), BF16 KV cache",
            ("int4", "int8"),
        ),
        _scheme(
            "fp8",
            "FP8 (E4M3) weights and activations in linear layers and experts (DeepSeek's native format), BF16 KV",
            ("fp8", "fp8"),
        ),
        _scheme(
            "fp8-c8",
            "FP8 weights and activations, FP8 KV cache",
            ("fp8", "fp8"),
            kv="fp8",
        ),
        _scheme(
            "mxfp8", "MXFP8 weights and activations in linear layers and experts, BF16 KV cache", ("mxfp8", "mxfp8")
        ),
        _scheme(
            "mxfp4",
            "MXFP4 expert weights with MXFP8 activations, MXFP8 other linear layers, BF16 KV cache",
            ("mxfp8", "mxfp8"),
            experts=("mxfp4", "mxfp8"),
        ),
        _scheme(
            "mxfp4-a4",
            "MXFP4 weights and activations in the experts (the MXFP4 peak), MXFP8 other linear layers, BF16 KV",
            ("mxfp8", "mxfp8"),
            experts=("mxfp4", "mxfp4"),
        ),
        _scheme(
            "hif8",
            "HiF8 weights and activations in linear layers and experts, HiF8 KV cache",
            ("hif8", "hif8"),
            kv="hif8",
        ),
    )
}

DEFAULT_QUANTIZATION = "a8w8c16"
AUTO_QUANTIZATION = "auto"
# What `auto` takes, in order: the report's INT8 scheme where the chip has INT8 math (A2, A3,
# CloudMatrix384), else the 8-bit float formats the newer chips list instead (Ascend 950: FP8, MXFP8,
# HiF8, no INT8 peak), else BF16.
AUTO_PREFERENCE = (DEFAULT_QUANTIZATION, "fp8", "mxfp8", "hif8", "bf16")


def runs_on(quant: QuantizationScheme, hw: HardwareSpec) -> bool:
    """Whether every GEMM of the scheme has a math format the machine lists a peak for."""
    return all(hw.peak_flops_per_s.get(fmt) is not None for fmt in quant.math_formats().values())


def resolve_quantization(name: str, machines: list[HardwareSpec]) -> tuple[str, str | None]:
    """`name`, or for `auto` the first scheme of AUTO_PREFERENCE that every machine runs, with a note
    saying why when that is not the default (None otherwise)."""
    if name != AUTO_QUANTIZATION:
        return name, None
    for candidate in AUTO_PREFERENCE:
        if all(runs_on(QUANTIZATION_SCHEMES[candidate], hw) for hw in machines):
            if candidate == DEFAULT_QUANTIZATION:
                return candidate, None
            names = ", ".join(sorted({hw.name for hw in machines}))
            return candidate, (
                f"quantization {candidate} (--quantization auto): {names} lists no INT8 peak for the default "
                f"{DEFAULT_QUANTIZATION}; pass --quantization to choose another scheme."
            )
    names = ", ".join(sorted({hw.name for hw in machines}))
    raise BadInputError(
        f"--quantization auto: no scheme of {', '.join(AUTO_PREFERENCE)} runs on every machine ({names}); "
        "pass --quantization with a scheme they all list a peak for."
    )


def get_quantization(name: str) -> QuantizationScheme:
    """The scheme called `name`, or an error listing the known ones."""
    try:
        return QUANTIZATION_SCHEMES[name]
    except KeyError:
        known = ", ".join(sorted(QUANTIZATION_SCHEMES))
        raise BadInputError(f"unknown quantization '{name}'; known schemes: {known}.") from None


def check_scheme_on_hardware(quant: QuantizationScheme, hw: HardwareSpec) -> None:
    """Refuse a scheme whose GEMMs need a math format the machine does not list (names the field)."""
    for module, fmt in quant.math_formats().items():
        if hw.peak_flops_per_s.get(fmt) is None:
            listed = hw.peak_flops_per_s.listed()
            fits = [s.name for s in QUANTIZATION_SCHEMES.values() if runs_on(s, hw)]
            raise BadInputError(
                f"quantization '{quant.name}': the {module} run in {fmt.upper()}, but hardware '{hw.name}' lists no "
                f"peak_flops_per_s.{fmt} (it lists {', '.join(listed)}); choose a scheme it runs "
                f"({', '.join(fits) or 'none'}) or add peak_flops_per_s.{fmt} to the hardware YAML."
            )
