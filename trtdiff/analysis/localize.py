"""Find the first diverging tensor and the ONNX nodes that may have caused it.

Layers are in topological order, so the first diverging one is the earliest place the
numbers change. When that tensor is a module output whose inner ops were not paired one by
one, the cause lies somewhere between the last tensors known to agree and it: the suspects
are the ancestors of the diverging node that no agreeing tensor vouches for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trtdiff.report import FirstDivergence

if TYPE_CHECKING:
    from trtdiff.report import BackendPair, Layer
    from trtdiff.source.onnx_graph import GraphInfo

_NOT_SUSPECT_OPS = {"Constant"}


def first_divergence(
    layers: Sequence[Layer], graph: GraphInfo, pair_order: Sequence[BackendPair]
) -> FirstDivergence | None:
    """The first layer with a diverged pair (pairs tried in `pair_order`), with its suspects."""
    for position, layer in enumerate(layers):
        diverged = [key for key in pair_order if key in layer.pairs and layer.pairs[key].diverged]
        if not diverged:
            continue
        key = diverged[0]
        metrics = layer.pairs[key]
        agreeing = [other.tensor for other in layers[:position] if key in other.pairs and not other.pairs[key].diverged]
        return FirstDivergence(
            tensor=layer.tensor,
            onnx_node=layer.onnx_node,
            op_type=layer.op_type,
            module=layer.module,
            pair=key,
            cosine=metrics.cosine,
            max_abs=metrics.max_abs,
            rel_err=metrics.rel_err,
            reasons=metrics.reasons,
            suspects=suspects(graph, layer.tensor, agreeing),
        )
    return None


def suspects(graph: GraphInfo, tensor: str, agreeing: Sequence[str]) -> tuple[str, ...]:
    """Node names between the agreeing tensors and `tensor`: the diverging node first, then nearest first."""
    target = graph.producer_of.get(tensor)
    if target is None:
        return ()
    upstream = graph.ancestors(target)
    vouched: set[int] = set()
    stack = [graph.producer_of[t] for t in agreeing if t in graph.producer_of and graph.producer_of[t] in upstream]
    while stack:
        index = stack.pop()
        if index in vouched:
            continue
        vouched.add(index)
        stack.extend(p for t in graph.nodes[index].reads if (p := graph.producer_of.get(t)) is not None)
    open_nodes = sorted(i for i in upstream - vouched if graph.nodes[i].op_type not in _NOT_SUSPECT_OPS)
    return (graph.nodes[target].name, *(graph.nodes[i].name for i in reversed(open_nodes)))
