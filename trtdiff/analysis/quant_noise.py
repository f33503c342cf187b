"""What quantizing a node's weights explains of its local error.

A Conv, ConvTranspose, MatMul or Gemm whose weight comes out of a DequantizeLinear computes with
the weight rounded to the quantizer's grid: fed the reference's own input values (its local
run, analysis.culprits), it is off from the float model by sum_k x_k * dw_k, every dw_k a
rounding error of its own weight. Rounding to a grid of step s leaves an error spread evenly over
[-s/2, s/2] (variance s^2/12); rounding to FP8 E4M3 (3 mantissa bits) the same with s the
spacing of the float8 values around the weight, 2^(e-3) times the scale for a weight of binary
exponent e. The errors of different weights are independent, so the node's output error has, at
each position, the variance `op(x^2, var(dw))`: the same op, run on the input squared and the
weights' rounding variances. That is what the quantization explains of the node's error, from
the weights the file holds and the input the node was fed, whatever the scheme (per tensor, per
channel, per block; int8, uint8, int4, fp8), the exporter or the calibration: a correctly
quantized node's local error is about its square root (rms ratio about 1), a weight channel's
scale four times too large makes it tens.

The variance is computed by the runtime the comparison trusts for exact values (the registry's
`exact_backend`), on a one-node model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from trtdiff.source.onnx_graph import constant_values, graph_from_model

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo, NodeInfo

LINEAR = {"Conv": (1,), "ConvTranspose": (1,), "MatMul": (1, 0), "Gemm": (1, 0)}
"""The ops whose output error from rounded weights is a sum of input times weight error, and which of their
inputs may hold the weight (tried in this order)."""
_MOVES = frozenset({"Transpose", "Reshape", "Slice", "Identity"})  # ops that move (or drop) weights, changing none
_E4M3_MANTISSA = 3
_E4M3_MIN_EXPONENT = -6  # below it float8e4m3fn is subnormal: spacing 2^-9


@dataclass(frozen=True)
class WeightRounding:
    """A linear node reading a quantized weight: which input holds it, and each weight's rounding variance."""

    node: str
    weight_input: int
    variance: np.ndarray
    squared: np.ndarray
    """Each weight squared (as dequantized): what an input's own rounding is multiplied by."""


def weight_roundings(graph: GraphInfo) -> dict[str, WeightRounding]:
    """By output tensor: every linear node of `graph` whose weight is a DequantizeLinear of a constant (or of a
    QuantizeLinear of one: ModelOpt's default form), with the rounding variance of each of its weights; a
    weight moved on the way (the Transpose ModelOpt's PyTorch route writes before a MatMul) moves them too."""
    if not any(n.op_type == "DequantizeLinear" for n in graph.nodes):
        return {}
    constants = constant_values(graph)
    found: dict[str, WeightRounding] = {}
    for node in graph.nodes:
        for index in LINEAR.get(node.op_type, ()):
            if index >= len(node.inputs) or not node.outputs:
                continue
            dequantize, moves = graph.node_of(node.inputs[index]), []
            while dequantize is not None and dequantize.op_type in _MOVES and dequantize.inputs:
                moves.append(dequantize)
                dequantize = graph.node_of(dequantize.inputs[0])
            rounded = _variance(graph, dequantize, constants) if dequantize is not None else None
            for move in reversed(moves if rounded is not None else []):
                moved = [moved_like(graph, move, values) for values in rounded or ()]
                rounded = (moved[0], moved[1]) if moved[0] is not None and moved[1] is not None else None
            if rounded is not None:
                found[node.outputs[0]] = WeightRounding(node.name, index, *rounded)
                break
    return found


Side = tuple[np.ndarray, "np.ndarray | None"]
"""One input of a linear node: its values squared, and their rounding variance (None: exact)."""


