"""Quantization schemes: bytes per weight, per activation sent over links, per KV element.

`a8w8c16` is the report's scheme (SmoothQuant INT8 weights and activations in every linear layer,
experts included; BF16 intermediates and KV cache). The embedding and LM head stay BF16 in all
schemes, as in the deployed DeepSeek checkpoints. The attention core (scores, softmax, values)
runs in BF16 in all schemes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.errors import BadInputError
from planner.specs.hardware import Strict

MathKind = Literal["int8", "bf16"]


class QuantizationScheme(Strict):
    """How many bytes each kind of tensor takes and which math units the linear layers use."""

    name: str
    description: str
    linear_weight_bytes: float = Field(gt=0, description="attention projections, dense FFN, router")
    expert_weight_bytes: float = Field(gt=0, description="routed and shared experts")
    vocab_weight_bytes: float = Field(gt=0, description="embedding and LM head")
    dispatch_bytes_per_element: float = Field(gt=0, description="token sent to experts")
    combine_bytes_per_element: float = Field(gt=0, description="expert output sent back")
    activation_bytes_per_element: float = Field(gt=0, description="hidden states kept in HBM")
    kv_bytes_per_element: float = Field(gt=0)
    linear_math: MathKind


QUANTIZATION_SCHEMES: dict[str, QuantizationScheme] = {
    s.name: s
    for s in (
        QuantizationScheme(
            name="a8w8c16",
            description="INT8 weights and activations in linear layers and experts, BF16 KV cache "
            "(the report's A8W8C16; default)",
            linear_weight_bytes=1,
            expert_weight_bytes=1,
            vocab_weight_bytes=2,
            dispatch_bytes_per_element=1,
            combine_bytes_per_element=2,
            activation_bytes_per_element=2,
            kv_bytes_per_element=2,
            linear_math="int8",
        ),
        QuantizationScheme(
            name="bf16",
            description="BF16 everywhere",
            linear_weight_bytes=2,
            expert_weight_bytes=2,
            vocab_weight_bytes=2,
            dispatch_bytes_per_element=2,
            combine_bytes_per_element=2,
            activation_bytes_per_element=2,
            kv_bytes_per_element=2,
            linear_math="bf16",
        ),
        QuantizationScheme(
            name="a8w4c16",
            description="INT4 expert weights (INT8 math after dequantisation), INT8 other linear layers, BF16 KV cache",
            linear_weight_bytes=1,
            expert_weight_bytes=0.5,
            vocab_weight_bytes=2,
            dispatch_bytes_per_element=1,
            combine_bytes_per_element=2,
            activation_bytes_per_element=2,
            kv_bytes_per_element=2,
            linear_math="int8",
        ),
    )
}

DEFAULT_QUANTIZATION = "a8w8c16"


def get_quantization(name: str) -> QuantizationScheme:
    """The scheme called `name`, or an error listing the known ones."""
    try:
        return QUANTIZATION_SCHEMES[name]
    except KeyError:
        known = ", ".join(sorted(QUANTIZATION_SCHEMES))
        raise BadInputError(f"unknown quantization '{name}'; known schemes: {known}.") from None
