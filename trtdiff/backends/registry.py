"""The one place ONNX backends are chosen and opened: recordings, ONNX Runtime, TensorRT.

`choose_backends` turns the requested names into the ones that will run (PyTorch only with
a PyTorch model); `open_backends` opens them on the ONNX graph, in a fixed order
(recordings, then ONNX Runtime, then TensorRT), and says why TensorRT was skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trtdiff.errors import OptionError, param
from trtdiff.options import DEFAULT_BACKENDS, BackendOptions

if TYPE_CHECKING:
    import numpy as np

    from trtdiff.backends.base import OnnxBackend
    from trtdiff.report import TensorRTSummary
    from trtdiff.source.onnx_graph import GraphInfo


@dataclass(frozen=True)
class OpenedBackends:
    """The ONNX backends ready to run, what TensorRT did (if asked for), and notes for the report."""

    backends: tuple[OnnxBackend, ...]
    tensorrt: TensorRTSummary | None
    notes: tuple[str, ...]


def choose_backends(options: BackendOptions, has_torch: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the backends to try, notes): as given, else torch (with a PyTorch model), onnxruntime, tensorrt.

    Required backends are added; recorded ones come after the others.
    """
    chosen = tuple(dict.fromkeys(options.backends)) if options.backends else DEFAULT_BACKENDS
    chosen = tuple(dict.fromkeys((*chosen, *options.require, *options.recordings)))
    notes: tuple[str, ...] = ()
    if "torch" in chosen and not has_torch:
        notes = ("MODEL is an ONNX file: only ONNX backends are compared",)
        if "torch" in options.require:
            raise OptionError(
                f"MODEL is an ONNX file; give the PyTorch model as MODEL and the file with {param('onnx')}",
                parameter="require",
                value="torch",
            )
        chosen = tuple(b for b in chosen if b != "torch")
    return chosen, notes


def open_backends(
    graph: GraphInfo,
    feeds: Mapping[str, np.ndarray],
    options: BackendOptions,
    names: Sequence[str],
    engine_path: Path | None = None,
) -> OpenedBackends:
    """Open the ONNX backends among `names` on `graph` (recordings replace running a backend)."""
    from trtdiff.backends.recorded import RecordedBackend

    opened: list[OnnxBackend] = [RecordedBackend(n, p, graph) for n, p in options.recordings.items() if n in names]
    notes: list[str] = []
    summary = None
    if "onnxruntime" in names and "onnxruntime" not in options.recordings:
        from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend

        opened.append(OnnxRuntimeBackend(graph, provider=options.ort_provider))
    if "onnx-reference" in names and "onnx-reference" not in options.recordings:
        from trtdiff.backends.onnx_reference import OnnxReferenceBackend

        opened.append(OnnxReferenceBackend(graph))
    if "tensorrt" in names and "tensorrt" not in options.recordings:
        runner, summary = _open_tensorrt(graph, feeds, options, engine_path)
        if runner is not None:
            opened.append(runner)
        elif summary is not None:
            notes.append(f"TensorRT skipped: {summary.reason}")
            if engine_path is not None:
                notes.append(f"no engine written to {engine_path}: TensorRT did not run; `trtdiff build` builds one")
    return OpenedBackends(tuple(opened), summary, tuple(notes))


def _open_tensorrt(
    graph: GraphInfo, feeds: Mapping[str, np.ndarray], options: BackendOptions, engine_path: Path | None
) -> tuple[OnnxBackend | None, TensorRTSummary | None]:
    from trtdiff.backends.tensorrt.builder import input_shapes_from
    from trtdiff.backends.tensorrt.selection import tensorrt_runner

    settings = dataclasses.replace(options.tensorrt, tf32=options.tf32, input_shapes=input_shapes_from(feeds))
    cache = Path(options.engine_cache) if options.engine_cache else None
    return tensorrt_runner(graph, settings, cache, engine_path, "tensorrt" in options.require)
