"""Which TensorRT tensors the engine returns, which it cannot, their ONNX names, and the run groups.

Modes: `all` marks every tensor TensorRT can report as a *debug tensor* (`mark_debug`): one
engine whose values a debug listener copies as they are produced, group by group under the
mark budget (budget.py); the network's outputs stay its only outputs. `unfused` keeps fusion
and asks the engine to report whatever survives it (`mark_unfused_tensors_as_debug_tensors`,
TensorRT 10.12+ and RTX; engine-internal names). `none` keeps the final outputs only.

Not marked (each with its reason): network inputs, tensors inside loop and conditional
bodies, constants, shape tensors (Polygraphy's rules), bool tensors unless asked, types with
no numpy equivalent, and the tensors inside a quantize/dequantize pair (marking those would
stop TensorRT from fusing the pair into the quantized layer, changing the very numbers).

Marking is planned first (`plan_marks`, no change to the network) and applied afterwards
(`apply_marks`), so the plain engine can be built from the same parse before the marks go on.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from trtdiff.backends.tensorrt.api import member, members
from trtdiff.backends.tensorrt.budget import Budget, run_groups
from trtdiff.backends.tensorrt.names import NetworkIndex, map_onnx_names, subgraph_names
from trtdiff.errors import BackendError, OptionError, param
from trtdiff.options import OUTPUT_MODES

if TYPE_CHECKING:
    from trtdiff.backends.tensorrt.api import EnumValue, Layer, Network, OnnxParser, Tensor, TrtModule
    from trtdiff.options import OutputsMode

REASON_INPUT = "network input: the feed itself, not computed by the engine"
REASON_CONTROL = "inside a loop or conditional body: TensorRT cannot report such a tensor"
REASON_CONSTANT = "constant/weights: TensorRT keeps it as weights of a constant layer, not a computed tensor"
REASON_SHAPE = "shape tensor: TensorRT computes it on the host as a shape; only execution tensors are returned"
REASON_BOOL = (
    "bool tensor: marking bool tensors broke mark-all builds in TensorRT (NVIDIA/TensorRT #1698, #3592, "
    "#3596), so it is left unmarked; mark_bool=True marks it"
)
REASON_QDQ = (
    "inside a quantize/dequantize pair (a Quantize or Dequantize output): marking it would stop TensorRT fusing "
    "the pair into the quantized layer (explicit quantization) and change the numbers being checked"
)
REASON_DTYPE = "type {dtype} has no numpy equivalent, so it cannot be returned for comparison"
REASON_NO_TENSOR = "no TensorRT tensor: the parser folded it into weights or constants"
UNFUSED_NOTE = (
    "unfused: fusion kept; tensors that survive fusion arrive as debug tensors under engine-internal names, "
    "with no guarantee that every unfused tensor is reported; each run copies at most the mark budget of them"
)
UNFUSED_REFUSED = "unfused: TensorRT refused to mark unfused tensors as debug tensors; only final outputs are returned"

# Layer types that open and close ILoop/IIfConditional regions in a parsed network (Polygraphy's rule).
_REGION_START = ("TRIP_LIMIT", "ITERATOR", "RECURRENCE", "CONDITION", "CONDITIONAL_INPUT")
_REGION_END = ("LOOP_OUTPUT", "CONDITIONAL_OUTPUT")
RETURNABLE_TYPES = ("FLOAT", "HALF", "BF16", "INT8", "INT32", "INT64", "BOOL", "UINT8")
_ITEMSIZE = {"FLOAT": 4, "HALF": 2, "BF16": 2, "INT8": 1, "INT32": 4, "INT64": 8, "BOOL": 1, "UINT8": 1}

TRT_API = (
    "INetworkDefinition.mark_debug",
    "INetworkDefinition.is_debug_tensor",
    "ILayer.type",
    "ILayer.num_inputs",
    "ILayer.get_input",
    "ITensor.dtype",
    "ITensor.is_network_input",
    "ITensor.is_network_output",
    "ITensor.is_shape_tensor",
    "ITensor.shape",
    "LayerType.CONSTANT",
    "LayerType.SHAPE",
    "LayerType.QUANTIZE",
    "LayerType.DEQUANTIZE",
    *(f"LayerType.{t}" for t in _REGION_START + _REGION_END),
    *(f"DataType.{t}" for t in RETURNABLE_TYPES),
)
TRT_OPTIONAL_API = ("INetworkDefinition.mark_unfused_tensors_as_debug_tensors",)


@dataclass(frozen=True)
class SkippedTensor:
    """A tensor that is not returned, and why."""

    trt_name: str | None
    onnx_name: str | None
    layer: str | None
    reason: str


@dataclass(frozen=True)
class MarkPlan:
    """What the engine returns: its outputs, its debug tensors in run groups, what is skipped, ONNX names.

    `groups` cuts `debug` (TensorRT names, layer order) into groups within the mark budget; in
    `unfused` mode the engine picks its debug tensors, so `groups` is the planned upper bound
    over every tensor it could report. A sample of the comparison is one run whatever the
    groups (runtime.plan_run: the listener streams the tensors); the groups are what the
    report's planned `runs_per_sample` still counts.
    """

    mode: OutputsMode
    outputs: tuple[str, ...]  # the network's own outputs (returned by every run)
    debug: tuple[str, ...]  # marked as debug tensors (mode "all")
    skipped: tuple[SkippedTensor, ...]
    onnx_to_trt: Mapping[str, str] = field(default_factory=dict)
    debug_unfused: bool = False
    notes: tuple[str, ...] = ()
    sizes: Mapping[str, int | None] = field(default_factory=dict)  # bytes per returned tensor, None: unknown
    groups: tuple[tuple[str, ...], ...] = ()
    budget: Budget | None = None
    tensor_names: frozenset[str] = frozenset()  # every tensor of the parsed network
    data_tensors: int = 0  # ONNX tensors computed from the inputs' values (what coverage counts against)

    @cached_property
    def trt_to_onnx(self) -> dict[str, str]:
        return {trt_name: onnx_name for onnx_name, trt_name in self.onnx_to_trt.items()}

    @property
    def marked(self) -> tuple[str, ...]:
        """Every tensor the engine returns by name: its outputs, then its debug tensors."""
        return (*self.outputs, *self.debug)

    @property
    def runs_per_sample(self) -> int:
        """The groups within the mark budget (at least one), the report's planned figure; a sample runs once."""
        return max(1, len(self.groups))

    def group_of(self) -> dict[str, int]:
        """ONNX name -> the group it falls in, for debug tensors."""
        reverse = self.trt_to_onnx
        return {reverse[t]: index for index, group in enumerate(self.groups) for t in group if t in reverse}

    def returned_onnx(self) -> tuple[str, ...]:
        """ONNX names the engine returns (outputs and debug tensors; in unfused mode the outputs only)."""
        reverse = self.trt_to_onnx
        return tuple(reverse[t] for t in self.marked if t in reverse)

    def debug_bytes(self) -> int:
        """Bytes of every debug tensor of one sample (unknown sizes not counted; see `unknown_sizes`)."""
        return sum(self.sizes.get(t) or 0 for t in self.debug)

    def unknown_sizes(self) -> int:
        return sum(1 for t in self.debug if self.sizes.get(t) is None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "outputs": list(self.outputs),
            "debug": list(self.debug),
            "skipped": [vars(s).copy() for s in self.skipped],
            "onnx_to_trt": dict(self.onnx_to_trt),
            "debug_unfused": self.debug_unfused,
            "notes": list(self.notes),
            "groups": [list(group) for group in self.groups],
            "budget_bytes": self.budget.bytes if self.budget else None,
            "debug_bytes": self.debug_bytes(),
        }


