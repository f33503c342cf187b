"""Memory TensorRT reads and writes, as torch tensors: inputs, outputs, debug copies, dynamic outputs.

The logic of TensorRT's two callback interfaces lives in plain classes (`DebugCollector`,
`OutputBuffers`) that the `trt.IDebugListener` / `trt.IOutputAllocator` subclasses made by
`make_debug_listener` / `make_output_allocator` delegate to. Debug tensors are copied to the
host as they are produced (the comparison runs on the host), as NVIDIA's debugTensorWriter
sample does; a copy can stay on the device for a comparison that runs there. TensorRT's Python wrappers catch
and print any exception a callback raises (pyCore.cpp), so the callbacks here never raise:
they record what went wrong, and the runtime raises it after `execute_async_v3` returns.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from trtdiff.errors import BackendError, describe_error, param

if TYPE_CHECKING:
    import torch

    from trtdiff.backends.tensorrt.api import DebugListener, Dims, EnumValue, OutputAllocator, TrtModule

_TORCH_DTYPES = {
    "FLOAT": "float32",
    "HALF": "float16",
    "BF16": "bfloat16",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
    "UINT8": "uint8",
}
_TYPESTR = {
    "FLOAT": "<f4",
    "HALF": "<f2",
    "BF16": "<i2",
    "INT8": "|i1",
    "INT32": "<i4",
    "INT64": "<i8",
    "BOOL": "|b1",
    "UINT8": "|u1",
}
REASON_DEBUG_DTYPE = "debug tensor of TensorRT type {dtype}: no torch equivalent (packed or 8-bit float), not compared"

TRT_API = ("IDebugListener", "IDebugListener.process_debug_tensor", "IOutputAllocator", "TensorLocation.HOST")
TRT_OPTIONAL_API: tuple[str, ...] = ()


def torch_dtype(trt_dtype: EnumValue) -> torch.dtype:
    """The torch dtype for a TensorRT DataType (by member name, so any TensorRT module works)."""
    import torch

    name = getattr(trt_dtype, "name", str(trt_dtype))
    if name not in _TORCH_DTYPES:
        raise BackendError(
            f"TensorRT type {name} has no torch equivalent; mark fewer outputs ({param('outputs')} none)"
        )
    dtype: torch.dtype = getattr(torch, _TORCH_DTYPES[name])
    return dtype


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """Host copy as numpy; bfloat16 (no numpy type) becomes float32."""
    import torch

    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.detach().cpu().numpy()


def allocate(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, int]:
    """A tensor of `shape` on `device` and an address for TensorRT that is never null, even for an empty tensor.

    torch reports data_ptr() 0 for any tensor with no elements (CPU and H200 alike), so the address
    comes from a one-element backing buffer that the returned view keeps alive.
    """
    import torch

    count = int(np.prod(shape, dtype=np.int64))
    backing = torch.empty(max(count, 1), dtype=dtype, device=device)
    return backing[:count].view(shape), backing.data_ptr()


def stage_input(array: np.ndarray, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, int]:
    """Copy a feed to `device` as `dtype` (on the current stream); the address is never null, as for outputs."""
    import torch

    tensor, address = allocate(tuple(int(d) for d in array.shape), dtype, device)
    if tensor.numel():
        tensor.copy_(torch.from_numpy(np.require(array, requirements=["C", "W"])))
    return tensor, address


def synchronize(stream: int) -> None:
    """Wait for TensorRT's `stream` (an int handle; 0 is the legacy default stream) before reading memory it wrote."""
    import torch

    if stream:
        _external_stream(stream).synchronize()
    elif cuda_initialized():
        torch.cuda.synchronize()


def cuda_initialized() -> bool:
    """Whether torch has a CUDA context already (so synchronizing or freeing its cache means something)."""
    import torch

    is_initialized: Callable[[], bool] = torch.cuda.is_initialized  # torch leaves it unannotated
    return torch.cuda.is_available() and is_initialized()


def _external_stream(stream: int) -> torch.cuda.Stream:
    """TensorRT's stream handle as a torch stream (the current stream for the legacy default stream 0)."""
    import torch

    if not stream:
        return torch.cuda.current_stream()
    external: Callable[[int], torch.cuda.Stream] = torch.cuda.ExternalStream  # torch leaves it unannotated
    return external(stream)


