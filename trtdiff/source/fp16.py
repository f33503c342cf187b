"""Reduced precision as an ONNX graph states it: which precision a graph computes in, and FP16 conversion.

A graph's own types say its precision (`graph_precision`: a node writing float16 or bfloat16).
An FP32 graph is run in FP16 by converting it (`convert_to_fp16`): ONNX Runtime and the ONNX
reference evaluator when `--precision fp16` asks for it, and strongly typed TensorRT (TRT 11,
TensorRT-RTX), whose builders have no FP16 flag: a layer runs in FP16 only if the network says so.

The converter is onnxruntime's own, `onnxruntime.transformers.float16.convert_float_to_float16`
(`keep_io_types=True`, the nodes of `--keep-fp32` as its `node_block_list`), chosen by measurement
over onnxconverter-common's (issue 38; the table is in docs/compare.md): on 24 small exports of the
models users have, onnxconverter-common 1.16 wrote 9 graphs ONNX Runtime refused at load (every
TorchScript attention, whose scale is shape arithmetic Cast to float; a KV-cache decoder step; a
UNet's float timestep; a graph output read again inside; an Identity of a weight a kept node held in
FP32); onnxruntime's converter wrote none, and its graphs run in the ONNX reference evaluator once its
nodes are in topological order. It comes with onnxruntime, so FP16 needs no extra, and one converter
serves every ONNX backend, `--keep-fp32` and strongly typed TensorRT. It keeps its op block list
(Range, TopK, Min, Max, ... stay FP32 between Casts; Resize runs in FP16 with its scales FP32), Casts
to integer types as they are and every value name, so intermediates still compare by their ONNX
names. Weights are clamped to float16's own range (`FP16_MAX`, `FP16_TINY`).

Then: a node kept in FP32 writes its FP32 value under its own name (`_restore_kept_names`), a
Constant only FP32 nodes read keeps its FP32 value (`_keep_fp32_constants`), and
`graph_types.make_consistent` puts the nodes in topological order, makes every declared type what
flows (a Cast where a node's inputs disagree, outputs Cast back to FP32) and drops the Casts that
round an FP32 value to float16 and back between kept nodes. ONNX's strict type inference must then
accept the graph wherever it accepts the FP32 one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from trtdiff.errors import OptionError, param
from trtdiff.source.graph_types import TypeRepairs, cast_to, make_consistent, type_error

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo

CONVERTER = "onnxruntime.transformers.float16"
FP16_MAX = 65504.0
FP16_TINY = 2.0**-24
"""float16's largest finite value and smallest positive (subnormal) one: weights beyond them are clamped to them."""


@dataclass(frozen=True)
class Fp16Conversion:
    """The converted model and what the conversion did (`repairs`: what graph_types.make_consistent changed)."""

    model: onnx.ModelProto
    converter: str
    kept_fp32_ops: tuple[str, ...]
    repairs: TypeRepairs = field(default_factory=TypeRepairs)
    clamped_weights: int = 0
    kept_nodes: tuple[str, ...] = ()

    def note(self, converted: str) -> str:
        """The report's line on this conversion; `converted` says what was converted and why."""
        kept = ", ".join(self.kept_fp32_ops) or "none"
        nodes = f"; nodes kept FP32 (keep_fp32): {', '.join(self.kept_nodes)}" if self.kept_nodes else ""
        repaired = f"; repaired: {self.repairs.sentence()}" if self.repairs else ""
        if self.clamped_weights:
            repaired += (
                f"; {self.clamped_weights} weights moved into float16's range [{FP16_TINY:.3g}, {FP16_MAX:g}] "
                "in magnitude"
            )
        return (
            f"fp16: {converted} with {self.converter} convert_float_to_float16(keep_io_types=True); "
            f"node types kept FP32: {kept}{nodes}{repaired}"
        )


GraphPrecision = Literal["fp32", "fp16", "bf16"]
_REDUCED_TYPES: dict[str, GraphPrecision] = {"float16": "fp16", "bfloat16": "bf16"}


def graph_precision(graph: GraphInfo) -> GraphPrecision:
    """The precision `graph` computes in by its own types: "fp16" (or "bf16") when a node writes
    float16 (bfloat16) values, else "fp32". An FP32 graph with a few float16 constants cast up stays "fp32"."""
    for node in graph.nodes:
        for tensor in node.outputs:
            dtype = graph.tensor_type(tensor).dtype
            if dtype is not None and dtype.name in _REDUCED_TYPES:
                return _REDUCED_TYPES[dtype.name]
    return "fp32"


