"""Q/DQ graphs: the quantization scale of each tensor, and the float value each DequantizeLinear stands for.

A QDQ file (ONNX Runtime's quantize_static, NVIDIA ModelOpt) keeps float tensors between
`QuantizeLinear` (float -> integer, x / scale + zero point, rounded and saturated) and
`DequantizeLinear` (integer -> float, (q - zero point) x scale) pairs. What a DequantizeLinear
outputs approximates the float tensor its QuantizeLinear read: that tensor's PyTorch value is
its reference. quantize_static folds an activation that the quantization range already clips
(a Relu after a Conv: zero point at the bottom of the range) into the Q/DQ and renames the
tensors, so the QuantizeLinear reads the Conv's output while the DequantizeLinear stands for
PyTorch's `relu`: the recorded op that reads only that value and clips it is taken instead.

Weight DequantizeLinears (their input a constant) compute constants; they are listed, not
compared. FP8 E4M3 Q/DQ (a float8e4m3fn zero point) has no uniform step: its tensors are
judged in the spacing of float8 values around each value (analysis.quant). Only what the
graph says is read: no value is computed to decide a pair.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.source.onnx_graph import constant_values
from trtdiff.source.qdq_scales import QDQ_OPS, ScaleFault, scale_faults

if TYPE_CHECKING:
    import onnx

    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.source.onnx_graph import GraphInfo, NodeInfo

_QDQ = QDQ_OPS
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}  # the escapes a regular expression reads as these characters
_CLIPS = frozenset({"relu", "relu6", "hardtanh", "clamp"})  # record kinds a Q/DQ range may absorb


@dataclass(frozen=True)
class Quantization:
    """The DequantizeLinear a tensor comes out of or flows into, with its (largest) scale and zero point."""

    node: str
    scale: float
    zero_point: int
    dtype: str
    output: str = ""
    """The DequantizeLinear's output (the other tensor it judges is the float one its QuantizeLinear reads)."""
    fault: str = ""
    """What is wrong with its scale or its QuantizeLinear's (source.qdq_scales: zero, negative, not finite), or ""."""

    def describe(self) -> str:
        """ "/relu/Relu_output_0_DequantizeLinear (scale 0.00943, zero point -128, int8)", then its fault if any."""
        text = f"{self.node} (scale {self.scale:.3g}, zero point {self.zero_point:g}, {self.dtype})"
        return f"{text}: {self.fault}" if self.fault else text


def has_qdq(graph: GraphInfo) -> bool:
    """Whether the graph holds any QuantizeLinear or DequantizeLinear node (a cheap test, no values read)."""
    return any(node.op_type in _QDQ for node in graph.nodes)


def quantizations(graph: GraphInfo) -> dict[str, Quantization]:
    """Tensor -> the quantization that judges it: an activation DequantizeLinear's output, and the
    float tensor its QuantizeLinear reads (a Conv's output before the Q/DQ), by the same DQ.

    Empty for a graph with no Q/DQ (nothing read). A scale no constant holds is skipped.
    """
    if not has_qdq(graph):
        return {}
    constants, faults = constant_values(graph), scale_faults(graph)
    found: dict[str, Quantization] = {}
    for node in graph.nodes:
        if node.op_type != "DequantizeLinear" or not node.outputs or not node.inputs:
            continue
        if node.inputs[0] in constants or node.outputs[0] not in graph.data_tensors:
            continue  # a weight: a constant
        source = graph.node_of(node.inputs[0])
        quantize = source if source is not None and source.op_type == "QuantizeLinear" and source.inputs else None
        quantization = _quantization(node, constants, _fault(node, quantize, faults))
        if quantization is None:
            continue
        found[node.outputs[0]] = quantization
        if quantize is not None:
            found.setdefault(quantize.inputs[0], quantization)
    return found


