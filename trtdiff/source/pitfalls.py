"""The rules of `inspect`: what an ONNX graph (and the PyTorch calls behind it) says about known pitfalls.

Each rule reads a `Context` (the graph, its Resize rows, where each node came from in
PyTorch, the tensors' magnitudes on the example input) and returns `Finding`s. Severity
and advice are fixed per code in `RULES`; messages name the nodes and the numbers.
Advice names library parameters with `param(...)` (see `Inspection.named`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import numpy_helper

from trtdiff.errors import param
from trtdiff.report.inspection import SEVERITY_RANK, Finding, Interpolation, ResizeInfo, Severity
from trtdiff.source.onnx_graph import GraphInfo, NodeInfo, attributes, dynamic_inputs, node_module
from trtdiff.source.qdq_scales import scale_faults
from trtdiff.source.resizes import STACK_TRACE_KEY, guess_module, read_resizes, source_of, with_calls

FP16_MAX = 65504.0
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INTERPOLATING = frozenset({"linear", "bilinear", "trilinear", "cubic"})
HALF_PIXEL = frozenset({"half_pixel", "pytorch_half_pixel"})
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
NORMS = {"BatchNormalization": "BatchNorm", "LayerNormalization": "LayerNorm"}
NORMS |= {"GroupNormalization": "GroupNorm", "InstanceNormalization": "InstanceNorm"}
USUAL_EPSILONS = {"LayerNorm": (1e-5, 1e-6, 1e-12)}  # 1e-6: ViT, T5; 1e-12: BERT. Others: 1e-5.
UNDERFLOW_EPSILON = 1e-7
SHAPE_SINKS = frozenset({"Reshape", "Resize", "Upsample", "Expand", "Tile", "ConstantOfShape"})
_CLAMPED_SLICE_INPUTS = frozenset({1, 2, 4})  # starts, ends, steps: TensorRT clamps huge INT64 values there
_REEXPORT_11 = f"re-export at opset 11 or higher ({param('opset')} 11)"
_HALF_PIXEL_FIX = f"{_REEXPORT_11}, or set coordinate_transformation_mode to half_pixel"

# code -> (severity, advice): the advice a finding of that code gives.
# fmt: off
RULES: dict[str, tuple[Severity, str]] = {
    "resize-no-coordinate-mode": ("error", f"{_REEXPORT_11}: align_corners=False is then written as half_pixel"),
    "align-corners-lost": ("error", f"{_REEXPORT_11}: align_corners=True is then written as "
                           "coordinate_transformation_mode=align_corners"),
    "asymmetric-coordinates": ("error", _HALF_PIXEL_FIX),
    "coordinate-mismatch": ("error", _HALF_PIXEL_FIX),
    "nearest-fractional-scale": ("warning", "upsample by a whole factor (or to a multiple of the input size), or "
                                 "compare this Resize's output across backends before relying on it"),
    "pytorch-half-pixel-size-1": ("warning", "write half_pixel instead (the exporter does for align_corners=False "
                                  "from opset 11), or reduce that axis with a pooling op rather than a Resize"),
    "softmax-axis": ("warning", f"re-export at opset 13 or higher ({param('opset')} 13), or move the axis last"),
    "int64-narrowed": ("info", "harmless for indices, labels and constants within ±2^31 (Slice starts and ends are "
                       "clamped); where values can be larger, compute them in float"),
    "fp16-overflow": ("warning", "keep these layers in FP32 in an FP16 engine (TensorRT layer precisions with "
                      "precision constraints), or rescale before them; FP32 engines are unaffected"),
    "batchnorm-unfolded": ("info", "export in eval mode (model.eval()) so the exporter folds BatchNorm into the Conv "
                           "before it; with no Conv before it, differences near 1e-6 there are expected"),
    "epsilon-underflow": ("warning", "keep the normalization in FP32 in an FP16 engine, or use an epsilon of 1e-5 "
                          "or more"),
    "unusual-epsilon": ("info", "check it against the PyTorch module's eps: a changed or lost epsilon shifts every "
                        "normalized value"),
    "groupnorm-instancenorm": ("info", f"use GroupNormalization (re-export at opset 18 or higher, {param('opset')} "
                               "18) or TensorRT's GroupNorm plugin, and compare this module's output across backends"),
    "baked-dimension": ("error", "export with the dimension symbolic: reshape with x.size(0), -1 or 0 instead of "
                        "int(x.size(0)) (int() and .item() make the trace write a number), and give the exporter the "
                        "dimension as dynamic (dynamic_axes for TorchScript, dynamic_shapes for dynamo)"),
    "qdq-scale": ("error", "give it a positive, finite scale: calibrate again with data that reaches this tensor (a "
                  "zero scale comes from a calibration that only ever saw zeros there), or leave the tensor "
                  "unquantized; TensorRT's ONNX parser refuses a scale that is not positive"),
    "shape-chains": ("info", "compare the model before and after simplification (onnxslim, fixed input shapes) "
                     f"with {param('simplify')}: if the numbers change, the shape path is a suspect"),
}
# fmt: on
# Rules about what the ONNX graph itself computes: re-exporting or editing the file is their fix, so
# they do not explain a node whose file the ONNX spec evaluator cleared (a culprit with a runtime verdict).
EXPORT_RULES = frozenset(
    {
        "resize-no-coordinate-mode",
        "align-corners-lost",
        "asymmetric-coordinates",
        "coordinate-mismatch",
        "nearest-fractional-scale",
        "softmax-axis",
        "unusual-epsilon",
        "baked-dimension",
        "qdq-scale",
    }
)
# Rules whose node may sit inside a culprit's subgraph rather than be the culprit itself: a constant
# shape that is wrong shows first in the paired op after it (a Softmax after the baked Reshape).
SUBGRAPH_RULES = frozenset({"baked-dimension"})
# Rules whose message names the node at fault and what is wrong with it: a culprit's advice starts with it
# (the node may not be the culprit itself: a weight's DequantizeLinear behind the Conv that reads it).
NAMING_RULES = SUBGRAPH_RULES | {"qdq-scale"}
# Ops whose target shape is an input, and which input (a constant there fixes every dimension).
_SHAPED = {"Reshape": 1, "Expand": 1}

Origin = Callable[[NodeInfo], tuple["str | None", "str | None"]]


@dataclass(frozen=True)
class Context:
    """What the rules read: the graph, its Resize rows by node name, node origins, magnitudes."""

    graph: GraphInfo
    resizes: Mapping[str, ResizeInfo]
    origin: Origin
    magnitudes: Mapping[str, float] | None = None
    consumers: dict[str, list[tuple[NodeInfo, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node in self.graph.nodes:
            for position, tensor in enumerate(node.inputs):
                self.consumers.setdefault(tensor, []).append((node, position))

    def finding(self, code: str, nodes: Sequence[NodeInfo], message: str, severity: Severity | None = None) -> Finding:
        module, source = self.origin(nodes[0]) if nodes else (None, None)
        default, advice = RULES[code]
        return Finding(severity or default, code, tuple(n.name for n in nodes), module, message, advice, source)

    def grouped(self, code: str, nodes: Sequence[NodeInfo], template: str) -> list[Finding]:
        """One finding for all `nodes`, none without; `template` may say {count} and {first}."""
        message = template.format(count=len(nodes), first=nodes[0].name) if nodes else ""
        return [self.finding(code, nodes, message)] if nodes else []

    def users(self, tensor: str) -> list[NodeInfo]:
        return [node for node, _ in self.consumers.get(tensor, [])]


def find_all(context: Context) -> list[Finding]:
    """Every rule's findings, errors first, then in rule order."""
    found: list[Finding] = []
    for node in context.graph.nodes:
        if (info := context.resizes.get(node.name)) is not None:
            found += _coordinates(context, node, info) + _nearest(context, node, info) + _size_one(context, node, info)
    rules = (_softmax, _int64_data, _int64_constants, _fp16, _batchnorm, _epsilons, _groupnorm, _baked)
    for rule in (*rules, _qdq_scales, _shapes):
        found += rule(context)
    return sorted(found, key=lambda f: -SEVERITY_RANK[f.severity])


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def worst_severity(findings: Sequence[Finding]) -> Severity | None:
    """The most severe finding's severity, None without findings."""
    return max((f.severity for f in findings), key=SEVERITY_RANK.__getitem__, default=None)


def _coordinates(context: Context, node: NodeInfo, info: ResizeInfo) -> list[Finding]:
    """Coordinate modes PyTorch's interpolation does not match (none, asymmetric, align_corners lost).

    A Resize whose every resized axis has one input pixel is skipped: every coordinate mode
    samples that pixel (the ASPP image pooling upsampling a 1x1 map agrees at any opset).
    """
    if info.mode not in INTERPOLATING or info.broadcasts:
        return []
    mode, aligned = info.coordinate_transformation_mode, info.align_corners
    where = f"{info.op_type} {info.node} ({info.mode}, opset {context.graph.opset})"
    call = f"PyTorch called {info.torch_op or 'the interpolation'}"
    if aligned and mode != "align_corners":
        how = "no coordinate_transformation_mode exists before opset 11" if mode is None else f"the file says {mode}"
        message = f"{where}: {call} with align_corners=True, but {how}; upsampled values shift"
        return [context.finding("align-corners-lost", [node], message)]
    if mode is None:
        message = (
            f"{where}: Resize has no coordinate_transformation_mode before opset 11, so runtimes sample "
            "asymmetrically while PyTorch's align_corners=False samples pixel centres (half_pixel); "
            "upsampled values shift by up to half a pixel"
        )
        return [context.finding("resize-no-coordinate-mode", [node], message)]
    if mode == "asymmetric":
        if aligned is False:
            message = f"{where}: asymmetric coordinates, but {call} with align_corners=False (half_pixel)"
            return [context.finding("asymmetric-coordinates", [node], message)]
        message = f"{where}: asymmetric: PyTorch's bilinear is half_pixel (align_corners=False) or align_corners"
        return [context.finding("asymmetric-coordinates", [node], message, "warning")]
    if aligned is False and mode not in HALF_PIXEL:
        message = f"{where}: coordinate mode {mode}, but {call} with align_corners=False (half_pixel)"
        return [context.finding("coordinate-mismatch", [node], message)]
    return []


