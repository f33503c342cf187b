"""What a compiled runtime did, in one shape every compiled runtime fills: the report's `runtimes`.

A compiled (fusing) runtime compiles the model twice, the plain model that ships and marked
ones that return intermediates, so the report says for each: which device and precision it
compiled for and what precision it reports back, what it fused (each executed layer's ONNX
nodes), which of the plain model's fusions the marked ones split, precision as run per
layer against what the model asks, what stays unmapped, and whether marking changed the
answer. OpenVINO fills one today; TensorRT keeps its own `tensorrt` summary (report/tensorrt.py),
whose parts (fused layers, fusions split, precisions, the marking check) this one reuses.
Renderers show every entry through one function (render/runtimes.py), never per runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtdiff.report.tensorrt import EngineLayerInfo, FusionSplit, LayerPrecision, MarkingCheck


@dataclass(frozen=True)
class RuntimeSummary:
    """One compiled runtime's run: settings as asked and as compiled, fusion, precision as run, the marking check.

    `backend`: its registry name (e.g. "openvino"); `title`: its name in sentences.
    `precision_asked`/`precision_compiled`: the inference precision asked for and the one the
    compiled model reports. `compiled_models`: compilations made (the plain one and one per
    group of marks); `marked`: tensors returned through added outputs. `unmapped_tensors`:
    ONNX tensors the runtime has no tensor for (not compared); `unmapped_ops`: names in its
    runtime graph that no ONNX node answers to (ops it generated). `fused_layers`,
    `runtime_layers` and `layer_precisions` describe the plain model (what ships);
    `fusions_split` its fused layers that a marked model computes in several layers.
    """

    backend: str
    title: str
    version: str | None = None
    device: str | None = None
    precision_asked: str | None = None
    precision_compiled: str | None = None
    compiled_models: int = 0
    compile_seconds: float = 0.0
    marked: int = 0
    unmapped_tensors: tuple[str, ...] = ()
    unmapped_ops: tuple[str, ...] = ()
    fusion_source: str | None = None
    runtime_layers: int = 0
    fused_layers: tuple[EngineLayerInfo, ...] = ()
    fusions_split: tuple[FusionSplit, ...] = ()
    layer_precisions: tuple[LayerPrecision, ...] = ()
    marking_check: MarkingCheck | None = None
    notes: tuple[str, ...] = ()
