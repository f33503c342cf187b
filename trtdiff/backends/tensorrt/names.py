"""ONNX names of a parsed TensorRT network, found in linear time.

The ONNX parser keeps each ONNX value name on its tensor (adding `_N` on a clash) and names
layers after ONNX nodes; `parser.get_layer_output_tensor(node, i)` is the authoritative map
where a node has a unique top-level name. Everything here walks the network once
(`index_network`) and looks names up in dictionaries: a name map for thousands of layers costs
milliseconds, not the minutes a per-name scan of every tensor took (a probe of 3,000 named
Constant+Add nodes spent 87 s in the old regular-expression scan).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import onnx

from trtdiff.backends.tensorrt.api import Layer, Network, OnnxParser, Tensor

TRT_API = (
    "INetworkDefinition.num_layers",
    "INetworkDefinition.get_layer",
    "INetworkDefinition.num_inputs",
    "INetworkDefinition.get_input",
    "ILayer.name",
    "ILayer.num_outputs",
    "ILayer.get_output",
    "ILayer.metadata",
    "ITensor.name",
)
TRT_OPTIONAL_API = ("OnnxParser.get_layer_output_tensor",)
_SUFFIX = re.compile(r"(.+)_\d+")


@dataclass
class NetworkIndex:
    """Every layer and layer output of a parsed network, walked once, with lookups by tensor name."""

    layers: list[Layer]
    outputs: list[tuple[Layer, Tensor]]  # every layer output, in layer order
    by_name: dict[str, tuple[Layer, Tensor]]
    suffixed: dict[str, list[str]]  # "v" -> ["v_0", "v_3"]: tensors the parser renamed on a clash
    inputs: frozenset[str]
    nested_layers: frozenset[str] = field(default_factory=frozenset)  # inside loop/conditional bodies
    sub_nodes: frozenset[str] = field(default_factory=frozenset)  # ONNX node names inside Loop/If/Scan bodies

    def tensor_names(self) -> frozenset[str]:
        return frozenset(self.by_name)


def index_network(network: Network, sub_nodes: frozenset[str] = frozenset()) -> NetworkIndex:
    """Walk `network` once. `sub_nodes`: ONNX node names inside Loop/If/Scan bodies (`subgraph_names`)."""
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    outputs: list[tuple[Layer, Tensor]] = []
    nested: set[str] = set()
    for layer in layers:
        name = layer.name
        if name in sub_nodes or " | " in (layer.metadata or ""):
            nested.add(name)
        for index in range(layer.num_outputs):
            tensor = layer.get_output(index)
            if tensor is not None:
                outputs.append((layer, tensor))
    by_name = {tensor.name: (layer, tensor) for layer, tensor in outputs}
    suffixed: dict[str, list[str]] = {}
    for name in by_name:
        match = _SUFFIX.fullmatch(name)
        if match:
            suffixed.setdefault(match.group(1), []).append(name)
    inputs = frozenset(network.get_input(i).name for i in range(network.num_inputs))
    return NetworkIndex(layers, outputs, by_name, suffixed, inputs, frozenset(nested), sub_nodes)


def map_onnx_names(parser: OnnxParser, index: NetworkIndex, model: onnx.ModelProto) -> dict[str, str]:
    """ONNX top-level value name -> TensorRT tensor name, for every value with a tensor (one pass)."""
    counts = Counter(node.name for node in model.graph.node if node.name)
    by_parser = hasattr(parser, "get_layer_output_tensor")
    mapping = {v.name: v.name for v in model.graph.input if v.name in index.inputs}
    for node in model.graph.node:
        unique = bool(node.name) and counts[node.name] == 1 and node.name not in index.sub_nodes
        for position, value in enumerate(node.output):
            if not value:
                continue
            tensor = parser.get_layer_output_tensor(node.name, position) if unique and by_parser else None
            if tensor is not None:
                mapping[value] = tensor.name
                continue
            found = _by_value_name(value, index)
            if found is not None:
                mapping[value] = found
    return mapping


def _by_value_name(value: str, index: NetworkIndex) -> str | None:
    """The top-level tensor named `value`, else the one `value_N` the parser made of it on a clash."""
    top = [
        name
        for name in (value, *index.suffixed.get(value, ()))
        if name in index.by_name and index.by_name[name][0].name not in index.nested_layers
    ]
    if value in top:
        return value
    return top[0] if len(top) == 1 else None


def subgraph_names(model: onnx.ModelProto) -> tuple[frozenset[str], frozenset[str]]:
    """Node names and value names that live inside Loop/If/Scan bodies, at any depth."""
    nodes: set[str] = set()
    values: set[str] = set()

    def walk(graph: onnx.GraphProto) -> None:
        values.update(v.name for v in graph.input)
        for node in graph.node:
            nodes.add(node.name)
            values.update(o for o in node.output if o)
            for body in bodies(node):
                walk(body)

    for node in model.graph.node:
        for body in bodies(node):
            walk(body)
    nodes.discard("")
    return frozenset(nodes), frozenset(values)


def bodies(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The subgraphs (Loop/If/Scan bodies) a node holds."""
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs
