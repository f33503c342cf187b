"""What every ONNX-executing backend offers: named tensors for given inputs, in bounded chunks.

A backend never returns every intermediate at once unless they fit in `max_bytes`: the
comparison consumes one chunk, keeps only what it still needs, and asks for the next. That
is what lets trtdiff compare a model whose intermediates do not fit in memory twice over.

Every backend has one lifecycle (Polygraphy's runner: activate, infer, deactivate): it is
open once constructed (registry.open_backend is the one place that constructs them), runs
any number of times, and is closed once: `close()` releases what it holds (sessions,
engines, files) and is idempotent, and the backend is a context manager, so `with` or an
ExitStack closes it on every path, errors included. A closed backend refuses to run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np

from trtdiff.errors import BackendError

if TYPE_CHECKING:
    from typing import Self

    import onnx

    from trtdiff.options import BackendOptions, BuildSettings
    from trtdiff.report import PairMetrics, RuntimeSummary, TensorRTSummary, Thresholds
    from trtdiff.source.onnx_graph import GraphInfo

DEFAULT_CHUNK_BYTES = 1 << 30

# Compares a reference array with a candidate under thresholds (analysis.metrics.compare_tensors):
# handed in by the stage that owns metrics, so that a backend comparing its own outputs imports none.
OutputComparison = Callable[[np.ndarray, np.ndarray, "Thresholds"], "PairMetrics"]


@dataclass(frozen=True)
class EngineRequest:
    """What a backend that builds engines (TensorRT) reads when it opens, besides its options; the others never look.

    `settings`: the engine settings the comparison derived (registry.engine_settings); None:
    derived from the options and the feeds the same way. `save_to`: where the engines built
    are written (`--save-engine`; None: nowhere).
    """

    settings: BuildSettings | None = None
    save_to: Path | None = None


@dataclass(frozen=True)
class OpenRequest:
    """What opening a backend may read besides its graph.

    `feeds`: the inputs it will run on (a runtime that builds for fixed shapes reads theirs).
    `compare_outputs`: how a compiled runtime compares its plain model's outputs with the
    marked one's (none: that check is not run). `engine`: what a backend that builds engines
    reads (EngineRequest).
    """

    options: BackendOptions
    feeds: Mapping[str, np.ndarray] | None = None
    compare_outputs: OutputComparison | None = None
    engine: EngineRequest = EngineRequest()


@dataclass(frozen=True)
class Unavailable:
    """Why a backend cannot run here, in one line, and the report's own part saying so where it has one (TensorRT's
    summary, which the report holds apart: `Report.tensorrt`); a spec's `unavailable` hook returns it."""

    reason: str
    summary: TensorRTSummary | None = None


