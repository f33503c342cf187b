"""Where NaN and Inf come from: per backend, the first tensor they appear in on their way to an output.

"Where does the NaN come from" is what users ask when an FP16 engine returns NaN. The
answer is searched backwards from each non-finite final output of a backend: through its
producer's inputs, following tensors that hold NaN/Inf in that backend (and tensors that
were not compared, which cannot say), stopping at compared tensors that are finite. The
first tensor reached, in topological order, is named. A correct attention mask holding
-inf is not: the finite softmax after it stops the search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from trtdiff.report import NonFinite

if TYPE_CHECKING:
    from trtdiff.report import BackendPair, Layer, PairMetrics
    from trtdiff.source.onnx_graph import GraphInfo


def backend_counts(pairs: Mapping[BackendPair, PairMetrics], backend: str) -> tuple[int, int] | None:
    """`backend`'s NaN and Inf counts in one tensor, read from any pair it takes part in (None: not compared)."""
    for pair, metrics in pairs.items():
        if pair.reference == backend:
            return metrics.nan_ref, metrics.inf_ref
        if pair.candidate == backend:
            return metrics.nan_cand, metrics.inf_cand
    return None


def non_finite_backends(outputs: Mapping[str, Mapping[BackendPair, PairMetrics]], backends: Sequence[str]) -> list[str]:
    """The backends among `backends` whose final outputs (output -> pair -> metrics) hold NaN or Inf."""
    return [
        backend
        for backend in backends
        if any(sum(backend_counts(per_pair, backend) or (0, 0)) for per_pair in outputs.values())
    ]


def first_non_finite(
    layers: Sequence[Layer], graph: GraphInfo, backends: Sequence[str], sample: str
) -> tuple[NonFinite, ...]:
    """For each backend whose compared outputs hold NaN/Inf, where they first appear (see the module doc)."""
    found: list[NonFinite] = []
    for backend in backends:
        counts = {layer.tensor: c for layer in layers if (c := backend_counts(layer.pairs, backend)) is not None}
        outputs = [layer.tensor for layer in layers if layer.is_output and any(counts.get(layer.tensor, ()))]
        if not outputs:
            continue
        origins = set().union(*(_origins(graph, output, counts) for output in outputs))
        layer = next(layer for layer in layers if layer.tensor in origins)
        nan, inf = counts[layer.tensor]
        found.append(NonFinite(backend, layer.tensor, layer.onnx_node, layer.op_type, layer.module, nan, inf, sample))
    return tuple(found)


def _origins(graph: GraphInfo, output: str, counts: Mapping[str, tuple[int, int]]) -> set[str]:
    """`output` and the compared non-finite tensors upstream of it, reached without crossing a finite one."""
    reached, stack, seen = {output}, [output], {output}
    while stack:
        producer = graph.producer_of.get(stack.pop())
        if producer is None:
            continue
        for tensor in graph.nodes[producer].inputs:
            if not tensor or tensor in seen:
                continue
            seen.add(tensor)
            known = counts.get(tensor)
            if known is None:  # not compared here: look through it
                stack.append(tensor)
            elif any(known):
                reached.add(tensor)
                stack.append(tensor)
    return reached