def _fault(dequantize: NodeInfo, quantize: NodeInfo | None, faults: Mapping[str, ScaleFault]) -> str:
    """What is wrong with the scale of `dequantize`, else of the QuantizeLinear feeding it; "" where nothing is."""
    if (own := faults.get(dequantize.name)) is not None:
        return own.describe()
    if quantize is not None and (fault := faults.get(quantize.name)) is not None:
        return f"the scale of its QuantizeLinear {quantize.name}, {fault.scale}, {fault.text}"
    return ""


def weight_dequantizers(graph: GraphInfo) -> list[str]:
    """The DequantizeLinear nodes whose input is a constant (weights, biases): not compared as tensors."""
    return list(weight_quantizations(graph))


def weight_quantizations(graph: GraphInfo) -> dict[str, Quantization | None]:
    """Each weight or bias DequantizeLinear -> its quantization (None: no constant scale): its input a constant
    (`--dq_only`, quantize_static), or a QuantizeLinear of one (ModelOpt's default, "fake-quantized")."""
    if not has_qdq(graph):
        return {}
    constants, faults = constant_values(graph), scale_faults(graph)
    return {
        n.name: _quantization(n, constants, _fault(n, graph.node_of(n.inputs[0]), faults))
        for n in graph.nodes
        if n.op_type == "DequantizeLinear" and n.inputs and float_weight_of(graph, n, constants) is not None
    }


def float_weight_of(graph: GraphInfo, dequantize: NodeInfo, constants: Mapping[str, np.ndarray]) -> str | None:
    """The constant a weight DequantizeLinear dequantizes: its input, or the float initializer its
    QuantizeLinear reads ("" where the file holds only the integers); None for an activation's."""
    if dequantize.inputs[0] in constants:
        return ""
    quantize = graph.node_of(dequantize.inputs[0])
    if quantize is not None and quantize.op_type == "QuantizeLinear" and quantize.inputs[0] in constants:
        return quantize.inputs[0]
    return None


