"""The TensorRT backend: find TensorRT, build the plain and the marked engine from the exact ONNX file, run them.

Nothing here imports TensorRT or torch at import time; `probe()` says whether this machine
can build (TensorRT importable) and run (a CUDA GPU the installed TensorRT supports).

    info = probe()
    build = build_engine(graph, BuildSettings(outputs="all", input_shapes=input_shapes_from(feeds)))  # CPU too
    with open_backend("tensorrt", graph, feeds=feeds) as backend:  # backends.registry; BackendError: cannot run here
        ...
"""

from __future__ import annotations

from trtdiff.backends.compiled import answer, precision
from trtdiff.backends.compiled.fusion import EngineLayer, FusionReport, fusions_split
from trtdiff.backends.tensorrt import (
    budget,
    buffers,
    builder,
    execution,
    fusion,
    importing,
    logger,
    marking,
    names,
    runtime,
)
from trtdiff.backends.tensorrt.budget import DEFAULT_MARK_BUDGET, Budget, budget_of, run_groups
from trtdiff.backends.tensorrt.builder import (
    BuildSettings,
    build_engine,
    build_with_marks,
    input_shapes_from,
    parse_onnx,
)
from trtdiff.backends.tensorrt.cache import cache_key, load_engine, save_engine
from trtdiff.backends.tensorrt.fusion import fusion_from_inspector, fusion_from_plan
from trtdiff.backends.tensorrt.importing import GpuInfo, Probe, TensorRTInfo, import_tensorrt, probe, tensorrt_info
from trtdiff.backends.tensorrt.marking import MarkPlan, SkippedTensor
from trtdiff.backends.tensorrt.result import BuildResult, EnginePlan
from trtdiff.backends.tensorrt.runtime import NO_EXECUTION, TensorRTBackend
from trtdiff.options import OUTPUT_MODES

_MODULES = (importing, logger, names, builder, marking, budget, fusion, buffers, execution, runtime)
# Every TensorRT attribute this package touches ("Class.attr"); OPTIONAL ones are feature-detected.
TRT_API = tuple(sorted({name for module in _MODULES for name in module.TRT_API}))
TRT_OPTIONAL_API = tuple(sorted({name for module in _MODULES for name in module.TRT_OPTIONAL_API}))

__all__ = [
    "DEFAULT_MARK_BUDGET",
    "NO_EXECUTION",
    "OUTPUT_MODES",
    "TRT_API",
    "TRT_OPTIONAL_API",
    "Budget",
    "BuildResult",
    "BuildSettings",
    "EngineLayer",
    "EnginePlan",
    "FusionReport",
    "GpuInfo",
    "MarkPlan",
    "Probe",
    "SkippedTensor",
    "TensorRTBackend",
    "TensorRTInfo",
    "answer",
    "budget_of",
    "build_engine",
    "build_with_marks",
    "cache_key",
    "fusion_from_inspector",
    "fusion_from_plan",
    "fusions_split",
    "import_tensorrt",
    "input_shapes_from",
    "load_engine",
    "parse_onnx",
    "precision",
    "probe",
    "run_groups",
    "save_engine",
    "tensorrt_info",
]