def _whole(ratio: float) -> bool:
    return ratio >= 1 and abs(ratio - round(ratio)) < 1e-6


def _nearest(context: Context, node: NodeInfo, info: ResizeInfo) -> list[Finding]:
    """Nearest with a scale that is no whole factor (up or down): PyTorch and ONNX round differently."""
    if info.mode != "nearest":
        return []
    ratios = [o / i for i, o in info.resized_axes() if i] or [s for s in info.scales or () if s not in (0, 1)]
    odd = [r for r in ratios if not (_whole(r) or _whole(1 / r))]
    if not odd:
        return []
    message = (
        f"{info.op_type} {info.node}: nearest with scale {odd[0]:.4g}; PyTorch's nearest copies pixel "
        f"floor(x·in/out) while ONNX rounds with {info.nearest_mode or 'the runtime rounding'} after its own "
        "coordinate arithmetic, so output pixels at exact multiples can copy a neighbour of PyTorch's pixel"
    )
    return [context.finding("nearest-fractional-scale", [node], message)]


def _size_one(context: Context, node: NodeInfo, info: ResizeInfo) -> list[Finding]:
    """pytorch_half_pixel maps an output size of 1 to coordinate 0, unlike PyTorch (onnx/onnx#4276)."""
    if info.coordinate_transformation_mode != "pytorch_half_pixel" or all(o != 1 for _, o in info.resized_axes()):
        return []
    message = (
        f"{info.op_type} {info.node}: pytorch_half_pixel with an output size of 1 on a resized axis samples the "
        "first pixel there, while PyTorch samples the centre; runtimes disagree about it too (onnx/onnx#4276)"
    )
    return [context.finding("pytorch-half-pixel-size-1", [node], message)]


