"""The PyTorch reference: one forward pass that records every computing aten op's output.

A TorchDispatchMode sees each aten op in execution order, for eager modules, loaded
TorchScript archives and ExportedPrograms alike. For eager modules, forward hooks add the
module path each op ran in, which is what lets pairing follow the exporter's scopes. Python
hooks do not fire inside a TorchScript module, so there the paths are read from its graph
instead (`script_paths`). Values are copied when recorded, because in-place ops
(ReLU(inplace=True)) overwrite their input. Data flow is followed through the ops that are
not recorded (views, reshapes, copies) so each record knows which records feed it
(`TorchRecord.sources`). Pairing may add values derived from the recorded ones
(`register_derived`); a capture computes them on demand, for every sample.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trtdiff.backends.pytorch.op_kinds import aten_kind
from trtdiff.backends.pytorch.script import script_paths
from trtdiff.backends.store import TensorStore
from trtdiff.errors import InputError, ModelRunError, OptionError, TrtdiffError, cause_line, interrupts_kept, param


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
    sources: tuple[int | None, ...] = ()
    """Per tensor argument, the record it flows from through unrecorded ops (views, copies):
    a record index, INPUT for a model input, None for a parameter, buffer or constant."""

    @property
    def key(self) -> str:
        return f"torch:{self.index}"


INPUT = -1
"""`TorchRecord.sources` entry of a value computed from a model input by unrecorded ops only."""
DERIVED_PREFIX = "torch:derived:"
INPUT_PREFIX = "torch:input:"


class DerivedSource(Protocol):
    """Computes a derived value (see `register_derived`) from any capture of the same model."""

    def compute(self, capture: TorchCapture, key: str) -> np.ndarray: ...


_DERIVED: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def register_derived(key: str, source: DerivedSource) -> None:
    """Let every capture compute `key` with `source` (held weakly: as long as its owner keeps it)."""
    if not key.startswith(DERIVED_PREFIX):
        raise ValueError(f"a derived key starts with {DERIVED_PREFIX!r}: {key!r}")
    _DERIVED[key] = source


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
    inputs: list[np.ndarray] = field(default_factory=list)
    """The model's inputs, in order (`value` of `input_keys`; kept beside the store)."""

    @property
    def input_keys(self) -> list[str]:
        return [f"{INPUT_PREFIX}{i}" for i in range(len(self.inputs))]

    def __post_init__(self) -> None:
        for record in self.records:
            for parent in record.inputs:
                self.consumers.setdefault(parent, []).append(record.index)

    def value(self, key: str) -> np.ndarray:
        """A recorded value, or a derived one (computed here on first use, see `register_derived`)."""
        if key.startswith(INPUT_PREFIX):
            return self.inputs[int(key.removeprefix(INPUT_PREFIX))]
        if key not in self.store and key.startswith(DERIVED_PREFIX):
            source = _DERIVED.get(key)
            if source is None:
                raise KeyError(f"{key}: no derivation is registered for it (its pairing is gone)")
            self.store.put(key, source.compute(self, key))
        return self.store.get(key)

    def path_of(self, record: TorchRecord) -> str | None:
        """The module path `record` ran in: from forward hooks, else recovered from a TorchScript graph."""
        return record.module_path if record.module_path is not None else self.recovered_paths.get(record.index)


