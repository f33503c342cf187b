"""The ONNX graph cut into consecutive segments, so that every node runs once however many chunks are wanted.

When the tensors wanted of a backend do not fit in one chunk (`max_bytes`), running the
whole graph once per chunk computes every node as many times as there are chunks (18 runs
of DeepLabV3+ at 4096x4096). Instead the topologically ordered nodes are cut into
segments whose wanted outputs fit the chunk budget; each segment is a small ONNX model of
its own whose inputs are the *frontier* it reads (graph inputs, earlier segments' values)
and whose outputs are the wanted tensors it makes plus the frontier later segments read.
Run in order, each segment's wanted outputs are one chunk and only the frontier is kept.

Only the nodes some wanted tensor depends on are kept. A node is never split: an If, Loop
or Scan stays whole in one segment, with the outer-scope tensors its subgraphs read
(`NodeInfo.implicit`) among the segment's inputs. The initializers a segment reads are
copied into it. The values at a cut are fed as they came out, so their types (float16 in
a reduced-precision graph) are kept; the caller gives each frontier tensor's type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from trtdiff.source.onnx_graph import GraphInfo


@dataclass(frozen=True)
class Segment:
    """Consecutive nodes run as one model: what it reads, what it makes, which of that is wanted.

    `nodes`: indices into `GraphInfo.nodes`, in order. `inputs`: the tensors fed to it (graph
    inputs and earlier segments' outputs; initializers are inside it). `wanted`: the wanted
    tensors it makes, in the order asked. `handed_on`: what it makes that later segments read
    (the frontier it leaves). `frontier_bytes`: the expected size of what it reads and hands on.
    """

    nodes: tuple[int, ...]
    inputs: tuple[str, ...]
    wanted: tuple[str, ...]
    handed_on: tuple[str, ...]
    frontier_bytes: int = 0

    def fetched(self, output_of: Mapping[str, str]) -> list[str]:
        """The segment model's outputs: each wanted tensor as `output_of` exposes it, then the frontier as made."""
        names = [output_of.get(t, t) for t in self.wanted]
        return names + [t for t in self.handed_on if t not in names]


def needed_nodes(graph: GraphInfo, wanted: Sequence[str]) -> list[int]:
    """Indices, in order, of the nodes that make a wanted tensor or feed one, directly or not."""
    needed = set(wanted)
    kept: list[int] = []
    for node in reversed(graph.nodes):
        if any(t in needed for t in node.outputs if t):
            kept.append(node.index)
            needed.update(t for t in node.reads if t)
    return kept[::-1]


def plan_segments(
    graph: GraphInfo, wanted: Sequence[str], sizes: Mapping[str, int] | None, max_bytes: int
) -> list[Segment]:
    """The needed nodes cut into segments whose wanted outputs stay under `max_bytes` (as `chunk_names` sizes them).

    A node whose wanted outputs alone pass the budget gets a segment of its own (it cannot be
    split); nodes that make nothing wanted join the segment being filled.
    """
    asked = set(wanted)
    sizes = sizes or {}
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for index in needed_nodes(graph, wanted):
        size = sum(sizes.get(t, 1) for t in graph.nodes[index].outputs if t in asked)
        if current and total and size and total + size > max_bytes:
            groups.append(current)
            current, total = [], 0
        current.append(index)
        total += size
    if current:
        groups.append(current)
    return _segments(graph, groups, wanted, sizes)


def largest_frontier(segments: Sequence[Segment]) -> int:
    """The most bytes of live tensors held between segments (what a segment reads and hands on), 0 for none."""
    return max((s.frontier_bytes for s in segments), default=0)


def _segments(
    graph: GraphInfo, groups: list[list[int]], wanted: Sequence[str], sizes: Mapping[str, int]
) -> list[Segment]:
    """Each group's inputs (what it reads that it does not make) and outputs (wanted, then read later)."""
    reads = [_reads(graph, group) for group in groups]
    made = [{t for i in group for t in graph.nodes[i].outputs if t} for group in groups]
    segments: list[Segment] = []
    for position, group in enumerate(groups):
        later: set[str] = set().union(*reads[position + 1 :]) if position + 1 < len(groups) else set()
        inputs = tuple(t for t in reads[position] if t not in made[position] and t not in graph.initializers)
        mine = tuple(dict.fromkeys(t for t in wanted if t in made[position]))
        handed_on = tuple(t for i in group for t in graph.nodes[i].outputs if t and t in later)
        frontier = sum(sizes.get(t, graph.tensor_type(t).nbytes() or 0) for t in (*inputs, *handed_on))
        segments.append(Segment(tuple(group), inputs, mine, handed_on, frontier))
    return segments


def _reads(graph: GraphInfo, group: Sequence[int]) -> list[str]:
    """Every tensor the group's nodes read (their inputs and their subgraphs' outer-scope names), first use first."""
    return list(dict.fromkeys(t for i in group for t in graph.nodes[i].reads if t))


def segment_model(
    graph: GraphInfo,
    segment: Segment,
    types: Mapping[str, onnx.TypeProto],
    output_of: Mapping[str, str],
) -> onnx.ModelProto:
    """The segment as a model of its own: its nodes, the initializers they read, its inputs typed by `types`.

    `output_of` names the output a wanted tensor is read through (a bfloat16 tensor through a
    Cast to float32, `expose_node_outputs`); the frontier is handed on as it is.
    """
    import onnx
    from onnx import TensorProto, helper

    source = graph.model.graph
    nodes = [source.node[i] for i in segment.nodes]
    read = set(_reads(graph, segment.nodes))
    initializers = [init for init in source.initializer if init.name in read]
    inputs = [onnx.ValueInfoProto(name=name, type=types[name]) for name in segment.inputs]
    nodes += [
        helper.make_node("Cast", [name], [output_of[name]], to=TensorProto.FLOAT)
        for name in segment.wanted
        if output_of.get(name, name) != name
    ]
    outputs = [onnx.ValueInfoProto(name=name) for name in segment.fetched(output_of)]
    body = helper.make_graph(nodes, f"{source.name or 'graph'}_segment", inputs, outputs, initializer=initializers)
    model = helper.make_model(body, opset_imports=list(graph.model.opset_import))
    model.ir_version = graph.model.ir_version
    model.functions.extend(graph.model.functions)
    return model
