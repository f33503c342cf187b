"""An ONNX graph whose declared types agree with what its nodes compute: the pass after every FP16 conversion.

A float16 converter decides each tensor's type by the op that reads or writes it and by name, not by
what flows: onnxconverter-common typed a `Cast(to=FLOAT)`'s output float16, typed an Identity of a weight
it kept in FP32 float16, and let attention read a present key/value after its Cast back to float32;
onnxruntime's converter appends its Casts after the nodes that read them. ONNX Runtime refuses such a
graph at load and the ONNX reference evaluator stops at the first node whose inputs disagree.

`make_consistent` walks the graph once in topological order (reordering the nodes where they are not),
carrying each tensor's element type from the graph inputs and initializers through ONNX's own type
inference of each node, and repairs where a node's inputs do not fit its schema: inputs that share a
type variable but differ in float type are Cast to float16 (every float16 input of a node kept in FP32 to
float32), and
a float16 input where the schema allows only float32 (Resize's scales, Range, QuantizeLinear's scale
before opset 19) is Cast to float32. Casts the conversion added that change nothing, or round a float32
value to float16 and back between two nodes kept in FP32, are dropped. Then each declared type is set to
what flows, and a graph output declared float32 that flows float16 is Cast back. `type_error` runs
ONNX's strict type inference: the check that the repaired graph is one every runtime accepts.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

import onnx
from onnx import TensorProto, defs, helper

FLOAT_TYPES: frozenset[int] = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})
_TYPE_NAMES: dict[int, str] = {TensorProto.FLOAT: "tensor(float)", TensorProto.FLOAT16: "tensor(float16)"}
_SUFFIX: dict[int, str] = {TensorProto.FLOAT: "fp32", TensorProto.FLOAT16: "fp16"}
_VARIADIC = defs.OpSchema.FormalParameterOption.Variadic


@dataclass(frozen=True)
class TypeRepairs:
    """What `make_consistent` changed: nodes moved into topological order, nodes given a Cast on an input,
    tensors whose declared type was corrected, and graph outputs Cast back to their declared type."""

    reordered: int = 0
    cast_inputs: tuple[str, ...] = ()
    retyped: tuple[str, ...] = ()
    cast_outputs: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.reordered or self.cast_inputs or self.retyped or self.cast_outputs)

    def sentence(self) -> str:
        """One clause for a report note ("" when nothing was repaired)."""
        parts = []
        if self.reordered:
            parts.append(f"{self.reordered} nodes put in topological order")
        if self.cast_inputs:
            parts.append(f"inputs Cast to one float type at {_names(self.cast_inputs)}")
        if self.retyped:
            parts.append(f"declared types corrected to what flows for {_names(self.retyped)}")
        if self.cast_outputs:
            parts.append(f"outputs {', '.join(self.cast_outputs)} Cast back to FP32")
        return "; ".join(parts)


def _names(names: tuple[str, ...], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def _outer_names(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read from the enclosing scope (If, Loop, Scan), at any depth."""
    used: set[str] = set()
    for graph in _subgraphs(node):
        made = {v.name for v in graph.input} | {i.name for i in graph.initializer}
        for inner in graph.node:
            used.update(name for name in inner.input if name not in made)
            used |= _outer_names(inner) - made
            made.update(inner.output)
        used.update(o.name for o in graph.output if o.name not in made)
    return used


def topological_order(graph: onnx.GraphProto) -> int:
    """Sort `graph`'s nodes so each comes after the nodes it reads (its subgraphs' outer reads included),
    keeping the given order wherever it already is one. Returns how many nodes moved."""
    nodes = list(graph.node)
    producer = {name: i for i, node in enumerate(nodes) for name in node.output if name}
    readers: list[list[int]] = [[] for _ in nodes]
    waiting = []
    for i, node in enumerate(nodes):
        sources = {producer[name] for name in {*node.input, *_outer_names(node)} if name in producer} - {i}
        waiting.append(len(sources))
        for source in sources:
            readers[source].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for reader in readers[i]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) < len(nodes):  # a cycle: no order exists, leave the graph as it is for the check to name
        return 0
    moved = sum(1 for position, i in enumerate(order) if position != i)
    if moved:
        del graph.node[:]
        graph.node.extend(nodes[i] for i in order)
    return moved


def _tensor(elem_type: int) -> onnx.TypeProto:
    proto = onnx.TypeProto()
    proto.tensor_type.elem_type = elem_type
    return proto


def _elem(proto: onnx.TypeProto | None) -> int | None:
    if proto is None or not proto.HasField("tensor_type") or not proto.tensor_type.elem_type:
        return None
    return int(proto.tensor_type.elem_type)


class _Walk:
    """The one pass over a graph in topological order: the types that flow, and the Casts added on the way."""

    def __init__(self, model: onnx.ModelProto, kept: Collection[str]) -> None:
        self.model, self.kept = model, kept
        graph = model.graph
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.declared = {v.name: v.type for v in [*graph.value_info, *graph.output]}
        self.types: dict[str, onnx.TypeProto] = {v.name: v.type for v in graph.input}
        self.types.update((i.name, _tensor(i.data_type)) for i in graph.initializer)
        self.taken = {*self.types, *(name for node in graph.node for name in node.output)}
        self.casts: dict[tuple[str, int], str] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.cast_inputs: list[str] = []

    def run(self) -> None:
        for node in self.model.graph.node:
            schema = self._schema(node)
            if schema is not None and not any(True for _ in _subgraphs(node)):
                self._fit_inputs(node, schema)
            self.nodes.append(node)
            self._infer_outputs(node, schema)

    def _schema(self, node: onnx.NodeProto) -> defs.OpSchema | None:
        domain = "" if node.domain == "ai.onnx" else node.domain
        try:
            return defs.get_schema(node.op_type, self.opsets.get(domain, 1), domain)
        except defs.SchemaError:
            return None  # an op ONNX does not define (a custom domain): its declared types are taken as they are

    def _cast(self, name: str, to: int) -> str:
        """The name of `name` Cast to `to`, adding the Cast (shared by every later reader) before the node."""
        if (name, to) not in self.casts:
            out = f"{name}_cast_to_{_SUFFIX[to]}"
            while out in self.taken:
                out += "_"
            self.taken.add(out)
            self.nodes.append(helper.make_node("Cast", [name], [out], name=out, to=to))
            self.types[out] = _tensor(to)
            self.casts[name, to] = out
        return self.casts[name, to]

    def _fit_inputs(self, node: onnx.NodeProto, schema: defs.OpSchema) -> None:
        params = list(schema.inputs)
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        bound: dict[str, list[int]] = {}
        changed = False
        for i, name in enumerate(node.input):
            if not name or not params or (i >= len(params) and params[-1].option != _VARIADIC):
                continue
            param = params[min(i, len(params) - 1)]
            elem = _elem(self.types.get(name))
            if param.type_str in allowed:
                if param.is_homogeneous or param.option != _VARIADIC:
                    bound.setdefault(param.type_str, []).append(i)
            elif elem == TensorProto.FLOAT16 and param.type_str == _TYPE_NAMES[TensorProto.FLOAT]:
                node.input[i], changed = self._cast(name, TensorProto.FLOAT), True
        for variable, indices in bound.items():
            elems = {e for i in indices if (e := _elem(self.types.get(node.input[i]))) is not None}
            if not elems or not elems <= FLOAT_TYPES:
                continue
            target: int
            if node.name in self.kept:
                target = TensorProto.FLOAT
            elif len(elems) == 1:
                (target,) = elems
            else:
                target = TensorProto.FLOAT16
            if _TYPE_NAMES[target] not in allowed[variable]:
                target = TensorProto.FLOAT  # the op has no float16 form at this opset: it computes in FP32
            for i in indices:
                name = node.input[i]
                if _elem(self.types.get(name)) not in (None, target):
                    node.input[i], changed = self._cast(name, target), True
        if changed:
            self.cast_inputs.append(node.name or node.op_type)

    def _infer_outputs(self, node: onnx.NodeProto, schema: defs.OpSchema | None) -> None:
        inferred: dict[str, onnx.TypeProto] = {}
        if schema is not None:
            nested = any(True for _ in _subgraphs(node))
            known = self.types if nested else {n: self.types[n] for n in node.input if n in self.types}
            try:
                inferred = onnx.shape_inference.infer_node_outputs(
                    schema, node, dict(known), opset_imports=list(self.model.opset_import)
                )
            except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, KeyError, RuntimeError):
                inferred = {}  # left to the declared types, and to the strict check after the pass
        for name in node.output:
            proto = inferred.get(name)
            if _elem(proto) is not None and proto is not None:
                self.types[name] = _tensor(proto.tensor_type.elem_type)
            elif name in self.declared:
                self.types[name] = self.declared[name]


