"""Module paths for the records of a TorchScript module, read from its graph.

Python forward hooks do not fire inside a ScriptModule, so the capture's records carry no
module path there. The submodules still call each other (`prim::CallMethod` on the
attribute chain from `self`), which is how the exporter recovers its scope names; walking
the forward graph the same way lists the computing aten nodes in execution order with the
module path each runs in, and aligning them with the records gives each record its path.
A graph node that dispatches several recorded ops (`scaled_dot_product_attention` on its math
implementation, a fused attention kernel recorded through its decomposition: torch_attention)
gives its path to the ops recorded in its place.

The TorchScript exporter rewrites the forward graph in place: it inlines every submodule call
into it, writing the module chain each node came from into its scope name
("pkg.Net::/torch.nn.modules.container.Sequential::layer1/BasicBlock::0"), which is where its
ONNX node names come from. Every copy of the archive shares that graph (`copy.deepcopy` and
`.to(dtype)` included: the float16 benchmark of an FP16 comparison, recorded after the export), so
a node's path is read from its scope name where it has one, and from the calls walked otherwise.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import torch

from trtdiff.backends.pytorch.align import certain_pairs
from trtdiff.backends.pytorch.attention import FUSED_ATTENTION
from trtdiff.backends.pytorch.op_kinds import aten_kind

if TYPE_CHECKING:
    from trtdiff.backends.pytorch.records import TorchRecord


_OPAQUE = frozenset({"prim::CallFunction", "prim::PythonOp"})


class _Unreadable(Exception):
    """The graph runs code whose ops cannot be listed in order from the graph alone."""


@dataclass(frozen=True)
class _ScriptOp:
    """A computing aten node of a TorchScript graph, the module it runs in and the ops that feed it."""

    kind: str
    path: str
    feeds: frozenset[int]


def script_paths(module: torch.jit.ScriptModule, records: Sequence[TorchRecord]) -> dict[int, str]:
    """Module paths for the records of a TorchScript module's forward: record index -> path.

    A ScriptModule's submodules still call each other (`prim::CallMethod` on the attribute
    chain from `self`), so walking the forward graph lists its computing aten nodes in
    execution order with the module path each runs in. Those are aligned with the recorded
    ops by kind (`certain_pairs`), and the alignment is checked against the data flow: a
    record's inputs must be nodes that feed its node. Where the graph has control flow or
    opaque calls, or the check fails, nothing is returned and pairing goes by kind alone.
    Records left between two aligned pairs where the graph has only attention nodes of one
    module (SDPA decomposed while recording) get that module's path.
    """
    ops = _script_ops(module)
    if ops is None:
        return {}
    op_kinds, record_kinds = [op.kind for op in ops], [record.kind for record in records]
    if op_kinds == record_kinds:
        aligned = [(i, i) for i in range(len(ops))]
    else:
        aligned = certain_pairs(op_kinds, record_kinds, swaps=False)
    op_of = {records[j].index: i for i, j in aligned}
    for i, j in aligned:
        if any(p in op_of and op_of[p] not in ops[i].feeds for p in records[j].inputs):
            return {}
    paths = {records[j].index: ops[i].path for i, j in aligned}
    return paths | _decomposed_paths(ops, records, aligned)


_OPS: weakref.WeakKeyDictionary[Any, list[_ScriptOp] | None] = weakref.WeakKeyDictionary()


def _script_ops(module: torch.jit.ScriptModule) -> list[_ScriptOp] | None:
    """The kinded aten nodes of the module's forward, walked once per module (None: unreadable)."""
    if module not in _OPS:
        found: list[_ScriptOp] = []
        try:
            _walk_method(module, "", "forward", [], found)
        except (_Unreadable, AttributeError, KeyError, RuntimeError):
            _OPS[module] = None
        else:
            _OPS[module] = found
    return _OPS[module]


