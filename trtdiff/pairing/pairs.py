"""Say which PyTorch value each ONNX tensor stands for — by structure, never by position alone.

Pairing goes in passes, each only over what earlier passes left:
1. scoped: ONNX nodes and recorded aten ops grouped by (module path, kind), paired in order
   when both groups have the same length and the shapes agree; then, per module path, the
   nodes and ops aligned in order (below); then the leftovers in order regardless of kind
   when their counts match (an op whose type was edited; never an op exporters decompose,
   whose pieces are those nodes);
2. global: the leftovers grouped by kind alone, same rule, then aligned over the whole
   graph (all there is for ExportedPrograms and for TorchScript modules whose module paths
   could not be read from their graph); pairs whose inputs contradict the data flow are paired
   again by what they read, or left unpaired (pairing_flow);
3. module: a module's output paired with the last tensor its ONNX scope produces;
4. outputs: the graph's outputs with the model's outputs, in the exporter's order; then a
   node with subgraphs (If, Loop, Scan) with the value its paired consumer read, the last
   value the branch taken (or the loop) computed (method "module": a region's output);
5. composite: an op the exporter decomposed (GELU, SiLU, LayerNorm below opset 17) with the
   last node of its decomposition, found by data flow from its paired input (pairing_composite);
6. quantized: an activation DequantizeLinear's output with the value its QuantizeLinear's input
   is paired with (or the clipping op quantize_static folded into the Q/DQ; pairing_qdq);
7. derived: each float tensor still without a value (inside SiLU, GELU, LayerNorm below
   opset 17; the reshapes, splits and transposes between ops) gets its node run in
   PyTorch on PyTorch's values, kept only where a recorded value downstream vouches for it
   (pairing_derive).
Kinds come from op_kinds, with a Linear's bias add and attention's value product read from
the op that feeds them (pairing_kinds). Shapes agree when equal, or when one only merges or
splits adjacent dimensions of the other (a view: PyTorch's bmm 192x49x49 for ONNX's MatMul
64x3x49x49), never through a transpose.
Aligning (backends.pytorch.align) walks the ONNX nodes in topological order and the ops in execution
order, with the pairs already made as anchors, and keeps only the pairs that every
alignment of least cost makes, shapes permitting: an inserted, deleted or swapped node costs
its own pair and no more, and an op of a changed kind keeps its pair (method "scope") when
its place is certain. Module paths come from forward hooks for eager modules and from the
graph for TorchScript modules (`TorchCapture.path_of`).
Exporter rewrites are undone first: BatchNorm folded into the Conv before it makes that
Conv's ONNX output stand for the BatchNorm's PyTorch output.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtdiff.backends.pytorch.align import certain_pairs, segments
from trtdiff.backends.pytorch.op_kinds import DECOMPOSED_KINDS
from trtdiff.backends.pytorch.records import RECORD_PREFIX, TorchCapture, TorchRecord
from trtdiff.pairing.composite import pair_composites
from trtdiff.pairing.derive import Derivation, derive, evaluate
from trtdiff.pairing.flow import regrouped
from trtdiff.pairing.kinds import computed_from_inputs, onnx_kinds, record_kind
from trtdiff.pairing.qdq import dequantized_keys
from trtdiff.pairing.views import view_compatible
from trtdiff.report import PairingMethod
from trtdiff.source.onnx_graph import GraphInfo, NodeInfo, TensorType, dynamic_inputs, node_module


@dataclass(frozen=True)
class TorchPair:
    """The PyTorch value an ONNX tensor is compared with."""

    key: str
    method: PairingMethod
    torch_op: str | None
    module_path: str | None


@dataclass(frozen=True)
class Pairing:
    """ONNX tensor name -> PyTorch value, and the module path of every ONNX node."""

    pairs: dict[str, TorchPair]
    node_modules: dict[str, str | None]
    derivation: Derivation | None = None
    """Computes the derived values (method "derived"); kept here so that they stay computable."""

    def value(self, capture: TorchCapture, key: str) -> np.ndarray:
        """The value `key` of `capture` (any capture of the model: a later sample's too).

        A recorded value is the capture's; a derived one is computed from the capture's recorded
        values by this pairing's derivation, on first use, and kept in the capture's store.
        """
        if self.derivation is not None and self.derivation.owns(key):
            return self.derivation.value(capture, key)
        return capture.value(key)


@dataclass(frozen=True)
class _Unit:
    """A PyTorch value that may stand for one ONNX tensor (a record, or a folded chain)."""

    record: TorchRecord
    kind: str
    scopes: tuple[str | None, ...]
    method: PairingMethod


def pair(graph: GraphInfo, capture: TorchCapture, module_names: set[str]) -> Pairing:
    """Pair ONNX tensors with recorded PyTorch values (see the module docstring)."""
    node_modules = {node.name: node_module(node, module_names) for node in graph.nodes}
    kinds = onnx_kinds(graph)
    candidates = [n for n in graph.nodes if n.name in kinds and n.outputs and n.outputs[0] in graph.data_tensors]
    units = _units(graph, capture, candidates, node_modules)
    state = _State(graph, capture, node_modules, kinds)
    if capture.paths_known or capture.recovered_paths:
        _pair_scopes(state, candidates, units)
    onnx_left: dict[str, list[NodeInfo]] = defaultdict(list)
    for node in candidates:
        if state.free_node(node):
            onnx_left[state.kind(node)].append(node)
    torch_left: dict[str, list[_Unit]] = defaultdict(list)
    for unit in units:
        if state.free_unit(unit):
            torch_left[unit.kind].append(unit)
    before = set(state.pairs)
    for kind, nodes in onnx_left.items():
        state.in_order(nodes, torch_left.get(kind, []), "op")
    state.align(candidates, [u for u in units if u.kind != "module"])
    state.follow_data(before)

    if capture.paths_known:
        _pair_module_outputs(graph, capture, node_modules, state.pairs, state.used)
    _pair_graph_outputs(graph, capture, state.pairs)
    _pair_control_flow(graph, capture, state.pairs, state.used)
    for tensor, (key, op) in dequantized_keys(graph, capture, {t: p.key for t, p in state.pairs.items()}).items():
        state.pairs[tensor] = TorchPair(key, "quantized", op, state.pairs_module(tensor))
    evaluation = evaluate(graph, capture, {t: p.key for t, p in state.pairs.items()})
    composites = pair_composites(
        graph,
        capture,
        {t: p.key for t, p in state.pairs.items()},
        state.used,
        node_modules,
        evaluation,
        lambda tensor, record: _compatible(graph, tensor, record),
        lambda sources: evaluate(graph, capture, sources, evaluation),
    )
    for tensor, record in composites.items():
        state.pairs[tensor] = TorchPair(record.key, "composite", record.op, capture.path_of(record))
        state.used.add(record.index)
    if composites:  # the new pairs vouch for the nodes before them, and feed the ones after
        evaluation = evaluate(graph, capture, {t: p.key for t, p in state.pairs.items()}, evaluation)
    derivation = derive(graph, capture, {t: p.key for t, p in state.pairs.items()}, evaluation)
    keys = {t: derivation.keys[t] for t in derivation.compared} if derivation is not None else {}
    for tensor, key in keys.items():
        producer = graph.node_of(tensor)
        assert producer is not None
        state.pairs[tensor] = TorchPair(key, "derived", f"derived:{producer.op_type}", node_modules[producer.name])
    for tensor, (key, op) in dequantized_keys(graph, capture, {t: p.key for t, p in state.pairs.items()}).items():
        state.pairs[tensor] = TorchPair(key, "quantized", op, state.pairs_module(tensor))  # of a derived value
    return Pairing(pairs=state.pairs, node_modules=node_modules, derivation=derivation)


class _State:
    """The pairs made so far, and the two ways of making more: in order, and by alignment."""

    def __init__(
        self, graph: GraphInfo, capture: TorchCapture, node_modules: dict[str, str | None], kinds: dict[str, str]
    ) -> None:
        self.graph = graph
        self.capture = capture
        self.node_modules = node_modules
        self.kinds = kinds
        self.pairs: dict[str, TorchPair] = {}
        self.used: set[int] = set()
        self.partner: dict[str, int] = {}  # ONNX tensor -> index of the record it was paired with
        self.dynamic = bool(dynamic_inputs(graph))

    def pairs_module(self, tensor: str) -> str | None:
        """The module path of the node producing `tensor`."""
        producer = self.graph.node_of(tensor)
        return None if producer is None else self.node_modules[producer.name]

    def kind(self, node: NodeInfo) -> str:
        return self.kinds.get(node.name, "")

    def free_node(self, node: NodeInfo) -> bool:
        return node.outputs[0] not in self.pairs

    def free_unit(self, unit: _Unit) -> bool:
        return unit.record.index not in self.used

    def take(self, node: NodeInfo, unit: _Unit, method: PairingMethod) -> None:
        record = unit.record
        self.pairs[node.outputs[0]] = TorchPair(record.key, method, record.op, self.capture.path_of(record))
        self.partner[node.outputs[0]] = record.index
        self.used.add(record.index)

    def in_order(self, nodes: list[NodeInfo], units: list[_Unit], method: PairingMethod) -> None:
        """Pair nodes and units in order when there are as many of each and every shape agrees.

        In a graph with dynamic inputs a shape may also disagree where the structure is certain
        (as many of each, in order, same rank and type): a dimension the export wrote as a
        number (`int(x.size(0))`) gives another shape at another size, and that pair is kept,
        to be reported as a shape mismatch there rather than left unpaired.
        """
        if not nodes or len(nodes) != len(units):
            return
        pairs = zip(nodes, units, strict=True)
        if all(_compatible(self.graph, n.outputs[0], u.record) or self._reshaped(n, u.record) for n, u in pairs):
            for node, unit in zip(nodes, units, strict=True):
                self.take(node, unit, method if unit.method == "op" else unit.method)

    def _reshaped(self, node: NodeInfo, record: TorchRecord) -> bool:
        """Same rank and type, another shape, in a graph with dynamic inputs (see `in_order`)."""
        onnx_type = self.graph.tensor_type(node.outputs[0])
        return (
            self.dynamic
            and onnx_type.shape is not None
            and len(onnx_type.shape) == len(record.shape)
            and onnx_type.dtype is not None
            and str(onnx_type.dtype) == record.dtype
        )

    def align(self, nodes: list[NodeInfo], units: list[_Unit]) -> None:
        """Pair what is free of `nodes` (topological order) and `units` (execution order) by alignment.

        Pairs already made are anchors; between consecutive anchors the free nodes and units
        are aligned by kind and shape, and only the pairs every best alignment makes are taken
        (see backends.pytorch.align). A pair of different kinds is an edited op: method "scope".
        """
        position = {unit.record.index: j for j, unit in enumerate(units)}
        partners = [self.partner.get(node.outputs[0], -1) for node in nodes]
        anchors = [(i, position[p]) for i, p in enumerate(partners) if p in position]
        free_nodes = [i for i, node in enumerate(nodes) if self.free_node(node)]
        free_units = [j for j, unit in enumerate(units) if self.free_unit(unit)]
        for lefts, rights in segments(free_nodes, free_units, anchors):
            seg_nodes, seg_units = [nodes[i] for i in lefts], [units[j] for j in rights]
            kinds = [self.kind(node) for node in seg_nodes]
            pairable = self.pairable(seg_nodes, seg_units)
            for i, j in certain_pairs(kinds, [unit.kind for unit in seg_units], pairable):
                unit = seg_units[j]
                self.take(seg_nodes[i], unit, unit.method if kinds[i] == unit.kind else "scope")

    def follow_data(self, before: set[str]) -> None:
        """The pairs made since `before` by kind and order alone, corrected by what they read (pairing_flow)."""
        made = {t: self.capture.records[self.partner[t]] for t in self.pairs if t not in before and t in self.partner}
        kind_of = {t: self.kind(node) for t in made if (node := self.graph.node_of(t)) is not None}
        changes = regrouped(
            self.graph, self.capture, made, self.partner, kind_of.__getitem__, computed_from_inputs(self.capture)
        )
        methods = {made[t].index: self.pairs[t].method for t in changes}
        for tensor in changes:
            del self.pairs[tensor]
            self.used.discard(self.partner.pop(tensor))
        for tensor, record in changes.items():
            if record is not None:
                path = self.capture.path_of(record)
                self.pairs[tensor] = TorchPair(record.key, methods[record.index], record.op, path)
                self.partner[tensor] = record.index
                self.used.add(record.index)

    def pairable(self, nodes: list[NodeInfo], units: list[_Unit]) -> np.ndarray:
        """Which node may stand for which unit: shapes that agree, and for different kinds, the same scope.

        An op exporters decompose (SiLU, GELU, GroupNorm) stands for no node of another kind: that node is
        a piece of its decomposition (pairing_composite pairs it), not the op with its type edited.
        """
        types = [self.graph.tensor_type(node.outputs[0]) for node in nodes]
        agree = _table(types, [(u.record.shape, u.record.dtype) for u in units], lambda t, r: _type_fits(t, *r))
        same_kind = _table([self.kind(node) for node in nodes], [unit.kind for unit in units], operator.eq)
        scopes = [self.node_modules[node.name] for node in nodes]
        same_scope = _table(scopes, [unit.scopes for unit in units], _scope_fits)
        whole = np.array([unit.kind not in DECOMPOSED_KINDS for unit in units], dtype=bool)
        fits: np.ndarray = agree & (same_kind | (same_scope & whole[np.newaxis, :]))
        return fits


def _scope_fits(scope: str | None, unit_scopes: tuple[str | None, ...]) -> bool:
    return scope is None or scope in unit_scopes or all(s is None for s in unit_scopes)


def _table(left: Sequence[Hashable], right: Sequence[Hashable], fits: Callable[[Any, Any], bool]) -> np.ndarray:
    """fits(left[i], right[j]) for every i, j, evaluated once per distinct pair of keys."""
    left_keys = {key: i for i, key in enumerate(dict.fromkeys(left))}
    right_keys = {key: j for j, key in enumerate(dict.fromkeys(right))}
    small = np.array([[fits(a, b) for b in right_keys] for a in left_keys], dtype=bool)
    small = small.reshape(len(left_keys), len(right_keys))
    return small[np.ix_([left_keys[k] for k in left], [right_keys[k] for k in right])]


def _pair_scopes(state: _State, candidates: list[NodeInfo], units: list[_Unit]) -> None:
    """Pass 1: per (module path, kind) in order; per module path by alignment, then in order ignoring kind."""
    onnx_groups: dict[tuple[str, str], list[NodeInfo]] = defaultdict(list)
    for node in candidates:
        scope = state.node_modules[node.name]
        if scope is not None:
            onnx_groups[(scope, state.kind(node))].append(node)
    torch_groups: dict[tuple[str, str], list[_Unit]] = defaultdict(list)
    for unit in units:
        scope = next((s for s in unit.scopes if (s, unit.kind) in onnx_groups), None)
        if scope is not None:
            torch_groups[(scope, unit.kind)].append(unit)
    for key, nodes in onnx_groups.items():
        state.in_order(nodes, torch_groups.get(key, []), "op")
    for nodes, scope_units in _by_scope(state, candidates, units, free_only=False).values():
        state.align(nodes, scope_units)
    for nodes, scope_units in _by_scope(state, candidates, units, free_only=True).values():
        if not any(unit.kind in DECOMPOSED_KINDS for unit in scope_units):  # its nodes are there, not one of its kind
            state.in_order(nodes, scope_units, "scope")


def _by_scope(
    state: _State, candidates: list[NodeInfo], units: list[_Unit], *, free_only: bool
) -> dict[str, tuple[list[NodeInfo], list[_Unit]]]:
    """ONNX nodes and units (module outputs aside) grouped by module path, each unit under its first scope in ONNX."""
    groups: dict[str, tuple[list[NodeInfo], list[_Unit]]] = {}
    for node in candidates:
        scope = state.node_modules[node.name]
        if scope is not None and (state.free_node(node) or not free_only):
            groups.setdefault(scope, ([], []))[0].append(node)
    for unit in units:
        scope = next((s for s in unit.scopes if s in groups), None)
        if scope is not None and unit.kind != "module" and (state.free_unit(unit) or not free_only):
            groups[scope][1].append(unit)
    return groups


def _units(
    graph: GraphInfo, capture: TorchCapture, candidates: list[NodeInfo], node_modules: dict[str, str | None]
) -> list[_Unit]:
    """Recorded values that can stand for ONNX tensors, with BatchNorm folded where the file folded it."""
    onnx_bn_scopes = {node_modules[n.name] for n in candidates if n.op_type == "BatchNormalization"}
    scoped = capture.paths_known or bool(capture.recovered_paths)
    folded_into: dict[int, TorchRecord] = {}
    for bn in (r for r in capture.records if r.kind == "batch_norm"):
        if not bn.inputs:
            continue
        conv = capture.records[bn.inputs[0]]
        if conv.kind != "conv" or capture.consumers.get(conv.index) != [bn.index]:
            continue
        if not onnx_bn_scopes or (scoped and None not in onnx_bn_scopes and capture.path_of(bn) not in onnx_bn_scopes):
            folded_into[conv.index] = bn
    absorbed = {bn.index for bn in folded_into.values()}
    from_inputs = computed_from_inputs(capture)
    units: list[_Unit] = []
    for record in capture.records:
        if record.index in absorbed:
            continue
        folded = folded_into.get(record.index)
        if folded is not None:
            scopes = (capture.path_of(record), capture.path_of(folded))
            units.append(_Unit(folded, "conv", scopes, "folded"))
        else:
            units.append(_Unit(record, record_kind(capture, record, from_inputs), (capture.path_of(record),), "op"))
    return units


def _compatible(graph: GraphInfo, tensor: str, record: TorchRecord) -> bool:
    return _type_fits(graph.tensor_type(tensor), record.shape, record.dtype)


def _type_fits(onnx_type: TensorType, shape: tuple[int, ...], dtype: str) -> bool:
    """Whether an ONNX tensor of this type can hold a PyTorch value of this shape and dtype.

    Shapes that only merge or split adjacent dimensions of each other hold the same elements in
    the same order (PyTorch's bmm 192x49x49 for ONNX's MatMul 64x3x49x49): they fit, and are
    compared through the reshape. A transposed layout does not. Integer and bool tensors fit
    only the same element type (an int64 Cast never stands for a bool comparison).
    """
    if onnx_type.shape is not None and tuple(onnx_type.shape) != shape:
        known = tuple(d for d in onnx_type.shape if d is not None)
        if len(known) == len(onnx_type.shape):
            if not view_compatible(known, shape):
                return False
        elif len(shape) != len(onnx_type.shape) or any(
            d not in (None, s) for d, s in zip(onnx_type.shape, shape, strict=True)
        ):
            return False  # partly unknown: the same rank, and the known sizes agree
    if onnx_type.dtype is not None:
        torch_float = dtype.startswith(("float", "bfloat", "half"))
        if onnx_type.is_float != torch_float:
            return False
        if not torch_float and onnx_type.dtype.name != dtype:
            return False  # integer and bool tensors are compared exactly: the same type too
    return True


def _pair_module_outputs(
    graph: GraphInfo,
    capture: TorchCapture,
    node_modules: dict[str, str | None],
    pairs: dict[str, TorchPair],
    used: set[int],
) -> None:
    """A module whose ops did not pair one by one is still compared at its output: the last tensor leaving its
    nodes that fits the output, or, where the module returned several tensors, the only one that fits."""
    call_counts: dict[str, int] = defaultdict(int)
    for call in capture.module_calls:
        call_counts[call.path] += 1
    consumers: dict[str, set[int]] = defaultdict(set)
    for node in graph.nodes:
        for tensor in node.inputs:
            consumers[tensor].add(node.index)
    outputs = set(graph.graph_outputs)
    for call in capture.module_calls:
        if call.output_record is None or call.output_record in used or call_counts[call.path] != 1:
            continue
        record = capture.records[call.output_record]
        inside = [
            n
            for n in graph.nodes
            if (scope := node_modules[n.name]) is not None and (scope == call.path or scope.startswith(call.path + "."))
        ]
        inside_indices = {n.index for n in inside}
        fitting = [
            tensor
            for node in reversed(inside)
            if (tensor := node.outputs[0] if node.outputs else "")
            and (tensor in outputs or any(c not in inside_indices for c in consumers[tensor]))
            and tensor not in pairs
            and _compatible(graph, tensor, record)
        ]
        if fitting and (call.tensors == 1 or len(fitting) == 1):  # of several outputs alike, which is first is unknown
            pairs[fitting[0]] = TorchPair(record.key, "module", record.op, call.path)
            used.add(record.index)


def _pair_graph_outputs(graph: GraphInfo, capture: TorchCapture, pairs: dict[str, TorchPair]) -> None:
    if len(graph.graph_outputs) != len(capture.output_keys):
        return
    for tensor, key, record_index in zip(graph.graph_outputs, capture.output_keys, capture.output_records, strict=True):
        if tensor in pairs:
            continue
        record = capture.records[record_index] if record_index is not None else None
        pairs[tensor] = TorchPair(key, "output", record.op if record else None, record.module_path if record else None)


_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def _pair_control_flow(graph: GraphInfo, capture: TorchCapture, pairs: dict[str, TorchPair], used: set[int]) -> None:
    """An If's (Loop's, Scan's) float output with the recorded value its paired consumers read.

    The recording holds the ops of the branch taken (the iterations run), not the If: the
    value the If stands for is what the op paired with its consumer was fed, found through
    that op's sources; it is taken only when exactly one unpaired source fits the output.
    """
    readers: dict[str, list[NodeInfo]] = defaultdict(list)
    for node in graph.nodes:
        for tensor in node.inputs:
            readers[tensor].append(node)
    for node in graph.nodes:
        if node.op_type not in _CONTROL_FLOW:
            continue
        for tensor in node.outputs:
            if not tensor or tensor in pairs or not graph.tensor_type(tensor).is_float:
                continue
            fitting: set[int] = set()
            for reader in readers[tensor]:
                index = _record_index(pairs.get(reader.outputs[0]) if reader.outputs else None)
                if index is None:
                    continue
                record = capture.records[index]
                for source in record.sources or record.inputs:
                    if source is not None and source >= 0 and source not in used:
                        if _compatible(graph, tensor, capture.records[source]):
                            fitting.add(source)
            if len(fitting) == 1:
                record = capture.records[fitting.pop()]
                pairs[tensor] = TorchPair(record.key, "module", record.op, capture.path_of(record))
                used.add(record.index)


def _record_index(pair: TorchPair | None) -> int | None:
    """The record a pair's value is (None for a model output, a derived value)."""
    if pair is None or not pair.key.startswith(RECORD_PREFIX):
        return None
    rest = pair.key.removeprefix(RECORD_PREFIX)
    return int(rest) if rest.isdigit() else None