def _float16_module() -> ModuleType:
    """onnxruntime's converter module (it ships with every onnxruntime and onnxruntime-gpu wheel).

    Importing `onnxruntime.transformers` appends that folder to sys.path, which its other modules (those
    `onnxruntime.quantization` imports among them) need; it stays as onnxruntime leaves it."""
    try:
        from onnxruntime.transformers import float16
    except ImportError as error:
        raise OptionError(
            f"{param('precision')} fp16 converts the FP32 graph with {CONVERTER}, which this onnxruntime lacks: "
            "reinstall onnxruntime (or onnxruntime-gpu) 1.18 or newer"
        ) from error
    module: ModuleType = float16
    return module


def convert_to_fp16(model: onnx.ModelProto, keep: Sequence[str] = ()) -> Fp16Conversion:
    """Convert float32 weights and values to float16, keeping graph inputs/outputs float32, and the nodes
    named in `keep` in float32 (the converter's node_block_list); `model` itself is left as it is.

    Raises OptionError when the converted graph's types still disagree where the FP32 graph's agree.
    """
    float16 = _float16_module()
    import onnxruntime

    out_of_range = _out_of_fp16_range(model)
    converted = float16.convert_float_to_float16(
        model,  # shape inference first makes the converter's own copy
        keep_io_types=True,
        node_block_list=list(keep),
        min_positive_val=FP16_TINY,
        max_finite_val=FP16_MAX,
    )
    blocked = set(float16.DEFAULT_OP_BLOCK_LIST)
    kept = {n.name for n in converted.graph.node if n.op_type in blocked} | set(keep)
    names = {name for node in model.graph.node for name in node.output}
    added = _added_by(model)
    _restore_kept_names(converted.graph, names, added)
    _keep_fp32_constants(model, converted, added)
    repairs = make_consistent(converted, kept, added, names)
    _unique_node_names(converted.graph)
    error = type_error(converted)
    if error is not None and type_error(model) is None:
        raise OptionError(
            f"{param('precision')} fp16: the graph {CONVERTER} converted has types that disagree ({error}); keep "
            f"that node in FP32 ({param('keep_fp32')} NODE), or convert the file yourself (e.g. ModelOpt AutoCast) "
            f"and give it with {param('onnx')}"
        )
    clamped = sum(1 for t in _weights(converted) if t.name in out_of_range and t.data_type == TensorProto.FLOAT16)
    present = {node.op_type for node in model.graph.node}
    converter = f"{CONVERTER} (onnxruntime {onnxruntime.__version__})"
    return Fp16Conversion(converted, converter, tuple(sorted(present & blocked)), repairs, clamped, tuple(keep))


def _added_by(original: onnx.ModelProto) -> Callable[[onnx.NodeProto], bool]:
    """Whether a node of the converted graph is a Cast the conversion added (the converter names every Cast it
    adds; an original node keeps its name, and an unnamed one stays unnamed)."""
    names = {node.name for node in original.graph.node}
    return lambda node: node.op_type == "Cast" and bool(node.name) and node.name not in names


def _restore_kept_names(graph: onnx.GraphProto, names: set[str], added: Callable[[onnx.NodeProto], bool]) -> None:
    """A node kept in FP32 writes its FP32 value under its own name again, the Cast after it the float16 copy.

    The converter renames a kept node's output (`X` becomes `X_cast_to_fp16`, in float32) and gives the name to
    the float16 Cast after it; swapped back, the comparison reads the value the node computes, as the FP32
    graph names it, and the names say what each holds.
    """
    producer = {name: node for node in graph.node for name in node.output}
    swap: dict[str, str] = {}
    for node in graph.node:
        if cast_to(node) != TensorProto.FLOAT16 or not added(node):
            continue
        value, name = node.input[0], node.output[0]
        writer = producer.get(value)
        if name in names and value not in names and writer is not None and not added(writer):
            swap[value], swap[name] = name, value
    if not swap:
        return
    for node in graph.node:
        node.input[:] = [swap.get(name, name) for name in node.input]
        node.output[:] = [swap.get(name, name) for name in node.output]
    for info in graph.value_info:
        info.name = swap.get(info.name, info.name)


def _unique_node_names(graph: onnx.GraphProto) -> None:
    """A node repeated whole (the same name, op, inputs, outputs and attributes as an earlier one) is dropped, and
    a node named as an earlier one gets a suffix: ONNX Runtime refuses a graph with two nodes of one name or two
    definitions of one value, and the conversion can write a Cast twice (smp's DeepLabV3+ ResNet-101 on the H200
    host, its overflowing nodes kept in FP32 for the exclusion check: "two nodes with same node name
    (.../relu_2/Relu_output_0_cast_to_fp32_node)"). A node's name only labels it."""
    seen: set[bytes] = set()
    repeated = []
    for index, node in enumerate(graph.node):
        whole = node.SerializeToString(deterministic=True)
        if whole in seen:
            repeated.append(index)
        seen.add(whole)
    for index in reversed(repeated):
        del graph.node[index]
    taken = {node.name for node in graph.node}
    named: set[str] = set()
    for node in graph.node:
        if node.name and node.name in named:
            number = 2
            while f"{node.name}_{number}" in taken:
                number += 1
            node.name = f"{node.name}_{number}"
            taken.add(node.name)
        named.add(node.name)


