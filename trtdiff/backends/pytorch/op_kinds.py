"""A shared vocabulary of operation kinds, so an aten op and an ONNX node can be matched.

Only kinds that produce a value worth comparing are listed: view and shape manipulation,
casts and constants have no entry and are never paired by kind. Some kinds also depend on
the op that feeds it (a Linear's bias add, attention's value product): pairing_kinds.
"""

from __future__ import annotations

from typing import Any

ONNX_KINDS: dict[str, str] = {
    "Conv": "conv",
    "ConvTranspose": "conv_transpose",
    "BatchNormalization": "batch_norm",
    "InstanceNormalization": "instance_norm",
    "LayerNormalization": "layer_norm",
    "GroupNormalization": "group_norm",
    "Relu": "relu",
    "Clip": "clip",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "LeakyRelu": "leaky_relu",
    "Elu": "elu",
    "HardSwish": "hardswish",
    "HardSigmoid": "hardsigmoid",
    "Gelu": "gelu",
    "Mish": "mish",
    "Softplus": "softplus",
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "Sqrt": "sqrt",
    "Exp": "exp",
    "Log": "log",
    "Cos": "cos",
    "Sin": "sin",
    "Reciprocal": "reciprocal",
    "Erf": "erf",
    "Neg": "neg",
    "Abs": "abs",
    "Max": "maximum",
    "Min": "minimum",
    "Where": "where",
    "MatMul": "matmul",
    "Gemm": "gemm",
    "Attention": "attention",
    "Concat": "concat",
    "Resize": "resize",
    "Upsample": "resize",
    "MaxPool": "maxpool",
    "AveragePool": "avgpool",
    "GlobalAveragePool": "mean",
    "ReduceMean": "mean",
    "Softmax": "softmax",
    "LogSoftmax": "log_softmax",
    "Pad": "pad",
    "Transpose": "permute",
    "ArgMax": "argmax",
    "ArgMin": "argmin",
    "Round": "round",
    "Cast": "cast",  # only where it reads or writes an integer or bool tensor: onnx_kinds
}

