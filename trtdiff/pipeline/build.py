"""`trtdiff.pipeline.build`: build the TensorRT engines trtdiff would compare, without running them.

Useful on a machine without a GPU TensorRT supports (TensorRT-RTX builds on the CPU), to see
what would be marked, what could not be and why, how ONNX names map to TensorRT's, how many
runs a sample would take, which fused layers of the plain engine the marked one splits, the
precision each layer was built in, and to prepare the engines for another machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.options import CompareOptions
from trtdiff.pipeline.prepare import prepare, timed
from trtdiff.report import BuildReport
from trtdiff.version import __version__

if TYPE_CHECKING:
    import torch


def build(model: str | Path | torch.nn.Module, options: CompareOptions | None = None, **fields: Any) -> BuildReport:
    """Export (or take the given ONNX file) and build its marked and plain TensorRT engines.

    Options as for `compare` (the model, export and backend parts are read).
    """
    from trtdiff.backends.tensorrt.builder import build_engine
    from trtdiff.backends.tensorrt.importing import gpu_info
    from trtdiff.backends.tensorrt.settings import engine_settings
    from trtdiff.backends.tensorrt.summary import not_run_check, summarize

    options = (options or CompareOptions()).with_fields(**fields)
    options.export.validate()
    options.runtime.validate()
    engine_settings(options.runtime).validate()  # a precision TensorRT is not built at: refused before the export
    timings: dict[str, float] = {}
    with prepare(model, options, backends=(), timings=timings) as prepared:
        runtime = options.runtime
        gpu = gpu_info()
        with timed(timings, "build"):
            cache = Path(runtime.engine_cache) if runtime.engine_cache else None
            result = build_engine(prepared.graph, prepared.engine, cache_dir=cache, gpu=gpu)
        if prepared.engine_path is not None:
            result.write_engines(prepared.engine_path)
        with timed(timings, "read_plans"):
            fusion = result.fusion_hint(prepared.graph)
            plain_fusion = result.plain_fusion_hint(prepared.graph) if result.plain is not None else fusion
            parsed = result.parsed_graph
            precision_fusion = (
                result.fusion_hint(parsed) if parsed is not None and parsed is not prepared.graph else None
            )
        summary = summarize(
            result,
            fusion,
            status="built",
            gpu=gpu.describe() if gpu else None,
            graph=prepared.graph,
            plain_fusion=plain_fusion,
            include_name_map=True,
            marking_check=not_run_check(),
            precision_fusion=precision_fusion,
        )
        return BuildReport(
            model=prepared.loaded.source,
            onnx_path=prepared.onnx_path,
            opset=prepared.graph.opset,
            exporter=prepared.exporter,
            inputs=prepared.inputs,
            tensorrt=summary,
            saved_engine=str(prepared.engine_path) if prepared.engine_path else None,
            notes=prepared.notes,
            timings={k: round(v, 4) for k, v in timings.items()},
            trtdiff_version=__version__,
        )
