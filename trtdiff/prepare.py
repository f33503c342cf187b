"""The steps `compare` and `build` share: load the model, build inputs, get the ONNX file.

Kept apart from the pipeline so both commands take exactly the same options the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trtdiff.errors import InputError, OptionError
from trtdiff.export import export_onnx
from trtdiff.inputs import make_inputs
from trtdiff.loading import LoadedModel, from_module, load_model
from trtdiff.onnx_graph import GraphInfo, load_graph

DEFAULT_OPSET = 17


@dataclass(frozen=True)
class Source:
    """The loaded model, the ONNX file the user gave (if any), and the inputs, in input order."""

    loaded: LoadedModel
    given_graph: GraphInfo | None
    feeds: dict[str, np.ndarray]
    input_names: tuple[str, ...] = ()
    dtypes: dict[str, np.dtype] | None = None

    @property
    def has_torch(self) -> bool:
        return self.loaded.kind != "onnx"


def load_source(
    model: str | Path | torch.nn.Module,
    *,
    model_class: str | None,
    trust: bool,
    onnx: str | Path | None,
    input_shapes: Sequence[str],
    input_files: Sequence[str | Path],
    seed: int,
    first_feeds: Mapping[str, np.ndarray] | None = None,
) -> Source:
    """Load MODEL (a file, a factory spec or an nn.Module), the given ONNX file, and the inputs.

    `first_feeds` replaces the inputs built from shapes and files (a data set's first sample).
    """
    if isinstance(model, (str, Path)):
        loaded = load_model(str(model), model_class=model_class, trust=trust)
    else:
        loaded = from_module(model)
    if loaded.kind == "onnx":
        if onnx is not None:
            raise OptionError(f"--onnx {onnx}: MODEL is already an ONNX file; give the PyTorch model as MODEL")
        onnx = loaded.onnx_path
    given = load_graph(onnx) if onnx is not None else None
    names = given.graph_inputs if given is not None else loaded.input_names
    dtypes = {} if given is None else {n: dtype for n in names if (dtype := given.tensor_type(n).dtype) is not None}
    if first_feeds is not None:
        values = list(first_feeds.values())
        feeds = dict(zip(names, values, strict=True)) if len(names) == len(values) else dict(first_feeds)
        return Source(loaded, given, feeds, tuple(names), dtypes)
    if given is not None and not input_shapes and not input_files:
        input_shapes = _static_shapes(given)
    feeds = make_inputs(list(names), shapes=list(input_shapes), files=[str(f) for f in input_files], seed=seed, dtypes=dtypes)
    return Source(loaded, given, feeds, tuple(names), dtypes)


def _static_shapes(graph: GraphInfo) -> list[str]:
    """--input-shape values read from the ONNX file's inputs, when every dimension is fixed."""
    shapes = []
    for name in graph.graph_inputs:
        shape = graph.tensor_type(name).shape
        if shape is None or any(d is None or d <= 0 for d in shape):
            return []
        shapes.append(f"{name}:{'x'.join(map(str, shape))}")
    return shapes


def onnx_graph_for(
    source: Source, *, opset: int | None, exporter: str, save_path: Path | None, folder: Path, notes: list[str]
) -> tuple[GraphInfo, str]:
    """The ONNX graph to compare (given, or exported now) and the name of the exporter used."""
    if source.given_graph is not None:
        if opset is not None and source.given_graph.opset != opset:
            notes.append(f"--opset {opset} ignored: the given ONNX file declares opset {source.given_graph.opset}")
        return source.given_graph, "given"
    target = save_path if save_path is not None else folder / "model.onnx"
    result = export_onnx(source.loaded, source.feeds, opset=opset or DEFAULT_OPSET, exporter=exporter, path=target)
    notes.append(f"exported with the {result.exporter} exporter at opset {result.opset}")
    return load_graph(result.path), result.exporter


def check_new_file(path: str | Path | None, force: bool, option: str) -> Path | None:
    """A path trtdiff may write: never an existing file unless `force`, and its folder must exist."""
    if path is None:
        return None
    path = Path(path)
    if path.exists() and not force:
        raise OptionError(f"{option} {path}: the file exists; choose another path or pass --force to overwrite it")
    if not path.parent.is_dir():
        raise OptionError(f"{option} {path}: folder {path.parent} does not exist; create it first")
    return path


def onnx_feeds(graph: GraphInfo, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs keyed by the ONNX file's input names, checked against its static dimensions."""
    values = list(feeds.values())
    if set(graph.graph_inputs) <= set(feeds):
        named = {name: feeds[name] for name in graph.graph_inputs}
    elif len(graph.graph_inputs) == len(values):
        named = dict(zip(graph.graph_inputs, values, strict=True))
    else:
        raise InputError(
            f"{graph.path}: the ONNX file has inputs {', '.join(graph.graph_inputs)} but the model was given "
            f"{', '.join(feeds)}; check that --onnx belongs to this model"
        )
    for name, value in named.items():
        expected = graph.tensor_type(name)
        if expected.shape is None:
            continue
        fits = len(expected.shape) == value.ndim and all(d is None or d == v for d, v in zip(expected.shape, value.shape))
        if not fits:
            want = "x".join("?" if d is None else str(d) for d in expected.shape)
            got = "x".join(map(str, value.shape))
            raise InputError(f"input {name}: shape {got} does not fit {graph.path.name}, which expects {want}; "
                             f"use --input-shape {name}:{want.replace('?', '1')}")
    return named


@contextmanager
def timed(timings: dict[str, float], step: str) -> Iterator[None]:
    """Add the seconds the block took to `timings[step]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[step] = timings.get(step, 0.0) + time.perf_counter() - start
