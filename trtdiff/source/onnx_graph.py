"""Read an ONNX file once: nodes in topological order, tensor types and shapes, scopes, opset.

Everything downstream (backends, pairing, localization) asks this object about the graph
instead of walking the protobuf again.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from trtdiff.errors import OnnxFileError, first_line, param

DYNAMO_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_SHAPE_OPS = frozenset({"Shape", "Size"})
_ML_FLOATS = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})


@dataclass(frozen=True)
class NodeInfo:
    """One top-level ONNX node. `scope` is the module path it came from, when the name says so."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    scope_pieces: tuple[str, ...] | None = None
    module_path: str | None = None
    implicit: tuple[str, ...] = ()
    """Outer-scope tensors its subgraphs (If branches, Loop and Scan bodies) read by name, not
    listed in `inputs`: the node depends on them as much as on an input."""

    @property
    def reads(self) -> tuple[str, ...]:
        """Every tensor the node reads: its inputs, then its subgraphs' outer-scope names."""
        return (*self.inputs, *self.implicit) if self.implicit else self.inputs


@dataclass(frozen=True)
class TensorType:
    """Element type and (possibly partly unknown) shape of an ONNX value."""

    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None

    @property
    def is_float(self) -> bool:
        """A floating type: numpy's, or ml_dtypes' bfloat16 and float8 (numpy sees those as void)."""
        return self.dtype is not None and (np.issubdtype(self.dtype, np.floating) or self.dtype.name in _ML_FLOATS)

    def nbytes(self) -> int | None:
        if self.dtype is None or self.shape is None:
            return None
        dims = [d for d in self.shape if d is not None]
        if len(dims) != len(self.shape):
            return None
        return int(np.prod(dims, dtype=np.int64)) * self.dtype.itemsize


@dataclass
class GraphInfo:
    """What trtdiff knows about an ONNX file."""

    path: Path
    model: onnx.ModelProto
    opset: int
    nodes: list[NodeInfo]
    types: dict[str, TensorType]
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]
    initializers: frozenset[str]
    producer: str = ""
    producer_of: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """What reading the file changed (TensorRT's own FP8 Q/DQ read as the standard ops: source.trt_ops)."""

    def __post_init__(self) -> None:
        self.producer_of = {out: node.index for node in self.nodes for out in node.outputs if out}

    def node_of(self, tensor: str) -> NodeInfo | None:
        index = self.producer_of.get(tensor)
        return None if index is None else self.nodes[index]

    def tensor_type(self, tensor: str) -> TensorType:
        return self.types.get(tensor, TensorType(None, None))

    @cached_property
    def node_outputs(self) -> list[str]:
        """Every node output in topological order (the tensors a backend can expose)."""
        return [out for node in self.nodes for out in node.outputs if out]

    @cached_property
    def data_tensors(self) -> frozenset[str]:
        """Tensors computed from the graph inputs' values, not only from their shapes or constants."""
        data = set(self.graph_inputs)
        for node in self.nodes:
            if node.op_type not in _SHAPE_OPS and any(t in data for t in node.reads):
                data.update(t for t in node.outputs if t)
        return frozenset(data)

    def ancestors(self, index: int) -> set[int]:
        """Indices of every node that feeds node `index`, directly or not."""
        seen: set[int] = set()
        stack = [index]
        while stack:
            for tensor in self.nodes[stack.pop()].reads:
                parent = self.producer_of.get(tensor)
                if parent is not None and parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return seen