def _softmax(context: Context) -> list[Finding]:
    """Below opset 13, Softmax flattens to 2-D at `axis`: a non-last axis normalizes over several."""
    graph, found = context.graph, []
    for node in graph.nodes if graph.opset < 13 else []:
        shape = graph.tensor_type(node.inputs[0]).shape if node.inputs else None
        if node.op_type not in SOFTMAX_OPS or node.domain not in ("", "ai.onnx") or not shape:
            continue
        axis = int(attributes(graph, node).get("axis", 1))
        if axis % len(shape) != len(shape) - 1:
            message = (
                f"{node.op_type} {node.name}: axis={axis} of a rank-{len(shape)} tensor at opset {graph.opset}; "
                "before 13 it flattens to 2-D there and normalizes over every later axis together"
            )
            found.append(context.finding("softmax-axis", [node], message))
    return found


def _int64_data(context: Context) -> list[Finding]:
    """INT64 tensors computed from the input data (ArgMax, indices): TensorRT computes them in INT32."""
    graph = context.graph
    data = [(t, n) for n in graph.nodes for t in n.outputs if t in graph.data_tensors]
    data = [(t, n) for t, n in data if graph.tensor_type(t).dtype == np.int64]
    if not data:
        return []
    tensor, node = data[0]
    message = (
        f"{_n(len(data), 'INT64 tensor')} computed from the input data (e.g. {tensor} from {node.op_type} "
        f"{node.name}); TensorRT computes them in INT32, so values beyond ±2^31 would wrap"
    )
    return [context.finding("int64-narrowed", [n for _, n in data], message)]


def _int64_constants(context: Context) -> list[Finding]:
    """INT64 constants outside the INT32 range, except where TensorRT clamps them (Slice bounds)."""
    graph, wide = context.graph, []
    constants: list[tuple[str, NodeInfo | None, Any]] = [(i.name, None, i) for i in graph.model.graph.initializer]
    for producer in graph.nodes:
        if producer.op_type == "Constant" and "value" in (attrs := attributes(graph, producer)):
            constants.append((producer.outputs[0], producer, attrs["value"]))
    for tensor, node, proto in constants:
        if proto.data_type != 7:  # INT64
            continue
        uses = context.consumers.get(tensor, [])
        if uses and all(n.op_type == "Slice" and i in _CLAMPED_SLICE_INPUTS for n, i in uses):
            continue
        value = numpy_helper.to_array(proto)
        if value.size and (value.min() < INT32_MIN or value.max() > INT32_MAX):
            wide.append((tensor, [node] if node is not None else [n for n, _ in uses[:1]]))
    if not wide:
        return []
    message = (
        f"{_n(len(wide), 'INT64 constant')} with values outside the INT32 range (e.g. {wide[0][0]}); TensorRT "
        "narrows INT64 weights to INT32, clamping or rejecting them"
    )
    return [context.finding("int64-narrowed", wide[0][1], message)]


def _fp16(context: Context) -> list[Finding]:
    """Tensors whose magnitude on the example input overflows FP16 (|x| > 65504): a value a computation made,
    which the magnitudes hold (source.masks.computed_magnitude: an attention mask's -inf or finfo.min, given
    rather than computed, is left out of them)."""
    magnitudes, graph = context.magnitudes or {}, context.graph
    over = [(t, magnitudes[t]) for t in graph.node_outputs if magnitudes.get(t, 0.0) > FP16_MAX]
    if not over:
        return []
    nodes = [node for t, _ in over if (node := graph.node_of(t)) is not None]
    tensor, largest = max(over, key=lambda item: item[1])
    message = (
        f"{_n(len(over), 'tensor')} beyond FP16's range (|x| > 65504) on the example input, first at "
        f"{nodes[0].op_type} {nodes[0].name}, largest {largest:.3g} at {tensor}; an FP16 engine turns them into "
        "inf or NaN (LayerNorm's sum of squares, Softmax's Exp, reductions and Pow are the usual places)"
    )
    return [context.finding("fp16-overflow", nodes, message)]


