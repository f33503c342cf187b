"""Quantized tensors judged in quantization steps (the figure is defined in trtdiff.analysis.noise).

Between a QuantizeLinear and its DequantizeLinear a tensor holds integers: comparing it with the
float model by cosine and a relative error made for float32 rounding calls every INT8 layer
diverged. A tensor the graph's own Q/DQ nodes quantize (trtdiff.pairing.qdq.quantizations) is
judged instead by its error in steps of that DequantizeLinear's scale against
`max_quant_steps`; NaN/Inf that differ and a shape mismatch still diverge. A DequantizeLinear whose scale
(or its QuantizeLinear's) is zero, negative or not finite diverges whatever its values (reason
"quant_scale"), so it is the culprit, and the float tensor its QuantizeLinear reads is not judged in steps
of that scale (every error over a zero step is infinite). Every other tensor,
and every tensor of a graph with no Q/DQ, keeps its figures and verdict unchanged (nothing is
computed for them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.analysis.noise import QUANT_PERCENTILE, quant_steps
from trtdiff.backends.store import to_host
from trtdiff.pairing.qdq import weight_quantizations
from trtdiff.report import QuantizedWeight, Reason
from trtdiff.source.onnx_graph import constant_values

if TYPE_CHECKING:
    from trtdiff.pairing.qdq import Quantization
    from trtdiff.report import PairMetrics, Thresholds, WeightSource
    from trtdiff.source.onnx_graph import GraphInfo, NodeInfo

_KEPT = frozenset({"non_finite", "shape", "mismatches"})  # reasons that stand whatever the precision
COARSE_GRID = 1 / 16
"""An integer grid's scale is too coarse where the reference's values reach less than this fraction of the
largest magnitude it holds (4 of 8 bits unused). Max calibration puts the largest value calibration saw at
the grid's end (1), entropy and percentile calibration clip (above 1); values 16x smaller than every
calibration sample are not another input but a wrong scale (docs/quantized.md: the clean fixtures' margins)."""
COARSE_FLOAT8 = 1 / 256
"""The same for an FP8 E4M3 grid. Its precision is relative (3 mantissa bits from 2^-6 to 448, subnormal
below), so unused range costs little until the values sink toward the subnormals: 8 of its 17.8 binades
unused (ModelOpt's entropy calibration leaves FP8 tensors at 1/13 of 448)."""
_GRID_ENDS = {"int4": (-8, 7), "uint4": (0, 15), "float8_e4m3fn": (-448, 448)}


def in_steps(
    reference: Any,
    candidate: Any,
    metrics: PairMetrics,
    tensor: str,
    quantized: Mapping[str, Quantization],
    thresholds: Thresholds,
) -> PairMetrics:
    """`metrics` of `reference` against `candidate` judged in quantization steps where `tensor` is
    quantized; unchanged otherwise."""
    quantization = quantized.get(tensor)
    if quantization is None or metrics.mismatches is not None or metrics.shape_mismatch:
        return metrics
    if quantization.fault and tensor != quantization.output:  # the float tensor before: no step to judge it in
        kept = tuple(r for r in metrics.reasons if r.metric in _KEPT)
        return dataclasses.replace(metrics, reasons=kept, diverged=bool(kept))
    if metrics.max_abs is None and not quantization.fault:
        return metrics
    ref = np.asarray(to_host(reference), dtype=np.float64).reshape(-1)
    cand = np.asarray(to_host(candidate), dtype=np.float64).reshape(-1)
    delta = np.abs(ref - cand)
    if quantization.dtype == "float8_e4m3fn" and quantization.scale > 0:  # in the spacing around each value
        from trtdiff.analysis.quant_noise import float8_spacing

        delta = delta / (float8_spacing(ref / quantization.scale) * quantization.scale)
        step = 1.0
    else:
        step = quantization.scale
    delta = delta[np.isfinite(delta)]
    error = float(np.percentile(delta, QUANT_PERCENTILE)) if delta.size else 0.0
    steps = quant_steps(error, step)
    reasons = [r for r in metrics.reasons if r.metric in _KEPT]
    if quantization.fault:  # wrong whatever the values: named at its DequantizeLinear
        reasons.append(Reason("quant_scale", quantization.scale, detail=quantization.describe()))
    if steps > thresholds.max_quant_steps:
        reasons.append(Reason("quant_steps", steps, thresholds.max_quant_steps, detail=quantization.node))
    if tensor == quantization.output and not quantization.fault and (coarse := _coarse(ref, quantization)):
        reasons.append(coarse)
    return dataclasses.replace(metrics, quant_steps=steps, reasons=tuple(reasons), diverged=bool(reasons))


def grid_ends(kind: str) -> tuple[int, int] | None:
    """The lowest and highest value of a quantization grid's type ("int8", "int4", "float8_e4m3fn"); None where
    it is not one."""
    if kind in _GRID_ENDS:
        return _GRID_ENDS[kind]
    try:
        info = np.iinfo(kind)
    except (TypeError, ValueError):
        return None
    return int(info.min), int(info.max)


def grid_use(values: np.ndarray, quantization: Quantization) -> float | None:
    """The largest finite |value| over the largest magnitude `quantization`'s grid holds ((q - zero point) x
    scale at the type's limits); None where the type's limits are unknown or every value is 0."""
    ends = grid_ends(quantization.dtype)
    if ends is None:
        return None
    end = max(abs(ends[0] - quantization.zero_point), abs(ends[1] - quantization.zero_point)) * quantization.scale
    finite = np.abs(values[np.isfinite(values)])
    top = float(np.max(finite, initial=0.0))
    return top / end if top > 0 and end > 0 else None


def _coarse(values: np.ndarray, quantization: Quantization) -> Reason | None:
    """A "quant_scale" reason where the values reach less than `COARSE_GRID` (`COARSE_FLOAT8`) of the grid,
    saying by how much."""
    used = grid_use(values, quantization)
    least = COARSE_FLOAT8 if quantization.dtype.startswith("float8") else COARSE_GRID
    if used is None or used >= least:
        return None
    detail = (
        f"{quantization.describe()}: the values reach 1/{1 / used:.0f} of its grid (< 1/{1 / least:.0f}),"
        f" the scale is {1 / used:.0f}x coarser than they need"
    )
    return Reason("quant_scale", used, least, detail=detail)


def quantized_weights(
    graph: GraphInfo, floats: Mapping[str, tuple[WeightSource, np.ndarray | None]]
) -> tuple[QuantizedWeight, ...]:
    """Every weight and bias DequantizeLinear of `graph`, against the float weight it quantizes where `floats`
    (pairing.weights: by DequantizeLinear, where from and its values) holds one; () with no Q/DQ.

    A weight quantized correctly is within half a step of its float value wherever that value is inside the
    grid (round to nearest); one beyond the grid's end saturates there on purpose (AWQ and other clip
    searches), so it is not judged. The figure is the max, not a percentile, since nothing about a constant
    varies with the input. A scale that is zero, negative or not finite (source.qdq_scales), or coarser than
    a channel's (block's) values need (`_coarse_weight`), is inf steps, float weight or not: the scale is wrong,
    whatever the weight (the file may hold one scale for both its QuantizeLinear and DequantizeLinear, so that
    every value is within half a step of it: a coarser grid, not a misplaced value).
    """
    weights = weight_quantizations(graph)
    if not weights:
        return ()
    found = []
    for node in (n for n in graph.nodes if n.name in weights):
        quantization = weights[node.name]
        fault = quantization.fault if quantization is not None else ""
        source, values = floats.get(node.name, (None, None))
        computed = _dequantized(graph, node) if not fault else None
        steps = _weight_steps(graph, node, values, computed) if values is not None and computed else None
        fault = fault or (_coarse_weight(graph, node, computed) if computed is not None else "")
        described = quantization.describe() if quantization is not None else ""
        named = source.describe() if source is not None and values is not None else None
        found.append(QuantizedWeight(node.name, named, math.inf if fault else steps, described, fault, source))
    return tuple(found)


WEIGHT_GRID = 1 / 2
"""A weight's channel (block) whose values reach less than this share of its grid has too coarse a scale: every
weight quantizer here (ModelOpt's, quantize_static's) sets a weight's scale from its largest value, which then
sits at the grid's end (1; above with AWQ's clip search), so a scale twice as coarse as that already says the
scale was not made from these values (a x4 scale: 1/4). An FP8 weight is held to `COARSE_FLOAT8`, as an FP8
activation is: its precision is relative, and ModelOpt's FP8 weights reach 1/12 of 448 by design."""
_WEIGHT_GRIDS = frozenset({"int8", "uint8", "int4", "uint4", "float8_e4m3fn"})
"""The grids a weight is quantized to (an int32 bias's scale is the product of its input's and weight's)."""


def _coarse_weight(graph: GraphInfo, node: NodeInfo, computed: tuple[np.ndarray, np.ndarray, str]) -> str:
    """What is wrong with a weight DequantizeLinear's scale where a channel's (block's) values reach less than
    `WEIGHT_GRID` of its grid (`COARSE_FLOAT8` of FP8's): "its scale conv1.weight_scale is 4x coarser than the
    values of channel 3 of 16 need: they reach 1/4 of its grid, < 1/2"; "" otherwise."""
    from onnx import helper

    from trtdiff.analysis.quant_noise import broadcast_scale

    grid, _, grid_type = computed
    constants = constant_values(graph, set(node.inputs[1:3]))
    scale = constants.get(node.inputs[1])
    zero = constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    kind = str(zero.dtype) if zero is not None else grid_type
    if scale is None or kind not in _WEIGHT_GRIDS or scale.size == 0:
        return ""
    attributes = {a.name: helper.get_attribute_value(a) for a in graph.model.graph.node[node.index].attribute}
    points = np.zeros(()) if zero is None or kind.startswith("float8") else np.asarray(zero, dtype=np.float64)
    offset = broadcast_scale(points, grid.shape, attributes) if points.size > 1 else points
    ends = grid_ends(kind)
    if offset is None or ends is None:
        return ""
    lowest, highest = ends
    reach = np.abs(grid - offset) / np.maximum(np.abs(lowest - offset), np.abs(highest - offset))
    per_scale = _per_scale(reach, scale.shape, attributes)
    if per_scale is None:
        return ""
    used = np.where(per_scale > 0, per_scale, np.inf)  # a channel of zeros says nothing about its scale
    worst = float(np.min(used)) if used.size else math.inf
    least = COARSE_FLOAT8 if kind.startswith("float8") else WEIGHT_GRID  # FP8's precision is relative
    if worst >= least:
        return ""
    where = "the weight" if per_scale.size == 1 else _which(per_scale.shape, int(np.argmin(used)))
    return (
        f"its scale {node.inputs[1]} is {1 / worst:.0f}x coarser than the values of {where} need: they reach "
        f"1/{1 / worst:.0f} of its grid, < 1/{1 / least:.0f}"
    )


def _per_scale(values: np.ndarray, shape: tuple[int, ...], attributes: Mapping[str, Any]) -> np.ndarray | None:
    """The largest of `values` under each value of a DequantizeLinear's scale (of `shape`): over the tensor, along
    its `axis`, or per block of `block_size` along it; None where the shapes do not say."""
    size = int(np.prod(shape, dtype=np.int64))
    if size == 1:
        return np.asarray([values.max(initial=0.0)])
    axis = int(attributes.get("axis", 1)) % values.ndim
    block = int(attributes.get("block_size", 0))
    if block:
        if len(shape) != values.ndim:
            return None
        count = -(-values.shape[axis] // block)
        pad = [(0, 0)] * values.ndim
        pad[axis] = (0, count * block - values.shape[axis])
        padded = np.pad(values, pad)
        split = padded.reshape((*values.shape[:axis], count, block, *values.shape[axis + 1 :]))
        return np.asarray(split.max(axis=axis + 1))
    if len(shape) != 1 or shape[0] != values.shape[axis]:
        return None
    return np.asarray(values.max(axis=tuple(i for i in range(values.ndim) if i != axis)))


def _which(shape: tuple[int, ...], flat: int) -> str:
    """ "channel 3 of 16" for one scale per channel, "block (1, 5) of (2, 64)" for blocks."""
    if len(shape) == 1:
        return f"channel {flat} of {shape[0]}"
    index = tuple(int(i) for i in np.unravel_index(flat, shape))
    return f"block {index} of {tuple(shape)}"


def _weight_steps(
    graph: GraphInfo, node: NodeInfo, expected: np.ndarray, computed: tuple[np.ndarray, np.ndarray, str]
) -> float | None:
    """max |dequantized - expected| in steps of the scale of each weight's channel or block (its float8 spacing
    on an FP8 grid), over the weights inside the grid; None where the shapes differ."""
    from onnx import helper

    from trtdiff.analysis.quant_noise import broadcast_scale, float8_spacing

    if computed[0].shape != expected.shape:
        return None
    grid, dequantized, grid_type = computed
    constants = constant_values(graph, set(node.inputs[1:3]))
    attributes = {a.name: helper.get_attribute_value(a) for a in graph.model.graph.node[node.index].attribute}
    scale = constants.get(node.inputs[1])
    step = broadcast_scale(np.asarray(scale, dtype=np.float64), grid.shape, attributes) if scale is not None else None
    if step is None:
        return None
    zero = constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    kind = str(zero.dtype) if zero is not None else grid_type
    if kind.startswith("float8"):
        step = step * float8_spacing(grid)
    ends = grid_ends(kind)
    if ends is None:
        return None
    saturated = ((grid <= ends[0]) & (expected < dequantized)) | ((grid >= ends[1]) & (expected > dequantized))
    error = np.abs(dequantized - expected) / step
    return float(np.max(error[~saturated], initial=0.0))


def _dequantized(graph: GraphInfo, node: NodeInfo) -> tuple[np.ndarray, np.ndarray, str] | None:
    """(the weight's values on its grid, as stored: q, before the zero point; the DequantizeLinear's output), both
    float64, and the grid's type ("int4", "int8", "float8_e4m3fn"), by the ONNX reference evaluator on the
    weight's QuantizeLinear (if any) and DequantizeLinear alone."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    nodes = [graph.model.graph.node[node.index]]
    source = graph.node_of(node.inputs[0])
    if source is not None and source.op_type == "QuantizeLinear":
        nodes.insert(0, graph.model.graph.node[source.index])
    needed = {t for n in nodes for t in n.input if t} - {o for n in nodes for o in n.output}
    constants = constant_values(graph, needed)
    if needed - set(constants):
        return None
    outputs = [nodes[-1].input[0], nodes[-1].output[0]]
    model = helper.make_model(
        helper.make_graph(
            list(nodes),
            "weight",
            [],
            [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None) for name in outputs],
            [numpy_helper.from_array(np.asarray(constants[name]), name) for name in sorted(needed)],
        ),
        opset_imports=[helper.make_opsetid("", max(graph.opset, 19))],  # the evaluator has no Q/DQ before 19
    )
    try:
        grid, dequantized = ReferenceEvaluator(model).run(None, {})
    except Exception:  # noqa: BLE001 - a weight it cannot compute is listed, not compared
        return None
    return np.asarray(grid).astype(np.float64), np.asarray(dequantized).astype(np.float64), str(np.asarray(grid).dtype)
