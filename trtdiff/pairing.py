"""Say which PyTorch value each ONNX tensor stands for — by structure, never by position alone.

Pairing goes in passes, each only over what earlier passes left:
1. scoped: ONNX nodes and recorded aten ops grouped by (module path, kind), paired in order
   when both groups have the same length and the shapes agree; then, per module path, the
   leftovers in order regardless of kind (an op whose type was edited);
2. global: the leftovers grouped by kind alone (this is all there is for TorchScript
   archives and ExportedPrograms, whose ops carry no module path), same rule;
3. module: a module's output paired with the last tensor its ONNX scope produces;
4. outputs: the graph's outputs with the model's outputs, in the exporter's order.
Exporter rewrites are undone first: BatchNorm folded into the Conv before it makes that
Conv's ONNX output stand for the BatchNorm's PyTorch output.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from trtdiff.backends.torch_backend import TorchCapture, TorchRecord
from trtdiff.onnx_graph import GraphInfo, NodeInfo
from trtdiff.op_kinds import onnx_kind
from trtdiff.report import PairingMethod

_CALL_SUFFIX = re.compile(r"_\d+$")


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


@dataclass(frozen=True)
class _Unit:
    """A PyTorch value that may stand for one ONNX tensor (a record, or a folded chain)."""

    record: TorchRecord
    kind: str
    scopes: tuple[str | None, ...]
    method: PairingMethod


def resolve_scope(pieces: Iterable[str], module_names: set[str]) -> str | None:
    """Map TorchScript-exporter scope pieces ("stem", "stem.0", "relu_1") to a module path."""
    current = ""
    for piece in pieces:
        found = _resolve_piece(current, piece, module_names)
        if found is None and _CALL_SUFFIX.search(piece):
            found = _resolve_piece(current, _CALL_SUFFIX.sub("", piece), module_names)
        if found is None:
            return None
        current = found
    return current


def _resolve_piece(current: str, piece: str, names: set[str]) -> str | None:
    direct = f"{current}.{piece}" if current else piece
    if direct in names:
        return direct
    parts = piece.split(".")
    for k in range(1, len(parts)):
        head, tail = ".".join(parts[:k]), ".".join(parts[k:])
        if current == head or current.endswith("." + head):
            candidate = f"{current}.{tail}"
            if candidate in names:
                return candidate
    below = [n for n in names if n.startswith(current + ".") and (n.endswith("." + piece))] if current else []
    return min(below, key=len) if below else None


def node_module(node: NodeInfo, module_names: set[str]) -> str | None:
    """The module path an ONNX node came from, from dynamo metadata or TorchScript names."""
    if node.module_path is not None:
        return node.module_path
    if node.scope_pieces is None:
        return None
    return resolve_scope(node.scope_pieces, module_names)


def pair(graph: GraphInfo, capture: TorchCapture, module_names: set[str]) -> Pairing:
    """Pair ONNX tensors with recorded PyTorch values (see the module docstring)."""
    node_modules = {node.name: node_module(node, module_names) for node in graph.nodes}
    candidates = [
        n for n in graph.nodes if onnx_kind(n.op_type, n.domain) and n.outputs and n.outputs[0] in graph.data_tensors
    ]
    units = _units(graph, capture, candidates, node_modules)
    pairs: dict[str, TorchPair] = {}
    used: set[int] = set()

    def take(node: NodeInfo, unit: _Unit, method: PairingMethod) -> None:
        pairs[node.outputs[0]] = TorchPair(unit.record.key, method, unit.record.op, unit.record.module_path)
        used.add(unit.record.index)

    if capture.paths_known:
        onnx_groups: dict[tuple[str, str], list[NodeInfo]] = defaultdict(list)
        for node in candidates:
            scope = node_modules[node.name]
            if scope is not None:
                onnx_groups[(scope, onnx_kind(node.op_type, node.domain))].append(node)  # type: ignore[index]
        torch_groups: dict[tuple[str, str], list[_Unit]] = defaultdict(list)
        for unit in units:
            scope = next((s for s in unit.scopes if (s, unit.kind) in onnx_groups), None)
            if scope is not None:
                torch_groups[(scope, unit.kind)].append(unit)
        for key, nodes in onnx_groups.items():
            _pair_in_order(graph, nodes, torch_groups.get(key, []), take, "op")
        _pair_scopes_ignoring_kind(graph, candidates, units, node_modules, pairs, used, take)

    onnx_left: dict[str, list[NodeInfo]] = defaultdict(list)
    for node in candidates:
        if node.outputs[0] not in pairs:
            onnx_left[onnx_kind(node.op_type, node.domain)].append(node)  # type: ignore[index]
    torch_left: dict[str, list[_Unit]] = defaultdict(list)
    for unit in units:
        if unit.record.index not in used:
            torch_left[unit.kind].append(unit)
    for kind, nodes in onnx_left.items():
        _pair_in_order(graph, nodes, torch_left.get(kind, []), take, "op")

    if capture.paths_known:
        _pair_module_outputs(graph, capture, node_modules, pairs, used)
    _pair_graph_outputs(graph, capture, pairs)
    return Pairing(pairs=pairs, node_modules=node_modules)


def _units(
    graph: GraphInfo, capture: TorchCapture, candidates: list[NodeInfo], node_modules: dict[str, str | None]
) -> list[_Unit]:
    """Recorded values that can stand for ONNX tensors, with BatchNorm folded where the file folded it."""
    onnx_bn_scopes = {node_modules[n.name] for n in candidates if n.op_type == "BatchNormalization"}
    bn_records = [r for r in capture.records if r.kind == "batch_norm"]
    folded_into: dict[int, TorchRecord] = {}
    for bn in bn_records:
        if not bn.inputs:
            continue
        conv = capture.records[bn.inputs[0]]
        if conv.kind != "conv" or capture.consumers.get(conv.index) != [bn.index]:
            continue
        if not onnx_bn_scopes or (
            capture.paths_known and None not in onnx_bn_scopes and bn.module_path not in onnx_bn_scopes
        ):
            folded_into[conv.index] = bn
    absorbed = {bn.index for bn in folded_into.values()}
    units: list[_Unit] = []
    for record in capture.records:
        if record.index in absorbed:
            continue
        folded = folded_into.get(record.index)
        if folded is not None:
            units.append(_Unit(folded, "conv", (record.module_path, folded.module_path), "folded"))
        else:
            units.append(_Unit(record, record.kind, (record.module_path,), "op"))
    return units


def _compatible(graph: GraphInfo, tensor: str, record: TorchRecord) -> bool:
    onnx_type = graph.tensor_type(tensor)
    if onnx_type.shape is not None and None not in onnx_type.shape and tuple(onnx_type.shape) != record.shape:
        return False
    if onnx_type.dtype is not None:
        torch_float = record.dtype.startswith(("float", "bfloat", "half"))
        if onnx_type.is_float != torch_float:
            return False
    return True


Take = Callable[[NodeInfo, "_Unit", PairingMethod], None]


def _pair_in_order(
    graph: GraphInfo, nodes: list[NodeInfo], units: list[_Unit], take: Take, method: PairingMethod
) -> None:
    if not nodes or len(nodes) != len(units):
        return
    if all(_compatible(graph, n.outputs[0], u.record) for n, u in zip(nodes, units, strict=True)):
        for node, unit in zip(nodes, units, strict=True):
            take(node, unit, method if unit.method == "op" else unit.method)


def _pair_scopes_ignoring_kind(
    graph: GraphInfo,
    candidates: list[NodeInfo],
    units: list[_Unit],
    node_modules: dict[str, str | None],
    pairs: dict[str, TorchPair],
    used: set[int],
    take: Take,
) -> None:
    """Within one module scope, pair the leftovers in order when their counts match.

    This is what catches an op whose type changed (an activation swapped in an edited
    file): its kind no longer matches, but it is still the n-th op of that module.
    """
    onnx_by_scope: dict[str, list[NodeInfo]] = defaultdict(list)
    for node in candidates:
        scope = node_modules[node.name]
        if scope is not None and node.outputs[0] not in pairs:
            onnx_by_scope[scope].append(node)
    torch_by_scope: dict[str, list[_Unit]] = defaultdict(list)
    for unit in units:
        scope = next((s for s in unit.scopes if s in onnx_by_scope), None)
        if unit.record.index not in used and unit.kind != "module" and scope is not None:
            torch_by_scope[scope].append(unit)
    for scope, nodes in onnx_by_scope.items():
        _pair_in_order(graph, nodes, torch_by_scope.get(scope, []), take, "scope")


def _pair_module_outputs(
    graph: GraphInfo,
    capture: TorchCapture,
    node_modules: dict[str, str | None],
    pairs: dict[str, TorchPair],
    used: set[int],
) -> None:
    """A module whose ops did not pair one by one is still compared at its output."""
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
        for node in reversed(inside):
            tensor = node.outputs[0] if node.outputs else ""
            leaves = tensor in outputs or any(c not in inside_indices for c in consumers[tensor])
            if tensor and leaves and tensor not in pairs and _compatible(graph, tensor, record):
                pairs[tensor] = TorchPair(record.key, "module", record.op, call.path)
                used.add(record.index)
                break


def _pair_graph_outputs(graph: GraphInfo, capture: TorchCapture, pairs: dict[str, TorchPair]) -> None:
    if len(graph.graph_outputs) != len(capture.output_keys):
        return
    for tensor, key, record_index in zip(graph.graph_outputs, capture.output_keys, capture.output_records, strict=True):
        if tensor in pairs:
            continue
        record = capture.records[record_index] if record_index is not None else None
        pairs[tensor] = TorchPair(key, "output", record.op if record else None, record.module_path if record else None)