def _batchnorm(context: Context) -> list[Finding]:
    """BatchNormalization left unfolded: TensorRT folds it, ONNX Runtime runs it as written."""
    nodes = [n for n in context.graph.nodes if n.op_type == "BatchNormalization"]
    message = (
        "{count} BatchNormalization node(s) left in the graph (e.g. {first}): TensorRT folds them into the "
        "layer before, ONNX Runtime runs them as written, so the two differ by rounding"
    )
    return context.grouped("batchnorm-unfolded", nodes, message)


def _epsilons(context: Context) -> list[Finding]:
    """Epsilons below FP16's reach (warning) and unusual ones (info), grouped by kind and value."""
    groups: dict[tuple[str, float], list[NodeInfo]] = {}
    for node in context.graph.nodes:
        if node.op_type in NORMS:
            epsilon = float(attributes(context.graph, node).get("epsilon", 1e-5))
            groups.setdefault((NORMS[node.op_type], epsilon), []).append(node)
    found = []
    for (kind, epsilon), nodes in groups.items():
        usual = USUAL_EPSILONS.get(kind, (1e-5,))
        what = f"{kind} epsilon {epsilon:.3g} on {len(nodes)} node(s) (e.g. {nodes[0].name})"
        if epsilon < UNDERFLOW_EPSILON:
            message = f"{what}: below 1e-7 it underflows in FP16, so a flat channel or row divides by almost zero"
            found.append(context.finding("epsilon-underflow", nodes, message))
        elif not any(np.isclose(epsilon, u, rtol=1e-3, atol=0) for u in usual):
            message = f"{what}: not the usual {' or '.join(f'{u:g}' for u in usual)}"
            found.append(context.finding("unusual-epsilon", nodes, message))
    return found


def _groupnorm(context: Context) -> list[Finding]:
    """GroupNorm written as Reshape -> InstanceNormalization -> Reshape -> Mul (-> Add)."""
    graph, nodes = context.graph, []
    for node in graph.nodes:
        before = graph.node_of(node.inputs[0]) if node.inputs else None
        if node.op_type != "InstanceNormalization" or before is None or before.op_type != "Reshape":
            continue
        after = [n for n in context.users(node.outputs[0]) if n.op_type == "Reshape"]
        if any(m.op_type == "Mul" for a in after for m in context.users(a.outputs[0])):
            nodes.append(node)
    message = (
        "{count} GroupNorm(s) written as Reshape → InstanceNormalization → Reshape → Mul → Add (e.g. {first}), "
        "as the TorchScript exporter writes GroupNorm: TensorRT has had accuracy issues with this pattern "
        "(NVIDIA/TensorRT#4336, #4756)"
    )
    return context.grouped("groupnorm-instancenorm", nodes, message)


def _baked(context: Context) -> list[Finding]:
    """A Reshape/Expand to a constant shape that fixes a dimension its input has dynamic (`int(x.size(0))` traced).

    The input's dimension is dynamic when shape inference from the graph's declared inputs
    leaves it unknown; the constant writes a number there. At the exported size it is right; at
    any other (a batch of 2 for a graph exported at 1) the tensors after it take other shapes
    than PyTorch's, and whatever reshapes them back mixes samples.
    """
    graph, found = context.graph, []
    if not dynamic_inputs(graph):  # nothing is fed at another size than exported
        return []
    for node in graph.nodes:
        position = _SHAPED.get(node.op_type)
        if position is None or len(node.inputs) <= position:
            continue
        target = _constant(graph, node.inputs[position])
        before = graph.tensor_type(node.inputs[0]).shape
        if target is None or before is None:
            continue
        fixed = [k for k, d in enumerate(before) if d is None and k < target.size and int(target.flat[k]) > 0]
        if fixed:
            k = fixed[0]
            message = (
                f"{node.name} ({node.op_type}) takes its shape from the constant {node.inputs[position]} = "
                f"{target.tolist()}, which fixes dimension {k} to {int(target.flat[k])} where its input's dimension "
                f"{k} is dynamic: fed another size there, every tensor after it has another shape than PyTorch's"
            )
            found.append(context.finding("baked-dimension", [node], message))
    return found


