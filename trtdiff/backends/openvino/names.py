"""OpenVINO's tensors and ops mapped back to the ONNX file's tensors and nodes, read from the model, not guessed.

OpenVINO's ONNX frontend keeps each ONNX value name among the names of the output port
that computes it (`Output.get_names()`), and names each op after the ONNX node it came
from. One ONNX node may become several ops: a Conv with a bias becomes a Convolution
(`conv/WithoutBiases`, no tensor name) and an Add (named `conv`, carrying the Conv's
output name; an op computing a graph output may be named after the tensor, not the node);
ops the frontend adds of its own (shape arithmetic, `Constant_7`) have generated names and
no ONNX tensor. So a tensor maps through the port names, exactly; an op maps to a node by
its name, else by the ONNX tensors its outputs carry (their producer), else by the longest
`/`-cut prefix that does (`conv/WithoutBiases` -> `conv`); what maps to nothing is listed,
never guessed at.

Outputs of ONNX Constant nodes are not returned (as TensorRT returns none): they are weights,
not computed, and OpenVINO's CPU plugin holds int64 constants as int32, so an INT64_MAX Slice
end would come back as 2**31 - 1 and read as a difference that no computation made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo

Port = tuple[str, int]  # (op friendly name, output index)


@dataclass(frozen=True)
class TensorMap:
    """Which OpenVINO output port holds each ONNX tensor of the graph, and what has none.

    `port_of`: ONNX tensor -> the port computing it (several tensors may share a port: an
    Identity's input and output). `outputs`: the ONNX tensors the model already returns.
    `unmapped`: ONNX node outputs (graph inputs aside) that no port carries (folded at read,
    or renamed), in graph order.
    """

    port_of: Mapping[str, Port]
    outputs: frozenset[str]
    unmapped: tuple[str, ...] = ()
    op_types: Mapping[str, str] = field(default_factory=dict)  # friendly name -> OpenVINO type
    op_tensors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # friendly name -> ONNX tensors out

    def representative(self, names: Iterable[str]) -> dict[str, str]:
        """For each of `names`, the one name of its port that is marked (one added output per port)."""
        chosen: dict[Port, str] = {}
        return {name: chosen.setdefault(self.port_of[name], name) for name in names if name in self.port_of}


def tensor_map(model: Any, graph: GraphInfo) -> TensorMap:
    """Read an `openvino.Model` (as read from the ONNX file, before any output is added) against `graph`."""
    constants = {
        t for node in graph.nodes if node.op_type == "Constant" and node.domain in ("", "ai.onnx") for t in node.outputs
    }
    wanted = set(graph.node_outputs) - set(graph.graph_inputs) - constants
    port_of: dict[str, Port] = {}
    op_types: dict[str, str] = {}
    op_tensors: dict[str, tuple[str, ...]] = {}
    for op in model.get_ordered_ops():
        name = op.get_friendly_name()
        op_types[name] = op.get_type_name()
        if op.get_type_name() == "Result":
            continue
        carried: list[str] = []
        for index, output in enumerate(op.outputs()):
            for tensor in output.get_names():
                if tensor in wanted:
                    carried.append(tensor)
                    port_of.setdefault(tensor, (name, index))
        op_tensors[name] = tuple(carried)
    outputs = frozenset(t for output in model.outputs for t in output.get_names() if t in port_of)
    unmapped = tuple(t for t in graph.node_outputs if t in wanted and t not in port_of)
    return TensorMap(port_of, outputs, unmapped, op_types, op_tensors)


class NodeNames:
    """OpenVINO op names -> ONNX node names, built once per graph (linear lookups)."""

    def __init__(self, graph: GraphInfo, op_tensors: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """`op_tensors`: the read model's op names -> the ONNX tensors their outputs carry (TensorMap.op_tensors)."""
        self.nodes = {node.name for node in graph.nodes if node.name}
        self.by_tensor = {tensor: node.name for node in graph.nodes for tensor in node.outputs if node.name}
        self.op_tensors = op_tensors or {}

    def node(self, op_name: str) -> str | None:
        """The ONNX node an OpenVINO op (or runtime layer's original op) name stands for, or None."""
        cut = op_name
        while True:
            found = self._exact(cut)
            if found is not None or "/" not in cut:
                return found
            cut = cut.rsplit("/", 1)[0]

    def _exact(self, name: str) -> str | None:
        if name in self.nodes:
            return name
        for tensor in self.op_tensors.get(name, ()):
            if tensor in self.by_tensor:
                return self.by_tensor[tensor]
        return None
