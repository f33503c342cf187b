"""Which TensorRT tensors become engine outputs, which cannot, and their ONNX names.

Modes: `all` marks every layer output TensorRT allows as an output (this disables fusion
and changes memory reuse, so it can hide or create errors: NVIDIA/TensorRT #1961, #3258);
`unfused` keeps fusion and asks the engine to report whatever survives it as debug tensors
(`mark_unfused_tensors_as_debug_tensors`, TRT 10.12+/RTX); `none` keeps the final outputs.

Names: the ONNX parser keeps each ONNX value name (adding `_N` on a clash) and names layers
after ONNX nodes; `parser.get_layer_output_tensor(node, i)` is the authoritative map.

Sizes: each marked tensor's bytes come from its ONNX value type, else TensorRT's static shape;
slicing.py cuts the marks into slices that fit the mark budget, one engine each.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from trtdiff.errors import OptionError, param
from trtdiff.options import OUTPUT_MODES

if TYPE_CHECKING:
    from trtdiff.options import OutputsMode

REASON_INPUT = "network input: TensorRT cannot mark a network input as an output (it is the feed itself)"
REASON_CONTROL = "inside a loop or conditional body: TensorRT cannot mark such a tensor as a network output"
REASON_CONSTANT = "constant/weights: TensorRT keeps it as weights of a constant layer, not a computed output"
REASON_SHAPE = "shape tensor: TensorRT computes it on the host as a shape; only execution tensors are returned"
REASON_BOOL = (
    "bool tensor: marking bool tensors broke mark-all builds in TensorRT (NVIDIA/TensorRT #1698, #3592, "
    "#3596), so it is left unmarked; mark_bool=True marks it"
)
REASON_DTYPE = "type {dtype} has no numpy equivalent, so it cannot be returned for comparison"
REASON_NO_TENSOR = "no TensorRT tensor: the parser folded it into weights or constants"

# Layer types that open and close ILoop/IIfConditional regions in a parsed network (Polygraphy's rule).
_REGION_START = ("TRIP_LIMIT", "ITERATOR", "RECURRENCE", "CONDITION", "CONDITIONAL_INPUT")
_REGION_END = ("LOOP_OUTPUT", "CONDITIONAL_OUTPUT")
RETURNABLE_TYPES = ("FLOAT", "HALF", "BF16", "INT8", "INT32", "INT64", "BOOL", "UINT8")
_ITEMSIZE = {"FLOAT": 4, "HALF": 2, "BF16": 2, "INT8": 1, "INT32": 4, "INT64": 8, "BOOL": 1, "UINT8": 1}

TRT_API = (
    "INetworkDefinition.num_layers",
    "INetworkDefinition.get_layer",
    "INetworkDefinition.mark_output",
    "INetworkDefinition.num_inputs",
    "INetworkDefinition.get_input",
    "ILayer.name",
    "ILayer.type",
    "ILayer.num_outputs",
    "ILayer.get_output",
    "ILayer.metadata",
    "ITensor.name",
    "ITensor.dtype",
    "ITensor.is_network_input",
    "ITensor.is_network_output",
    "ITensor.is_shape_tensor",
    "ITensor.shape",
    "LayerType.CONSTANT",
    "LayerType.SHAPE",
    *(f"LayerType.{t}" for t in _REGION_START + _REGION_END),
    *(f"DataType.{t}" for t in RETURNABLE_TYPES),
)
TRT_OPTIONAL_API = ("OnnxParser.get_layer_output_tensor", "INetworkDefinition.mark_unfused_tensors_as_debug_tensors")


@dataclass(frozen=True)
class SkippedTensor:
    """A tensor that is not returned, and why."""

    trt_name: str | None
    onnx_name: str | None
    layer: str | None
    reason: str


@dataclass(frozen=True)
class MarkPlan:
    """What the engine will return: marked TensorRT tensors, skipped ones, ONNX -> TensorRT names."""

    mode: OutputsMode
    marked: tuple[str, ...]
    skipped: tuple[SkippedTensor, ...]
    onnx_to_trt: Mapping[str, str] = field(default_factory=dict)
    debug_unfused: bool = False
    notes: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()  # the network's own outputs among `marked` (every engine has them)
    sizes: Mapping[str, int | None] = field(default_factory=dict)  # bytes per marked tensor, None: unknown
    slices: tuple[tuple[str, ...], ...] = ()  # when split: the extra marks of each engine, in order
    budget_bytes: int | None = None
    tensor_names: frozenset[str] = frozenset()  # every tensor of the parsed network

    @cached_property
    def trt_to_onnx(self) -> dict[str, str]:
        return {trt_name: onnx_name for onnx_name, trt_name in self.onnx_to_trt.items()}

    def extra_marks(self) -> tuple[str, ...]:
        """Marked tensors that are not the network's own outputs (what marking added)."""
        outputs = set(self.outputs)
        return tuple(t for t in self.marked if t not in outputs)

    def engine_marks(self) -> tuple[tuple[str, ...], ...]:
        """The extra marks of each engine: the slices, or one engine marking them all."""
        return self.slices or (self.extra_marks(),)

    def owner_of(self) -> dict[str, int]:
        """ONNX name -> the engine that returns it, for extra marks (network outputs: any engine)."""
        reverse = self.trt_to_onnx
        return {reverse[t]: index for index, part in enumerate(self.slices) for t in part if t in reverse}

    def marked_bytes(self) -> int:
        """Bytes of device memory the marked tensors take (unknown sizes count as the largest known)."""
        sizes = _known_sizes(self)
        return sum(sizes[t] for t in self.marked)

    def returned_onnx(self) -> tuple[str, ...]:
        """ONNX names whose tensors are marked outputs (what `all`/`none` engines return)."""
        reverse = self.trt_to_onnx
        return tuple(reverse[t] for t in self.marked if t in reverse)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "marked": list(self.marked),
            "skipped": [vars(s).copy() for s in self.skipped],
            "onnx_to_trt": dict(self.onnx_to_trt),
            "debug_unfused": self.debug_unfused,
            "notes": list(self.notes),
            "outputs": list(self.outputs),
            "slices": [list(part) for part in self.slices],
            "budget_bytes": self.budget_bytes,
            "marked_bytes": self.marked_bytes(),
        }


