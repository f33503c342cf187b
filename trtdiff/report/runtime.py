"""What a compiled runtime did, in one shape every compiled runtime fills: the report's `runtimes`.

A compiled (fusing) runtime compiles the model twice, the plain model that ships and marked
ones that return intermediates, so the report says for each: which device and precision it
compiled for and what precision it reports back, what it fused (each executed layer's ONNX
nodes), which of the plain model's fusions the marked ones split, precision as run per
layer against what the model asks, what stays unmapped, and whether marking changed the
answer. OpenVINO fills one; TensorRT's own `tensorrt` summary (report/tensorrt.py) stays the
JSON form of its run (reports of every schema hold it) and is read as one of these where it
is shown (render/runtimes.py: `compiled_runtimes`, `tensorrt_runtime`). Renderers show every
entry through one function there, never per runtime; the sentences are theirs, not this
module's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
    What one runtime says and no other does lives in generic fields: `status` "skipped" with
    `reason` (asked for, not run here); `artifact`/`build_word`, what it compiles and how
    ("model"/"compilation", TensorRT's "engine"/"build"); `headline`, its own first line in
    place of the generic one; `details`, further lines in words; `facts`, (name, value) pairs
    for machines (JUnit properties `<backend>.<name>`, the environment's `gpu`).
    """

    backend: str
    title: str
    status: Literal["skipped", "built", "ran"] = "ran"
    reason: str | None = None
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
    artifact: str = "model"
    build_word: str = "compilation"
    headline: str | None = None
    details: tuple[str, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()
