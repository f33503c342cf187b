"""Kinds that depend on a node's neighbours: a Linear's bias add, and attention's value product.

op_kinds names what one op computes; two roles need the op that feeds it too, read the same
way on both sides so that they meet:
- "gemm": a Linear. PyTorch records `addmm` (2-D or contiguous 3-D input) or `mm`/`bmm`
  followed by `add` of the bias; ONNX holds `Gemm`, or `MatMul` followed by `Add` of a
  constant. So an add of a matrix product and a constant (below) is a "gemm" on either
  side, and the product before it keeps its own kind.
- "attention": the product of attention weights with the values. A fused attention kernel
  recorded whole records this one value (torch_attention records it op by op where it can);
  ONNX (and attention written out) computes it with the `MatMul` that follows `Softmax`. So
  a matrix product whose first operand comes from a softmax is "attention" on either side.
A constant is what the ONNX file holds as one: not computed from the model's inputs. On the
PyTorch side that is a parameter, or a record computed from parameters alone (a relative
position bias gathered from its table), which the exporter folds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trtdiff.backends.pytorch.op_kinds import onnx_kind
from trtdiff.backends.pytorch.records import INPUT

if TYPE_CHECKING:
    from trtdiff.backends.pytorch.records import TorchCapture, TorchRecord
    from trtdiff.source.onnx_graph import GraphInfo, NodeInfo

_TRANSPARENT = frozenset({"Identity", "Dropout", "Cast"})  # ops between Softmax and MatMul that change nothing


def onnx_kinds(graph: GraphInfo) -> dict[str, str]:
    """The kind of every ONNX node that has one, by node name (see the module docstring)."""
    kinds: dict[str, str] = {}
    for node in graph.nodes:
        kind = onnx_kind(node.op_type, node.domain)
        if kind is None or (kind == "cast" and not _integer_cast(graph, node)):
            continue
        if kind == "add" and _is_bias_add(graph, node):
            kind = "gemm"
        elif kind == "matmul" and node.inputs and _producer_type(graph, node.inputs[0]) == "Softmax":
            kind = "attention"
        kinds[node.name] = kind
    return kinds


def _integer_cast(graph: GraphInfo, node: NodeInfo) -> bool:
    """Whether a Cast reads or writes an integer or bool tensor (PyTorch records only those casts)."""
    ends = [t for t in (*node.inputs[:1], *node.outputs[:1]) if t]
    return any(graph.tensor_type(t).dtype is not None and not graph.tensor_type(t).is_float for t in ends)


def _is_bias_add(graph: GraphInfo, node: NodeInfo) -> bool:
    if len(node.inputs) != 2:
        return False
    first, second = node.inputs
    for product, bias in ((first, second), (second, first)):
        producer = graph.node_of(product)
        if producer is not None and producer.op_type == "MatMul" and bias not in graph.data_tensors:
            return True
    return False


def _producer_type(graph: GraphInfo, tensor: str) -> str | None:
    node = graph.node_of(tensor)
    while node is not None and node.op_type in _TRANSPARENT and node.inputs:
        node = graph.node_of(node.inputs[0])
    return node.op_type if node is not None else None


def computed_from_inputs(capture: TorchCapture) -> list[bool]:
    """Per record, whether it is computed from the model's inputs (else from parameters alone, a constant)."""
    flags: list[bool] = []
    for record in capture.records:
        flags.append(any(s is not None and (s == INPUT or flags[s]) for s in record.sources))
    return flags


def record_kind(capture: TorchCapture, record: TorchRecord, from_inputs: Sequence[bool]) -> str:
    """The kind of a recorded op (see the module docstring); `from_inputs` as computed_from_inputs gives."""
    kind = record.kind
    sources = record.sources
    if kind == "add" and len(sources) == 2:
        data = [s for s in sources if s is not None and (s == INPUT or from_inputs[s])]
        if len(data) == 1 and data[0] >= 0 and capture.records[data[0]].kind == "matmul":
            return "gemm"
    if kind == "matmul" and sources and sources[0] is not None and sources[0] >= 0:
        if capture.records[sources[0]].kind == "softmax":
            return "attention"
    return kind
