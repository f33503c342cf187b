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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto

from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, OnnxBackend, OpenRequest, chunk_names, expose_node_outputs
from trtdiff.errors import BackendError, OptionError, first_line
from trtdiff.options import DEFAULT_PROVIDER

if TYPE_CHECKING:
    from typing import Self

    from trtdiff.source.onnx_graph import GraphInfo


_ORT_FATAL = 4  # ONNX Runtime's log severity: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal
# Protobuf cannot serialize a message of 2 GB or more; a margin below it for the exposed outputs.
PROTOBUF_LIMIT = (1 << 31) - (64 << 20)


class OnnxRuntimeBackend(OnnxBackend):
    """Runs the exact ONNX file the report names and returns its intermediates by name; `close()` ends the session."""

    name = "onnxruntime"
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
        try:
            self._session: ort.InferenceSession | None = ort.InferenceSession(
                self._session_source(model), options, providers=[provider], provider_options=[provider_options]
            )
        except Exception as error:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
            self._release()  # the weights written beside a large model
            raise BackendError(
                f"{graph.path}: ONNX Runtime cannot load the model: {_ort_message(error, graph)}"
            ) from error
        self._version = ort.__version__

    def _release(self) -> None:
        self._session = None
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def _session_source(self, model: onnx.ModelProto) -> bytes | str:
        """The model as bytes, or, past protobuf's 2 GB, as a file with its weights beside it."""
        if model.ByteSize() < PROTOBUF_LIMIT:
            serialized: bytes = model.SerializeToString()
            return serialized
        self._folder = tempfile.TemporaryDirectory(prefix="trtdiff-ort-")  # kept while the session lives
        path = Path(self._folder.name) / "model.onnx"
        onnx.save_model(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="model.weights"
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
        self._check_open()
        names = [t for t in wanted if t in self._exposed_set]
        for group in chunk_names(names, sizes, max_bytes):
            session = self._session
            if session is None:
                raise BackendError(f"the {self.name} backend was closed while it ran")
            try:
                values = session.run([self._output_of[t] for t in group], _ort_feeds(feeds))
            except Exception as error:
                raise BackendError(
                    f"{self.graph.path}: ONNX Runtime failed to run the model: {_ort_message(error, self.graph)}"
                ) from error
            yield {name: np.asarray(value) for name, value in zip(group, values, strict=True)}


CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"


def choose_provider(requested: str, available: Sequence[str], *, tf32: bool) -> tuple[str, dict[str, str]]:
    """The execution provider to run and its options: "auto" is CUDA where this ONNX Runtime has it, else the CPU.

    onnxruntime-gpu lists CUDAExecutionProvider; it is given `use_tf32` (ONNX Runtime's CUDA
    provider option, on by default there) as `tf32` says, so the comparison is FP32 unless
    asked. Any other provider is taken as named, with no options; one this ONNX Runtime lacks
    is an OptionError naming `ort_provider` and the choices.
    """
    provider = (CUDA_PROVIDER if CUDA_PROVIDER in available else CPU_PROVIDER) if requested == "auto" else requested
    if provider not in available:
        raise OptionError(
            f"not available in this onnxruntime; choose auto or one of {', '.join(available)}",
            parameter="ort_provider",
            value=requested,
        )
    return provider, ({"use_tf32": "1" if tf32 else "0"} if provider == CUDA_PROVIDER else {})


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