def plan_marks(
    trt: TrtModule,
    index: NetworkIndex,
    parser: OnnxParser,
    model: onnx.ModelProto,
    mode: OutputsMode,
    budget: Budget,
    *,
    mark_bool: bool = False,
    sizes: Mapping[str, int | None] | None = None,
    data_tensors: int = 0,
) -> MarkPlan:
    """What `mode` marks on the indexed network, its run groups under `budget`; nothing is changed yet.

    `sizes`: bytes per ONNX value for the shapes fed (budget.resolved_sizes).
    """
    if mode not in OUTPUT_MODES:
        raise OptionError(f"unknown; choose one of {', '.join(OUTPUT_MODES)}", parameter="outputs", value=mode)
    onnx_to_trt = map_onnx_names(parser, index, model)
    reverse = {t: o for o, t in onnx_to_trt.items()}
    rules = _Rules(trt, index, mark_bool)
    by_onnx = sizes or {}

    def size_of(tensor: Any) -> int | None:
        return _tensor_bytes(tensor, by_onnx.get(reverse.get(tensor.name, "")))

    outputs, debug, skipped, tensor_sizes = _sort_tensors(rules, mode, reverse, subgraph_names(model)[1], size_of)
    if mode == "unfused":
        candidates = [t.name for layer, t, nested in rules.walk() if rules.skip_reason(layer, t, nested) is None]
        tensor_sizes.update((n, size_of(index.by_name[n][1])) for n in candidates)
        groups = run_groups([n for n in candidates if n not in outputs], tensor_sizes, budget.bytes)
    else:
        groups = run_groups(debug, tensor_sizes, budget.bytes) if debug else []
    notes = [_all_note(len(debug), len(groups), budget)] if mode == "all" else []
    return MarkPlan(
        mode,
        tuple(outputs),
        tuple(debug),
        (*skipped, *_onnx_only_skips(model, onnx_to_trt)),
        onnx_to_trt,
        False,
        tuple(notes),
        tensor_sizes,
        tuple(groups),
        budget,
        index.tensor_names(),
        data_tensors,
    )


