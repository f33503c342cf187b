"""ONNX ops that compute, in PyTorch: activations, arithmetic, products, reductions, normalizations, Conv.

Each op takes a `Call` (its inputs as torch tensors, attributes, static output shapes, opset)
and returns its outputs; it raises `Unsupported` for a form it does not cover.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import torch
import torch.nn.functional as F


class Unsupported(Exception):
    """A node form trtdiff does not compute in PyTorch (no value is derived for it)."""


@dataclass(frozen=True)
class Call:
    """One node's inputs (None: absent or not foldable), attributes, static output shapes and opset."""

    inputs: list[torch.Tensor | None]
    attrs: dict[str, Any]
    out_shapes: list[tuple[int, ...] | None]
    opset: int

    def arg(self, i: int) -> torch.Tensor:
        """Input `i`, which the op needs."""
        value = self.inputs[i] if i < len(self.inputs) else None
        if value is None:
            raise Unsupported(f"input {i} is not known")
        return value

    def optional(self, i: int) -> torch.Tensor | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def ints(self, i: int, attr: str) -> list[int] | None:
        """An int list given as input `i` (newer opsets) or as attribute `attr` (older ones)."""
        if attr in self.attrs:
            return [int(v) for v in self.attrs[attr]]
        value = self.optional(i)
        return None if value is None else [int(v) for v in value.reshape(-1).tolist()]

    def number(self, i: int, attr: str, default: float) -> float:
        """A scalar given as input `i` or attribute `attr`, else `default`."""
        if attr in self.attrs:
            return float(self.attrs[attr])
        value = self.optional(i)
        return default if value is None else float(value.reshape(-1)[0])


Op = Callable[[Call], Sequence[torch.Tensor | None]]


def _unary(fn: Callable[[torch.Tensor], torch.Tensor]) -> Op:
    return lambda call: [fn(call.arg(0))]


