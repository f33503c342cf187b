"""What OpenVINO really executes: its runtime graph read into the shared fusion map, with precision as run.

`CompiledModel.get_runtime_model()` is the graph the plugin executes, one op per executed
layer. Each carries rt_info written by the plugin: `layerType` (Convolution, Subgraph,
Reorder...), `runtimePrecision` (the precision the layer computes in: f32, bf16, i8...),
`outputPrecisions`, `primitiveType` (the kernel, e.g. brgconv_avx512_f32) and
`originalLayersNames`, the comma-separated names of the ops of the read model the layer
computes: a fused Conv+bias+ReLU reads `conv/WithoutBiases,conv,relu`. Those names go
back to ONNX nodes through `names.NodeNames` (exact, or the `/`-cut prefix); a name that
maps to no node (an op OpenVINO generated, e.g. `Reshape_15`) is listed, not guessed.
Parameters, results and constants are no computation and are left out; layers with no
original op at all are the layout reorders the plugin adds, and Converts named after no ONNX
node (`/Shape.0.0`: an int64 output computed in int32) its precision conversions: both are
counted as added, not as unmapped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trtdiff.backends.compiled.fusion import EngineLayer, FusionReport
from trtdiff.backends.openvino.names import NodeNames

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo

SOURCE_RUNTIME = "OpenVINO runtime graph (get_runtime_model rt_info)"
HOW = "originalLayersNames"
_NOT_COMPUTED = frozenset({"Input", "Output", "Const", "Parameter", "Result", "Constant"})
_ADDED = frozenset({"Reorder", "Convert"})
# OpenVINO element type names -> the names the report uses (trtdiff.backends.compiled.precision).
PRECISION_NAMES = {
    "f64": "FP64",
    "f32": "FP32",
    "f16": "FP16",
    "bf16": "BF16",
    "f8e4m3": "FP8",
    "f8e5m2": "FP8",
    "i64": "INT64",
    "i32": "INT32",
    "i8": "INT8",
    "u8": "UINT8",
    "i4": "INT4",
    "u4": "UINT4",
    "boolean": "BOOL",
}


@dataclass(frozen=True)
class RuntimeGraph:
    """The executed layers as a `FusionReport`, the original op names no ONNX node answers to, the layers added.

    `added`: layout reorders and precision converts the plugin added (no ONNX node, not unmapped).
    """

    fusion: FusionReport
    unmapped_ops: tuple[str, ...] = ()
    added: int = 0


def runtime_graph(compiled: Any, graph: GraphInfo, names: NodeNames | None = None) -> RuntimeGraph:
    """Read `compiled.get_runtime_model()` against `graph` (never raises: an error is the report's note)."""
    from trtdiff.errors import describe_error

    index = names or NodeNames(graph)
    try:
        ops = list(compiled.get_runtime_model().get_ordered_ops())
    except Exception as error:  # noqa: BLE001 -- fusion is information; it must never fail a comparison
        return RuntimeGraph(FusionReport((), "none", f"the runtime graph could not be read ({describe_error(error)})"))
    layers: list[EngineLayer] = []
    unmapped: dict[str, None] = {}
    added = 0
    for op in ops:
        info = _rt_info(op)
        kind = info.get("layerType", "")
        if kind in _NOT_COMPUTED:
            continue
        originals = [n.strip() for n in info.get("originalLayersNames", "").split(",") if n.strip()]
        found = {original: index.node(original) for original in originals}
        nodes = tuple(dict.fromkeys(node for node in found.values() if node is not None))
        if not nodes and kind in _ADDED:
            added += 1
            continue
        unmapped.update((original, None) for original, node in found.items() if node is None)
        precision = info.get("runtimePrecision", "")
        layers.append(
            EngineLayer(
                op.get_friendly_name(),
                nodes,
                HOW,
                kind or None,
                info.get("primitiveType") or None,
                (PRECISION_NAMES.get(precision, precision.upper()),) if precision else (),
            )
        )
    return RuntimeGraph(FusionReport(tuple(layers), SOURCE_RUNTIME), tuple(unmapped), added)


def _rt_info(op: Any) -> dict[str, str]:
    """An op's rt_info as text (OVAny values read with astype(str))."""
    info = op.get_rt_info()
    found: dict[str, str] = {}
    for key in info.keys():
        try:
            found[str(key)] = str(info[key].astype(str))
        except Exception:  # noqa: BLE001 -- a value with no text form says nothing we read
            continue
    return found