def copy_debug_tensor(
    addr: int, dtype_name: str, shape: tuple[int, ...], stream: int, *, on_host: bool = False, to_host: bool = True
) -> np.ndarray | torch.Tensor:
    """Copy memory TensorRT owns (valid only during the callback) to a numpy array (`to_host` False: a device tensor).

    As NVIDIA's debugTensorWriter does: wait for the stream (the values are only final once the
    work TensorRT queued before the callback has run), then copy device memory to the host, or
    read host memory in place. A device copy stays on the device only where the comparison runs
    there (`to_host` False); bfloat16 comes back as float32 in numpy (numpy has no bfloat16).
    """
    if dtype_name not in _TYPESTR:
        raise BackendError(REASON_DEBUG_DTYPE.format(dtype=dtype_name))
    if any(d < 0 for d in shape):
        raise BackendError(f"debug tensor shape {shape} has unresolved dimensions")
    count = int(np.prod(shape, dtype=np.int64))
    if on_host:
        synchronize(stream)
        itemsize = int(_TYPESTR[dtype_name][2:])
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * (count * itemsize)).from_address(addr)).copy()
        return _host_array(raw, dtype_name, shape)
    import torch

    view = torch.as_tensor(_CudaArray(addr, shape, _TYPESTR[dtype_name]), device="cuda")
    external = _external_stream(stream)
    with torch.cuda.stream(external):
        copy = view.to("cpu") if to_host else view.clone()
    external.synchronize()
    if dtype_name == "BF16":
        copy = copy.view(torch.bfloat16)
    return to_numpy(copy) if to_host else copy


