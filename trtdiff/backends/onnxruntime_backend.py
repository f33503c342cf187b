"""ONNX Runtime: every node output exposed as a graph output, graph optimizations off.

With optimizations off the tensors named in the file really exist, so each one can be
compared. The provider is chosen at run time (`choose_provider`): "auto" takes CUDA where
the installed ONNX Runtime has it (the onnxruntime-gpu package, which replaces onnxruntime
under the same module name), with TF32 off unless asked, else the CPU, the numerically
plainest. The provider and its settings are in `describe()`, so in every report.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto

from trtdiff.backends.base import (
    DEFAULT_CHUNK_BYTES,
    OnnxBackend,
    OpenRequest,
    chunk_names,
    expose_node_outputs,
    serialized,
)
from trtdiff.backends.segments import Segment, plan_segments, segment_model
from trtdiff.errors import BackendError, OptionError, first_line
from trtdiff.options import DEFAULT_PROVIDER

if TYPE_CHECKING:
    from typing import Self

    from trtdiff.source.onnx_graph import GraphInfo


_ORT_FATAL = 4  # ONNX Runtime's log severity: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal
# A segment of the graph and the session that runs it (backends.segments).
_Runnable = tuple[Segment, Any]


class OnnxRuntimeBackend(OnnxBackend):
    """Runs the exact ONNX file the report names and returns its intermediates by name; `close()` ends the session."""

    name = "onnxruntime"
    runs_once = True
    _folder: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    def open(cls, graph: GraphInfo, request: OpenRequest) -> Self:
        return cls(graph, provider=request.options.ort_provider, tf32=request.options.tf32)

    def __init__(self, graph: GraphInfo, provider: str = DEFAULT_PROVIDER, *, tf32: bool = False) -> None:
        import onnxruntime as ort

        provider, provider_options = choose_provider(provider, ort.get_available_providers(), tf32=tf32)
        self.graph = graph
        self.provider = provider
        self.provider_options = provider_options
        model, self._output_of = expose_node_outputs(graph, bfloat16_as_float32=True)
        self._exposed_set = frozenset(self._output_of)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        # No arena: it would keep the largest run's intermediates for the life of the session, on top of the
        # tensors handed back (measured: 4.9 GB against 4.0 GB peak at 2048x2048 under --memory-limit 1GB).
        options.enable_cpu_mem_arena = False
        # ONNX Runtime logs each failure to stderr and raises it too: only the raised one is reported (one line).
        # The default logger is ONNX Runtime's process-wide state (it has no getter to restore it from): the
        # session's own level below is what keeps a run quiet; the default covers loading the model.
        ort.set_default_logger_severity(_ORT_FATAL)
        options.log_severity_level = _ORT_FATAL
        self._options = options
        self._plans: dict[tuple[Any, ...], list[_Runnable] | None] = {}
        self.session_runs = 0
        """How many times a session ran (the whole graph or one segment): what a test counts."""
        self.sessions_made = 0
        try:
            self._session: ort.InferenceSession | None = self._new_session(model, "model")
        except Exception as error:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
            self._release()  # the weights written beside a large model
            raise BackendError(
                f"{graph.path}: ONNX Runtime cannot load the model: {_ort_message(error, graph)}"
            ) from error
        self._version = ort.__version__

    def _release(self) -> None:
        self._session = None
        self._plans.clear()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def _new_session(self, model: onnx.ModelProto, stem: str) -> Any:
        """A session of `model` with this backend's options and provider (`stem` names its file, if it needs one)."""
        import onnxruntime as ort

        self.sessions_made += 1
        return ort.InferenceSession(
            self._session_source(model, stem),
            self._options,
            providers=[self.provider],
            provider_options=[self.provider_options],
        )

    def _session_source(self, model: onnx.ModelProto, stem: str) -> bytes | str:
        """The model as bytes, or, past protobuf's 2 GB, as a file with its weights beside it."""
        data = serialized(model)
        if data is not None:
            return data
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="trtdiff-ort-")  # kept while the sessions live
        path = Path(self._folder.name) / f"{stem}.onnx"
        onnx.save_model(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=f"{stem}.weights"
        )
        return str(path)

    def describe(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.provider_options.items())
        return f"onnxruntime {self._version} ({self.provider}{f': {settings}' if settings else ''})"

    def emulates(self, precision: str) -> str | None:
        """The CPU provider has FP32 kernels for most float16 ops: it runs them between Casts it inserts."""
        if precision == "fp32" or self.provider != "CPUExecutionProvider":
            return None
        return (
            f"ONNX Runtime's CPU provider runs most {precision} nodes through float32 kernels between casts it "
            "inserts, so its figures understate the precision's own error and an overflow inside such a run "
            "vanishes: the ONNX reference evaluator (--backends with onnx-reference) or the CUDA provider "
            f"computes in {precision}"
        )

    def available(self) -> set[str]:
        return set(self._exposed_set)

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[dict[str, np.ndarray]]:
        """One run of the whole graph when the wanted tensors fit in one chunk, else its segments, each run once.

        Over several chunks the graph is cut into segments (backends.segments) whose wanted
        outputs fit `max_bytes`: each runs once, its wanted outputs are one chunk, and only the
        frontier later segments read is kept, as ONNX Runtime made it (types included). So
        every node runs once per call, whatever the budget. The segments' sessions are made on
        first use and kept for later calls with the same tensors and budget.
        """
        self._check_open()
        names = [t for t in wanted if t in self._exposed_set]
        if len(chunk_names(names, sizes, max_bytes)) <= 1:
            if names:
                yield self._run_whole(feeds, names)
            return
        segments = self._segments(tuple(names), sizes, max_bytes) if self.cuts_exact else None
        if segments is None:  # each chunk runs the whole graph (see `cuts_exact`; or a value at a cut is no tensor)
            for group in chunk_names(names, sizes, max_bytes):
                yield self._run_whole(feeds, group)
            return
        yield from self._run_segments(segments, feeds)

    @cached_property
    def cuts_exact(self) -> bool:
        """Whether a segment boundary leaves every value as one run of the whole graph makes it.

        Not where the CPU provider runs float16 or bfloat16 nodes through float32 kernels: inside
        one run it drops the casts between two such nodes, so the second reads the first's
        unrounded float32 result, where a cut would hand on the rounded value (one float16 step
        apart, measured on the FP16 transformer block). There each chunk runs the whole graph.
        """
        if self.provider != CPU_PROVIDER:
            return True
        reduced = ("float16", "bfloat16")
        return not any(
            (d := self.graph.tensor_type(t).dtype) is not None and d.name in reduced for t in self._output_of
        )

    def _run_whole(self, feeds: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
        """`names` from one run of the whole graph."""
        session = self._live(self._session)
        self.session_runs += 1
        try:
            values = session.run([self._output_of[t] for t in names], _ort_feeds(feeds))
        except Exception as error:
            raise self._failed(error) from error
        return {name: np.asarray(value) for name, value in zip(names, values, strict=True)}

    def _run_segments(
        self, segments: list[_Runnable], feeds: Mapping[str, np.ndarray]
    ) -> Iterator[dict[str, np.ndarray]]:
        """Each segment run once on the frontier; its wanted outputs yielded, what no later segment reads dropped."""
        import onnxruntime as ort

        frontier: dict[str, Any] = {
            name: value if isinstance(value, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(value)
            for name, value in _ort_feeds(feeds).items()
        }
        for position, (segment, session) in enumerate(segments):
            fetched = segment.fetched(self._output_of)
            self.session_runs += 1
            try:
                values = self._live(session).run_with_ort_values(fetched, {t: frontier[t] for t in segment.inputs})
            except Exception as error:
                raise self._failed(error) from error
            made = dict(zip(fetched, values, strict=True))
            later = {t for next_segment, _ in segments[position + 1 :] for t in next_segment.inputs}
            frontier = {t: v for t, v in frontier.items() if t in later}
            frontier.update((t, made[t]) for t in segment.handed_on if t in later)
            del values
            chunk: dict[str, np.ndarray] = {}
            for tensor in segment.wanted:  # each copied to numpy and its OrtValue let go: one chunk held, not two
                chunk[tensor] = np.asarray(made.pop(self._output_of.get(tensor, tensor)).numpy())
            del made
            yield chunk
            del chunk  # the caller has compared and dropped it: not held through the next segment's run

    def _segments(
        self, names: tuple[str, ...], sizes: Mapping[str, int] | None, max_bytes: int
    ) -> list[_Runnable] | None:
        """The segments for these tensors and budget, with their sessions (made once, then reused)."""
        key = (names, max_bytes, tuple((sizes or {}).get(t) for t in names))
        if key not in self._plans:
            self._plans[key] = self._open_segments(plan_segments(self.graph, names, sizes, max_bytes))
        return self._plans[key]

    def _open_segments(self, segments: list[Segment]) -> list[_Runnable] | None:
        """A session per segment, with the whole graph's session options; None where a cut holds no tensor."""
        types = self._frontier_types()
        if any(t not in types for segment in segments for t in segment.inputs):
            return None
        opened: list[_Runnable] = []
        for position, segment in enumerate(segments):
            model = segment_model(self.graph, segment, types, self._output_of)
            try:
                session = self._new_session(model, f"segment{position}")
            except Exception as error:  # ORT raises its own types; the whole graph did load
                raise BackendError(
                    f"{self.graph.path}: ONNX Runtime cannot load segment {position + 1} of the model: "
                    f"{_ort_message(error, self.graph)}"
                ) from error
            opened.append((segment, session))
        return opened

    def _frontier_types(self) -> dict[str, onnx.TypeProto]:
        """Each tensor's type as ONNX Runtime inferred it for the whole graph (what a cut is fed with)."""
        from onnx import helper

        session = self._live(self._session)
        types: dict[str, onnx.TypeProto] = {}
        for arg in (*session.get_inputs(), *session.get_outputs()):
            element = _element_type(arg.type)
            if element is not None:
                known = self.graph.tensor_type(arg.name).shape  # ORT reports an unknown rank as [], as a scalar's
                shape = arg.shape if arg.shape or known == () else known
                types[arg.name] = helper.make_tensor_type_proto(element, _dims(shape))
        for raw, exposed in self._output_of.items():  # read through a Cast: bfloat16, the shape as exposed
            if raw != exposed and exposed in types:
                shape = types[exposed].tensor_type.shape
                types[raw] = helper.make_tensor_type_proto(TensorProto.BFLOAT16, None)
                types[raw].tensor_type.shape.CopyFrom(shape)
        return types

    def _live(self, session: Any) -> Any:
        if session is None or self._closed:
            raise BackendError(f"the {self.name} backend was closed while it ran")
        return session

    def _failed(self, error: BaseException) -> BackendError:
        return BackendError(
            f"{self.graph.path}: ONNX Runtime failed to run the model: {_ort_message(error, self.graph)}"
        )


CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"


def choose_provider(requested: str, available: Sequence[str], *, tf32: bool) -> tuple[str, dict[str, str]]:
    """The execution provider to run and its options: "auto" is CUDA where this ONNX Runtime has it, else the CPU.

    onnxruntime-gpu lists CUDAExecutionProvider; it is given `use_tf32` (ONNX Runtime's CUDA
    provider option, on by default there) as `tf32` says, so the comparison is FP32 unless
    asked, and cuDNN's heuristic choice of each convolution's algorithm: the default times
    every algorithm of every convolution on a session's first run, and a comparison makes a
    session per graph it runs once (the model, each node alone, its float32 twin): on the H200
    host an FP16 compare of torchvision's LRASPP at 512x512 took 18.7-24.2 s with it, 13.2-16.5 s
    without (FP32: 2.8-2.9 s, 1.9-2.3 s). Every algorithm computes the convolution in the
    precision asked; which one runs is not what a comparison judges. Any other provider is
    taken as named, with no options; one this ONNX Runtime lacks is an OptionError naming
    `ort_provider` and the choices.
    """
    provider = (CUDA_PROVIDER if CUDA_PROVIDER in available else CPU_PROVIDER) if requested == "auto" else requested
    if provider not in available:
        raise OptionError(
            f"not available in this onnxruntime; choose auto or one of {', '.join(available)}",
            parameter="ort_provider",
            value=requested,
        )
    if provider != CUDA_PROVIDER:
        return provider, {}
    return provider, {"use_tf32": "1" if tf32 else "0", "cudnn_conv_algo_search": "HEURISTIC"}


def _element_type(text: str) -> int | None:
    """ONNX's element type of an ONNX Runtime type name ("tensor(float16)"), None for a sequence, map or optional."""
    if not (text.startswith("tensor(") and text.endswith(")")):
        return None
    element: int | None = getattr(TensorProto, text[len("tensor(") : -1].upper(), None)
    return element


def _dims(shape: Sequence[Any] | None) -> list[int | str | None] | None:
    """A shape as ONNX Runtime reports it, as `helper.make_tensor_type_proto` takes it (symbols and unknowns kept).

    The dimensions are kept, not left open: ONNX Runtime's shape inference inside a segment
    reads them (a Resize checks its `sizes` input's length against the rank).
    """
    if shape is None:
        return None
    return [d if isinstance(d, int | str) else None for d in shape]


def _ort_feeds(feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The feeds as ONNX Runtime takes them: bfloat16 arrays (ml_dtypes) as OrtValues of that type."""
    import onnxruntime as ort

    converted: dict[str, Any] = {}
    for name, value in feeds.items():
        if value.dtype.name == "bfloat16":
            converted[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                value.view(np.uint16), TensorProto.BFLOAT16
            )
        else:
            converted[name] = value
    return converted


_SOURCE_CHECK = re.compile(r"\S*onnxruntime_src/\S+:\d+ .*? was false\. ")


def _ort_message(error: BaseException, graph: GraphInfo) -> str:
    """ORT's first line, plus the node and op type when an unsupported op is the cause.

    The C++ source location and the check that failed ("/onnxruntime_src/...h:84 Helper(...)
    size != 0 ... was false.") are dropped: the sentence after them says what was wrong.
    """
    text = first_line(error, limit=10_000) or type(error).__name__
    text = _SOURCE_CHECK.sub("", text)
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx") and node.op_type in text:
            return (
                f"{text[:300]} (node {node.name}, op {node.domain}::{node.op_type}; ONNX Runtime has no kernel for it)"
            )
    for node in graph.nodes:
        if f"'{node.op_type}'" in text or f"op_type:{node.op_type}" in text.replace(" ", ""):
            return f"{text[:300]} (node {node.name}, op {node.op_type})"
    return text[:400]