def _qdq_scales(context: Context) -> list[Finding]:
    """Q/DQ nodes whose scale is zero, negative or not finite (source.qdq_scales), each with the node a comparison
    names for it: a QuantizeLinear's DequantizeLinear, a weight DequantizeLinear's readers. A QuantizeLinear whose
    DequantizeLinear reads the same faulty scale is that DequantizeLinear's finding."""
    graph, faults, found = context.graph, scale_faults(context.graph), []
    for name, fault in faults.items():
        node = next(n for n in graph.nodes if n.name == name)
        after = [n for t in node.outputs for n in context.users(t)]
        if fault.op_type == "QuantizeLinear":
            after = [n for n in after if n.op_type == "DequantizeLinear"]
            if any(n.name in faults and faults[n.name].scale == fault.scale for n in after):
                continue
        elif _constant(graph, node.inputs[0]) is None:  # an activation's DequantizeLinear: the culprit itself
            after = []
        message = f"{node.op_type} {node.name}: {fault.describe()}"
        found.append(context.finding("qdq-scale", [node, *after], message))
    return found


def _constant(graph: GraphInfo, tensor: str) -> np.ndarray | None:
    """The value of an initializer or a Constant node's output; None for a tensor computed at run time."""
    if tensor in graph.initializers:
        return numpy_helper.to_array(next(i for i in graph.model.graph.initializer if i.name == tensor))
    producer = graph.node_of(tensor)
    if producer is None or producer.op_type != "Constant":
        return None
    value = attributes(graph, producer).get("value")
    return numpy_helper.to_array(value) if value is not None else None


def _sink(context: Context, shape: NodeInfo) -> NodeInfo | None:
    """The first Reshape/Resize/... whose shape input `shape` feeds through shape arithmetic."""
    seen, stack = set(shape.outputs), list(shape.outputs)
    while stack:
        for consumer, position in context.consumers.get(stack.pop(), []):
            if consumer.op_type in SHAPE_SINKS and (position > 0 or consumer.op_type == "ConstantOfShape"):
                return consumer
            fresh = [t for t in consumer.outputs if t not in context.graph.data_tensors and t not in seen]
            seen.update(fresh)
            stack += fresh
    return None


def _shapes(context: Context) -> list[Finding]:
    """Shapes computed at run time (Shape chains, dynamic inputs) that a simplifier would fold."""
    chains = [(n, sink) for n in context.graph.nodes if n.op_type == "Shape" and (sink := _sink(context, n))]
    dynamic = dynamic_inputs(context.graph)
    if not chains and not dynamic:
        return []
    parts = [f"inputs with dynamic dimensions: {', '.join(dynamic)}"] if dynamic else []
    if chains:
        example = f"{chains[0][0].name} → {chains[0][1].op_type} {chains[0][1].name}"
        count = _n(len(chains), "Shape chain")
        parts.insert(0, f"{count} computing Reshape/Resize shapes at run time (e.g. {example}); onnxsim/onnxslim ")
        parts[0] += f"would fold {count}"
    return [context.finding("shape-chains", [shape for shape, _ in chains], "; ".join(parts))]


def inspect_graph(
    graph: GraphInfo,
    *,
    calls: Sequence[Interpolation] = (),
    magnitudes: Mapping[str, float] | None = None,
    module_names: set[str] | None = None,
) -> tuple[list[ResizeInfo], list[Finding]]:
    """The Resize rows and findings of `graph`; `calls`: the model's upsampling calls, when it was given."""
    known: dict[str, tuple[str | None, str | None]] = {}

    def origin(node: NodeInfo) -> tuple[str | None, str | None]:
        if node.name in known:
            return known[node.name]
        module = node_module(node, module_names) if module_names else node.module_path
        if module is None and node.scope_pieces is not None:
            module = guess_module(node.scope_pieces)
        meta = {p.key: p.value for p in graph.model.graph.node[node.index].metadata_props}
        return module, source_of(meta.get(STACK_TRACE_KEY, ""))

    rows = with_calls(read_resizes(graph, origin), calls)
    known.update({row.node: (row.module, row.source) for row in rows})
    return rows, find_all(Context(graph, {row.node: row for row in rows}, origin, magnitudes))
