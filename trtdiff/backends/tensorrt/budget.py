"""The mark budget: how many bytes of debug tensors one run of the engine may copy, and the run groups.

One engine is built with every tensor marked as a debug tensor; what the budget limits is
what one execution copies. The marked tensors are cut, in the network's layer order (the
ONNX parser adds layers in node order, so topological), into contiguous groups whose bytes
fit the budget; each run of the same engine switches on the debug state of one group
(`set_tensor_debug_state`). One engine means one fusion and one answer, whatever the budget.

Sizes come from the shapes actually fed: where the ONNX file leaves dimensions dynamic, its
shapes are inferred again with the inputs fixed to the fed shapes. The default budget is a
fixed number, never the GPU's momentary free memory, so the same command plans the same runs
on any day.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from trtdiff.errors import OptionError
from trtdiff.source.onnx_graph import GraphInfo, graph_from_model

DEFAULT_MARK_BUDGET = 1 << 30  # 1 GiB of debug tensors copied per run
TRT_API: tuple[str, ...] = ()
TRT_OPTIONAL_API: tuple[str, ...] = ()


@dataclass(frozen=True)
class Budget:
    """The budget in bytes and where it came from (the report states both)."""

    bytes: int
    source: str  # "given" or "default"

    def describe(self) -> str:
        return f"{self.bytes:,} bytes ({'given' if self.source == 'given' else 'the fixed default'})"


def budget_of(given: int | None) -> Budget:
    """The budget for `mark_budget_bytes` (None: the fixed default)."""
    if given is None:
        return Budget(DEFAULT_MARK_BUDGET, "default")
    if given <= 0:
        raise OptionError("must be a positive number of bytes", parameter="mark_budget_bytes", value=given)
    return Budget(int(given), "given")


def resolved_sizes(graph: GraphInfo, input_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int | None]:
    """Bytes of every node output for the shapes fed (None where even then unknown).

    The graph's own types where they are static and its inputs are what is fed; else shape
    inference again on a copy whose inputs have the fed shapes (dynamic dimensions resolved).
    """
    sizes = {name: graph.tensor_type(name).nbytes() for name in graph.node_outputs}
    fed_as_declared = all(
        graph.tensor_type(name).shape == tuple(shape) for name, shape in input_shapes.items() if name in graph.types
    )
    if fed_as_declared and all(size is not None for size in sizes.values()):
        return sizes
    fixed = _with_input_shapes(graph.model, input_shapes)
    if fixed is None:
        return sizes
    inferred = graph_from_model(fixed, graph.path)
    return {name: inferred.tensor_type(name).nbytes() or sizes.get(name) for name in graph.node_outputs}


def _with_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> onnx.ModelProto | None:
    """A copy of the model's top-level graph with the inputs fixed to `shapes` and no inferred values."""
    if not shapes:
        return None
    copy = onnx.ModelProto()
    try:
        copy.CopyFrom(model)
    except Exception:  # noqa: BLE001 -- a model over protobuf's limit: sizes stay as declared
        return None
    del copy.graph.value_info[:]
    for value in copy.graph.input:
        if value.name not in shapes or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        del dims[:]
        for size in shapes[value.name]:
            dims.add().dim_value = int(size)
    return copy


def run_groups(names: Sequence[str], sizes: Mapping[str, int | None], budget: int) -> list[tuple[str, ...]]:
    """`names`, in order, in consecutive groups whose bytes fit `budget` (a larger tensor alone).

    An unknown size counts as the largest known one (the budget itself when none is known),
    so an unknown never makes a run copy more than planned without saying so.
    """
    known = [size for size in (sizes.get(n) for n in names) if size is not None]
    fallback = max(known, default=budget)
    groups: list[tuple[str, ...]] = []
    current: list[str] = []
    used = 0
    for name in names:
        size = sizes.get(name)
        size = fallback if size is None else size
        if current and used + size > budget:
            groups.append(tuple(current))
            current, used = [], 0
        current.append(name)
        used += size
    if current:
        groups.append(tuple(current))
    return groups