ATEN_KINDS: dict[str, str] = {
    "convolution": "conv",
    "_convolution": "conv",
    "cudnn_convolution": "conv",
    "mkldnn_convolution": "conv",
    "native_batch_norm": "batch_norm",
    "_native_batch_norm_legit": "batch_norm",
    "_native_batch_norm_legit_no_training": "batch_norm",
    "cudnn_batch_norm": "batch_norm",
    "batch_norm": "batch_norm",
    "instance_norm": "instance_norm",
    "native_layer_norm": "layer_norm",
    "layer_norm": "layer_norm",
    "native_group_norm": "group_norm",
    "group_norm": "group_norm",  # TorchScript graphs call aten::group_norm (eager dispatch records native_group_norm)
    "relu": "relu",
    "relu_": "relu",
    "hardtanh": "clip",
    "hardtanh_": "clip",
    "clamp": "clip",
    "clamp_": "clip",
    "clip": "clip",
    "sigmoid": "sigmoid",
    "sigmoid_": "sigmoid",
    "tanh": "tanh",
    "tanh_": "tanh",
    "leaky_relu": "leaky_relu",
    "leaky_relu_": "leaky_relu",
    "elu": "elu",
    "elu_": "elu",
    "hardswish": "hardswish",
    "hardswish_": "hardswish",
    "hardsigmoid": "hardsigmoid",
    "hardsigmoid_": "hardsigmoid",
    "gelu": "gelu",
    "gelu_": "gelu",
    "silu": "silu",  # no ONNX op: Sigmoid and Mul (pairing_composite)
    "silu_": "silu",
    "mish": "mish",  # ONNX Mish from opset 18, else Softplus, Tanh and Mul
    "mish_": "mish",
    "softplus": "softplus",
    "add": "add",
    "add_": "add",
    "sub": "sub",
    "sub_": "sub",
    "mul": "mul",
    "mul_": "mul",
    "div": "div",
    "div_": "div",
    "pow": "pow",
    "sqrt": "sqrt",
    "exp": "exp",
    "log": "log",
    "cos": "cos",  # rotary and sinusoidal (timestep) embeddings
    "sin": "sin",
    "reciprocal": "reciprocal",
    "log_": "log",
    "erf": "erf",
    "neg": "neg",
    "abs": "abs",
    "maximum": "maximum",
    "minimum": "minimum",
    "where": "where",
    "mm": "matmul",
    "bmm": "matmul",
    "matmul": "matmul",
    "addmm": "gemm",
    "linear": "gemm",  # TorchScript graphs call aten::linear (eager dispatch records addmm or mm + add)
    "scaled_dot_product_attention": "attention",  # in TorchScript graphs; eager dispatch records a fused kernel
    "_scaled_dot_product_flash_attention_for_cpu": "attention",
    "_scaled_dot_product_flash_attention": "attention",
    "_scaled_dot_product_efficient_attention": "attention",
    "_scaled_dot_product_cudnn_attention": "attention",
    "_scaled_dot_product_fused_attention_overrideable": "attention",
    "cat": "concat",
    "upsample_bilinear2d": "resize",
    "upsample_nearest2d": "resize",
    "upsample_bicubic2d": "resize",
    "upsample_linear1d": "resize",
    "upsample_nearest1d": "resize",
    "upsample_trilinear3d": "resize",
    "upsample_nearest3d": "resize",
    "_upsample_bilinear2d_aa": "resize",
    "_upsample_nearest_exact2d": "resize",
    "max_pool2d": "maxpool",
    "max_pool2d_with_indices": "maxpool",
    "max_pool1d": "maxpool",
    "max_pool3d_with_indices": "maxpool",
    "avg_pool2d": "avgpool",
    "avg_pool1d": "avgpool",
    "_adaptive_avg_pool2d": "avgpool",
    "adaptive_avg_pool2d": "avgpool",
    "mean": "mean",
    "_softmax": "softmax",
    "_safe_softmax": "softmax",  # SDPA's math implementation (torch_attention)
    "softmax": "softmax",
    "_log_softmax": "log_softmax",
    "log_softmax": "log_softmax",
    "constant_pad_nd": "pad",
    "pad": "pad",
    "reflection_pad1d": "pad",
    "reflection_pad2d": "pad",
    "reflection_pad3d": "pad",
    "replication_pad1d": "pad",
    "replication_pad2d": "pad",
    "replication_pad3d": "pad",
    "permute": "permute",
    "argmax": "argmax",
    "argmin": "argmin",
    "round": "round",
    "_to_copy": "cast",  # CASTS: only where an integer or bool tensor goes in or out
    "to": "cast",
    "_to_dim_order_copy": "cast",
}

CASTS = frozenset({"_to_copy", "to", "_to_dim_order_copy"})
"""Ops that change a tensor's dtype: recorded (kind "cast") only where an integer or bool tensor goes in or out,
the integer path that ONNX computes with Cast; a float-to-float cast is left as a view of its input."""


DECOMPOSED_KINDS = frozenset({"gelu", "silu", "mish", "hardswish", "layer_norm", "group_norm"})
"""Kinds that exporters may write as several nodes (GELU below opset 20, LayerNorm below 17): pairing_composite."""
ONLY_DECOMPOSED = frozenset({"silu"})
"""Kinds no ONNX op computes: always written as several nodes."""

_TRANSPOSABLE = frozenset({"convolution", "_convolution"})  # the transposed flag is args[6]


def aten_kind(packet_name: str, args: tuple[Any, ...], *, integer: bool = False) -> str | None:
    """The kind of an aten op given its overload packet name (e.g. "relu_") and arguments.

    `integer`: whether an integer or bool tensor goes in or comes out (a cast is recorded only then).
    """
    if packet_name in CASTS:
        return "cast" if integer else None
    kind = ATEN_KINDS.get(packet_name)
    if packet_name in _TRANSPOSABLE and len(args) > 6 and args[6] is True:
        return "conv_transpose"  # eager modules dispatch convolution, TorchScript modules _convolution
    if packet_name in ("_adaptive_avg_pool2d", "adaptive_avg_pool2d") and len(args) > 1 and _all_ones(args[1]):
        return "mean"  # global pooling: GlobalAveragePool or ReduceMean in ONNX, mean.dim in decompositions
    return kind


def _all_ones(size: object) -> bool:
    return isinstance(size, (list, tuple)) and all(s == 1 for s in size)


def onnx_kind(op_type: str, domain: str = "") -> str | None:
    """The kind of an ONNX node, or None for ops trtdiff does not pair by kind."""
    if domain not in ("", "ai.onnx"):
        return None
    return ONNX_KINDS.get(op_type)