def _host_array(raw: np.ndarray, dtype_name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Raw host bytes as a numpy array of `dtype_name` (bfloat16 widened to float32)."""
    if dtype_name == "BF16":
        widened = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        return widened.reshape(shape)
    return raw.view(np.dtype(_TYPESTR[dtype_name])).reshape(shape)


class DebugSink(Protocol):
    """Where a streamed run hands each debug tensor as it fires (stream.TensorStream)."""

    def route(self, name: str) -> str | None:
        """The name to hand the tensor over under; None: not wanted, not copied."""
        ...

    def reserve(self, nbytes: int) -> bool:
        """Wait for room for `nbytes`; False: the consumer stopped, the tensor is not copied."""
        ...

    def put(self, name: str, value: np.ndarray | torch.Tensor, nbytes: int) -> None: ...

    def release(self, nbytes: int) -> None:
        """A reservation the copy did not fill (it failed)."""
        ...


class DebugCollector:
    """Keeps a copy of each debug tensor by name (what TensorRT's callback hands over); never raises.

    `budget` bounds what one run copies where the engine, not trtdiff, chooses the debug
    tensors (unfused mode): the tensors are counted into groups of at most `budget` bytes in the
    order they arrive (the same every run of one engine on one input), and a run copies only
    group `wanted` (`start(group)`); `groups` says how many groups the last run saw. With a
    `sink` (`start(group, sink)`), each copy is handed to it as the tensor fires instead of kept.
    """

    def __init__(self, *, to_host: bool = True, budget: int | None = None) -> None:
        self.to_host = to_host
        self.budget = budget
        self.tensors: dict[str, np.ndarray | torch.Tensor] = {}
        self.errors: list[str] = []
        self.skipped: dict[str, str] = {}
        self.calls = 0
        self.copied_bytes = 0
        self.wanted: int | None = None
        self.groups = 0
        self.sink: DebugSink | None = None
        self._group = 0
        self._used = 0

    def start(self, group: int | None = None, sink: DebugSink | None = None) -> None:
        """Forget the last run; copy only group `group` of this run (None: every tensor), handed to `sink` if given."""
        self.tensors.clear()
        self.errors.clear()
        self.skipped.clear()
        self.calls = self.copied_bytes = self.groups = self._group = self._used = 0
        self.wanted, self.sink = group, sink

    reset = start

    def process(self, addr: int, on_host: bool, dtype_name: str, shape: Sequence[int], name: str, stream: int) -> bool:
        """One debug tensor; False (and an entry in `errors`) when its copy failed."""
        self.calls += 1
        if dtype_name not in _TYPESTR:
            self.skipped[name] = REASON_DEBUG_DTYPE.format(dtype=dtype_name)
            return True
        dims = tuple(int(d) for d in shape)
        if not self._in_window(dims, dtype_name):
            return True
        sink = self.sink
        nbytes = _nbytes(dims, dtype_name) if min(dims, default=0) >= 0 else 0
        target = name if sink is None else sink.route(name)
        # the sink's reserve waits while its chunk is full: the engine then waits inside this callback
        if target is None or (sink is not None and not sink.reserve(nbytes)):
            return True  # not wanted, or the comparison stopped reading
        try:
            copy = copy_debug_tensor(addr, dtype_name, dims, stream, on_host=on_host, to_host=self.to_host or on_host)
        except Exception as error:  # noqa: BLE001 -- TensorRT's wrapper would print and drop it; raised after the run
            if sink is not None:
                sink.release(nbytes)
            self.errors.append(f"{name}: {describe_error(error)}")
            return False
        self.copied_bytes += nbytes
        if sink is None:
            self.tensors[name] = copy
        else:
            sink.put(target, copy, nbytes)
        return True

    def _in_window(self, dims: tuple[int, ...], dtype_name: str) -> bool:
        """Whether this tensor belongs to the group this run copies (always, without a budget)."""
        if self.budget is None:
            self.groups = 1
            return True
        size = _nbytes(dims, dtype_name)
        if self._used and self._used + size > self.budget:
            self._group += 1
            self._used = 0
        self._used += size
        self.groups = self._group + 1
        return self.wanted is None or self._group == self.wanted

    def take(self) -> dict[str, np.ndarray | torch.Tensor]:
        """The copies so far, handed over (the collector keeps no reference to them)."""
        taken = dict(self.tensors)
        self.tensors.clear()
        return taken

    def failure(self, where: str) -> BackendError | None:
        """A BackendError naming the first failed copy, or None when every copy worked."""
        if not self.errors:
            return None
        more = f" (+{len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        return BackendError(
            f"{where}: copying TensorRT debug tensors failed for {self.errors[0]}{more}; "
            f"compare the final outputs only ({param('outputs')} none) or give a smaller {param('mark_budget_bytes')}"
        )

    def raise_errors(self, where: str) -> None:
        error = self.failure(where)
        if error is not None:
            raise error


def make_debug_listener(trt: TrtModule, collector: DebugCollector | None = None) -> DebugListener:
    """An IDebugListener whose `collector` (a DebugCollector) keeps a copy of each debug tensor.

    TensorRT's wrapper calls `process_debug_tensor(int(addr), location, type, shape, name,
    int(stream))` and ignores what it returns (pyCore.cpp); the collector records failures.
    """
    host = trt.TensorLocation.__members__.get("HOST")
    base = trt.IDebugListener
    keeper = collector or DebugCollector()

    class TensorCollector(base):  # type: ignore[misc,valid-type]  # TensorRT's class, chosen at run time
        def __init__(self) -> None:
            super().__init__()
            self.collector = keeper

        def process_debug_tensor(
            self, addr: int, location: EnumValue, type: EnumValue, shape: Dims, name: str, stream: int
        ) -> bool:
            dtype_name = getattr(type, "name", str(type))
            return self.collector.process(addr, location == host, dtype_name, tuple(shape), name, stream)

    return cast("DebugListener", TensorCollector())


def _nbytes(dims: tuple[int, ...], dtype_name: str) -> int:
    return int(np.prod(dims, dtype=np.int64)) * int(_TYPESTR[dtype_name][2:])


class OutputBuffers:
    """Memory for outputs whose shape is known only once the engine ran (NonZero, NMS, Unique)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.buffers: dict[str, torch.Tensor] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.errors: list[str] = []

    def reset(self) -> None:
        """Forget the last run's shapes and errors (buffers are kept for reuse)."""
        self.shapes.clear()
        self.errors.clear()

    def reallocate(self, name: str, size: int, alignment: int) -> int:
        """An address of at least `size` bytes aligned to `alignment`; 0 (and an entry in `errors`) on failure."""
        import torch

        try:
            size, alignment = max(int(size), 1), max(int(alignment), 1)
            current = self.buffers.get(name)
            if current is None or current.numel() < size or current.data_ptr() % alignment:
                raw = torch.empty(size + alignment, dtype=torch.uint8, device=self.device)
                offset = (-raw.data_ptr()) % alignment
                self.buffers[name] = raw[offset : offset + size]
            return self.buffers[name].data_ptr()
        except Exception as error:  # noqa: BLE001 -- TensorRT's wrapper would print it; raised after the run
            self.errors.append(f"{name}: {describe_error(error)}")
            return 0

    def notify(self, name: str, shape: Sequence[int]) -> None:
        self.shapes[name] = tuple(int(d) for d in shape)

    def result(self, name: str, dtype: torch.dtype) -> torch.Tensor | None:
        """The output as `dtype` in the shape TensorRT reported; None when it reported none."""
        import torch

        shape = self.shapes.get(name)
        if shape is None or any(d < 0 for d in shape):
            return None
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            return torch.empty(shape, dtype=dtype, device=self.device)
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        buffer = self.buffers.get(name)
        if buffer is None or buffer.numel() < nbytes:
            return None
        return buffer[:nbytes].view(dtype).reshape(shape)

    def release(self) -> None:
        self.buffers.clear()
        self.shapes.clear()


def make_output_allocator(trt: TrtModule, buffers: OutputBuffers) -> OutputAllocator:
    """An IOutputAllocator whose `outputs` (`buffers`) holds each data-dependent output."""
    base = trt.IOutputAllocator

    class Allocator(base):  # type: ignore[misc,valid-type]  # TensorRT's class, chosen at run time
        def __init__(self) -> None:
            super().__init__()
            self.outputs = buffers

        def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int) -> int:
            return self.outputs.reallocate(tensor_name, size, alignment)

        def reallocate_output_async(self, tensor_name: str, memory: int, size: int, alignment: int, stream: int) -> int:
            return self.outputs.reallocate(tensor_name, size, alignment)

        def notify_shape(self, tensor_name: str, shape: Dims) -> None:
            self.outputs.notify(tensor_name, tuple(shape))

    return cast("OutputAllocator", Allocator())


class _CudaArray:
    """Just enough `__cuda_array_interface__` (v2) for torch.as_tensor to view a raw device pointer."""

    def __init__(self, addr: int, shape: tuple[int, ...], typestr: str) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (int(addr), False),
            "strides": None,
            "version": 2,
        }


def _storage_dtype(dtype_name: str) -> torch.dtype:
    import torch

    return torch.int16 if dtype_name == "BF16" else getattr(torch, _TORCH_DTYPES[dtype_name])
