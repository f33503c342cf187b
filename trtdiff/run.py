"""`trtdiff run`: record every tensor one ONNX backend produces, to compare elsewhere with --load.

For a backend that runs where PyTorch does not (an edge device with ONNX Runtime or
TensorRT): record there, then `trtdiff compare MODEL --onnx FILE --load B=FILE.npz` on a
machine with the PyTorch model, with the same pairing and reports.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from trtdiff.backends.base import OnnxBackend
from trtdiff.backends.recorded import onnx_digest, record
from trtdiff.backends.tensorrt.builder import BuildSettings, input_shapes_from
from trtdiff.errors import OptionError
from trtdiff.onnx_graph import GraphInfo
from trtdiff.prepare import check_new_file, load_source, onnx_feeds, onnx_graph_for

RECORDABLE = ("onnxruntime", "tensorrt")


@dataclass(frozen=True)
class Recording:
    """What `trtdiff run` wrote."""

    path: str
    backend: str
    describe: str
    tensors: int
    onnx_sha256: str
    onnx_path: str | None
    inputs: dict[str, tuple[int, ...]]


def run(
    model: str | Path | torch.nn.Module,
    *,
    backend: str,
    save: str | Path,
    force: bool = False,
    input_shapes: tuple[str, ...] | list[str] = (),
    input_files: tuple[str | Path, ...] | list[str | Path] = (),
    seed: int = 0,
    opset: int | None = None,
    exporter: str = "auto",
    onnx: str | Path | None = None,
    save_onnx: str | Path | None = None,
    model_class: str | None = None,
    trust: bool = False,
    ort_provider: str = "CPUExecutionProvider",
    tensorrt: BuildSettings | None = None,
    tf32: bool = False,
    engine_cache: str | Path | None = None,
) -> Recording:
    """Run `backend` on the model's ONNX file and record every tensor it returns to `save` (.npz)."""
    if backend not in RECORDABLE:
        raise OptionError(f"--backend {backend}: only ONNX backends can be recorded ({', '.join(RECORDABLE)}); "
                          "the PyTorch reference is captured by compare itself")
    target = check_new_file(save, force, "--save")
    assert target is not None
    if target.suffix != ".npz":
        raise OptionError(f"--save {target}: recordings are .npz files; name it {target.with_suffix('.npz').name}")
    source = load_source(model, model_class=model_class, trust=trust, onnx=onnx, input_shapes=input_shapes,
                         input_files=input_files, seed=seed)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trtdiff-") as tmp:
        graph, _ = onnx_graph_for(source, opset=opset, exporter=exporter, save_path=check_new_file(save_onnx, force, "--save-onnx"),
                                  folder=Path(tmp), notes=notes)
        feeds = onnx_feeds(graph, source.feeds)
        runner = _backend(backend, graph, ort_provider, replace(tensorrt or BuildSettings(), tf32=tf32,
                                                                 input_shapes=input_shapes_from(feeds)), engine_cache)
        count = record(runner, graph, feeds, target)
    return Recording(
        path=str(target), backend=backend, describe=runner.describe(), tensors=count, onnx_sha256=onnx_digest(graph),
        onnx_path=str(save_onnx or source.given_graph.path) if (save_onnx or source.given_graph) else None,
        inputs={name: tuple(int(d) for d in value.shape) for name, value in feeds.items()},
    )


def _backend(name: str, graph: GraphInfo, ort_provider: str, settings: BuildSettings,
             engine_cache: str | Path | None) -> OnnxBackend:
    if name == "onnxruntime":
        from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend

        return OnnxRuntimeBackend(graph, provider=ort_provider)
    from trtdiff.backends.tensorrt import TensorRTBackend

    return TensorRTBackend(graph, settings, cache_dir=Path(engine_cache) if engine_cache else None)