def load_graph(path: str | Path) -> GraphInfo:
    """Load and shape-infer an ONNX file; raise OnnxFileError with a next step if it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise OnnxFileError(f"{path}: no such ONNX file; check the path given to {param('onnx')} or as MODEL")
    try:
        model = onnx.load(str(path))
    except Exception as error:  # onnx raises DecodeError, ValueError and others for bad files
        raise OnnxFileError(
            f"{path}: not a readable ONNX file ({first_line(error, 200) or type(error).__name__}); "
            "re-export it or check the file"
        ) from error
    if not model.graph.node:
        raise OnnxFileError(f"{path}: the ONNX graph has no nodes; re-export the model")
    from trtdiff.source.trt_ops import UnreadOp, standard_ops

    try:
        model, notes = standard_ops(model)
    except UnreadOp as error:
        raise OnnxFileError(f"{path}: {error}") from None
    return dataclasses.replace(graph_from_model(model, path), notes=notes) if notes else graph_from_model(model, path)


def graph_from_model(model: onnx.ModelProto, path: Path) -> GraphInfo:
    """Build a GraphInfo from an in-memory model (shape inference is best effort)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 -- inference is an aid only; a model it cannot handle is still comparable
        inferred = model
    graph = inferred.graph
    initializers = frozenset(init.name for init in graph.initializer)
    nodes = [_node_info(i, node) for i, node in enumerate(graph.node)]
    types: dict[str, TensorType] = {}
    for value in [*graph.value_info, *graph.input, *graph.output]:
        types[value.name] = _tensor_type(value)
    for init in graph.initializer:
        types[init.name] = TensorType(helper.tensor_dtype_to_np_dtype(init.data_type), tuple(init.dims))
    return GraphInfo(
        path=path,
        model=model,
        opset=opset_of(model),
        nodes=nodes,
        types=types,
        graph_inputs=tuple(v.name for v in graph.input if v.name not in initializers),
        graph_outputs=tuple(v.name for v in graph.output),
        initializers=initializers,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
    )