def _sort_tensors(
    rules: _Rules,
    mode: OutputsMode,
    reverse: Mapping[str, str],
    sub_values: Container[str],
    size_of: Callable[[Any], int | None],
) -> tuple[list[str], list[str], list[SkippedTensor], dict[str, int | None]]:
    """The network's tensors as `mode` treats them: outputs kept, debug tensors to mark, those skipped and why,
    and the bytes of each tensor kept or marked."""
    outputs: list[str] = []
    debug: list[str] = []
    skipped: list[SkippedTensor] = []
    sizes: dict[str, int | None] = {}
    for layer, tensor, nested in rules.walk():
        name = tensor.name
        reason = rules.skip_reason(layer, tensor, nested)
        if tensor.is_network_output and reason is None:
            outputs.append(name)
        elif mode != "all":
            continue
        elif reason is not None:
            onnx_name = reverse.get(name) or (name if name in sub_values else None)
            skipped.append(SkippedTensor(name, onnx_name, layer.name, reason))
            continue
        else:
            debug.append(name)
        sizes[name] = size_of(tensor)
    return outputs, debug, skipped, sizes


def _all_note(marked: int, groups: int, budget: Budget) -> str:
    runs = max(1, groups)
    return (
        f"all: {marked} tensors marked as debug tensors of one engine (its outputs unchanged); one run per sample "
        f"hands them over as they fire ({runs} group{'s' if runs > 1 else ''} under the mark budget of "
        f"{budget.describe()})"
    )


def apply_marks(network: Network, index: NetworkIndex, plan: MarkPlan, only: Sequence[str] | None = None) -> MarkPlan:
    """Mark the plan's debug tensors on `network` (or `only` those), or the unfused debug state; the plan as applied.

    A tensor TensorRT refuses to mark moves to `skipped` with TensorRT's answer.
    """
    if plan.mode == "unfused":
        agreed = _mark_unfused(network)
        return replace(plan, debug_unfused=agreed, notes=(*plan.notes, UNFUSED_NOTE if agreed else UNFUSED_REFUSED))
    wanted = plan.debug if only is None else tuple(only)
    refused: list[SkippedTensor] = []
    for name in wanted:
        layer, tensor = index.by_name[name]
        if not network.mark_debug(tensor):
            refused.append(SkippedTensor(name, plan.trt_to_onnx.get(name), layer.name, "TensorRT refused mark_debug"))
    if not refused and only is None:
        return plan
    gone = {s.trt_name for s in refused}
    debug = tuple(t for t in wanted if t not in gone)
    return replace(
        plan,
        debug=debug,
        skipped=(*plan.skipped, *refused),
        groups=tuple(g for g in (tuple(t for t in group if t in debug) for group in plan.groups) if g),
    )