class _Recorder(TorchDispatchMode):
    """Records computing aten ops (see op_kinds) with their inputs' producers and sources."""

    def __init__(self, store: TensorStore, path_stack: list[str] | None) -> None:
        super().__init__()
        self.store = store
        self.path_stack = path_stack
        self.records: list[TorchRecord] = []
        self._producer: dict[int, tuple[weakref.ref, int]] = {}
        self._source: dict[int, tuple[weakref.ref, int]] = {}
        self._fresh: int | None = None  # the record the previous op made, if it made one
        self.failure: BaseException | None = None  # the first error raised through the recorder

    def producer(self, tensor: Any) -> int | None:
        """The record whose output `tensor` is (the same tensor, not a view of it)."""
        return _lookup(self._producer, tensor)

    def source(self, tensor: Any) -> int | None:
        """The record (or INPUT) `tensor` flows from through unrecorded ops such as views."""
        return _lookup(self._source, tensor)

    def mark(self, tensor: torch.Tensor, index: int, *, produced: bool) -> None:
        entry = (weakref.ref(tensor), index)
        self._source[id(tensor)] = entry
        if produced:
            self._producer[id(tensor)] = entry

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
            (self.source(tensor),),
        )
        self.records.append(record)
        self.store.put(record.key, tensor.detach().to("cpu", copy=True).numpy())
        self.mark(tensor, index, produced=True)
        return index

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        try:
            return self._dispatch(func, args, kwargs)
        except BaseException as error:  # TorchScript's interpreter wraps it, dropping its type and often its text
            self.failure = self.failure or error
            raise

    def _dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket.__name__
        kind = aten_kind(packet, args)
        first = out[0] if isinstance(out, (tuple, list)) else out
        flat_args, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat_args if isinstance(a, torch.Tensor)]
        fresh, self._fresh = self._fresh, None
        if kind is None or not isinstance(first, torch.Tensor):
            if not (fresh is not None and packet in _UNFLATTEN and self._unflatten(fresh, tensors, first)):
                self._pass_through(tensors, out)
            return out
        index = self._fresh = len(self.records)
        record = TorchRecord(
            index=index,
            op=str(func),
            kind=kind,
            module_path=self.path_stack[-1] if self.path_stack else ("" if self.path_stack is not None else None),
            shape=tuple(first.shape),
            dtype=str(first.dtype).removeprefix("torch."),
            inputs=tuple(p for p in (self.producer(a) for a in tensors) if p is not None),
            sources=tuple(self.source(a) for a in tensors),
        )
        self.records.append(record)
        self.store.put(record.key, first.detach().to("cpu", copy=True).numpy())
        self.mark(first, index, produced=True)
        return out

    def _unflatten(self, index: int, tensors: list[torch.Tensor], out: Any) -> bool:
        """A matrix product's output viewed right away (matmul and linear flatten, then unflatten): record that view.

        The value is the one the model's code sees (bmm 6x49x49 is the 2x3x49x49 of the
        matmul that called it), which is also how the exporter writes it.
        """
        record = self.records[index]
        if record.kind not in ("matmul", "gemm") or not tensors or self.producer(tensors[0]) != index:
            return False
        if not isinstance(out, torch.Tensor) or out.numel() != tensors[0].numel():
            return False
        self.records[index] = dataclasses.replace(record, shape=tuple(out.shape))
        self.store.put(record.key, self.store.get(record.key).reshape(tuple(out.shape)))
        self.mark(out, index, produced=True)
        return True

    def _pass_through(self, tensors: list[torch.Tensor], out: Any) -> None:
        """An unrecorded op's outputs flow from its one source (a view, a copy, a reshape)."""
        found = {s for s in (self.source(t) for t in tensors) if s is not None}
        if len(found) != 1:
            return
        (source,) = found
        leaves, _ = tree_flatten(out)
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                self.mark(leaf, source, produced=False)


_UNFLATTEN = frozenset({"view", "_unsafe_view", "reshape", "_reshape_alias"})


def _lookup(table: dict[int, tuple[weakref.ref, int]], tensor: Any) -> int | None:
    if not isinstance(tensor, torch.Tensor):
        return None
    entry = table.get(id(tensor))
    if entry is None or entry[0]() is not tensor:
        return None
    return entry[1]


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
    for tensor in tensors:
        recorder.mark(tensor, INPUT, produced=False)
    try:
        with interrupts_kept(), torch.no_grad(), recorder:
            result = module(*tensors)
    except Exception as wrapped:
        # Inside a TorchScript archive the interpreter's RuntimeError stands for what was raised through the recorder.
        error = recorder.failure if recorder.failure is not None and not eager else wrapped
        if isinstance(error, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        shapes = ", ".join(f"{name}:{'x'.join(map(str, v.shape))}" for name, v in inputs.items())
        raise _forward_failure(
            error,
            f" (inputs {shapes}); check {param('input_shapes')} / {param('input_files')} against what the model "
            "expects",
        ) from wrapped
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
        inputs=[np.array(value, copy=True) for value in inputs.values()],
    )


def _forward_failure(error: BaseException, advice: str) -> TrtdiffError:
    """The model's own error, or, when the machine ran out of memory, that (not the model's fault)."""
    message = cause_line(error)
    if isinstance(error, MemoryError) or "can't allocate memory" in message:
        return InputError(
            f"PyTorch ran out of memory running the model ({message or 'MemoryError'}); give "
            f"{param('input_shapes')} a smaller shape, or run on a machine with more memory"
        )
    return ModelRunError(f"the model's forward raised {type(error).__name__}: {message}{advice}")


def run_outputs(
    module: torch.nn.Module, inputs: Sequence[np.ndarray], *, device: str = "cpu", tf32: bool = False
) -> list[np.ndarray]:
    """A plain forward pass (no recording): the model's flattened tensor outputs, on the host."""
    with _on_device(module, device, tf32), torch.no_grad():
        tensors = [torch.from_numpy(np.array(value, copy=True, order="C")).to(device) for value in inputs]
        try:
            with interrupts_kept():
                result = module(*tensors)
        except Exception as error:
            raise _forward_failure(error, "; check the inputs") from error
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