def dequantized_keys(graph: GraphInfo, capture: TorchCapture, keys: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Activation DequantizeLinear output -> (recorded value key, its op), from the pairs made (`keys`).

    The value is the one the QuantizeLinear's input is paired with, or, where that value's only
    reader in PyTorch clips it (`relu`) and no ONNX tensor stands for that reader (quantize_static
    folded it), the reader's.
    """
    if not has_qdq(graph):
        return {}
    by_key = {record.key: record for record in capture.records}
    taken = set(keys.values())
    inputs = dict(zip(graph.graph_inputs, capture.input_keys, strict=False))  # a model input's own Q/DQ
    found: dict[str, tuple[str, str]] = {}
    for tensor in quantizations(graph):
        node = graph.node_of(tensor)
        if node is None or node.op_type != "DequantizeLinear" or tensor in keys:
            continue
        source = graph.node_of(node.inputs[0])
        if source is None or source.op_type != "QuantizeLinear":
            continue
        if source.inputs[0] in inputs:
            found[tensor] = (inputs[source.inputs[0]], "input")
            continue
        if source.inputs[0] not in keys:
            continue
        record = by_key.get(keys[source.inputs[0]])
        if record is None:  # a derived value (a converter's Cast before the Q/DQ): the DQ stands for it as it is
            found[tensor] = (keys[source.inputs[0]], "derived")
            continue
        readers = [r for r in capture.records if record.index in r.sources]
        if len(readers) == 1 and readers[0].kind in _CLIPS and readers[0].key not in taken:
            record = readers[0]
        found[tensor] = (record.key, record.op)
    return found


def _quantization(node: NodeInfo, constants: Mapping[str, np.ndarray], fault: str = "") -> Quantization | None:
    scale = constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if scale is None or scale.size == 0:
        return None
    zero = constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    zero_point = 0
    stored = zero is None and node.inputs[0] in constants  # a weight's integers: their type is the grid's (INT4)
    dtype = str(constants[node.inputs[0]].dtype) if stored else "int8"
    if zero is not None and zero.size:
        dtype = str(zero.dtype)
        if zero.dtype.kind in "iu" or dtype in ("int4", "uint4"):  # ml_dtypes' int4 is no numpy integer kind
            zero_point = int(zero.reshape(-1)[0])
        elif dtype != "float8_e4m3fn":
            return None  # E5M2 and other float grids: not judged in their steps yet
    largest = float(np.max(np.abs(scale.astype(np.float64))))
    return Quantization(node.name, largest, zero_point, dtype, node.outputs[0] if node.outputs else "", fault)


def to_exclude(graph: GraphInfo, node_name: str, subgraph: Sequence[str] = ()) -> tuple[str, ...]:
    """The nodes to keep in higher precision for a culprit `node_name` of a quantized graph (run locally with
    `subgraph`: a Linear's MatMul before its bias Add), as NVIDIA ModelOpt's quantization names them in
    `nodes_to_exclude`, the nodes whose inputs it quantizes: for a DequantizeLinear, the nodes that read its
    output (not quantizing their input removes that Q/DQ); else each node of the culprit's subgraph that reads a
    DequantizeLinear (an activation's or a weight's); else the node itself where it feeds a Q/DQ. Empty for a
    graph with no Q/DQ."""
    if not has_qdq(graph):
        return ()
    by_name = {n.name: n for n in graph.nodes}
    node = by_name.get(node_name)
    if node is None:
        return ()
    if node.op_type == "DequantizeLinear":
        readers = [n.name for n in graph.nodes if node.outputs and node.outputs[0] in n.inputs]
        return tuple(n for n in readers if n)
    if node.op_type == "QuantizeLinear":
        return ()
    members = [by_name[name] for name in dict.fromkeys((node_name, *subgraph)) if name in by_name]
    quantized = [m.name for m in members if any(_op(graph, t) == "DequantizeLinear" for t in m.inputs)]
    if quantized:
        return tuple(quantized)
    near = [graph.node_of(t) for t in node.inputs] + [n for n in graph.nodes if set(node.outputs) & set(n.inputs)]
    return (node.name,) if any(n is not None and n.op_type in _QDQ for n in near) else ()


def _op(graph: GraphInfo, tensor: str) -> str | None:
    """The op type of the node computing `tensor`, None for an input or initializer."""
    source = graph.node_of(tensor)
    return source.op_type if source is not None else None


def unquantized(
    graph: GraphInfo, nodes: Sequence[str], floats: Mapping[str, np.ndarray] | None = None
) -> onnx.ModelProto:
    """A copy of the model with `nodes`' inputs unquantized, as ModelOpt's `nodes_to_exclude` leaves them: each
    input a DequantizeLinear computes from a QuantizeLinear of a float tensor reads that float tensor instead;
    a weight reads its float initializer where the file holds one (ModelOpt's default form), else the float
    weight `floats` gives for its DequantizeLinear (pairing.weights: the PyTorch parameter, folded), else stays
    quantized.

    A Q/DQ whose zero point is its type's lowest value represents no negative value: it clips at zero,
    and quantize_static folds a Relu into it that way; a Relu then stands in for it. The Q/DQ nodes
    nothing reads any more are dropped.
    """
    import onnx
    from onnx import helper

    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    constants = constant_values(graph)
    wanted, relus = set(nodes), {o for n in model.graph.node for o in n.output}  # relus: names taken
    ordered: list[onnx.NodeProto] = []
    for info, node in zip(graph.nodes, model.graph.node, strict=True):  # trtdiff's names: unnamed ones too
        for i, tensor in enumerate(node.input if info.name in wanted else ()):
            weight = _float_weight(graph, tensor, constants, floats or {}, model)
            if weight is not None:
                node.input[i] = weight
                continue
            float_input = _quantized_from(graph, tensor, constants)
            if float_input is None:
                continue
            source, clips = float_input
            if clips:  # the Relu right before its reader: the float tensor is computed before the Q/DQ was
                relu = f"{source}/trtdiff.unquantized_relu"
                if relu not in relus:  # one Relu for every reader (and none again in a file unquantized before)
                    ordered.append(helper.make_node("Relu", [source], [relu], name=relu))
                    relus.add(relu)
                source = relu
            node.input[i] = source
        ordered.append(node)
    del model.graph.node[:]
    model.graph.node.extend(_read(ordered, {o.name for o in model.graph.output}))
    return model


def _float_weight(
    graph: GraphInfo,
    tensor: str,
    constants: Mapping[str, np.ndarray],
    floats: Mapping[str, np.ndarray],
    model: onnx.ModelProto,
) -> str | None:
    """The float weight to read instead of a weight DequantizeLinear's output `tensor`: the initializer its
    QuantizeLinear reads, or `floats`' value for it added to `model` as an initializer; None for anything else."""
    from onnx import numpy_helper

    dequantize = graph.node_of(tensor)
    if dequantize is None or dequantize.op_type != "DequantizeLinear":
        return None
    initializer = float_weight_of(graph, dequantize, constants)
    if initializer:
        return initializer
    if initializer is None or dequantize.name not in floats:
        return None
    name = f"{dequantize.name}/trtdiff.float_weight"
    if all(i.name != name for i in model.graph.initializer):
        dtype = graph.tensor_type(tensor).dtype or np.dtype(np.float32)  # the DequantizeLinear's output type
        values = np.asarray(floats[dequantize.name], dtype=dtype)
        model.graph.initializer.append(numpy_helper.from_array(values, name))
    return name


def _read(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """`nodes` without the Q/DQ nodes nothing reads any more (those the rewiring left behind), repeatedly."""
    while True:
        read = outputs | {t for n in nodes for t in n.input}
        kept = [n for n in nodes if n.op_type not in _QDQ or any(o in read for o in n.output)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept


def _quantized_from(graph: GraphInfo, tensor: str, constants: Mapping[str, np.ndarray]) -> tuple[str, bool] | None:
    """(the float tensor, whether its Q/DQ clips at zero) where an activation Q/DQ pair computes `tensor`."""
    dequantize = graph.node_of(tensor)
    if dequantize is None or dequantize.op_type != "DequantizeLinear" or dequantize.inputs[0] in constants:
        return None
    quantize = graph.node_of(dequantize.inputs[0])
    if quantize is None or quantize.op_type != "QuantizeLinear":
        return None
    zero = constants.get(quantize.inputs[2]) if len(quantize.inputs) > 2 and quantize.inputs[2] else None
    clips = zero is not None and zero.dtype.kind in "iu" and int(zero.reshape(-1)[0]) == np.iinfo(zero.dtype).min
    return quantize.inputs[0], clips


def exclude_pattern(node_name: str) -> str:
    """A node name as a regular expression that matches it alone under `re.match` (as ModelOpt reads its
    `nodes_to_exclude` entries), written as one line of printable text.

    Anchored by `^` and `\\Z` (`$` would also match the name followed by a newline); every character
    literal: regex syntax backslashed (`re.escape`), white space and what is not printable (a newline,
    ESC, a Unicode separator or control) as `\\n`, `\\r`, `\\t` or a `\\xHH`, `\\uHHHH` or `\\UHHHHHHHH`
    escape, which `re` reads as that character. So the line never breaks, never holds what a terminal acts on, and never
    starts with `::` (a CI workflow command).
    """
    return "^" + "".join(map(_literal, node_name)) + "\\Z"


def _literal(char: str) -> str:
    """One character of a node name as a regular expression matching it, in printable text with no space."""
    if char.isprintable() and not char.isspace():
        return re.escape(char)
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def unwritable(graph: GraphInfo, node_name: str) -> str | None:
    """Why no line of an exclusion list can name `node_name` alone (None where `exclude_pattern` does): the
    file gives the node no name (trtdiff's own name for it is not in the file), or several nodes share it."""
    count = sum(node.name == node_name for node in graph.model.graph.node)
    if count == 1 and node_name:
        return None
    return "the file gives the node no name" if count == 0 or not node_name else f"{count} nodes share the name"


def exclusion_patterns(graph: GraphInfo, node_names: Sequence[str]) -> tuple[str, ...]:
    """`exclude_pattern` of each of `node_names` that one can name alone in `graph` (`unwritable`), in order."""
    return tuple(exclude_pattern(name) for name in node_names if unwritable(graph, name) is None)
