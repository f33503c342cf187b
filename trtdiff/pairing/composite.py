"""A PyTorch op that the exporter decomposed, paired with the last node of its decomposition.

GELU (Div, Erf, Add, Mul, Mul in its erf form; nine nodes in its tanh form), SiLU (Sigmoid,
Mul), HardSwish below opset 14, Mish below 18, LayerNorm below opset 17: PyTorch records one
op, ONNX computes it in several nodes and no node has its kind. The module pass pairs such an
op when it is a module of its own in an eager model; this pass also covers functional calls
and TorchScript archives, where no module outputs are known.

The decomposition is found by data flow. The op's input is a recorded value that is paired
with an ONNX tensor x; the nodes computed from x (and constants) alone, through tensors
without a PyTorch value, are the candidates, in the op's module scope where both sides know
it. A candidate stands for the op when:
- its value, computed in PyTorch from x (pairing_derive), is the op's recorded value, to
  VOUCH_RTOL of its magnitude, and rounding could not move it past the thresholds; the first
  such candidate in topological order is taken; or
- no candidate reproduces it and the region is refuted: a recorded value downstream is not
  reproduced from the candidates either, so the ONNX nodes there compute something other than
  PyTorch (an edit, a wrong constant). Then the op, of a kind that exporters decompose, is
  paired with the last candidate of its module scope that every later candidate computed from
  it depends on alone (its cut), provided every recorded op that reads the op's output has its
  own pair. The local error then names a node of the decomposition, not the next recorded op.
  Where a reader has none yet, being decomposed too (the SiLU after a GroupNorm in an archive,
  where no module outputs are known), each cut is tried from the last: with the op's recorded
  value there (values evaluated again), the readers must each find a node that computes their
  own recorded value; the first cut they confirm is taken with their pairs. A cut past the
  op's end (its reader's nodes) leaves a reader nothing to compute its value from.
An op paired here is the input of the ops after it in the same pass (a SiLU edited after a
GroupNorm that pairs by value). A region that the values downstream vouch for, or that could
not be computed, is left as it is: a correct model is never given a pair that its values
contradict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from trtdiff.backends.pytorch.op_kinds import DECOMPOSED_KINDS
from trtdiff.backends.pytorch.records import INPUT, TorchCapture, TorchRecord
from trtdiff.pairing.kinds import computed_from_inputs

if TYPE_CHECKING:
    from trtdiff.pairing.derive import Evaluation
    from trtdiff.source.onnx_graph import GraphInfo


def pair_composites(
    graph: GraphInfo,
    capture: TorchCapture,
    keys: Mapping[str, str],
    used: set[int],
    node_modules: Mapping[str, str | None],
    evaluation: Evaluation,
    fits: Callable[[str, TorchRecord], bool],
    reevaluate: Callable[[Mapping[str, str]], Evaluation] | None = None,
) -> dict[str, TorchRecord]:
    """ONNX tensor -> the unpaired record it stands for (see the module docstring).

    `keys` maps the paired ONNX tensors to capture keys, `used` holds the paired records'
    indices, `fits` says whether an ONNX tensor's type can hold a record's value; `reevaluate`
    evaluates again with more sources (pairing_derive.evaluate), to confirm a refuted region's
    cut through the ops that read it (see the module docstring).
    """
    composites = _Pass(graph, capture, node_modules, fits)
    found, blocked = composites.run(capture.records, keys, used, evaluation)
    if reevaluate is None:
        return found
    for record, cuts, readers in blocked:
        for cut in cuts:
            trial = {**keys, **{t: r.key for t, r in found.items()}, cut: record.key}
            taken = used | {r.index for r in found.values()} | {record.index}
            reading = [capture.records[i] for i in readers]
            confirmed, _ = composites.run(reading, trial, taken, reevaluate(trial), by_value=True)
            if sorted(r.index for r in confirmed.values()) == sorted(readers):
                found[cut] = record
                found.update(confirmed)
                break
    return found


_Blocked = tuple[TorchRecord, list[str], list[int]]
"""A refuted op whose readers have no pair yet: the op, the cuts it may end at (last first), the readers."""


class _Pass:
    """One pass over recorded ops, pairing each with a node of its decomposition (see the module docstring)."""

    def __init__(
        self,
        graph: GraphInfo,
        capture: TorchCapture,
        node_modules: Mapping[str, str | None],
        fits: Callable[[str, TorchRecord], bool],
    ) -> None:
        self.graph, self.capture, self.node_modules, self.fits = graph, capture, node_modules, fits
        self.from_inputs = computed_from_inputs(capture)
        self.readers: dict[int, list[int]] = {}
        for record in capture.records:
            for source in set(record.sources):
                if source is not None and source >= 0:
                    self.readers.setdefault(source, []).append(record.index)
        self.outputs = {index for index in capture.output_records if index is not None}
        self.order = {tensor: i for i, tensor in enumerate(graph.node_outputs)}

    def run(
        self,
        records: Sequence[TorchRecord],
        keys: Mapping[str, str],
        used: set[int],
        evaluation: Evaluation,
        by_value: bool = False,
    ) -> tuple[dict[str, TorchRecord], list[_Blocked]]:
        """The pairs this pass makes among `records` (only those whose value a node computes, when `by_value`),
        and the refuted ops it could not pair while their readers have no pair."""
        graph, capture, node_modules, order = self.graph, self.capture, self.node_modules, self.order
        tensor_of = {key: tensor for tensor, key in keys.items()}
        roots = _Roots(graph, keys)
        found: dict[str, TorchRecord] = {}
        blocked: list[_Blocked] = []

        def take(tensor: str, record: TorchRecord) -> None:  # an op paired here is the input of the ops after it
            nonlocal roots
            found[tensor] = record
            tensor_of[record.key] = tensor
            roots = _Roots(graph, {**keys, **{t: r.key for t, r in found.items()}})

        for record in records:
            if record.index in used or record.kind == "module":
                continue
            data = {s for s in record.sources if s is not None and (s == INPUT or self.from_inputs[s])}
            if len(data) != 1:
                continue
            (source,) = data
            x = _onnx_input(graph, tensor_of, source)
            if x is None:
                continue
            scope = capture.path_of(record)
            region = [t for t in roots.computed_from(x) if t not in found and _float_data(graph, t)]
            if not region:
                continue
            fitting = [t for t in region if self.fits(t, record) and _in_scope(node_modules, graph, t, scope)]
            agreeing = [t for t in fitting if t not in evaluation.unstable and evaluation.agrees(t, record.key)]
            if agreeing:
                take(min(agreeing, key=order.__getitem__), record)
                continue
            if by_value or record.kind not in DECOMPOSED_KINDS or scope is None or not set(region) & evaluation.refuted:
                continue
            scoped = sorted((t for t in fitting if _scope(node_modules, graph, t) == scope), key=order.__getitem__)
            cuts = [t for t in reversed(scoped) if _cut(graph, t, set(region), order)]
            left = [r for r in self.readers.get(record.index, []) if r not in used and r not in self.outputs]
            if left and cuts:
                blocked.append((record, cuts, left))
            elif scoped and cuts and cuts[0] == scoped[-1]:
                take(cuts[0], record)
        return found, blocked


class _Roots:
    """For each ONNX tensor, the paired tensors (and graph inputs) it is computed from through unpaired ones."""

    def __init__(self, graph: GraphInfo, keys: Mapping[str, str]) -> None:
        roots: dict[str, frozenset[str]] = {t: frozenset({t}) for t in graph.graph_inputs}
        self.alone: dict[str, list[str]] = {}  # x -> the unpaired tensors computed from x alone, in order
        for node in graph.nodes:
            feeding = [t for t in node.inputs if t in graph.data_tensors]
            merged = frozenset().union(*(roots.get(t, frozenset()) for t in feeding))
            for tensor in (t for t in node.outputs if t):
                roots[tensor] = frozenset({tensor}) if tensor in keys else merged
                if tensor not in keys and len(merged) == 1:
                    self.alone.setdefault(next(iter(merged)), []).append(tensor)

    def computed_from(self, x: str) -> list[str]:
        """The unpaired tensors computed from `x` alone (and constants), in topological order."""
        return self.alone.get(x, [])


def _onnx_input(graph: GraphInfo, tensor_of: Mapping[str, str], source: int) -> str | None:
    if source == INPUT:
        return graph.graph_inputs[0] if len(graph.graph_inputs) == 1 else None
    return tensor_of.get(f"torch:{source}")


def _float_data(graph: GraphInfo, tensor: str) -> bool:
    return tensor in graph.data_tensors and graph.tensor_type(tensor).is_float


def _scope(node_modules: Mapping[str, str | None], graph: GraphInfo, tensor: str) -> str | None:
    node = graph.node_of(tensor)
    return node_modules.get(node.name) if node is not None else None


def _in_scope(node_modules: Mapping[str, str | None], graph: GraphInfo, tensor: str, scope: str | None) -> bool:
    found = _scope(node_modules, graph, tensor)
    return scope is None or found is None or found == scope


def _cut(graph: GraphInfo, tensor: str, region: set[str], order: Mapping[str, int]) -> bool:
    """Whether every region node computed from `tensor` reads the region only at `tensor` or after it.

    Region nodes that `tensor` does not feed are another branch from the op's input (an FP16
    graph's Cast of a graph input for a residual Add), not the op's: they do not decide its cut.
    """
    position = order[tensor]
    downstream = {tensor}
    for later in sorted((t for t in region if order[t] > position), key=order.__getitem__):
        node = graph.node_of(later)
        assert node is not None
        if not downstream.intersection(node.inputs):
            continue
        downstream.add(later)
        if any(t in region and order[t] < position for t in node.inputs):
            return False
        if any(t not in region and t != tensor and t in graph.data_tensors for t in node.inputs):
            return False
    return True
