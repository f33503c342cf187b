"""A reduced-precision ONNX model computing in float32 instead: the twin a node's own FP16 noise is measured by.

In an FP16 or BF16 comparison each node's *local* noise is what its precision makes there: the
node run in the graph's precision against the same node run in float32, on the same inputs
(analysis.culprits). `as_float32` gives that float32 twin of a model the shadow step built: every
float16 and bfloat16 type (inputs, outputs, value infos, initializers, Constant and
ConstantOfShape values, the `to` of a Cast), in the graph and in If/Loop/Scan bodies, becomes
float32; nothing else changes, so every node computes what it computed, only wider. Float32's
own error is 2^13 times below FP16's, so the twin stands for the exact result.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

_NARROW = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})
_DTYPE_ATTRIBUTES = frozenset({"to", "dtype"})  # Cast's target, EyeLike/RandomNormal...'s output type


def as_float32(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every float16/bfloat16 type and value made float32 (see the module docstring)."""
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    _widen_graph(wide.graph)
    return wide


def narrow(elem_type: int) -> bool:
    """Whether a tensor type is one `as_float32` widens."""
    return elem_type in _NARROW


def _widen_graph(graph: onnx.GraphProto) -> None:
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.HasField("tensor_type") and narrow(value.type.tensor_type.elem_type):
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    for index, tensor in enumerate(graph.initializer):
        if narrow(tensor.data_type):
            graph.initializer[index].CopyFrom(_widened(tensor))
    for node in graph.node:
        for attribute in node.attribute:
            _widen_attribute(attribute)


def _widen_attribute(attribute: onnx.AttributeProto) -> None:
    if attribute.type == onnx.AttributeProto.INT and attribute.name in _DTYPE_ATTRIBUTES and narrow(attribute.i):
        attribute.i = TensorProto.FLOAT
    elif attribute.type == onnx.AttributeProto.TENSOR and narrow(attribute.t.data_type):
        attribute.t.CopyFrom(_widened(attribute.t))
    elif attribute.type == onnx.AttributeProto.GRAPH:
        _widen_graph(attribute.g)
    elif attribute.type == onnx.AttributeProto.GRAPHS:
        for body in attribute.graphs:
            _widen_graph(body)


def _widened(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """`tensor` as float32, its name kept (bfloat16 goes through ml_dtypes, which onnx reads it with)."""
    values = numpy_helper.to_array(tensor)
    return numpy_helper.from_array(np.asarray(values, dtype=np.float32), tensor.name)
