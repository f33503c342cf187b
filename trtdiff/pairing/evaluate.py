"""Run one ONNX node in PyTorch, on PyTorch's values: the derived references of pairing_derive.

Each supported op is computed with the torch call PyTorch itself makes for that step (a
Sigmoid with torch.sigmoid, a MatMul with torch.matmul, a LayerNormalization with
F.layer_norm), in the values' own dtype. Inputs that are not computed from the model's
inputs (initializers, Constant nodes, shape arithmetic) are folded once with the ONNX spec
evaluator; a Reshape-like op takes its output shape from shape inference where it is static.
An op this module does not know, or an input it cannot fold, gives no value (never a guess).
A widened evaluator (a reduced-precision graph evaluated in its reference's precision:
pairing_derive.widened) computes in its data's float type: constants are widened to it, and a
Cast from float to float passes its input through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from onnx import helper, numpy_helper

from trtdiff.pairing.eval_ops import MATH_OPS, Call, Op
from trtdiff.pairing.eval_shape import SHAPE_OPS
from trtdiff.source.onnx_graph import GraphInfo, NodeInfo

OPS: dict[str, Op] = {**MATH_OPS, **SHAPE_OPS}


class NodeEvaluator:
    """Computes ONNX nodes of one graph in PyTorch (see the module docstring)."""

    def __init__(self, graph: GraphInfo, *, widen: bool = False) -> None:
        self.graph = graph
        self.widen = widen
        """Compute in the data's own float type, however narrow the graph's (see the module docstring)."""
        self.protos = list(graph.model.graph.node)
        self.opsets = {entry.domain or "": int(entry.version) for entry in graph.model.opset_import}
        self._initializers = {init.name: init for init in graph.model.graph.initializer}
        self._constants: dict[str, np.ndarray | None] = {}
        self.shape_of: Callable[[str], tuple[int, ...] | None] = lambda _tensor: None
        """The shape of a tensor computed from the inputs where shape inference left it open (set by the user)."""

    def supports(self, node: NodeInfo) -> bool:
        return node.domain in ("", "ai.onnx") and node.op_type in OPS

    def run(self, node: NodeInfo, data: Mapping[str, torch.Tensor]) -> list[torch.Tensor | None] | None:
        """`node`'s outputs, from `data` for the tensors computed from the model's inputs; None if it cannot."""
        if not self.supports(node):
            return None
        inputs: list[torch.Tensor | None] = []
        constants: list[int] = []
        for name in node.inputs:
            if name in self.graph.data_tensors:
                if name not in data:
                    return None
                inputs.append(data[name])
            else:
                folded = self.constant(name) if name else None
                constants.append(len(inputs))
                inputs.append(_tensor(folded) if folded is not None else None)
        proto = self.protos[node.index]
        attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        if self.widen:
            inputs = _widened(inputs, constants)
            if node.op_type == "Cast" and _passes_through(inputs, attrs):
                return [inputs[0]] + [None] * (len(node.outputs) - 1)
        shapes = [self._static_shape(t) for t in node.outputs]
        try:
            with torch.no_grad():
                outputs = list(OPS[node.op_type](Call(inputs, attrs, shapes, self.graph.opset)))
        except Exception:  # noqa: BLE001 -- Unsupported, or a form torch refuses: no derived value, never a guess
            return None
        outputs += [None] * (len(node.outputs) - len(outputs))
        return [v if v is not None and _fits(v, s) else None for v, s in zip(outputs, shapes, strict=False)]

    def constant(self, tensor: str) -> np.ndarray | None:
        """The value of a tensor not computed from the model's inputs (folded once), or None."""
        if tensor not in self._constants:
            self._constants[tensor] = None  # no cycles in a graph; this also marks work in progress
            self._constants[tensor] = self._fold(tensor)
        return self._constants[tensor]

    def _fold(self, tensor: str) -> np.ndarray | None:
        if tensor in self._initializers:
            return numpy_helper.to_array(self._initializers[tensor])
        node = self.graph.node_of(tensor)
        if node is None or tensor in self.graph.data_tensors:
            return None
        if node.op_type == "Shape":
            return self._shape_of(node)
        values = {name: self.constant(name) for name in node.inputs if name}
        if any(v is None for v in values.values()):
            return None
        from onnx.reference import ReferenceEvaluator

        try:
            evaluator = ReferenceEvaluator(self.protos[node.index], opsets=self.opsets)
            outputs = list(evaluator.run(None, values))
        except Exception:  # noqa: BLE001 -- an op the spec evaluator lacks: nothing is folded
            return None
        return np.asarray(outputs[list(node.outputs).index(tensor)])

    def _shape_of(self, node: NodeInfo) -> np.ndarray | None:
        shape = self._static_shape(node.inputs[0])
        if shape is None:
            shape = self.shape_of(node.inputs[0])
        if shape is None:
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in self.protos[node.index].attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return np.array(shape[slice(start, end)], dtype=np.int64)

    def _static_shape(self, tensor: str) -> tuple[int, ...] | None:
        shape = self.graph.tensor_type(tensor).shape
        if shape is None or any(d is None for d in shape):
            return None
        return tuple(int(d) for d in shape if d is not None)


def _widened(inputs: list[torch.Tensor | None], constants: list[int]) -> list[torch.Tensor | None]:
    """`inputs` with each float constant (at the indices `constants`) cast up to the widest float data input."""
    floats = [v.dtype for i, v in enumerate(inputs) if i not in constants and v is not None and v.is_floating_point()]
    if not floats:
        return inputs
    wide = max(floats, key=lambda dtype: dtype.itemsize)
    widened = list(inputs)
    for i in constants:
        value = inputs[i]
        if value is not None and value.is_floating_point() and value.dtype.itemsize < wide.itemsize:
            widened[i] = value.to(wide)
    return widened


def _passes_through(inputs: list[torch.Tensor | None], attrs: Mapping[str, object]) -> bool:
    """Whether a Cast takes a float value to a float type (which a widened evaluator does not round to)."""
    value, target = inputs[0] if inputs else None, attrs.get("to")
    return value is not None and value.is_floating_point() and isinstance(target, int) and target in _FLOAT_CODES


_FLOAT_CODES = frozenset({1, 10, 11, 16})  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _fits(value: torch.Tensor, shape: tuple[int, ...] | None) -> bool:
    return value.is_floating_point() and (shape is None or tuple(value.shape) == shape)


def _tensor(value: np.ndarray) -> torch.Tensor:
    """A constant as torch takes it: bfloat16 (ml_dtypes, which torch cannot read) through float32."""
    array = np.array(value)
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(array)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype of a numpy one, ml_dtypes' bfloat16 included."""
    if dtype.name == "bfloat16":
        return torch.bfloat16
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype
