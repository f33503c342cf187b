"""Rewrite an ONNX graph so each compared node can run alone on the reference's values.

A *shadow* model holds one copy of every compared node whose inputs are fed from outside:
the reference's value where the reference has one, the exact value (from the original
graph's run) for shape arithmetic and other non-float tensors, the initializers and
Constant nodes as they are. Where a float input has no reference value (inside a
decomposed op), the node that makes it is copied too, recursively: the smallest subgraph
whose float inputs all have a reference value; a DequantizeLinear's QuantizeLinear is copied with
it the same way (its integer output is the pair's own, not the original run's). Run once, the shadow model gives every
node's *local* output; the same rewriting injects the reference's values into the full
graph (`inject`), for attribution.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtdiff.source.onnx_graph import GraphInfo, implicit_inputs, subgraphs

PREFIX = "trtdiff.local/"


def local_name(tensor: str) -> str:
    """The shadow model's output that holds `tensor` computed from the reference's inputs."""
    return PREFIX + tensor


@dataclass(frozen=True)
class ShadowModel:
    """The rewritten model, what it must be fed, and which nodes each local output ran.

    `reference_inputs` take the reference's values, `exact_inputs` the original graph's own
    (shape arithmetic, integer tensors); `outputs` maps each compared tensor to its shadow
    output; `subgraphs` to the ONNX node names run for it (the node itself first).
    """

    model: onnx.ModelProto
    reference_inputs: tuple[str, ...]
    exact_inputs: tuple[str, ...]
    outputs: dict[str, str]
    subgraphs: dict[str, tuple[str, ...]]


def build_shadow(graph: GraphInfo, tensors: Iterable[str], has_reference: Callable[[str], bool]) -> ShadowModel:
    """A shadow model computing each of `tensors` from the reference's values of its node's inputs."""
    builder = _Builder(graph, has_reference)
    outputs: dict[str, str] = {}
    subgraphs: dict[str, tuple[str, ...]] = {}
    for tensor in tensors:
        index = graph.producer_of.get(tensor)
        if index is None:
            continue
        subgraphs[tensor] = builder.shadow(index)
        outputs[tensor] = local_name(tensor)
    return ShadowModel(
        builder.model(outputs.values()), tuple(builder.reference), tuple(builder.exact), outputs, subgraphs
    )


def embed(shadow: ShadowModel, values: Mapping[str, np.ndarray]) -> ShadowModel:
    """`shadow` with its exact inputs (shape arithmetic, integer tensors) written in as constants.

    They are the same for every backend, and TensorRT takes a shape tensor as a constant
    where it would need an optimization profile of values as an input.
    """
    model = onnx.ModelProto()
    model.CopyFrom(shadow.model)
    exact = set(shadow.exact_inputs)
    kept = [value for value in model.graph.input if value.name not in exact]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(values[name]), name) for name in shadow.exact_inputs
    )
    return dataclasses.replace(shadow, model=model, exact_inputs=())


def submodel(shadow: ShadowModel, tensor: str, graph: GraphInfo) -> onnx.ModelProto:
    """The part of `shadow` that computes `tensor` alone (its subgraph), for the spec evaluator."""
    names = set(shadow.subgraphs[tensor])
    wanted = [n for n in shadow.model.graph.node if n.name.removeprefix(PREFIX) in names or n.op_type == "Constant"]
    used = {t for node in wanted for t in (*node.input, *implicit_inputs(node))}
    model = onnx.ModelProto()
    model.CopyFrom(shadow.model)
    del model.graph.node[:]
    model.graph.node.extend(n for n in wanted if n.op_type != "Constant" or set(n.output) & used)
    inputs = [value for value in shadow.model.graph.input if value.name in used]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    initializers = [init for init in shadow.model.graph.initializer if init.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    del model.graph.output[:]
    model.graph.output.extend([_value_info(graph, tensor, shadow.outputs[tensor])])
    return model


def as_onnx(graph: GraphInfo, tensor: str, value: np.ndarray, *, split: bool = True) -> np.ndarray:
    """`value` in the ONNX tensor's dtype and static shape, to feed where the graph computes `tensor`.

    PyTorch may hold a squeezed view, and a reduced-precision graph's tensors are float16 where
    the reference's are float32 or float64 (a value past float16's range becomes inf there, as
    it would in the graph: no warning). `split`: a large cast in parts on the comparing threads (`cast`).
    """
    tensor_type = graph.tensor_type(tensor)
    value = np.asarray(value)
    if tensor_type.dtype is not None and value.dtype != tensor_type.dtype:
        value = cast(value, tensor_type.dtype, split=split)
    shape = tensor_type.shape
    if shape is not None and None not in shape and tuple(shape) != value.shape:
        static = tuple(d for d in shape if d is not None)
        if int(np.prod(static, dtype=np.int64)) == value.size:
            value = value.reshape(static)
    return value


_PARALLEL_FROM = 1 << 22  # elements from which a cast is split over the comparing threads


def each_as_onnx(graph: GraphInfo, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`as_onnx` of every value: float32 to float16 one after another (each on torch's threads, which must not be
    started from the comparing threads: `cast`), any other cast (bfloat16) several at once on the comparing
    threads, numpy's casts releasing the GIL. (numpy's float16 casts on one thread took 2.8 s for the feeds of
    an FP16 LRASPP (MobileNetV3) at 512x512 on the H200 host: 195 tensors mostly under a million values.)"""
    halves = [t for t, v in values.items() if _halves(np.asarray(v).dtype, graph.tensor_type(t).dtype)]
    fed = {tensor: as_onnx(graph, tensor, values[tensor]) for tensor in halves}
    others = [t for t in values if t not in fed]
    fed.update(in_parallel(lambda tensor: as_onnx(graph, tensor, values[tensor], split=False), others))
    return {tensor: fed[tensor] for tensor in values}


def _halves(dtype: np.dtype, to: np.dtype | None) -> bool:
    """Whether a cast from `dtype` to `to` is between float32 and float16 (analysis.metrics.half_cast)."""
    return to is not None and {dtype, to} == {np.dtype(np.float16), np.dtype(np.float32)}


def in_parallel(function: Callable[[str], np.ndarray], names: Iterable[str]) -> dict[str, np.ndarray]:
    """`function(name)` of each name, on the comparing threads, in the order given. `function` must not use those
    threads itself (a `cast` with `split`): waiting on the pool from inside it could wait forever."""
    from trtdiff.analysis.metrics import executor

    listed = list(names)
    return dict(zip(listed, executor().map(function, listed), strict=True))


def cast(value: np.ndarray, dtype: np.dtype, *, split: bool = True) -> np.ndarray:
    """`value` as `dtype`, rounded to nearest (ties to even) in one step (float64 to float16 directly, never
    through float32), past the type's range to inf without a warning; `value` itself where it has `dtype`.

    float32 to float16 and back, the feeds of every FP16 node alone, go through analysis.metrics.half_cast
    (narrowing on torch's threads: not to be called from the comparing threads); other casts through numpy,
    a large contiguous array in parts on the comparing threads (`split`; numpy releases the GIL in a cast).
    """
    if value.dtype == dtype:
        return value
    if _halves(value.dtype, dtype):
        from trtdiff.analysis.metrics import half_cast

        return half_cast(value, dtype, split=split)
    with np.errstate(over="ignore"):
        if not split or value.size < _PARALLEL_FROM or not value.flags.c_contiguous:
            return value.astype(dtype)
        from trtdiff.analysis.metrics import in_parts

        out = np.empty(value.shape, dtype=dtype)
        flat, into = value.reshape(-1), out.reshape(-1)

        def part(start: int, stop: int) -> None:
            with np.errstate(over="ignore"):
                np.copyto(into[start:stop], flat[start:stop], casting="unsafe")

        in_parts(part, value.size, _PARALLEL_FROM // 4)
        return out


def inject(graph: GraphInfo, tensors: Sequence[str]) -> onnx.ModelProto:
    """The full model with `tensors` fed from outside (as graph inputs) instead of computed."""
    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    replaced = set(tensors)
    for node in model.graph.node:
        for i, output in enumerate(node.output):
            if output in replaced:
                node.output[i] = output + "/trtdiff.replaced"
    # Rank and type only: the injected value is the reference's, whose shape the graph may not have written
    # (a dimension baked at export); a runtime that needs the sizes takes them from the feeds
    # (source.onnx_graph.typed_inputs).
    model.graph.input.extend(_value_info(graph, t, t, sized=False) for t in tensors)
    kept = [v for v in model.graph.value_info if v.name not in replaced]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    return model


class _Builder:
    """Collects shadow nodes, their inputs and the initializers they use."""

    def __init__(self, graph: GraphInfo, has_reference: Callable[[str], bool]) -> None:
        self.graph = graph
        self.has_reference = has_reference
        self.nodes: dict[int, onnx.NodeProto] = {}
        self.constants: dict[int, onnx.NodeProto] = {}
        self.subgraph: dict[int, tuple[str, ...]] = {}
        self.reference: list[str] = []
        self.exact: list[str] = []
        self.initializers: set[str] = set()

    def shadow(self, index: int) -> tuple[str, ...]:
        """Copy node `index` (and the unreferenced float producers it needs); the node names run."""
        if index in self.subgraph:
            return self.subgraph[index]
        original = self.graph.model.graph.node[index]
        copy = onnx.NodeProto()
        copy.CopyFrom(original)
        name = self.graph.nodes[index].name
        copy.name = PREFIX + name
        del copy.output[:]
        copy.output.extend(local_name(o) if o else "" for o in original.output)
        del copy.input[:]
        names: list[str] = [name]
        for tensor in original.input:
            source, pulled = self._source(tensor)
            copy.input.append(source)
            names += [n for n in pulled if n not in names]
        renamed: dict[str, str] = {}
        for tensor in self.graph.nodes[index].implicit:  # what an If branch or a Loop body reads from outside
            source, pulled = self._source(tensor)
            if source != tensor:
                renamed[tensor] = source
            names += [n for n in pulled if n not in names]
        if renamed:
            rename_outer(copy, renamed)
        self.nodes[index] = copy
        self.subgraph[index] = tuple(names)
        return self.subgraph[index]

    def _source(self, tensor: str) -> tuple[str, tuple[str, ...]]:
        """Where a shadow node reads `tensor` from, and the extra nodes that costs."""
        graph = self.graph
        if not tensor or tensor in graph.initializers:
            self.initializers.add(tensor)
            return tensor, ()
        producer = graph.producer_of.get(tensor)
        if producer is not None and graph.nodes[producer].op_type == "Constant":
            self.constants[producer] = graph.model.graph.node[producer]
            return tensor, ()
        is_data = tensor in graph.data_tensors
        if tensor in graph.graph_inputs or (is_data and self.has_reference(tensor)):
            _add(self.reference, tensor)
            return tensor, ()
        quantized = producer is not None and graph.nodes[producer].op_type == "QuantizeLinear"
        if producer is None or (not quantized and (not is_data or not graph.tensor_type(tensor).is_float)):
            _add(self.exact, tensor)  # shape arithmetic and integer tensors: the same on every backend
            return tensor, ()
        return local_name(tensor), self.shadow(producer)

    def model(self, outputs: Iterable[str]) -> onnx.ModelProto:
        source = self.graph.model
        graph = helper.make_graph(
            [*self.constants.values(), *(self.nodes[i] for i in sorted(self.nodes))],
            f"{source.graph.name or 'model'}-shadow",
            [_value_info(self.graph, t, t) for t in (*self.reference, *self.exact)],
            [_value_info(self.graph, t.removeprefix(PREFIX), t) for t in outputs],
            initializer=[init for init in source.graph.initializer if init.name in self.initializers],
        )
        model = helper.make_model(graph, opset_imports=list(source.opset_import), producer_name="trtdiff")
        model.ir_version = source.ir_version
        return model


def rename_outer(node: onnx.NodeProto, renamed: Mapping[str, str]) -> None:
    """Rename, inside `node`'s subgraphs (recursively), the outer-scope names of `renamed`.

    A name a subgraph defines itself shadows the outer one from there on and is left alone.
    """
    for graph in subgraphs(node):
        defined = {v.name for v in graph.input} | {i.name for i in graph.initializer}
        for inner in graph.node:
            outer = {k: v for k, v in renamed.items() if k not in defined}
            for i, name in enumerate(inner.input):
                if name in outer:
                    inner.input[i] = outer[name]
            if outer:
                rename_outer(inner, outer)
            defined.update(inner.output)
        for value in graph.output:
            if value.name in renamed and value.name not in defined:
                value.name = renamed[value.name]


def unprefix_subgraphs(node: onnx.NodeProto) -> None:
    """Take the shadow prefix off the outer names `node`'s subgraphs read (what `rename_outer` put there)."""
    for graph in subgraphs(node):
        for inner in graph.node:
            for i, name in enumerate(inner.input):
                inner.input[i] = name.removeprefix(PREFIX)
            unprefix_subgraphs(inner)
        for value in graph.output:
            value.name = value.name.removeprefix(PREFIX)


def _value_info(graph: GraphInfo, tensor: str, name: str, *, sized: bool = True) -> onnx.ValueInfoProto:
    """A value info for `name` with `tensor`'s element type and shape where known (without `sized`: its rank)."""
    tensor_type = graph.tensor_type(tensor)
    if tensor_type.dtype is None:
        return onnx.ValueInfoProto(name=name)
    elem = helper.np_dtype_to_tensor_dtype(tensor_type.dtype)
    shape = None if tensor_type.shape is None else [d if sized else None for d in tensor_type.shape]
    return helper.make_tensor_value_info(name, elem, shape)


def _add(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)