def make_consistent(
    model: onnx.ModelProto,
    kept: Collection[str] = (),
    added: Callable[[onnx.NodeProto], bool] | None = None,
    names: Collection[str] = (),
) -> TypeRepairs:
    """Repair `model` in place so every declared type is what its node computes (module docstring).

    `kept`: the names of nodes that compute in FP32 (the converter's blocked nodes): their float16 inputs
    are Cast to float32; another node's inputs that disagree are Cast to float16. `added` tells the Casts
    a conversion added: those that change nothing (a Cast to the type that flows) or undo another
    (float32 to float16 and back, between two nodes kept in FP32) are dropped, their readers reading the
    value before them, unless they write one of `names` (the tensors the FP32 graph names, which the
    comparison reads).
    """
    graph = model.graph
    reordered = topological_order(graph)
    walk = _Walk(model, kept)
    walk.run()
    nodes = walk.nodes if added is None else _without_needless_casts(walk.nodes, walk.types, added, graph, names)
    del graph.node[:]
    graph.node.extend(nodes)
    written = {name for node in nodes for name in node.output}
    stale = [value for value in graph.value_info if value.name not in written]
    for value in stale:
        graph.value_info.remove(value)
    retyped = []
    for value in graph.value_info:
        flows, declared = _elem(walk.types.get(value.name)), _elem(value.type)
        if flows is not None and declared is not None and flows != declared:
            value.type.tensor_type.elem_type = flows
            retyped.append(value.name)
    cast_outputs = []
    for output in graph.output:
        flows, declared = _elem(walk.types.get(output.name)), _elem(output.type)
        if flows != declared and {flows, declared} <= FLOAT_TYPES and declared is not None:
            _cast_output_back(graph, output.name, declared)
            cast_outputs.append(output.name)
    return TypeRepairs(reordered, tuple(walk.cast_inputs), tuple(retyped), tuple(cast_outputs))


def cast_to(node: onnx.NodeProto) -> int | None:
    """The element type a Cast node casts to (None for any other node)."""
    return next((int(a.i) for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None


def _without_needless_casts(
    nodes: list[onnx.NodeProto],
    types: dict[str, onnx.TypeProto],
    added: Callable[[onnx.NodeProto], bool],
    graph: onnx.GraphProto,
    names: Collection[str],
) -> list[onnx.NodeProto]:
    """`nodes` without the added Casts that change nothing or undo an added Cast (`make_consistent`)."""
    protected = {*names, *(o.name for o in graph.output)}
    producer = {name: node for node in nodes for name in node.output}
    instead: dict[str, str] = {}

    def source(name: str) -> str:
        while name in instead:
            name = instead[name]
        return name

    for node in nodes:
        to = cast_to(node)
        if to is None or not added(node):
            continue
        read = source(node.input[0])
        before = producer.get(read)
        if _elem(types.get(read)) != to and before is not None and added(before) and to == TensorProto.FLOAT:
            if cast_to(before) == TensorProto.FLOAT16 and _elem(types.get(before.input[0])) == TensorProto.FLOAT:
                read = source(before.input[0])  # float32 to float16 and back: read the float32 value
        if _elem(types.get(read)) != to:
            continue
        if node.output[0] in protected:
            node.input[0] = read  # it writes a name the comparison reads: it stays, reading the value unrounded
        else:
            instead[node.output[0]] = read
    for node in nodes:
        node.input[:] = [source(name) if name else name for name in node.input]
    kept = [node for node in nodes if not (node.output and node.output[0] in instead)]
    while True:  # an added Cast nobody reads any more (its reader was dropped) goes too
        reads = {name for node in kept for name in [*node.input, *_outer_names(node)]} | protected
        unread = {id(n) for n in kept if cast_to(n) is not None and added(n) and not {*n.output} & reads}
        if not unread:
            return kept
        kept = [n for n in kept if id(n) not in unread]


def _cast_output_back(graph: onnx.GraphProto, name: str, to: int) -> None:
    """The node writing graph output `name` writes `name`_fp16 instead (its readers in the graph follow), and a
    Cast to `to` writes `name`."""
    flowing = f"{name}_{'fp16' if to == TensorProto.FLOAT else 'fp32'}"
    for node in graph.node:
        node.output[:] = [flowing if o == name else o for o in node.output]
        node.input[:] = [flowing if i == name else i for i in node.input]
    for value in graph.value_info:
        if value.name == name:
            value.name = flowing
    graph.node.append(helper.make_node("Cast", [flowing], [name], name=f"{name}_cast_back", to=to))


def type_error(model: onnx.ModelProto) -> str | None:
    """ONNX's strict type inference on `model`: None when it passes, else its first error line."""
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        return lines[1] if len(lines) > 1 and lines[0].endswith("Inference error(s):") else lines[0]
    return None


__all__ = ["FLOAT_TYPES", "TypeRepairs", "cast_to", "make_consistent", "topological_order", "type_error"]
