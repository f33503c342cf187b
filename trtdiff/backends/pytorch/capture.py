"""The PyTorch reference: one forward pass that records every computing aten op's output.

A TorchDispatchMode sees each aten op in execution order, for eager modules, loaded
TorchScript archives and ExportedPrograms alike. For eager modules, forward hooks add the
module path each op ran in, which is what lets pairing follow the exporter's scopes. Python
hooks do not fire inside a TorchScript module, so there the paths are read from its graph
instead (`script_paths`). Values are kept as the tensors the forward made, copied only when
an in-place op (ReLU(inplace=True)) is about to overwrite one. Data flow is followed through the ops that are
not recorded (views, reshapes, copies) so each record knows which records feed it
(`TorchRecord.sources`). What a capture holds is plain data (records.py: torch-free, so
pairing reads it without importing torch); values pairing derives from the recorded ones are
computed by the pairing, for every sample (`Pairing.value`). Attention is recorded op by op,
with its fused kernels off (torch_attention).
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, Literal

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from trtdiff.backends.pytorch.attention import (
    ATTENTION_RTOL,
    FUSED_ATTENTION,
    AttentionWatch,
    decomposed_attention,
    decomposition,
    fused_note,
    output_gap,
    script_attention,
)
from trtdiff.backends.pytorch.op_kinds import CASTS, aten_kind
from trtdiff.backends.pytorch.records import (
    DERIVED_PREFIX as DERIVED_PREFIX,
    INPUT as INPUT,
    INPUT_PREFIX as INPUT_PREFIX,
    OUTPUT_PREFIX as OUTPUT_PREFIX,
    ModuleCall as ModuleCall,
    Returned as Returned,
    TorchCapture as TorchCapture,
    TorchRecord as TorchRecord,
)
from trtdiff.backends.pytorch.script import script_paths
from trtdiff.backends.store import TensorStore, to_host
from trtdiff.errors import InputError, ModelRunError, OptionError, TrtdiffError, cause_line, interrupts_kept, param


class QuietMode(TorchDispatchMode):
    """A dispatch mode that is never compiled: torch need not wrap `__torch_dispatch__` in dynamo's disable,
    whose first call imports dynamo and sympy (about a second). Every mode trtdiff enters is one."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class _Recorder(QuietMode):
    """Records computing aten ops (see op_kinds) with their inputs' producers and sources."""

    def __init__(
        self,
        store: TensorStore,
        path_stack: list[str] | None,
        visit: Visit | None = None,
        keep: Container[str] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch declares no types here
        self.store = store
        self.visit = visit
        self.keep = keep
        self.path_stack = path_stack
        self.records: list[TorchRecord] = []
        self._producer: dict[int, tuple[weakref.ref[Any], int]] = {}
        self._source: dict[int, tuple[weakref.ref[Any], int]] = {}
        self._fresh: int | None = None  # the record the previous op made, if it made one
        self.fused: list[tuple[str, str | None]] = []  # fused attention kernels that ran: (op, module path)
        self.failure: BaseException | None = None  # the first error raised through the recorder
        self.visit_failure: BaseException | None = None  # the first error `visit` raised: the caller's, not the model's
        self._nested = 0  # inside a fused kernel's decomposition (see _decompose)
        self._deferred: list[tuple[str, torch.Tensor]] = []  # values made there, for `visit`
        self._uncopied: dict[int, list[str]] = {}  # storage address -> keys kept without a copy

    def hold(self, key: str, tensor: torch.Tensor) -> None:
        """Show a value to `visit` as it is produced, then keep it (those in `keep`, when given).

        On the CPU the tensor itself is kept, copied only if an in-place op is about to write
        to its memory (`_copy_before_write`: ReLU(inplace=True) overwrites its input); on a GPU
        a copy is kept there. A module's output arrives from its forward hook, inside this
        mode: what `visit` and the copy run (torch metrics on a GPU) must not be recorded as
        the model's ops, so the mode is off meanwhile.
        """
        with _disable_current_modes():
            self._hold(key, tensor)

    def _hold(self, key: str, tensor: torch.Tensor) -> None:
        if self.visit is not None:
            if self._nested:  # inside a decomposition that may yet be dropped: shown once it is kept
                self._deferred.append((key, tensor.detach().clone()))
            else:
                self._show(key, tensor)
        if self.keep is None or key in self.keep:
            if tensor.device.type == "cpu" and tensor.layout == torch.strided:
                self.store.put(key, tensor.detach())
                self._uncopied.setdefault(_storage(tensor), []).append(key)
            else:
                self.store.put(key, _held_copy(tensor))

    def _show(self, key: str, tensor: torch.Tensor) -> None:
        """`visit(key, tensor)`, noting what it raised (a backend run in lockstep with the forward fails there: that
        error is raised as it is, not as the model's)."""
        assert self.visit is not None
        try:
            self.visit(key, tensor)
        except BaseException as error:
            self.visit_failure = self.visit_failure or error
            raise

    def _copy_before_write(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Copy the kept values whose memory an in-place (or out=) op is about to write."""
        schema = func._schema
        written = [
            value
            for index, argument in enumerate(schema.arguments)
            if argument.alias_info is not None and argument.alias_info.is_write
            for value in [args[index] if index < len(args) else kwargs.get(argument.name)]
        ]
        leaves, _ = tree_flatten(written)
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor) and leaf.device.type == "cpu":
                for key in self._uncopied.pop(_storage(leaf), []):
                    kept = self.store.get(key) if key in self.store else None
                    if isinstance(kept, torch.Tensor):  # not spilled to disk (a copy already)
                        self.store.put(key, _held_copy(kept))

    def path(self) -> str | None:
        """The module path of the op running now ("" at the top; None when paths are not followed)."""
        if self.path_stack is None:
            return None
        return self.path_stack[-1] if self.path_stack else ""

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
        self.hold(record.key, tensor)
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
        if self._nested and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
            with self:  # called from inside this mode, a composite op arrives whole: record its parts
                return func.decompose(*args, **kwargs)
        if self._uncopied and func._schema.is_mutable:
            self._copy_before_write(func, args, kwargs)
        out = func(*args, **kwargs)
        packet = func._overloadpacket.__name__
        if packet in FUSED_ATTENTION:
            self._fresh = None
            if self._decompose(func, args, kwargs, out):
                return out
            self.fused.append((packet, self.path()))
        first = out[0] if isinstance(out, (tuple, list)) else out
        flat_args, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat_args if isinstance(a, torch.Tensor)]
        ends = [*tensors[:1], *([first] if isinstance(first, torch.Tensor) else [])]  # what goes in, what comes out
        integer = packet in CASTS and any(not t.is_floating_point() and not t.is_complex() for t in ends)
        kind = aten_kind(packet, args, integer=integer)
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
            module_path=self.path(),
            shape=tuple(first.shape),
            dtype=str(first.dtype).removeprefix("torch."),
            inputs=tuple(p for p in (self.producer(a) for a in tensors) if p is not None),
            sources=tuple(self.source(a) for a in tensors),
        )
        self.records.append(record)
        self.hold(record.key, first)
        self.mark(first, index, produced=True)
        return out

    def _decompose(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> bool:
        """Record a fused attention kernel through its decomposition on the same inputs (torch_attention).

        Kept when it reproduces the kernel's output to ATTENTION_RTOL: then the kernel's output
        flows from the decomposition's last record. Otherwise its records are dropped.
        """
        run = decomposition(func, args, kwargs)
        first = out[0] if isinstance(out, (tuple, list)) else out
        if run is None or not isinstance(first, torch.Tensor):
            return False
        start, shown = len(self.records), len(self._deferred)
        self._nested += 1
        try:
            with self:
                value = run()
        except Exception:  # noqa: BLE001 -- a form the decomposition refuses: the kernel stays as it ran
            value = None
        finally:
            self._nested -= 1
        self._fresh = None
        last = self.source(value) if value is not None else None
        if value is None or last is None or last < start or _gap(value, first) > ATTENTION_RTOL:
            for record in self.records[start:]:
                self.store.discard(record.key)
            del self.records[start:]
            del self._deferred[shown:]
            return False
        if not self._nested and self.visit is not None:
            for key, kept in self._deferred:
                self._show(key, kept)
            self._deferred.clear()
        self.mark(first, last, produced=self.producer(value) == last and tuple(first.shape) == tuple(value.shape))
        return True

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
        if record.key in self.store:
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


def _gap(value: torch.Tensor, reference: torch.Tensor) -> float:
    return output_gap([value.detach().float().cpu().numpy()], [reference.detach().float().cpu().numpy()])


def _storage(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage().data_ptr())


def _held_copy(tensor: torch.Tensor) -> Any:
    """A copy of a recorded value to keep: on the GPU it ran on (no trip to the host), else a numpy array."""
    if tensor.device.type == "cuda":
        return tensor.detach().clone()
    return tensor.detach().to("cpu", copy=True).numpy()


_UNFLATTEN = frozenset({"view", "_unsafe_view", "reshape", "_reshape_alias"})


def _lookup(table: dict[int, tuple[weakref.ref[Any], int]], tensor: Any) -> int | None:
    if not isinstance(tensor, torch.Tensor):
        return None
    entry = table.get(id(tensor))
    if entry is None or entry[0]() is not tensor:
        return None
    return entry[1]


AttentionMode = Literal["auto", "decomposed", "fused"]
Visit = Callable[[str, "torch.Tensor"], None]
"""Called with each recorded value's key and tensor as it is produced (before later ops can change it)."""


def capture(
    module: torch.nn.Module,
    inputs: Mapping[str, np.ndarray],
    *,
    device: str = "cpu",
    tf32: bool = False,
    store: TensorStore | None = None,
    attention: AttentionMode = "auto",
    visit: Visit | None = None,
    keep: Container[str] | None = None,
    dtype: str | None = None,
) -> TorchCapture:
    """Run `module` once on `inputs` (in order) on `device` and record every computing op's output.

    `device` "auto" is the GPU when torch sees one (`resolve_device`). On CUDA, TF32 is off
    for matmuls and cuDNN convolutions unless `tf32`, so the reference is
    true FP32; the module is moved to `device` for the pass and back afterwards.
    `attention` "auto" records attention op by op (torch_attention) and, when the model ran
    attention, checks the final outputs against a plain forward with the fused kernels: beyond
    ATTENTION_RTOL it records again with the fused kernels, with a note. "decomposed" and
    "fused" record one way without the check (a later sample, recorded as the first was).

    `visit` sees every value as it is produced (the comparison streams the reference through
    it); then only the values named in `keep` are kept, when it is given. `keep` needs one way of
    recording attention, not "auto", which may record twice; with "auto", `visit` sees the values
    of both recordings, the second's under the keys the returned capture holds. `dtype` ("float64", "float16"):
    the floating inputs are cast to it (the module's parameters are the caller's to cast).
    """
    device = resolve_device(device)
    store = store if store is not None else TensorStore()
    if keep is not None and attention == "auto":
        raise ValueError("a streamed recording records attention one way: decomposed or fused")
    with _on_device(module, device, tf32):
        if attention == "fused":
            return _capture(module, inputs, device, store, decomposed=False, visit=visit, keep=keep, dtype=dtype)
        try:
            recorded = _capture(module, inputs, device, store, decomposed=True, visit=visit, keep=keep, dtype=dtype)
        except ModelRunError as error:
            if attention == "decomposed":
                raise
            _discard_records(store)  # the math path can need memory the fused kernels do not: try those
            fused = _capture(module, inputs, device, store, decomposed=False, dtype=dtype)
            cause = error.__cause__
            why = f"{type(cause).__name__}: {cause_line(cause)}" if cause is not None else str(error)
            return dataclasses.replace(fused, notes=(f"{_FUSED_NOTE}, the forward raised {why}", *fused.notes))
        if attention == "decomposed" or not recorded.ran_attention:
            return recorded
        plain = run_outputs(module, list(inputs.values()), device=device, tf32=tf32, dtype=dtype)
        gap = output_gap([recorded.value(key) for key in recorded.output_keys], plain)
        if gap <= ATTENTION_RTOL:
            return recorded
        _discard_records(store)
        fused = _capture(module, inputs, device, store, decomposed=False, dtype=dtype)
        note = f"{_FUSED_NOTE}, it moved the final outputs by {gap:.1e} of their size (more than {ATTENTION_RTOL:g})"
        return dataclasses.replace(fused, notes=(note, *fused.notes))


_FUSED_NOTE = (
    "attention recorded with its fused kernels: recorded op by op (MultiheadAttention fast path off, "
    "SDPA's math implementation)"
)


def _discard_records(store: TensorStore) -> None:
    """Drop a recording's values from `store` (records are numbered from 0; outputs too)."""
    for prefix in ("torch:", "torch:output:"):
        index = 0
        while f"{prefix}{index}" in store:
            store.discard(f"{prefix}{index}")
            index += 1


def resolve_device(device: str) -> str:
    """The device `device` names: "auto" is the first CUDA GPU when torch sees one, else the CPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


@contextmanager
def _on_device(module: torch.nn.Module, device: str, tf32: bool) -> Iterator[None]:
    """`module` on `device` with TF32 as asked, and TorchScript's graph executor unoptimized.

    Optimized, the executor profiles the first run of an archive and fuses later runs into
    kernels of its own (on a GPU by default): a second recording would then see other ops than
    the first, and a fused group no op at all. Every forward trtdiff runs is the plain graph.
    """
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
    precision = ConvolutionTf32(tf32) if target.type == "cuda" else nullcontext()
    try:
        if target != original:
            module.to(target)
        with torch.jit.optimized_execution(False), precision:  # type: ignore[attr-defined]  # public, not in __all__
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
        if target != original:
            module.to(original)


class ConvolutionTf32(QuietMode):
    """Every convolution with TF32 as asked, also where a trace baked the flag in.

    A traced archive calls `aten::_convolution` with `allow_tf32` written in as a constant (True
    unless the tracing process had turned it off), so `torch.backends.cudnn.allow_tf32` does not
    reach it: on a GPU its convolutions would run in TF32 whatever `--tf32` says (an FP32
    DeepLabV3+ at 1024x1024 then drifts past rtol 1e-3 from ONNX Runtime's CPU values).
    """

    def __init__(self, tf32: bool) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch declares no types here
        self.tf32 = tf32

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if func is torch.ops.aten._convolution.default and len(args) == _CONVOLUTION_ARGS:
            args = (*args[:-1], self.tf32)
        return func(*args, **(kwargs or {}))


_CONVOLUTION_ARGS = 13  # aten::_convolution(input, weight, bias, ..., cudnn_enabled, allow_tf32)


def _capture(
    module: torch.nn.Module,
    inputs: Mapping[str, np.ndarray],
    device: str,
    store: TensorStore,
    *,
    decomposed: bool,
    visit: Visit | None = None,
    keep: Container[str] | None = None,
    dtype: str | None = None,
) -> TorchCapture:
    """One recorded forward on `device` (see `capture`), attention decomposed or as it ran."""
    scripted = module if isinstance(module, torch.jit.ScriptModule) else None
    eager = scripted is None and not isinstance(module, torch.fx.GraphModule)
    path_stack: list[str] | None = [] if eager else None
    recorder = _Recorder(store, path_stack, visit, keep)
    watch = AttentionWatch(path_stack) if decomposed and scripted is None else None
    in_script = script_attention(scripted) if scripted is not None else []
    calls: list[ModuleCall] = []
    handles = _install_hooks(module, recorder, calls) if eager else []
    cast = getattr(torch, dtype) if dtype is not None else None
    tensors = [_input_tensor(value, device, cast) for value in inputs.values()]
    for tensor in tensors:
        recorder.mark(tensor, INPUT, produced=False)
    try:
        with interrupts_kept(), torch.no_grad():
            with decomposed_attention() if decomposed else nullcontext(), watch or nullcontext(), recorder:
                result = module(*tensors)
    except Exception as wrapped:
        if recorder.visit_failure is not None:  # what the caller's `visit` raised is the caller's to report
            raise recorder.visit_failure from None
        # Inside a TorchScript archive the interpreter's RuntimeError stands for what was raised through the recorder.
        error = recorder.failure if recorder.failure is not None and not eager else wrapped
        if isinstance(error, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        raise _forward_failure(error, _inputs_advice(inputs)) from wrapped
    finally:
        for handle in handles:
            handle.remove()
    output_records, output_keys, returned = _hold_outputs(recorder, result)
    return TorchCapture(
        records=recorder.records,
        module_calls=calls,
        output_records=output_records,
        output_keys=output_keys,
        paths_known=eager,
        store=store,
        device=device,
        recovered_paths=script_paths(scripted, recorder.records) if scripted is not None else {},
        inputs=[np.array(value, copy=True) for value in inputs.values()],
        decomposed=decomposed,
        ran_attention=bool(watch.calls if watch is not None else in_script),
        notes=tuple(note for note in [fused_note(recorder.fused, in_script)] if note),
        returned=returned,
        dtype=dtype or "float32",
    )


def _input_tensor(value: np.ndarray, device: str, cast: torch.dtype | None) -> torch.Tensor:
    """One input on `device`, a floating one in `cast` where given."""
    tensor = torch.from_numpy(np.array(value, copy=True, order="C")).to(device)
    return tensor.to(cast) if cast is not None and tensor.is_floating_point() else tensor


def _inputs_advice(inputs: Mapping[str, np.ndarray]) -> str:
    """What to check when the forward fails: the inputs it was given, against what the model expects."""
    shapes = ", ".join(f"{name}:{'x'.join(map(str, v.shape))}" for name, v in inputs.items())
    return f" (inputs {shapes}); check {param('input_shapes')} / {param('input_files')} against what the model expects"


def _hold_outputs(recorder: _Recorder, result: Any) -> tuple[list[int | None], list[str], Returned]:
    """Hold the model's tensor outputs (keys by position among its flattened outputs), the record of each,
    and the structure they were returned in."""
    leaves, spec = tree_flatten(result)
    tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    keys = [f"{OUTPUT_PREFIX}{i}" for i in tensors]
    for i, key in zip(tensors, keys, strict=True):
        recorder.hold(key, leaves[i])
    records = [recorder.producer(leaves[i]) for i in tensors]
    kept = tuple(str(leaf.dtype) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves)
    return records, keys, Returned(spec, kept, frozenset(tensors))


def returned_value(recorded: TorchCapture) -> Any:
    """What the recorded forward returned, rebuilt on the host from the held outputs (dtypes as they were).

    The TorchScript exporter runs an archive's forward once only to read the types of what it
    returns; given this, it need not (source.export).
    """
    returned = recorded.returned
    if returned is None:
        raise ValueError("this recording kept no structure of what the forward returned")

    def tensor(i: int) -> torch.Tensor:
        held = recorded.native(f"{OUTPUT_PREFIX}{i}")
        if isinstance(held, torch.Tensor):
            return held.cpu()
        dtype = getattr(torch, returned.leaves[i].removeprefix("torch."))
        return torch.from_numpy(np.array(held, copy=True)).to(dtype)  # spilled to disk (bfloat16 as float32)

    leaves = [tensor(i) if i in returned.tensors else leaf for i, leaf in enumerate(returned.leaves)]
    return tree_unflatten(leaves, returned.spec)


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
    module: torch.nn.Module,
    inputs: Sequence[np.ndarray],
    *,
    device: str = "cpu",
    tf32: bool = False,
    dtype: str | None = None,
) -> list[np.ndarray]:
    """A plain forward pass (no recording): the model's flattened tensor outputs, on the host.

    `dtype`: the floating inputs cast to it, as `capture` does."""
    device = resolve_device(device)
    cast = getattr(torch, dtype) if dtype is not None else None
    with _on_device(module, device, tf32), torch.no_grad():
        tensors = [_input_tensor(value, device, cast) for value in inputs]
        try:
            with interrupts_kept():
                result = module(*tensors)
        except Exception as error:
            raise _forward_failure(error, "; check the inputs") from error
    leaves, _ = tree_flatten(result)
    return [to_host(leaf) for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _install_hooks(module: torch.nn.Module, recorder: _Recorder, calls: list[ModuleCall]) -> list[Any]:
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
            tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
            first = tensors[0] if tensors else None
            record = recorder.producer(first)
            if record is None and first is not None:
                record = recorder.record_module_output(first, path, type(mod).__name__)
            calls.append(ModuleCall(path, type(mod).__name__, record, len(tensors)))

        handles.append(sub.register_forward_pre_hook(pre))
        handles.append(sub.register_forward_hook(post))
    return handles