class _Rules:
    """Polygraphy's marking rules over one indexed network, with the type sets looked up once."""

    def __init__(self, trt: TrtModule, index: NetworkIndex, mark_bool: bool) -> None:
        self.index, self.mark_bool = index, mark_bool
        kinds = trt.LayerType
        self.starts = members(kinds, _REGION_START)
        self.ends = members(kinds, _REGION_END)
        self.constant = member(kinds, "CONSTANT")
        self.shape = member(kinds, "SHAPE")
        self.quantize = member(kinds, "QUANTIZE")
        self.dequantize = member(kinds, "DEQUANTIZE")
        self.bool_type = member(trt.DataType, "BOOL")
        self.returnable = members(trt.DataType, RETURNABLE_TYPES)

    def walk(self) -> list[tuple[Layer, Tensor, bool]]:
        """Each layer output and whether it lies inside a loop or conditional body."""
        walked: list[tuple[Layer, Tensor, bool]] = []
        in_region = False
        previous: Layer | None = None
        for layer, tensor in self.index.outputs:
            if layer is not previous:
                kind = layer.type
                if kind in self.starts:
                    in_region = True
                elif kind in self.ends:
                    in_region = False
                previous = layer
            walked.append((layer, tensor, in_region or layer.name in self.index.nested_layers))
        return walked

    def skip_reason(self, layer: Layer, tensor: Tensor, nested: bool) -> str | None:
        """Why `tensor` is not marked; None when it can be."""
        if nested:
            return REASON_CONTROL
        if tensor.is_network_input:
            return REASON_INPUT
        if tensor.is_network_output:
            return None
        kind = layer.type
        if kind == self.constant:
            return REASON_CONSTANT
        if kind == self.shape or tensor.is_shape_tensor:
            return REASON_SHAPE
        if self._inside_qdq(layer, kind):
            return REASON_QDQ
        dtype = tensor.dtype
        if dtype == self.bool_type and not self.mark_bool:
            return REASON_BOOL
        if dtype not in self.returnable:
            return REASON_DTYPE.format(dtype=dtype.name)
        return None

    def _inside_qdq(self, layer: Layer, kind: EnumValue) -> bool:
        """A Quantize output (the quantized tensor between Q and DQ) or a Dequantize output (fused into its user)."""
        return kind is not None and kind in (self.quantize, self.dequantize)


def _mark_unfused(network: Network) -> bool:
    """Ask TensorRT to report whatever survives fusion as debug tensors; whether it agreed."""
    if not hasattr(network, "mark_unfused_tensors_as_debug_tensors"):
        raise OptionError(
            "needs network.mark_unfused_tensors_as_debug_tensors (TensorRT 10.12+ or TensorRT-RTX); "
            f"use {param('outputs')} all",
            parameter="outputs",
            value="unfused",
        )
    return bool(network.mark_unfused_tensors_as_debug_tensors())


def _tensor_bytes(tensor: Tensor, onnx_bytes: int | None) -> int | None:
    """Bytes of a returned tensor: from its ONNX value for the fed shapes, else TensorRT's static shape."""
    if onnx_bytes is not None:
        return int(onnx_bytes)
    dims = tuple(int(d) for d in tensor.shape)
    if any(d < 0 for d in dims):
        return None
    return int(np.prod(dims, dtype=np.int64)) * _ITEMSIZE.get(tensor.dtype.name, 4)


def _onnx_only_skips(model: onnx.ModelProto, onnx_to_trt: Mapping[str, str]) -> list[SkippedTensor]:
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


def require_debug_tensors(has_debug: bool) -> None:
    """Debug tensors are TensorRT 10.0+; older TensorRT is not supported."""
    if not has_debug:
        raise BackendError("this TensorRT has no debug tensors (INetworkDefinition.mark_debug); use TensorRT 10.0+")