def _decomposed_paths(
    ops: Sequence[_ScriptOp], records: Sequence[TorchRecord], aligned: Sequence[tuple[int, int]]
) -> dict[int, str]:
    """Paths for the records that attention nodes left unaligned: the ops their decomposition dispatched."""
    found: dict[int, str] = {}
    bounds = [(-1, -1), *aligned, (len(ops), len(records))]
    for (i0, j0), (i1, j1) in pairwise(bounds):
        gap_ops = ops[i0 + 1 : i1]
        if not gap_ops or j1 - j0 <= 1 or any(op.kind != "attention" for op in gap_ops):
            continue
        if len({op.path for op in gap_ops}) == 1:
            found.update({records[j].index: gap_ops[0].path for j in range(j0 + 1, j1)})
    return found


def _walk_method(
    module: Any, path: str, method: str, inputs: list[frozenset[int]], ops: list[_ScriptOp]
) -> list[frozenset[int]]:
    """Append the kinded aten nodes of `module.method` (`module` at `path`) to `ops`; return its outputs' feeds."""
    graph = module._c._get_method(method).graph  # a traced submodule's Python forward only raises
    params = list(graph.inputs())
    modules: dict[int, tuple[Any, str]] = {params[0].unique(): (module, path)}
    feeds: dict[int, frozenset[int]] = {v.unique(): f for v, f in zip(params[1:], inputs, strict=False)}
    for node in graph.nodes():
        kind, args = node.kind(), list(node.inputs())
        fed = frozenset().union(*(feeds.get(v.unique(), frozenset()) for v in args))
        if kind == "prim::GetAttr" and args[0].unique() in modules:
            owner, owner_path = modules[args[0].unique()]
            child = getattr(owner, node.s("name"))
            if isinstance(child, torch.nn.Module):
                child_path = f"{owner_path}.{node.s('name')}" if owner_path else node.s("name")
                modules[node.output().unique()] = (child, child_path)
            continue
        outs: list[frozenset[int]] = [fed] * node.outputsSize()
        if kind == "prim::CallMethod":
            child, child_path = modules[args[0].unique()]
            feeds_in = [feeds.get(v.unique(), frozenset()) for v in args[1:]]
            outs = _walk_method(child, child_path, node.s("name"), feeds_in, ops)
        elif kind in _OPAQUE or _calls_inside(node):
            raise _Unreadable(kind)
        elif (op_kind := _node_kind(node)) is not None:
            ops.append(_ScriptOp(op_kind, _scope_path(node.scopeName(), path), fed))
            outs = [frozenset({len(ops) - 1})] * node.outputsSize()
        for value, out in zip(node.outputs(), outs, strict=False):
            feeds[value.unique()] = out
    return [feeds.get(v.unique(), frozenset()) for v in graph.outputs()]


def _scope_path(scope: str, walked: str) -> str:
    """The module path a scope name states (the exporter's inlining: see the module docstring), else `walked`.

    Each "/"-separated part is "TypeName::attribute"; the first is the root module's, with no attribute.
    """
    parts = scope.split("/")
    if not scope or not all("::" in part for part in parts):
        return walked
    return ".".join(name for part in parts[1:] if (name := part.rsplit("::", 1)[1]))


def _node_kind(node: Any) -> str | None:
    kind = node.kind()
    if not kind.startswith("aten::"):
        return None
    if kind.removeprefix("aten::") in FUSED_ATTENTION:
        return "attention"  # recorded through its decomposition, if at all (torch_attention)
    return aten_kind(kind.removeprefix("aten::"), tuple(_constant(v) for v in node.inputs()))


def _constant(value: Any) -> Any:
    """The value of a constant graph input (a list of constants too), else None."""
    node = value.node()
    if node.kind() == "prim::Constant":
        return value.toIValue()
    if node.kind() == "prim::ListConstruct":
        items = [_constant(v) for v in node.inputs()]
        return items if all(item is not None for item in items) else None
    return None


def _calls_inside(node: Any) -> bool:
    """Whether a node's blocks (an If or a Loop) run calls or computing ops: their order is the data's."""
    for block in node.blocks():
        for inner in block.nodes():
            kind = inner.kind()
            if kind == "prim::CallMethod" or kind in _OPAQUE or _node_kind(inner) is not None or _calls_inside(inner):
                return True
    return False
