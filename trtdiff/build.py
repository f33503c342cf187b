"""`trtdiff.build`: build the TensorRT engine trtdiff would compare, without running it.

Useful on a machine without a GPU TensorRT supports (TensorRT-RTX builds on the CPU), to see
what would be marked, what could not be and why, how ONNX names map to TensorRT's, and to
prepare an engine for another machine.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from trtdiff.backends.tensorrt.builder import BuildSettings, build_engine, input_shapes_from
from trtdiff.backends.tensorrt.importing import gpu_info
from trtdiff.backends.tensorrt.summary import summarize
from trtdiff.prepare import check_new_file, load_source, onnx_feeds, onnx_graph_for, timed
from trtdiff.report import BuildReport


def build(
    model: str | Path | torch.nn.Module,
    *,
    input_shapes: tuple[str, ...] | list[str] = (),
    input_files: tuple[str | Path, ...] | list[str | Path] = (),
    seed: int = 0,
    opset: int | None = None,
    exporter: str = "auto",
    onnx: str | Path | None = None,
    save_onnx: str | Path | None = None,
    force: bool = False,
    tensorrt: BuildSettings | None = None,
    tf32: bool = False,
    engine_cache: str | Path | None = None,
    save_engine: str | Path | None = None,
    model_class: str | None = None,
    trust: bool = False,
) -> BuildReport:
    """Export (or take the given ONNX file) and build its TensorRT engine with `tensorrt` settings."""
    timings: dict[str, float] = {}
    notes: list[str] = []
    with timed(timings, "load"):
        source = load_source(model, model_class=model_class, trust=trust, onnx=onnx, input_shapes=input_shapes,
                             input_files=input_files, seed=seed)
    save_path = check_new_file(save_onnx, force, "--save-onnx")
    engine_path = check_new_file(save_engine, force, "--save-engine")
    with tempfile.TemporaryDirectory(prefix="trtdiff-") as tmp:
        with timed(timings, "export"):
            graph, exporter_used = onnx_graph_for(source, opset=opset, exporter=exporter, save_path=save_path,
                                                  folder=Path(tmp), notes=notes)
        feeds = onnx_feeds(graph, source.feeds)
        settings = replace(tensorrt or BuildSettings(), tf32=tf32, input_shapes=input_shapes_from(feeds))
        gpu = gpu_info()
        with timed(timings, "build"):
            result = build_engine(graph, settings, cache_dir=Path(engine_cache) if engine_cache else None, gpu=gpu)
        if engine_path is not None:
            engine_path.write_bytes(result.plan)
        summary = summarize(result, result.fusion_hint(graph), status="built", gpu=gpu.describe() if gpu else None,
                            include_name_map=True)
    return BuildReport(
        model=source.loaded.source,
        onnx_path=str(save_path or source.given_graph.path) if (save_path or source.given_graph) else None,
        opset=graph.opset,
        exporter=exporter_used,
        inputs={name: tuple(int(d) for d in value.shape) for name, value in source.feeds.items()},
        tensorrt=summary,
        saved_engine=str(engine_path) if engine_path else None,
        notes=tuple(notes),
        timings={k: round(v, 4) for k, v in timings.items()},
    )