def mark_network(
    trt: ModuleType,
    network: Any,
    parser: Any,
    model: onnx.ModelProto,
    mode: OutputsMode,
    *,
    mark_bool: bool = False,
    sizes: Mapping[str, int | None] | None = None,
) -> MarkPlan:
    """Mark outputs on a parsed `network` according to `mode` and return the plan.

    `sizes`: bytes per ONNX value where the ONNX types tell (what the mark budget counts).
    """
    if mode not in OUTPUT_MODES:
        raise OptionError(f"unknown; choose one of {', '.join(OUTPUT_MODES)}", parameter="outputs", value=mode)
    onnx_to_trt = map_onnx_names(parser, network, model)
    reverse = {t: o for o, t in onnx_to_trt.items()}
    sub_nodes, sub_values = subgraph_names(model)
    marked: list[str] = []
    outputs: list[str] = []
    skipped: list[SkippedTensor] = []
    returnable = {getattr(trt.DataType, t) for t in RETURNABLE_TYPES if hasattr(trt.DataType, t)}
    tensor_sizes: dict[str, int | None] = {}
    for layer, nested in _nested_layers(trt, network, sub_nodes):
        for tensor in _outputs(layer):
            reason = _skip_reason(trt, layer, tensor, nested, mark_bool, returnable)
            if tensor.is_network_output and reason is None:
                outputs.append(tensor.name)
            elif mode != "all":
                continue
            elif reason is not None:
                onnx_name = reverse.get(tensor.name) or (tensor.name if tensor.name in sub_values else None)
                skipped.append(SkippedTensor(tensor.name, onnx_name, layer.name, reason))
                continue
            else:
                network.mark_output(tensor)
            marked.append(tensor.name)
            tensor_sizes[tensor.name] = _tensor_bytes(tensor, (sizes or {}).get(reverse.get(tensor.name, "")))
    notes: list[str] = []
    debug_unfused = _mark_unfused(network, notes) if mode == "unfused" else False
    if mode == "all":
        notes.append(
            f"all: {len(marked)} tensors marked as outputs; marking disables fusion and changes memory reuse, "
            "so a difference may hide or appear only in this mode"
        )
    names = frozenset(t.name for layer in _layers(network) for t in _outputs(layer))
    return MarkPlan(
        mode,
        tuple(marked),
        (*skipped, *_onnx_only_skips(network, model, onnx_to_trt)),
        onnx_to_trt,
        debug_unfused,
        tuple(notes),
        tuple(outputs),
        tensor_sizes,
        tensor_names=names,
    )


def _nested_layers(trt: ModuleType, network: Any, sub_nodes: frozenset[str]) -> Iterator[tuple[Any, bool]]:
    """Each layer, and whether it lies inside a loop or conditional body (Polygraphy's rule, or ONNX's bodies)."""
    starts = {getattr(trt.LayerType, t) for t in _REGION_START if hasattr(trt.LayerType, t)}
    ends = {getattr(trt.LayerType, t) for t in _REGION_END if hasattr(trt.LayerType, t)}
    in_region = False
    for layer in _layers(network):
        if layer.type in starts:
            in_region = True
        elif layer.type in ends:
            in_region = False
        yield layer, in_region or layer.name in sub_nodes or " | " in (layer.metadata or "")


def _mark_unfused(network: Any, notes: list[str]) -> bool:
    """Ask TensorRT to report whatever survives fusion as debug tensors; whether it agreed."""
    if not hasattr(network, "mark_unfused_tensors_as_debug_tensors"):
        raise OptionError(
            "needs network.mark_unfused_tensors_as_debug_tensors (TensorRT 10.12+ or TensorRT-RTX); "
            f"use {param('outputs')} all",
            parameter="outputs",
            value="unfused",
        )
    debug_unfused = bool(network.mark_unfused_tensors_as_debug_tensors())
    notes.append(
        "unfused: fusion kept; tensors that survive fusion arrive as debug tensors under engine-internal "
        "names, with no guarantee that every unfused tensor is reported"
        if debug_unfused
        else "unfused: TensorRT refused to mark unfused tensors as debug tensors; only final outputs are returned"
    )
    return debug_unfused


