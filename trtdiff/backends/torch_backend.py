"""The PyTorch reference: one forward pass that records every computing aten op's output.

A TorchDispatchMode sees each aten op in execution order, for eager modules, loaded
TorchScript archives and ExportedPrograms alike. For eager modules, forward hooks add the
module path each op ran in, which is what lets pairing follow the exporter's scopes. Python
hooks do not fire inside a TorchScript module, so there the paths are read from its graph
instead (`script_paths`). Values are copied when recorded, because in-place ops
(ReLU(inplace=True)) overwrite their input.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trtdiff.errors import ModelRunError, OptionError, first_line, param
from trtdiff.op_kinds import aten_kind
from trtdiff.pairing_align import certain_pairs
from trtdiff.store import TensorStore


@dataclass(frozen=True)
class TorchRecord:
    """One recorded aten op: what it was, where it ran, what it produced and from what."""

    index: int
    op: str
    kind: str
    module_path: str | None
    shape: tuple[int, ...]
    dtype: str
    inputs: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"torch:{self.index}"


@dataclass(frozen=True)
class ModuleCall:
    """One call of a submodule and the record that produced its (first tensor) output."""

    path: str
    type_name: str
    output_record: int | None


@dataclass
class TorchCapture:
    """Everything one reference forward pass left behind; values live in `store`."""

    records: list[TorchRecord]
    module_calls: list[ModuleCall]
    output_records: list[int | None]
    output_keys: list[str]
    paths_known: bool
    store: TensorStore
    device: str = "cpu"
    consumers: dict[int, list[int]] = field(default_factory=dict)
    recovered_paths: dict[int, str] = field(default_factory=dict)
    """Record index -> module path, read from a TorchScript module's graph (its records carry none)."""

    def __post_init__(self) -> None:
        for record in self.records:
            for parent in record.inputs:
                self.consumers.setdefault(parent, []).append(record.index)

    def value(self, key: str) -> np.ndarray:
        return self.store.get(key)

    def path_of(self, record: TorchRecord) -> str | None:
        """The module path `record` ran in: from forward hooks, else recovered from a TorchScript graph."""
        return record.module_path if record.module_path is not None else self.recovered_paths.get(record.index)


class _Recorder(TorchDispatchMode):
    """Records computing aten ops (see op_kinds) with their inputs' producers."""

    def __init__(self, store: TensorStore, path_stack: list[str] | None) -> None:
        super().__init__()
        self.store = store
        self.path_stack = path_stack
        self.records: list[TorchRecord] = []
        self._producer: dict[int, tuple[weakref.ref, int]] = {}

    def producer(self, tensor: Any) -> int | None:
        if not isinstance(tensor, torch.Tensor):
            return None
        entry = self._producer.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return entry[1]

    def record_module_output(self, tensor: torch.Tensor, path: str, type_name: str) -> int:
        """Record a module output no recorded op produced (e.g. SiLU, GELU: ops without a kind)."""
        index = len(self.records)
        record = TorchRecord(
            index,
            f"module:{type_name}",
            "module",
            path,
            tuple(tensor.shape),
            str(tensor.dtype).removeprefix("torch."),
            (),
        )
        self.records.append(record)
        self.store.put(record.key, tensor.detach().to("cpu", copy=True).numpy())
        self._producer[id(tensor)] = (weakref.ref(tensor), index)
        return index

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket.__name__
        kind = aten_kind(packet, args)
        if kind is None:
            return out
        first = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(first, torch.Tensor):
            return out
        flat_args, _ = tree_flatten((args, kwargs))
        inputs = tuple(p for p in (self.producer(a) for a in flat_args) if p is not None)
        index = len(self.records)
        record = TorchRecord(
            index=index,
            op=str(func),
            kind=kind,
            module_path=self.path_stack[-1] if self.path_stack else ("" if self.path_stack is not None else None),
            shape=tuple(first.shape),
            dtype=str(first.dtype).removeprefix("torch."),
            inputs=inputs,
        )
        self.records.append(record)
        self.store.put(record.key, first.detach().to("cpu", copy=True).numpy())
        self._producer[id(first)] = (weakref.ref(first), index)
        return out


def capture(
    module: torch.nn.Module,
    inputs: Mapping[str, np.ndarray],
    *,
    device: str = "cpu",
    tf32: bool = False,
    store: TensorStore | None = None,
) -> TorchCapture:
    """Run `module` once on `inputs` (in order) on `device` and record every computing op's output.

    On CUDA, TF32 is off for matmuls and cuDNN convolutions unless `tf32`, so the reference is
    true FP32; the module is moved to `device` for the pass and back afterwards.
    """
    store = store if store is not None else TensorStore()
    with _on_device(module, device, tf32):
        return _capture(module, inputs, device, store)


