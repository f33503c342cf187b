"""`trtdiff.pipeline.build`: build the TensorRT engines trtdiff would compare, without running them.

Useful on a machine without a GPU TensorRT supports (TensorRT-RTX builds on the CPU), to see
what would be marked, what could not be and why, how ONNX names map to TensorRT's, how many
runs a sample would take, which fused layers of the plain engine the marked one splits, the
precision each layer was built in, and to prepare the engines for another machine.

The model, its export and the engine settings are prepared as for a comparison; the engines
are the registry's to build (`build_engines`: the backend whose spec `builds`, TensorRT), so
this stage imports no runtime's package.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.backends.registry import build_engines, engine_settings
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
    options = (options or CompareOptions()).with_fields(**fields)
    options.export.validate()
    options.runtime.validate()
    engine_settings(options.runtime).validate()  # a precision TensorRT is not built at: refused before the export
    timings: dict[str, float] = {}
    with prepare(model, options, backends=(), timings=timings) as prepared:
        summary = build_engines(
            prepared.graph, prepared.engine, options.runtime, prepared.engine_path, functools.partial(timed, timings)
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
