"""Shape arithmetic written as a small model of constants, from the graph's static shapes, not its data.

Each node alone (analysis.shadow) is fed the graph's own values of the tensors it reads that are
not data: a Resize's sizes, a Reshape's target shape. They follow from shapes alone: where shape
inference fixed the shape of every tensor a Shape (or Size) node reads, that node's output is a
constant, and what is computed from constants is too. Running the model `folded` writes costs
milliseconds; running the whole graph for those values cost a forward (a tenth of an FP16
compare's time on the 2-core CPU at 1024x1024). The static shapes are the ones the rest of
trtdiff feeds by (analysis.shadow.as_onnx); a value read from data, a dimension left open, a node
holding a subgraph, one outside the standard domain or a random one on the way makes it None: the
whole graph runs then, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtdiff.source.onnx_graph import GraphInfo

_STATIC = frozenset({"Shape", "Size"})
"""The ops whose output is their input's shape (or its element count): constants once that shape is static."""
_RANDOM = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)
"""Ops whose values a second run would not repeat: their tensors are taken from the graph's run."""


def folded(graph: GraphInfo, names: Sequence[str]) -> onnx.ModelProto | None:
    """A model without inputs that computes `names` from the graph's constants, each Shape or Size node on the way
    written as the constant its input's static shape gives; None where one of them needs more (module docstring)."""
    kept: dict[int, onnx.NodeProto] = {}
    initializers: set[str] = set()
    pending, seen = [n for n in names if n], set[str]()
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor in graph.initializers:
            initializers.add(tensor)
            continue
        index = graph.producer_of.get(tensor)
        if index is None or tensor in graph.data_tensors:  # a graph input, or computed from one's values
            return None
        node, proto = graph.nodes[index], graph.model.graph.node[index]
        if node.domain not in ("", "ai.onnx") or node.op_type in _RANDOM or node.implicit:
            return None
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in proto.attribute):
            return None
        if node.op_type in _STATIC:
            value = _static_value(graph, proto)
            if value is None:
                return None
            kept[index] = helper.make_node("Constant", [], [proto.output[0]], value=numpy_helper.from_array(value))
            continue
        kept[index] = proto
        pending.extend(proto.input)
    outputs = []
    for name in names:
        tensor_type = graph.tensor_type(name)
        if tensor_type.dtype is None:
            return None
        outputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(tensor_type.dtype), None))
    model = helper.make_model(
        helper.make_graph(
            [kept[i] for i in sorted(kept)],
            "trtdiff-shape-values",
            [],
            outputs,
            initializer=[i for i in graph.model.graph.initializer if i.name in initializers],
        ),
        opset_imports=list(graph.model.opset_import),
        producer_name="trtdiff",
    )
    model.ir_version = graph.model.ir_version
    return model


def _static_value(graph: GraphInfo, node: onnx.NodeProto) -> np.ndarray | None:
    """A Shape node's output (its `start` and `end` applied) or a Size node's, from its input's static shape."""
    shape = graph.tensor_type(node.input[0]).shape if node.input else None
    if shape is None or any(d is None for d in shape):
        return None
    dims = np.array(shape, dtype=np.int64)
    if node.op_type == "Size":
        return np.array(int(np.prod(dims)), dtype=np.int64)
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    rank = len(dims)
    start = _clamped(int(attributes.get("start", 0)), rank)
    end = _clamped(int(attributes.get("end", rank)), rank)
    return dims[start:end]


def _clamped(axis: int, rank: int) -> int:
    """A Shape node's `start` or `end`: negative counts from the end, and both are clamped to [0, rank]."""
    return min(max(axis + rank if axis < 0 else axis, 0), rank)
