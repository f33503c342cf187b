"""What `trtdiff build` asks of TensorRT: the marked and plain engines built (not run), written where asked, summarized.

The TensorRT spec's `builds` hook (backends.registry.build_engines): pipeline/build.py loads
the model, exports it and derives the engine settings like a comparison does, then hands the
graph here and wraps the summary in its `BuildReport`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trtdiff.options import BackendOptions, BuildSettings
    from trtdiff.report import TensorRTSummary
    from trtdiff.source.onnx_graph import GraphInfo

# Times the block it is given under a step's name ("build", "read_plans") in the report's timings.
Timed = Callable[[str], AbstractContextManager[None]]


def build(
    graph: GraphInfo, settings: BuildSettings, options: BackendOptions, engine_path: Path | None, timed: Timed
) -> TensorRTSummary:
    """Build (or load from the options' engine cache) the engines of `graph` with `settings`; write them to
    `engine_path` where given; what the report says about them (no engine run, so no marking check)."""
    from trtdiff.backends.tensorrt.builder import build_engine
    from trtdiff.backends.tensorrt.importing import gpu_info
    from trtdiff.backends.tensorrt.summary import not_run_check, summarize

    gpu = gpu_info()
    with timed("build"):
        cache = Path(options.engine_cache) if options.engine_cache else None
        result = build_engine(graph, settings, cache_dir=cache, gpu=gpu)
    if engine_path is not None:
        result.write_engines(engine_path)
    with timed("read_plans"):
        fusion = result.fusion_hint(graph)
        plain_fusion = result.plain_fusion_hint(graph) if result.plain is not None else fusion
        parsed = result.parsed_graph
        precision_fusion = result.fusion_hint(parsed) if parsed is not None and parsed is not graph else None
    return summarize(
        result,
        fusion,
        status="built",
        gpu=gpu.describe() if gpu else None,
        graph=graph,
        plain_fusion=plain_fusion,
        include_name_map=True,
        marking_check=not_run_check(),
        precision_fusion=precision_fusion,
    )