def _tensor_bytes(tensor: Any, onnx_bytes: int | None) -> int | None:
    """Bytes of a marked tensor: from its ONNX value type, else TensorRT's static shape; None when unknown."""
    if onnx_bytes is not None:
        return int(onnx_bytes)
    dims = tuple(tensor.shape)
    if any(d < 0 for d in dims):
        return None
    return int(np.prod(dims, dtype=np.int64)) * _ITEMSIZE.get(tensor.dtype.name, 4)


def _known_sizes(plan: MarkPlan) -> dict[str, int]:
    """Each marked tensor's size, unknown ones counted as the largest known (0 when none is known)."""
    known = [size for size in plan.sizes.values() if size is not None]
    largest = max(known, default=0)
    return {t: largest if plan.sizes.get(t) is None else int(plan.sizes[t] or 0) for t in plan.marked}


def _skip_reason(
    trt: ModuleType, layer: Any, tensor: Any, nested: bool, mark_bool: bool, returnable: set[Any]
) -> str | None:
    """Why `tensor` cannot (or should not) be marked as an output; None when it can."""
    if nested:
        return REASON_CONTROL
    if tensor.is_network_input:
        return REASON_INPUT
    if tensor.is_network_output:
        return None
    if layer.type == trt.LayerType.CONSTANT:
        return REASON_CONSTANT
    if layer.type == trt.LayerType.SHAPE or tensor.is_shape_tensor:
        return REASON_SHAPE
    if tensor.dtype == trt.DataType.BOOL and not mark_bool:
        return REASON_BOOL
    if tensor.dtype not in returnable:
        return REASON_DTYPE.format(dtype=tensor.dtype.name)
    return None


def map_onnx_names(parser: Any, network: Any, model: onnx.ModelProto) -> dict[str, str]:
    """ONNX top-level value name -> TensorRT tensor name, for every value with a tensor."""
    by_name = {t.name: layer for layer in _layers(network) for t in _outputs(layer)}
    inputs = {network.get_input(i).name for i in range(network.num_inputs)}
    counts = Counter(node.name for node in model.graph.node if node.name)
    sub_nodes, _ = subgraph_names(model)
    mapping = {name: name for name in (v.name for v in model.graph.input) if name in inputs}
    for node in model.graph.node:
        for index, value in enumerate(node.output):
            if not value:
                continue
            tensor = None
            if (
                node.name
                and counts[node.name] == 1
                and node.name not in sub_nodes
                and hasattr(parser, "get_layer_output_tensor")
            ):
                tensor = parser.get_layer_output_tensor(node.name, index)
            if tensor is not None:
                mapping[value] = tensor.name
                continue
            candidates = [n for n in by_name if n == value or re.fullmatch(re.escape(value) + r"_\d+", n)]
            top = [
                n for n in candidates if by_name[n].name not in sub_nodes and " | " not in (by_name[n].metadata or "")
            ]
            if value in top:
                mapping[value] = value
            elif len(top) == 1:
                mapping[value] = top[0]
    return mapping


def subgraph_names(model: onnx.ModelProto) -> tuple[frozenset[str], frozenset[str]]:
    """Node names and value names that live inside Loop/If/Scan bodies, at any depth."""
    nodes: set[str] = set()
    values: set[str] = set()

    def walk(graph: onnx.GraphProto) -> None:
        values.update(v.name for v in graph.input)
        for node in graph.node:
            nodes.add(node.name)
            values.update(o for o in node.output if o)
            for body in _bodies(node):
                walk(body)

    for node in model.graph.node:
        for body in _bodies(node):
            walk(body)
    nodes.discard("")
    return frozenset(nodes), frozenset(values)


def _onnx_only_skips(network: Any, model: onnx.ModelProto, onnx_to_trt: Mapping[str, str]) -> list[SkippedTensor]:
    """ONNX values that no marking can return: graph inputs and values the parser folded away."""
    initializers = {i.name for i in model.graph.initializer}
    skipped = [
        SkippedTensor(v.name, v.name, None, REASON_INPUT) for v in model.graph.input if v.name not in initializers
    ]
    for node in model.graph.node:
        for value in node.output:
            if value and value not in onnx_to_trt:
                reason = REASON_CONSTANT if node.op_type == "Constant" else REASON_NO_TENSOR
                skipped.append(SkippedTensor(None, value, node.name or None, reason))
    return skipped


def _bodies(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def _layers(network: Any) -> Iterator[Any]:
    return (network.get_layer(i) for i in range(network.num_layers))


def _outputs(layer: Any) -> Iterator[Any]:
    return (t for t in (layer.get_output(i) for i in range(layer.num_outputs)) if t is not None)