def _keep_fp32_constants(
    original: onnx.ModelProto, converted: onnx.ModelProto, added: Callable[[onnx.NodeProto], bool]
) -> None:
    """A Constant only nodes kept in FP32 read (through the converter's Casts to float32) keeps its float32 value.

    The converter tracks initializers so, but converts every Constant node: a divisor of 65536 read by a kept
    Div became 65504, float16's largest value."""
    values = {n.output[0]: n.attribute for n in original.graph.node if n.op_type == "Constant" and n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in converted.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    restored = set()
    for node in converted.graph.node:
        name = node.output[0] if node.op_type == "Constant" and node.output else ""
        was = next((a.t for a in values.get(name, ()) if a.name == "value"), None)
        if was is None or was.data_type != TensorProto.FLOAT or not readers.get(name):
            continue
        if all(cast_to(r) == TensorProto.FLOAT and added(r) for r in readers[name]):
            for attribute in node.attribute:
                if attribute.name == "value":
                    attribute.t.CopyFrom(was)
            restored.add(name)
    for info in converted.graph.value_info:
        if info.name in restored:
            info.type.tensor_type.elem_type = TensorProto.FLOAT


def _weights(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """The graph's initializers and its Constant nodes' values (each named as the value it writes)."""
    tensors = list(model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for attribute in node.attribute:
                if attribute.name == "value":
                    tensor = onnx.TensorProto()
                    tensor.CopyFrom(attribute.t)
                    tensor.name = node.output[0]
                    tensors.append(tensor)
    return tensors


def _out_of_fp16_range(model: onnx.ModelProto) -> set[str]:
    """The float32 weights holding a finite nonzero value beyond float16's range (clamped when converted)."""
    names = set()
    for tensor in _weights(model):
        if tensor.data_type != TensorProto.FLOAT or tensor.data_location == TensorProto.EXTERNAL:
            continue
        values = np.abs(numpy_helper.to_array(tensor))
        finite = values[np.isfinite(values) & (values > 0)]
        if finite.size and (finite.max() > FP16_MAX or finite.min() < FP16_TINY):
            names.add(tensor.name)
    return names


def run_precision(asked: GraphPrecision, graph: GraphInfo | None) -> GraphPrecision:
    """The precision a comparison runs in: the graph's own where its types are reduced, else `asked`.

    `graph`: the ONNX file given (None: one exported now, FP32). A reduced graph asked for
    another reduced precision, and BF16 asked of an FP32 graph (no converter here writes a BF16
    graph), are refused, naming what to give instead.
    """
    own = graph_precision(graph) if graph is not None else "fp32"
    name = graph.path.name if graph is not None else "the exported graph"
    if own != "fp32":
        if asked not in ("fp32", own):
            raise OptionError(
                f"{name} computes in {own} by its own types; drop {param('precision')} {asked} or give the FP32 "
                "ONNX file",
                parameter="precision",
                value=asked,
            )
        return own
    if asked == "bf16":
        raise OptionError(
            f"{name} is an FP32 graph and no converter here writes a BF16 one; give a BF16 ONNX file with "
            f"{param('onnx')} (e.g. ModelOpt AutoCast's low_precision_type='bf16') or use fp16",
            parameter="precision",
            value=asked,
        )
    return asked


def in_precision(
    graph: GraphInfo, precision: GraphPrecision, folder: Path, keep: Sequence[str] = ()
) -> tuple[GraphInfo, list[str]]:
    """The graph the ONNX backends run in `precision` (`run_precision`), and notes.

    An FP32 graph run in FP16 is converted (`convert_to_fp16`, saved in `folder`), the nodes
    named in `keep` left in FP32; a graph whose own types are reduced runs as it is.
    """
    if precision != "fp16" or graph_precision(graph) == "fp16":
        if keep:
            raise OptionError(
                f"nodes are kept in FP32 only when trtdiff converts an FP32 graph with {param('precision')} fp16",
                parameter="keep_fp32",
                value=",".join(keep),
            )
        return graph, []
    unknown = sorted(set(keep) - {node.name for node in graph.nodes})
    if unknown:
        raise OptionError(
            f"no node of {graph.path.name} is named {unknown[0]!r}; give the ONNX node names a culprit names",
            parameter="keep_fp32",
            value=",".join(keep),
        )
    from trtdiff.source.onnx_graph import graph_from_model

    conversion = convert_to_fp16(graph.model, keep)
    path = folder / f"{graph.path.stem}.fp16.onnx"
    onnx.save(conversion.model, str(path))
    note = conversion.note("the ONNX graph every ONNX backend runs was converted")
    return graph_from_model(conversion.model, path), [note]