def typed_inputs(model: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose graph inputs take the element type and shape of the values fed to them.

    Shape inference alone leaves some inputs of a rewritten model untyped or typed wrongly
    (a value PyTorch holds squeezed, an input inside a decomposed op); TensorRT's parser needs
    the type and shape the runtime will really get.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        if value.name not in values:
            continue
        array = np.asarray(values[value.name])
        if array.dtype.kind not in "biuf":
            continue
        typed = helper.make_tensor_value_info(value.name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
        value.CopyFrom(typed)
    return copy


def opset_of(model: onnx.ModelProto) -> int:
    """The default-domain opset the file declares (what was actually written)."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise OnnxFileError("the ONNX model declares no default-domain opset; re-export it")


def _node_info(index: int, node: onnx.NodeProto) -> NodeInfo:
    name = node.name or f"{node.op_type}_{index}"
    pieces: tuple[str, ...] | None = None
    module_path: str | None = None
    meta = {p.key: p.value for p in node.metadata_props}
    if DYNAMO_SCOPES_KEY in meta:
        try:
            scopes = ast.literal_eval(meta[DYNAMO_SCOPES_KEY])
            module_path = str(scopes[-2]) if len(scopes) >= 2 else ""
        except (ValueError, SyntaxError, IndexError):
            module_path = None
    elif name.startswith("/"):
        # TorchScript exporter: "/backbone/layer1/conv1/Conv" -> scope pieces before the op name.
        pieces = tuple(name.split("/")[1:-1])
    return NodeInfo(
        index=index,
        name=name,
        op_type=node.op_type,
        domain=node.domain,
        inputs=tuple(node.input),
        outputs=tuple(node.output),
        scope_pieces=pieces,
        module_path=module_path,
        implicit=implicit_inputs(node),
    )


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held in `node`'s attributes (If's branches, Loop's and Scan's body)."""
    found: list[onnx.GraphProto] = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            found.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            found.extend(attribute.graphs)
    return found


def implicit_inputs(node: onnx.NodeProto) -> tuple[str, ...]:
    """The outer-scope tensors `node`'s subgraphs read (recursively), in first-use order.

    A name a subgraph defines itself (its inputs, initializers, node outputs) shadows the
    outer one and is not counted; an empty name is an omitted optional input.
    """
    names: dict[str, None] = {}
    for graph in subgraphs(node):
        names.update(dict.fromkeys(outer_names(graph)))
    return tuple(names)


def outer_names(graph: onnx.GraphProto) -> list[str]:
    """The names `graph` (a subgraph) reads from its enclosing scopes, in first-use order."""
    defined = {v.name for v in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}
    outer: list[str] = []
    for inner in graph.node:
        for name in (*inner.input, *implicit_inputs(inner)):
            if name and name not in defined and name not in outer:
                outer.append(name)
        defined.update(inner.output)
    outer += [v.name for v in graph.output if v.name not in defined and v.name not in outer]
    return outer


def _tensor_type(value: onnx.ValueInfoProto) -> TensorType:
    if not value.type.HasField("tensor_type"):
        return TensorType(None, None)
    tensor_type = value.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type) if tensor_type.elem_type else None
    shape = None
    if tensor_type.HasField("shape"):
        shape = tuple(_dim(d) for d in tensor_type.shape.dim)
    return TensorType(dtype, shape)


def _dim(dim: onnx.TensorShapeProto.Dimension) -> int | None:
    """A dimension's size: None when dynamic (a name, nothing, or -1 as some writers put it, which ONNX
    Runtime reads as dynamic too); 0 is a real size (an empty tensor)."""
    return dim.dim_value if dim.HasField("dim_value") and dim.dim_value >= 0 else None


_CALL_SUFFIX = re.compile(r"_\d+$")


def resolve_scope(pieces: Iterable[str], module_names: set[str]) -> str | None:
    """Map TorchScript-exporter scope pieces ("stem", "stem.0", "relu_1") to a module path."""
    current = ""
    for piece in pieces:
        found = _resolve_piece(current, piece, module_names)
        if found is None and _CALL_SUFFIX.search(piece):
            found = _resolve_piece(current, _CALL_SUFFIX.sub("", piece), module_names)
        if found is None:
            return None
        current = found
    return current


def _resolve_piece(current: str, piece: str, names: set[str]) -> str | None:
    direct = f"{current}.{piece}" if current else piece
    if direct in names:
        return direct
    parts = piece.split(".")
    for k in range(1, len(parts)):
        head, tail = ".".join(parts[:k]), ".".join(parts[k:])
        if current == head or current.endswith("." + head):
            candidate = f"{current}.{tail}"
            if candidate in names:
                return candidate
    below = [n for n in names if n.startswith(current + ".") and (n.endswith("." + piece))] if current else []
    return min(below, key=len) if below else None


def node_module(node: NodeInfo, module_names: set[str]) -> str | None:
    """The module path an ONNX node came from, from dynamo metadata or TorchScript names."""
    if node.module_path is not None:
        return node.module_path
    if node.scope_pieces is None:
        return None
    return resolve_scope(node.scope_pieces, module_names)


def dynamic_inputs(graph: GraphInfo) -> list[str]:
    """The graph inputs with a dynamic dimension (a name, nothing, or -1 where a size would be)."""
    inputs = [v for v in graph.model.graph.input if v.name in graph.graph_inputs]
    return [
        v.name
        for v in inputs
        if any(not d.HasField("dim_value") or d.dim_value < 0 for d in v.type.tensor_type.shape.dim)
    ]


def attributes(graph: GraphInfo, node: NodeInfo) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded)."""
    values = {}
    for attribute in graph.model.graph.node[node.index].attribute:
        value = helper.get_attribute_value(attribute)
        values[attribute.name] = value.decode() if isinstance(value, bytes) else value
    return values


def constant_values(graph: GraphInfo, names: set[str] | None = None) -> Mapping[str, np.ndarray]:
    """The values of the graph's constants (initializers, Constant nodes' outputs), those in `names` only where
    given. Each is converted when first read (`Constants`): asking whether a tensor is a constant, or reading a
    scale, never converts a model's weights."""
    return Constants(graph, names)


class Constants(Mapping[str, np.ndarray]):
    """A graph's constants by name, each converted to numpy on first read and kept (a real model's weights
    would be copied whole, once per caller, if all were converted up front)."""

    def __init__(self, graph: GraphInfo, names: set[str] | None = None) -> None:
        model = graph.model.graph
        self._protos: dict[str, Any] = {i.name: i for i in model.initializer if names is None or i.name in names}
        for node in model.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                if names is None or node.output[0] in names:
                    self._protos[node.output[0]] = node.attribute[0].t
        self._values: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._values:
            from onnx import numpy_helper

            self._values[name] = numpy_helper.to_array(self._protos[name])
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._protos

    def __iter__(self) -> Iterator[str]:
        return iter(self._protos)

    def __len__(self) -> int:
        return len(self._protos)
