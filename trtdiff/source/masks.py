"""Attention masks: tensors whose huge negative values were given, not computed.

Every decoder masks its attention scores before the Softmax: `masked_fill(mask, -inf)` (a Where), an
additive mask of -inf (an Add), or `torch.finfo(dtype).min` in place of -inf. The masked positions then
hold -inf or -3.4e38, far past FP16's 65504, yet nothing overflowed: the value was written into a
constant (or fed as an input) and only copied, selected or added on its way to the Softmax, which
turns it into 0 in FP16 as in FP32. An overflow is a finite computation exceeding FP16's range; what
a mask carries is not one.

A *mask source* is a constant (an initializer, a Constant node, a ConstantOfShape's value) or a fed
input holding a value at or below -65504 (-inf included). A tensor *carries the mask* when a node that
copies, selects, broadcasts or adds values (`CARRIERS`) computes it from a mask source or from a tensor
that carries it, or a node that scales values (`SCALERS`: masked scores times a constant) from a tensor
that carries it. In such a tensor the values at or below -65504 are the mask's and are not
counted in its magnitude (`computed_magnitude`); its other values are, so scores that really overflow
are still found, at the node that computes them (the MatMul before the mask, which carries none).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from trtdiff.source.fp16 import FP16_MAX
from trtdiff.source.onnx_graph import GraphInfo, attributes, constant_values

# Ops whose output holds its inputs' values copied, selected, broadcast, added or scaled: a mask's values
# pass through them unchanged in kind (still at or below -65504, or -inf).
CARRIERS = frozenset(
    {
        "Where", "Add", "Sub", "Mul", "Div", "Neg", "Min", "Max", "Clip", "Expand", "Reshape", "Transpose",
        "Concat", "Slice", "Gather", "GatherElements", "Squeeze", "Unsqueeze", "Identity", "Cast", "CastLike",
        "Tile", "Trilu", "Flatten", "Pad", "LogSoftmax",
    }
)  # fmt: skip
SCALERS = frozenset({"Mul", "Div", "Neg"})  # carry a mask already carried, never one from a constant factor


def mask_tensors(graph: GraphInfo, feeds: Mapping[str, np.ndarray] | None = None) -> frozenset[str]:
    """The tensors nodes of `graph` compute that carry an attention mask (module docstring), given the inputs
    `feeds` (a fed input holding -inf or a value at or below -65504 is a mask source too).

    A scaling node (`SCALERS`) carries a mask only from a tensor that already carries one: a constant factor of
    -1e6 is no mask, and what it computes is counted in full. Only the constants that carrying nodes read are
    looked at; a graph without a mask source gives an empty set.
    """
    read = {t for n in graph.nodes if n.op_type in CARRIERS - SCALERS for t in n.inputs}
    given = {**constant_values(graph, read), **{k: v for k, v in (feeds or {}).items() if k in read}}
    sources = {name for name, value in given.items() if _is_mask(value)}
    carried: set[str] = set()
    for node in graph.nodes:
        if node.op_type == "ConstantOfShape" and _is_mask(attributes(graph, node).get("value")):
            carried.update(node.outputs)
        elif node.op_type in CARRIERS:
            if carried.intersection(node.inputs) or (node.op_type not in SCALERS and sources.intersection(node.inputs)):
                carried.update(node.outputs)
    return frozenset(carried)


def computed_magnitude(value: np.ndarray, mask: bool) -> float | None:
    """The largest |value| a computation made (NaN aside, inf counted); in a tensor that carries a mask, its
    values at or below -65504 (the mask's) left out. None where no value counts."""
    if not np.issubdtype(value.dtype, np.floating) or value.size == 0:
        return None
    counted = value[~(value <= -FP16_MAX)] if mask else value.reshape(-1)  # NaN compares False: kept, then skipped
    counted = counted[~np.isnan(counted)]
    return float(np.max(np.abs(counted))) if counted.size else None


def _is_mask(value: object) -> bool:
    """Whether a constant's value (an array, or an ONNX TensorProto) holds a value at or below -65504."""
    if value is None:
        return False
    if not isinstance(value, np.ndarray):
        from onnx import TensorProto, numpy_helper

        if not isinstance(value, TensorProto):
            return False
        value = numpy_helper.to_array(value)
    return bool(np.issubdtype(value.dtype, np.floating) and value.size and np.any(value <= -FP16_MAX))