@contextmanager
def _on_device(module: torch.nn.Module, device: str, tf32: bool) -> Iterator[None]:
    target = torch.device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise OptionError(
            f"no CUDA GPU is visible to torch here; use {param('torch_device')} cpu",
            parameter="torch_device",
            value=device,
        )
    original = next((p.device for p in module.parameters()), torch.device("cpu"))
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    try:
        if target != original:
            module.to(target)
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
        if target != original:
            module.to(original)


def _capture(
    module: torch.nn.Module, inputs: Mapping[str, np.ndarray], device: str, store: TensorStore
) -> TorchCapture:
    eager = not isinstance(module, torch.jit.ScriptModule) and not isinstance(module, torch.fx.GraphModule)
    path_stack: list[str] | None = [] if eager else None
    recorder = _Recorder(store, path_stack)
    calls: list[ModuleCall] = []
    handles = _install_hooks(module, recorder, calls) if eager else []
    tensors = [torch.from_numpy(np.array(value, copy=True, order="C")).to(device) for value in inputs.values()]
    try:
        with torch.no_grad(), recorder:
            result = module(*tensors)
    except Exception as error:
        shapes = ", ".join(f"{name}:{'x'.join(map(str, v.shape))}" for name, v in inputs.items())
        message = first_line(error)
        raise ModelRunError(
            f"the model's forward raised {type(error).__name__}: {message} (inputs {shapes}); "
            f"check {param('input_shapes')} / {param('input_files')} against what the model expects"
        ) from error
    finally:
        for handle in handles:
            handle.remove()
    leaves, _ = tree_flatten(result)
    output_records: list[int | None] = []
    output_keys: list[str] = []
    for i, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            continue
        key = f"torch:output:{i}"
        store.put(key, leaf.detach().to("cpu", copy=True).numpy())
        output_keys.append(key)
        output_records.append(recorder.producer(leaf))
    return TorchCapture(
        records=recorder.records,
        module_calls=calls,
        output_records=output_records,
        output_keys=output_keys,
        paths_known=eager,
        store=store,
        device=device,
        recovered_paths=script_paths(module, recorder.records) if isinstance(module, torch.jit.ScriptModule) else {},
    )


def run_outputs(
    module: torch.nn.Module, inputs: Sequence[np.ndarray], *, device: str = "cpu", tf32: bool = False
) -> list[np.ndarray]:
    """A plain forward pass (no recording): the model's flattened tensor outputs, on the host."""
    with _on_device(module, device, tf32), torch.no_grad():
        tensors = [torch.from_numpy(np.array(value, copy=True, order="C")).to(device) for value in inputs]
        try:
            result = module(*tensors)
        except Exception as error:
            message = first_line(error)
            raise ModelRunError(
                f"the model's forward raised {type(error).__name__}: {message}; check the inputs"
            ) from error
    leaves, _ = tree_flatten(result)
    return [leaf.detach().to("cpu").numpy() for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _install_hooks(module: torch.nn.Module, recorder: _Recorder, calls: list[ModuleCall]) -> list:
    stack = recorder.path_stack
    assert stack is not None
    handles = []
    for path, sub in module.named_modules():
        if not path:
            continue

        def pre(_mod: torch.nn.Module, _args: Any, path: str = path) -> None:
            stack.append(path)

        def post(mod: torch.nn.Module, _args: Any, output: Any, path: str = path) -> None:
            stack.pop()
            leaves, _ = tree_flatten(output)
            first = next((leaf for leaf in leaves if isinstance(leaf, torch.Tensor)), None)
            record = recorder.producer(first)
            if record is None and first is not None:
                record = recorder.record_module_output(first, path, type(mod).__name__)
            calls.append(ModuleCall(path, type(mod).__name__, record))

        handles.append(sub.register_forward_pre_hook(pre))
        handles.append(sub.register_forward_hook(post))
    return handles


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
    """
    ops: list[_ScriptOp] = []
    try:
        _walk_method(module, "", "forward", [], ops)
    except (_Unreadable, AttributeError, KeyError, RuntimeError):
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
    return {records[j].index: ops[i].path for i, j in aligned}


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
            ops.append(_ScriptOp(op_kind, path, fed))
            outs = [frozenset({len(ops) - 1})] * node.outputsSize()
        for value, out in zip(node.outputs(), outs, strict=False):
            feeds[value.unique()] = out
    return [feeds.get(v.unique(), frozenset()) for v in graph.outputs()]


def _node_kind(node: Any) -> str | None:
    kind = node.kind()
    if not kind.startswith("aten::"):
        return None
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
