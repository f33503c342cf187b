"""Precision as built: the type each engine layer writes against the type the model asks for.

TensorRT 11 and TensorRT-RTX have no FP16/INT8 builder flags: every network is strongly
typed, so a layer runs in the precision of the ONNX model's own types. What the engine
really does is read from the built engine: the engine inspector's DETAILED layer information
(`Format/Datatype` of each output) where an engine can be loaded, else the plan's compiled
program (fusion.py: the descriptors of the tensors each kernel writes). "Asked" is the ONNX
type of the layer's last node output in the model TensorRT parsed (the FP16 conversion where
one was made). A layer whose float type is lower or higher than asked is flagged (BF16 where
FP16 is asked is lower, 8 bits of mantissa to 11, as OpenVINO's CPU plugin runs an f16 hint
on CPUs without native FP16; FP16 where BF16 is asked too, for its range); where a figure is
missing, `missing` says which and why. A layer that only converts types (Casts) is never
flagged: a runtime may keep the wider type at a boundary and fold the conversion into the next
layer (OpenVINO's CPU plugin with native FP16 keeps the FP32 input Cast in FP32), and the next
layer's own row says what it computes in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from trtdiff.report import LayerPrecision

if TYPE_CHECKING:
    from trtdiff.backends.compiled.fusion import FusionReport
    from trtdiff.source.onnx_graph import GraphInfo

# Float precisions by bits: what "lower" and "higher" compare.
FLOAT_BITS = {"FP32": 32, "TF32": 19, "BF16": 16, "FP16": 16, "FP8": 8, "FP4": 4}
_NUMPY_NAMES = {
    "float32": "FP32",
    "float16": "FP16",
    "bfloat16": "BF16",
    "float64": "FP64",
    "int8": "INT8",
    "uint8": "UINT8",
    "int32": "INT32",
    "int64": "INT64",
    "bool": "BOOL",
}
MISSING_ASKED = "asked: the ONNX file gives no type for this layer's output"
MISSING_BUILT_PLAN = "built: the plan names no type for what this layer writes"


def asked_types(graph: GraphInfo) -> dict[str, str]:
    """ONNX node name -> the precision name of its first output, in the model the runtime read."""
    asked: dict[str, str] = {}
    for node in graph.nodes:
        outputs = [o for o in node.outputs if o]
        dtype = graph.tensor_type(outputs[0]).dtype if outputs else None
        if dtype is not None:
            asked[node.name] = _NUMPY_NAMES.get(np.dtype(dtype).name, np.dtype(dtype).name.upper())
    return asked


def conversions(graph: GraphInfo) -> frozenset[str]:
    """The names of the nodes that only convert a type (Cast, CastLike): they compute nothing to flag."""
    return frozenset(node.name for node in graph.nodes if node.op_type in ("Cast", "CastLike"))


def layer_precisions(
    fusion: FusionReport,
    asked: Mapping[str, str],
    order: Mapping[str, int],
    converts: frozenset[str] = frozenset(),
) -> tuple[LayerPrecision, ...]:
    """Each engine layer's built type against what its last ONNX node asks for (`order`: node positions).

    Layers that compute no ONNX node (layout reorders a runtime adds) have nothing asked: they get no row.
    Where a layer fuses conversions (`converts`, conversions(graph)) with computing nodes, runtimes report
    either type as built: TensorRT what the last Cast writes (an FP32 Resize between Casts, built FP16),
    OpenVINO what the last computing node computes (a Conv in FP16 fused with the Cast to the FP32 output).
    Both are as asked, so the row takes whichever of the two matches; a layer of conversions alone gets its
    row but no flag.
    """
    rows: list[LayerPrecision] = []
    for layer in (layer for layer in fusion.layers if layer.onnx_nodes):
        computing = [node for node in layer.onnx_nodes if node not in converts] or layer.onnx_nodes
        built = _widest(layer.output_types)
        wants = [asked.get(_last(nodes, order)) for nodes in (computing, layer.onnx_nodes)]
        want = next((w for w in wants if w is not None and _flag(w, built) is None), wants[0])
        missing = MISSING_ASKED if want is None else (MISSING_BUILT_PLAN if built is None else None)
        flag = None if converts.issuperset(layer.onnx_nodes) else _flag(want, built)
        rows.append(LayerPrecision(layer.name, layer.onnx_nodes, want, built, flag, missing))
    return tuple(rows)


def _last(nodes: Sequence[str], order: Mapping[str, int]) -> str:
    """The last of `nodes` in the graph's order."""
    return max(nodes, key=lambda node: order.get(node, -1))


def _widest(types: tuple[str, ...]) -> str | None:
    """The float type a layer writes (its widest output), else its first type, else None."""
    floats = [t for t in types if t in FLOAT_BITS]
    if floats:
        return max(floats, key=lambda t: FLOAT_BITS[t])
    return types[0] if types else None


def _flag(asked: str | None, built: str | None) -> Literal["lower", "higher"] | None:
    if asked is None or built is None or asked not in FLOAT_BITS or built not in FLOAT_BITS:
        return None
    if {asked, built} == {"FP16", "BF16"}:  # same width, each loses what the other keeps: mantissa or range
        return "lower"
    if FLOAT_BITS[built] < FLOAT_BITS[asked]:
        return "lower"
    if FLOAT_BITS[built] > FLOAT_BITS[asked]:
        return "higher"
    return None