def linear_variance(graph: GraphInfo, node: NodeInfo, first: Side, second: Side) -> np.ndarray | None:
    """The variance, at each output position, of the error the rounding of `node`'s two inputs explains: the op
    on one input's variance and the other's squares, both ways (their product's rounding is negligible); None
    where neither input is rounded or the op cannot be run so (a bias, alpha and beta aside)."""
    terms: list[np.ndarray | None] = []
    if first[1] is not None:
        terms.append(_run(graph, node, first[1], second[0]))
    if second[1] is not None:
        terms.append(_run(graph, node, first[0], second[1]))
    known = [term for term in terms if term is not None]
    if not known or len(known) < len(terms):
        return None
    total: np.ndarray = np.add.reduce(known)
    return total


def channel_axis(node: NodeInfo, ndim: int) -> int:
    """The axis of a linear node's output that holds its output channels: 1 for a Conv, the last otherwise."""
    return 1 if node.op_type in ("Conv", "ConvTranspose") and ndim > 1 else ndim - 1


def _run(graph: GraphInfo, node: NodeInfo, first: np.ndarray, second: np.ndarray) -> np.ndarray | None:
    """`node`'s op run on `first` and `second` as its two inputs (a variance summed the way the op sums
    products), by the runtime the comparison trusts for exact values."""
    from trtdiff.backends.base import fetch
    from trtdiff.backends.registry import exact_backend, open_backend

    proto = graph.model.graph.node[node.index]
    attributes = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
    if node.op_type == "Gemm":
        attributes["alpha"] = float(attributes.get("alpha", 1.0)) ** 2  # the error scales with alpha
        attributes.pop("beta", None)
    one = helper.make_node(node.op_type, ["a", "b"], ["y"], **attributes)
    a, b = np.asarray(first, dtype=np.float32), np.asarray(second, dtype=np.float32)
    graph_proto = helper.make_graph(
        [one],
        "rounding",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", max(graph.opset, 13))])
    model.ir_version = min(model.ir_version, graph.model.ir_version or model.ir_version)
    try:
        with open_backend(exact_backend(), graph_from_model(model, graph.path.with_suffix(".rounding.onnx"))) as run:
            (out,) = fetch(run, {"a": a}, ["y"]).values()
    except Exception:  # noqa: BLE001 - an estimate only: a node it cannot run keeps the float thresholds
        return None
    variance = np.asarray(out, dtype=np.float64)
    return variance if np.all(np.isfinite(variance)) else None


def moved_like(graph: GraphInfo, node: NodeInfo, values: np.ndarray) -> np.ndarray | None:
    """`values` moved as the shape op `node` moves its first input (a Transpose, a Reshape...): the op run on them,
    its other inputs the graph's constants; a Cast leaves them as they are. None where it cannot run so."""
    if node.op_type in ("Cast", "Identity"):
        return values
    from onnx.reference import ReferenceEvaluator

    proto = graph.model.graph.node[node.index]
    constants = constant_values(graph, set(node.inputs[1:]))
    if any(name and name not in constants for name in node.inputs[1:]):
        return None
    data = np.asarray(values, dtype=np.float64)
    model = helper.make_model(
        helper.make_graph(
            [proto],
            "moved",
            [helper.make_tensor_value_info(node.inputs[0], TensorProto.DOUBLE, list(data.shape))],
            [helper.make_tensor_value_info(name, TensorProto.DOUBLE, None) for name in proto.output],
            [numpy_helper.from_array(np.asarray(constants[n]), n) for n in node.inputs[1:] if n],
        ),
        opset_imports=[helper.make_opsetid("", graph.opset)],
    )
    try:
        outputs: Any = ReferenceEvaluator(model).run(None, {node.inputs[0]: data})
        moved = outputs[0]
    except Exception:  # noqa: BLE001 - an estimate only: where it cannot move them, no figure
        return None
    return np.asarray(moved, dtype=np.float64)


def input_rounding(graph: GraphInfo, dequantize: NodeInfo, values: np.ndarray) -> np.ndarray | None:
    """The rounding variance an activation Q/DQ (`dequantize`, a per-tensor scale) gives each of `values`:
    step^2/12 on an integer grid, the float8 spacing around each value on an FP8 one; None where its scale is
    not one constant."""
    constants = constant_values(graph, set(dequantize.inputs[1:3]))
    scale = constants.get(dequantize.inputs[1]) if len(dequantize.inputs) > 1 else None
    if scale is None or scale.size != 1:
        return None
    step = float(np.asarray(scale, dtype=np.float64).reshape(-1)[0])
    zero = constants.get(dequantize.inputs[2]) if len(dequantize.inputs) > 2 and dequantize.inputs[2] else None
    if zero is not None and zero.dtype.kind not in "iu":
        spacing = step * float8_spacing(values / step)
        variance: np.ndarray = np.square(spacing) / 12.0
        return variance
    return np.full(values.shape, step * step / 12.0)


def _variance(
    graph: GraphInfo, dequantize: NodeInfo, constants: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray] | None:
    """Each weight's rounding variance behind the DequantizeLinear `dequantize`, and each weight squared, shaped
    as the weight; None where it is not a weight's (its input is computed) or its scale is not a constant."""
    if dequantize.op_type != "DequantizeLinear" or len(dequantize.inputs) < 2:
        return None
    scale = constants.get(dequantize.inputs[1])
    stored = constants.get(dequantize.inputs[0])
    source = None if stored is not None else graph.node_of(dequantize.inputs[0])
    if scale is None:
        return None
    if stored is None:  # ModelOpt's default: a float initializer through a QuantizeLinear
        if source is None or source.op_type != "QuantizeLinear" or source.inputs[0] not in constants:
            return None
        weight = np.asarray(constants[source.inputs[0]], dtype=np.float64)
    else:
        weight = None
    zero = constants.get(dequantize.inputs[2]) if len(dequantize.inputs) > 2 and dequantize.inputs[2] else None
    shape = stored.shape if stored is not None else weight.shape if weight is not None else None
    if shape is None:
        return None
    attributes = {a.name: helper.get_attribute_value(a) for a in graph.model.graph.node[dequantize.index].attribute}
    step = broadcast_scale(np.asarray(scale, dtype=np.float64), shape, attributes)
    if step is None:
        return None
    points = np.asarray(zero, dtype=np.float64) if zero is not None and zero.dtype.kind in "iu" else np.zeros(())
    offset = broadcast_scale(points, shape, attributes) if points.size > 1 else points
    if offset is None:
        return None
    values = np.asarray(stored, dtype=np.float64) - offset if stored is not None else np.asarray(weight) / step
    squared = np.square(values * step) if stored is not None else np.square(np.asarray(weight))
    if zero is not None and zero.dtype.kind not in "iu":  # float8: the spacing around each value
        step = step * float8_spacing(values)
    variance: np.ndarray = np.square(step) / 12.0
    return variance, squared


def float8_spacing(values: np.ndarray) -> np.ndarray:
    """The spacing of float8e4m3fn values around each of `values` (in units of the scale): 2^(e-3) for a binary
    exponent e, 2^-9 below the smallest normal."""
    exponent = np.floor(np.log2(np.maximum(np.abs(values), 2.0**_E4M3_MIN_EXPONENT)))
    spacing: np.ndarray = 2.0 ** (exponent - _E4M3_MANTISSA)
    return spacing


def broadcast_scale(scale: np.ndarray, shape: tuple[int, ...], attributes: Mapping[str, object]) -> np.ndarray | None:
    """A DequantizeLinear's scale as one step per weight: per tensor, per channel along `axis`, or per block of
    `block_size` along it (opset 21)."""
    if scale.size == 1:
        return np.full(shape, float(scale.reshape(-1)[0]))
    axis = int(attributes.get("axis", 1)) % len(shape)  # type: ignore[call-overload]
    block = int(attributes.get("block_size", 0))  # type: ignore[call-overload]
    if block:
        if scale.ndim != len(shape):
            return None
        return np.repeat(scale, block, axis=axis)[tuple(slice(0, d) for d in shape)]
    if scale.ndim != 1 or scale.size != shape[axis]:
        return None
    view = [1] * len(shape)
    view[axis] = scale.size
    return np.broadcast_to(scale.reshape(view), shape).copy()
