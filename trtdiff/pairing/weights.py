"""The float weight each weight DequantizeLinear of a QDQ file stands for, after the export's folding.

A quantized weight is right when it is within half a step of the float weight it quantizes. Which
float weight that is depends on how the file was made: the exporter may have folded a BatchNorm
into the Conv before it (the TorchScript exporter then names the weight `onnx::Conv_50`, the dynamo
exporter keeps `conv1.weight` for the folded values), and a MatMul holds a Linear's weight
transposed. So the weight is found from the node that reads it, not from its name: the node's module
(`Pairing.node_modules`) gives the PyTorch parameter, and where the node's output is paired with a
BatchNorm's (a folded unit, pairing.pairs), that BatchNorm is folded in, as the exporter did. A
weight no module explains is compared with the float initializer its QuantizeLinear reads, where the
file holds one (what the export wrote), else not at all.

Only names and shapes are read to find it; `weight_values` computes it from the parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.pairing.qdq import float_weight_of, weight_quantizations
from trtdiff.report import WeightSource
from trtdiff.source.onnx_graph import constant_values

if TYPE_CHECKING:
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.pairing.pairs import Pairing
    from trtdiff.source.onnx_graph import GraphInfo, NodeInfo

_WEIGHTED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def weight_values(
    source: WeightSource, parameters: Mapping[str, np.ndarray], eps: Mapping[str, float], graph: GraphInfo
) -> np.ndarray | None:
    """The float weight `source` names, in float64: W x gamma / sqrt(var + eps) per output channel where a
    BatchNorm is folded in, transposed where the file holds it so; None where a value it needs is missing."""
    if source.parameter is None:
        constant = constant_values(graph, {source.initializer or ""}).get(source.initializer or "")
        return None if constant is None else constant.astype(np.float64)
    weight = parameters.get(source.parameter)
    if weight is None:
        return None
    weight = weight.astype(np.float64)
    if source.folded is not None:
        gamma, var = (parameters.get(f"{source.folded}.{k}") for k in ("weight", "running_var"))
        if gamma is None or var is None or source.folded not in eps:
            return None
        factor = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps[source.folded])
        weight = weight * factor.reshape((-1,) + (1,) * (weight.ndim - 1))
    return weight.T if source.transposed else weight


def float_weights(
    graph: GraphInfo, pairing: Pairing | None, capture: TorchCapture | None, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, WeightSource]:
    """Weight DequantizeLinear -> the float weight it stands for (`WeightSource`), for each one something explains.

    `shapes`: the PyTorch parameters' shapes by name (a parameter is taken only where its shape, or its
    transpose, is the weight's)."""
    constants = constant_values(graph)
    found: dict[str, WeightSource] = {}
    for name in weight_quantizations(graph):
        node = next(n for n in graph.nodes if n.name == name)
        initializer = float_weight_of(graph, node, constants)
        shape = _shape(graph, node.inputs[0], constants)
        source = _parameter(graph, node.outputs[0], pairing, capture, shapes, shape) if shape is not None else None
        if source is None and shape is not None:
            source = _named(graph, node.outputs[0], initializer or node.inputs[0], pairing, capture, shapes, shape)
        if source is None and initializer:
            source = WeightSource(initializer=initializer)
        if source is not None:
            found[name] = source
    return found


def _shape(graph: GraphInfo, tensor: str, constants: Mapping[str, np.ndarray]) -> tuple[int, ...] | None:
    """The weight's shape: the constant's, or the float initializer's its QuantizeLinear reads."""
    if tensor in constants:
        return tuple(constants[tensor].shape)
    quantize = graph.node_of(tensor)
    if quantize is None or not quantize.inputs or quantize.inputs[0] not in constants:
        return None
    return tuple(constants[quantize.inputs[0]].shape)


def _parameter(
    graph: GraphInfo,
    weight: str,
    pairing: Pairing | None,
    capture: TorchCapture | None,
    shapes: Mapping[str, tuple[int, ...]],
    shape: tuple[int, ...],
) -> WeightSource | None:
    """The PyTorch weight of the one Conv/Gemm/MatMul reading `weight` as its second input, with the BatchNorm
    its output is paired with folded in; None where the node, its module or a parameter of that shape is missing."""
    readers = [n for n in graph.nodes if weight in n.inputs]
    if pairing is None or len(readers) != 1 or readers[0].op_type not in _WEIGHTED:
        return None
    reader = readers[0]
    if len(reader.inputs) < 2 or reader.inputs[1] != weight:
        return None
    module = pairing.node_modules.get(reader.name)
    parameter = f"{module}.weight" if module else None
    if parameter is None or parameter not in shapes:
        return None
    own = shapes[parameter]
    transposed = len(own) == 2 and _transposes(graph, reader)  # a Linear's [out, in] weight as [in, out]
    if (own[::-1] if transposed else own) != shape:
        return None
    return WeightSource(parameter, _folded(reader.outputs[0], pairing, capture, module), transposed)


def _named(
    graph: GraphInfo,
    weight: str,
    stored: str,
    pairing: Pairing | None,
    capture: TorchCapture | None,
    shapes: Mapping[str, tuple[int, ...]],
    shape: tuple[int, ...],
) -> WeightSource | None:
    """The PyTorch parameter the file names (`stored`, less quantize_static's and ModelOpt's "_quantized"
    suffix: a bias), of the weight's shape, where no reader's output is paired with a BatchNorm (folded in,
    the values are no longer the parameter's); None otherwise."""
    name = stored.removesuffix("_quantized")
    if shapes.get(name) != shape:
        return None
    readers = [n for n in graph.nodes if weight in n.inputs]
    folded = pairing is not None and any(
        _folded(o, pairing, capture, None) is not None for reader in readers for o in reader.outputs
    )
    return None if folded else WeightSource(name)


def _transposes(graph: GraphInfo, reader: NodeInfo) -> bool:
    """Whether `reader` multiplies by its weight's transpose of a Linear's: a MatMul (x @ W^T), a Gemm without
    transB."""
    if reader.op_type == "MatMul":
        return True
    if reader.op_type != "Gemm":
        return False
    proto = graph.model.graph.node[reader.index]
    return not any(a.name == "transB" and a.i for a in proto.attribute)


def _folded(output: str, pairing: Pairing, capture: TorchCapture | None, module: str | None) -> str | None:
    """The BatchNorm module the ONNX node's output is paired with (the exporter folded it), else None."""
    paired = pairing.pairs.get(output)
    if paired is None or capture is None or not paired.key.startswith("torch:"):
        return None
    index = int(paired.key.removeprefix("torch:"))
    record = capture.records[index] if index < len(capture.records) else None
    if record is None or record.kind != "batch_norm":
        return None
    path = capture.path_of(record)
    return path if path and path != module else None