def _binary(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Op:
    return lambda call: [fn(call.arg(0), call.arg(1))]


def _variadic(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Op:
    return lambda call: [reduce(fn, [call.arg(i) for i in range(len(call.inputs))])]


def _hard_sigmoid(call: Call) -> list[torch.Tensor]:
    alpha, beta = float(call.attrs.get("alpha", 0.2)), float(call.attrs.get("beta", 0.5))
    return [torch.clamp(call.arg(0) * alpha + beta, 0.0, 1.0)]


def _clip(call: Call) -> list[torch.Tensor]:
    low = call.number(1, "min", -math.inf)
    high = call.number(2, "max", math.inf)
    return [torch.clamp(call.arg(0), low, high)]


def _softmax(fn: Callable[..., torch.Tensor]) -> Op:
    def run(call: Call) -> list[torch.Tensor]:
        x = call.arg(0)
        if call.opset >= 13:
            return [fn(x, dim=int(call.attrs.get("axis", -1)))]
        axis = int(call.attrs.get("axis", 1)) % max(x.dim(), 1)  # before opset 13: over the flattened tail
        flat = x.reshape(math.prod(x.shape[:axis]), -1)
        return [fn(flat, dim=1).reshape(x.shape)]

    return run


def _reduce(fn: Callable[..., torch.Tensor], axes_input_from: int) -> Op:
    def run(call: Call) -> list[torch.Tensor]:
        x = call.arg(0)
        axes = call.ints(1, "axes") if call.opset >= axes_input_from or "axes" in call.attrs else None
        keep = bool(call.attrs.get("keepdims", 1))
        if not axes:
            if call.attrs.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(x.dim()))
        return [fn(x, dim=tuple(a % x.dim() for a in axes), keepdim=keep)]

    return run


def _gemm(call: Call) -> list[torch.Tensor]:
    a, b, c = call.arg(0), call.arg(1), call.optional(2)
    a = a.t() if call.attrs.get("transA", 0) else a
    b = b.t() if call.attrs.get("transB", 0) else b
    alpha, beta = float(call.attrs.get("alpha", 1.0)), float(call.attrs.get("beta", 1.0))
    if c is None:
        return [torch.mm(a, b) * alpha if alpha != 1.0 else torch.mm(a, b)]
    return [torch.addmm(c, a, b, beta=beta, alpha=alpha)]  # what nn.Linear computes


def _layer_norm(call: Call) -> list[torch.Tensor | None]:
    x, scale, bias = call.arg(0), call.arg(1), call.optional(2)
    axis = int(call.attrs.get("axis", -1)) % x.dim()
    shape = tuple(x.shape[axis:])
    scale = scale.expand(shape)
    bias = bias.expand(shape) if bias is not None else None
    return [F.layer_norm(x, shape, scale, bias, float(call.attrs.get("epsilon", 1e-5)))]


def _batch_norm(call: Call) -> list[torch.Tensor | None]:
    if call.attrs.get("training_mode", 0):
        raise Unsupported("training-mode BatchNormalization")
    x, scale, bias, mean, var = (call.arg(i) for i in range(5))
    return [F.batch_norm(x, mean, var, scale, bias, False, 0.0, float(call.attrs.get("epsilon", 1e-5)))]


def _instance_norm(call: Call) -> list[torch.Tensor]:
    x, scale, bias = call.arg(0), call.arg(1), call.arg(2)
    return [F.instance_norm(x, weight=scale, bias=bias, eps=float(call.attrs.get("epsilon", 1e-5)))]


_CONVS: dict[int, Callable[..., torch.Tensor]] = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _conv(call: Call) -> list[torch.Tensor]:
    x, w, b = call.arg(0), call.arg(1), call.optional(2)
    spatial = x.dim() - 2
    if call.attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID") or spatial not in _CONVS:
        raise Unsupported("Conv with SAME padding or of an unusual rank")
    pads = [int(p) for p in call.attrs.get("pads", [0] * (2 * spatial))]
    begins, ends = pads[:spatial], pads[spatial:]
    if begins != ends:
        x = F.pad(x, [p for i in reversed(range(spatial)) for p in (begins[i], ends[i])])
        begins = [0] * spatial
    return [
        _CONVS[spatial](
            x,
            w,
            b,
            stride=[int(s) for s in call.attrs.get("strides", [1] * spatial)],
            padding=begins,
            dilation=[int(d) for d in call.attrs.get("dilations", [1] * spatial)],
            groups=int(call.attrs.get("group", 1)),
        )
    ]


_FLOAT_TYPES = {1: torch.float32, 10: torch.float16, 11: torch.float64, 16: torch.bfloat16}  # TensorProto codes


_LINEAR = {3: "linear", 4: "bilinear", 5: "trilinear"}


def _text(call: Call, name: str, default: str) -> str:
    value = call.attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _resize(call: Call) -> list[torch.Tensor]:
    """Resize (or Upsample) in the forms F.interpolate computes: linear with half-pixel or corner-aligned
    coordinates, nearest with asymmetric coordinates rounded down; by the given scales, else to the size."""
    x, size = call.arg(0), call.out_shapes[0] if call.out_shapes else None
    if size is None or tuple(size[:2]) != tuple(x.shape[:2]) or call.attrs.get("antialias", 0):
        raise Unsupported("Resize of the batch or channels, to an unknown size, or antialiased")
    mode, coordinates = _text(call, "mode", "nearest"), _text(call, "coordinate_transformation_mode", "half_pixel")
    if call.opset < 11:
        coordinates = "asymmetric"
    given = call.attrs.get("scales") or call.optional(2 if call.opset >= 11 else 1)
    scales = [float(v) for v in torch.as_tensor(given).reshape(-1).tolist()] if given is not None else []
    where = {"scale_factor": scales[2:], "recompute_scale_factor": False} if scales else {"size": list(size[2:])}
    if mode == "linear" and x.dim() in _LINEAR and coordinates in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        return [F.interpolate(x, mode=_LINEAR[x.dim()], align_corners=coordinates == "align_corners", **where)]
    if (
        mode == "nearest"
        and coordinates == "asymmetric"
        and _text(call, "nearest_mode", "round_prefer_floor") == "floor"
    ):
        return [F.interpolate(x, mode="nearest", **where)]
    raise Unsupported(f"Resize {mode} with {coordinates} coordinates")


def _cast(call: Call) -> list[torch.Tensor]:
    dtype = _FLOAT_TYPES.get(int(call.attrs.get("to", 0)))
    if dtype is None:
        raise Unsupported("a cast to a type that is not float")
    return [call.arg(0).to(dtype)]


def _where(call: Call) -> list[torch.Tensor]:
    return [torch.where(call.arg(0).bool(), call.arg(1), call.arg(2))]


def _gelu(call: Call) -> list[torch.Tensor]:
    approximate = call.attrs.get("approximate", b"none")
    return [F.gelu(call.arg(0), approximate=approximate.decode() if isinstance(approximate, bytes) else approximate)]


def _identity(call: Call) -> list[torch.Tensor]:
    return [call.arg(0)]


MATH_OPS: dict[str, Op] = {
    "Identity": _identity,
    "Dropout": _identity,  # inference: the input; its mask output is not a float
    "Relu": _unary(torch.relu),
    "Sigmoid": _unary(torch.sigmoid),
    "Tanh": _unary(torch.tanh),
    "Erf": _unary(torch.erf),
    "Exp": _unary(torch.exp),
    "Log": _unary(torch.log),
    "Sqrt": _unary(torch.sqrt),
    "Neg": _unary(torch.neg),
    "Abs": _unary(torch.abs),
    "Reciprocal": _unary(torch.reciprocal),
    "Softplus": _unary(F.softplus),
    "Mish": _unary(F.mish),
    "HardSwish": _unary(F.hardswish),
    "HardSigmoid": _hard_sigmoid,
    "LeakyRelu": lambda call: [F.leaky_relu(call.arg(0), float(call.attrs.get("alpha", 0.01)))],
    "Elu": lambda call: [F.elu(call.arg(0), float(call.attrs.get("alpha", 1.0)))],
    "Gelu": _gelu,
    "Clip": _clip,
    "Cast": _cast,
    "Add": _binary(torch.add),
    "Sub": _binary(torch.sub),
    "Mul": _binary(torch.mul),
    "Div": _binary(torch.div),
    "Pow": _binary(torch.pow),
    "Max": _variadic(torch.maximum),
    "Min": _variadic(torch.minimum),
    "Where": _where,
    "MatMul": _binary(torch.matmul),
    "Gemm": _gemm,
    "Softmax": _softmax(torch.softmax),
    "LogSoftmax": _softmax(torch.log_softmax),
    "ReduceMean": _reduce(torch.mean, 18),
    "ReduceSum": _reduce(torch.sum, 13),
    "ReduceMax": _reduce(torch.amax, 18),
    "ReduceMin": _reduce(torch.amin, 18),
    "GlobalAveragePool": lambda call: [call.arg(0).mean(dim=tuple(range(2, call.arg(0).dim())), keepdim=True)],
    "LayerNormalization": _layer_norm,
    "BatchNormalization": _batch_norm,
    "InstanceNormalization": _instance_norm,
    "Conv": _conv,
    "Resize": _resize,
    "Upsample": _resize,
}
