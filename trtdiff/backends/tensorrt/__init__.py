"""The TensorRT backend: find TensorRT, build an engine from the exact ONNX file, run it.

Nothing here imports TensorRT or torch at import time; `probe()` says whether this machine
can build (TensorRT importable) and run (a CUDA GPU the installed TensorRT supports).

    info = probe()
    build = build_engine(graph, BuildSettings(outputs="all", input_shapes=input_shapes_from(feeds)))
    backend = TensorRTBackend(graph, build=build)   # raises BackendError when it cannot run here
"""

from __future__ import annotations

from trtdiff.backends.tensorrt import buffers, builder, execution, fusion, importing, marking, runtime, slicing
from trtdiff.backends.tensorrt.builder import BuildSettings, build_engine, input_shapes_from, parse_onnx
from trtdiff.backends.tensorrt.cache import cache_key, load_engine, save_engine
from trtdiff.backends.tensorrt.fusion import EngineLayer, FusionReport, fusion_from_inspector, fusion_from_plan
from trtdiff.backends.tensorrt.importing import GpuInfo, Probe, TensorRTInfo, import_tensorrt, probe, tensorrt_info
from trtdiff.backends.tensorrt.marking import OUTPUT_MODES, MarkPlan, SkippedTensor
from trtdiff.backends.tensorrt.result import BuildResult, EnginePlan
from trtdiff.backends.tensorrt.runtime import NO_EXECUTION, TensorRTBackend
from trtdiff.backends.tensorrt.slicing import split_marks

_MODULES = (importing, builder, marking, slicing, fusion, buffers, execution, runtime)
# Every TensorRT attribute this package touches ("Class.attr"); OPTIONAL ones are feature-detected with hasattr.
TRT_API = tuple(sorted({name for module in _MODULES for name in module.TRT_API}))
TRT_OPTIONAL_API = tuple(sorted({name for module in _MODULES for name in module.TRT_OPTIONAL_API}))

__all__ = [
    "NO_EXECUTION",
    "OUTPUT_MODES",
    "TRT_API",
    "TRT_OPTIONAL_API",
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
    "build_engine",
    "cache_key",
    "fusion_from_inspector",
    "fusion_from_plan",
    "import_tensorrt",
    "input_shapes_from",
    "load_engine",
    "parse_onnx",
    "probe",
    "save_engine",
    "split_marks",
    "tensorrt_info",
]
