"""What every ONNX-executing backend offers: named tensors for given inputs, in bounded chunks.

A backend never returns every intermediate at once unless they fit in `max_bytes`: the
comparison consumes one chunk, keeps only what it still needs, and asks for the next. That
is what lets trtdiff compare a model whose intermediates do not fit in memory twice over.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import onnx

    from trtdiff.source.onnx_graph import GraphInfo

DEFAULT_CHUNK_BYTES = 1 << 30


class OnnxBackend(Protocol):
    """A runtime that executes an ONNX file and can return its intermediate tensors by ONNX name."""

    name: str

    def describe(self) -> str:
        """One line naming the runtime, its version and the device it runs on."""
        ...

    def available(self) -> set[str]:
        """ONNX tensor names this backend can return (every node output it could expose)."""
        ...

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
        ...


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