class OnnxBackend(ABC):
    """A runtime that executes an ONNX file and can return its intermediate tensors by ONNX name.

    Subclasses implement `describe`, `available`, `run` and, where they hold anything,
    `_release`; `close` and the context manager are here.
    """

    name: str
    _closed: bool = False
    runs_once: bool = False
    """Whether one `run` for every wanted tensor runs the graph once and hands the tensors over chunk by chunk
    without holding them all (ONNX Runtime's segments, TensorRT's streamed debug tensors): a comparison then
    asks it once per sample even where another backend sets the chunks (analysis.engine)."""

    @classmethod
    def open(cls, graph: GraphInfo, request: OpenRequest) -> Self:
        """A backend of this class on `graph`, configured from `request` (registry.open_backend calls it)."""
        raise NotImplementedError(f"{cls.__name__} is not opened by name")

    @abstractmethod
    def describe(self) -> str:
        """One line naming the runtime, its version and the device it runs on."""

    def emulates(self, precision: str) -> str | None:
        """Why this backend does not really compute in a reduced `precision` ("fp16", "bf16") the graph's types
        ask for (its figures then understate the precision's own error), or None where it does."""
        return None

    @abstractmethod
    def available(self) -> set[str]:
        """ONNX tensor names this backend can return (every node output it could expose)."""

    @abstractmethod
    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Yield the `wanted` tensors in chunks whose estimated size stays under `max_bytes`.

        `sizes` holds expected byte sizes where known (unknown tensors count as one byte).
        """

    def runtime_summary(self, thresholds: Thresholds) -> RuntimeSummary | None:
        """What a compiled runtime compiled, fused and ran in, for the report's `runtimes` (None: not one).

        Read after the samples ran, before `close()`; `thresholds` judge the marking check.
        """
        return None

    @property
    def closed(self) -> bool:
        """Whether `close()` was called: the backend holds nothing and cannot run."""
        return self._closed

    def close(self) -> None:
        """Release what the backend holds (idempotent: a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        self._release()

    def _release(self) -> None:  # noqa: B027 -- a hook: a backend that holds nothing frees nothing
        """Free sessions, engines, files; called once, by `close()`. Nothing to free by default."""

    def _check_open(self) -> None:
        """Raise BackendError when the backend was closed (a run after `close()` is a bug in the caller)."""
        if self._closed:
            raise BackendError(f"the {self.name} backend was closed; open it again (trtdiff.backends.registry)")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def chunk_names(wanted: Sequence[str], sizes: Mapping[str, int] | None, max_bytes: int) -> list[list[str]]:
    """Split names, in order, into groups whose summed expected size stays under `max_bytes`."""
    groups: list[list[str]] = []
    current: list[str] = []
    total = 0
    for name in wanted:
        size = (sizes or {}).get(name, 1)
        if current and total + size > max_bytes:
            groups.append(current)
            current, total = [], 0
        current.append(name)
        total += size
    if current:
        groups.append(current)
    return groups


PROTOBUF_LIMIT = (1 << 31) - (64 << 20)
"""Protobuf cannot serialize a message of 2 GB or more; a margin below it."""


def serialized(model: onnx.ModelProto) -> bytes | None:
    """The model's bytes, for a runtime to read from memory; None past protobuf's 2 GB (read it from a file then).

    Serialized once: asking its size first (ByteSize) serializes it as well, 0.14 s for DeepLabV3 (ResNet-50)'s
    160 MB on 2 cores, for every session of every segment."""
    from google.protobuf.message import EncodeError  # type: ignore[import-untyped]  # protobuf ships no stubs

    try:
        data: bytes = model.SerializeToString()
    except EncodeError:  # protobuf refuses past 2 GB
        return None
    return data if len(data) < PROTOBUF_LIMIT else None


def fetch(runner: OnnxBackend, feeds: Mapping[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """One chunk's tensors from one backend (the chunk is already sized; no further split)."""
    values: dict[str, np.ndarray] = {}
    for part in runner.run(feeds, names, max_bytes=1 << 62):
        values.update(part)
    return values


def expose_node_outputs(
    graph: GraphInfo, *, bfloat16_as_float32: bool = False
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of the model with every node output (but the graph inputs) as a graph output.

    Returns the model and, per exposed tensor, the output that holds it: with
    `bfloat16_as_float32` a bfloat16 tensor is read through a Cast to float32 (numpy, and so
    ONNX Runtime's Python API, has no bfloat16).
    """
    import onnx
    from onnx import TensorProto, helper

    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    inputs = set(graph.graph_inputs)
    existing = {o.name for o in model.graph.output}
    output_of: dict[str, str] = {}
    for tensor in (t for t in graph.node_outputs if t not in inputs):
        dtype = graph.tensor_type(tensor).dtype
        if bfloat16_as_float32 and dtype is not None and dtype.name == "bfloat16":
            output_of[tensor] = f"{tensor}/trtdiff.float32"
            model.graph.node.append(helper.make_node("Cast", [tensor], [output_of[tensor]], to=TensorProto.FLOAT))
            model.graph.output.append(onnx.ValueInfoProto(name=output_of[tensor]))
            continue
        output_of[tensor] = tensor
        if tensor not in existing:
            model.graph.output.append(onnx.ValueInfoProto(name=tensor))
    return model, output_of
