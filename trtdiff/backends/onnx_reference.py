"""onnx.reference: the ONNX spec's own evaluator (numpy, on the CPU), every node output exposed.

`ReferenceEvaluator` runs each op exactly as the ONNX specification describes it, so it is
a third opinion next to ONNX Runtime and TensorRT: where a runtime and PyTorch disagree, it
says which of the two follows the spec. It is slow (plain numpy) and returns only graph
outputs, so every node output is added as a graph output once, the model is evaluated once
per `run` call, and the wanted tensors are then handed out chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, OnnxBackend, OpenRequest, chunk_names, expose_node_outputs
from trtdiff.errors import BackendError, first_line

if TYPE_CHECKING:
    from typing import Self

    from trtdiff.source.onnx_graph import GraphInfo


class OnnxReferenceBackend(OnnxBackend):
    """Runs the exact ONNX file the report names through `onnx.reference.ReferenceEvaluator`."""

    name = "onnx-reference"

    @classmethod
    def open(cls, graph: GraphInfo, request: OpenRequest) -> Self:
        return cls(graph)

    def __init__(self, graph: GraphInfo) -> None:
        from onnx.reference import ReferenceEvaluator

        self.graph = graph
        model, exposed = expose_node_outputs(graph)
        self._exposed_set = frozenset(exposed)
        try:
            self._evaluator: ReferenceEvaluator | None = ReferenceEvaluator(
                model, new_ops=_pre_11_resize() if graph.opset < 11 else None
            )
        except Exception as error:  # NotImplementedError for unknown ops, others for bad models
            raise BackendError(
                f"{graph.path}: the ONNX reference evaluator cannot load the model: {_reference_message(error, graph)}"
            ) from error

    def describe(self) -> str:
        return f"onnx.reference (onnx {onnx.__version__}, spec evaluator on the CPU)"

    def available(self) -> set[str]:
        return set(self._exposed_set)

    def _release(self) -> None:
        self._evaluator = None

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[dict[str, np.ndarray]]:
        self._check_open()
        names = list(dict.fromkeys(t for t in wanted if t in self._exposed_set))
        if not names:
            return
        values = self._evaluate(feeds, names)
        for group in chunk_names(names, sizes, max_bytes):
            yield {name: np.asarray(values.pop(name)) for name in group}

    def _evaluate(self, feeds: Mapping[str, np.ndarray], names: list[str]) -> dict[str, Any]:
        """Run the whole model once and keep the `names` tensors (BackendError naming the node on failure)."""
        evaluator = self._evaluator
        if evaluator is None:
            raise BackendError(f"the {self.name} backend was closed while it ran")
        try:  # numpy computes what the spec says: an overflow to inf or a NaN is a value, not a warning
            with np.errstate(all="ignore"):
                outputs = evaluator.run(names, dict(feeds))
        except Exception as error:  # each op raises what numpy raises
            raise BackendError(
                f"{self.graph.path}: the ONNX reference evaluator failed to run the model: "
                f"{_reference_message(error, self.graph)}"
            ) from error
        return dict(zip(names, outputs, strict=True))


def _pre_11_resize() -> list[type]:
    """Resize-10 and Upsample as the spec of their opset has them (the evaluator knows only Resize-11+).

    Before opset 11 both take (X, scales) and map output pixel i to input coordinate
    i / scale ("asymmetric"), nearest neighbours rounding down; onnx.reference reads the
    second input as Resize-11's `roi` and has no linear Upsample. (Nearest downsampling by a
    non-integer factor is unspecified before opset 11; ONNX Runtime rounds up there.)
    """
    from onnx.reference.ops.op_resize import Resize as SpecResize

    def run(self: SpecResize, x: np.ndarray, scales: np.ndarray, mode: str = "nearest", **_: Any) -> Any:
        return SpecResize._run(
            self,
            x,
            None,
            np.asarray(scales, dtype=np.float32),
            mode=mode,
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )

    return [type(name, (SpecResize,), {"op_domain": "", "_run": run}) for name in ("Resize", "Upsample")]


def _reference_message(error: BaseException, graph: GraphInfo) -> str:
    """The evaluator's first line, plus the node and op that raised it (from the traceback or the text)."""
    text = (first_line(error, limit=10_000) or type(error).__name__)[:300]
    failing = _failing_node(error.__traceback__)
    if failing is not None:
        name, op_type = failing
        return f"{type(error).__name__}: {text} (node {name}, op {op_type})"
    for node in graph.nodes:
        if node.domain not in ("", "ai.onnx") and f"'{node.op_type}'" in text:
            return f"{text} (node {node.name}, op {node.domain}::{node.op_type}; the evaluator has no implementation)"
    for node in graph.nodes:
        if f"'{node.op_type}'" in text:
            return f"{text} (node {node.name}, op {node.op_type})"
    return text


def _failing_node(trace: TracebackType | None) -> tuple[str, str] | None:
    """(name, op type) of the outermost ONNX node whose implementation is on the traceback."""
    from onnx.reference.op_run import OpRun

    while trace is not None:
        owner = trace.tb_frame.f_locals.get("self")
        if isinstance(owner, OpRun):
            node = owner.onnx_node
            return node.name, node.op_type
        trace = trace.tb_next
    return None
