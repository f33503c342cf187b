"""Memory TensorRT reads and writes, as torch tensors: inputs, outputs, debug copies, dynamic outputs.

The logic of TensorRT's two callback interfaces lives in plain classes (`DebugCollector`,
`OutputBuffers`) that the `trt.IDebugListener` / `trt.IOutputAllocator` subclasses made by
`make_debug_listener` / `make_output_allocator` delegate to. TensorRT's Python wrappers catch
and print any exception a callback raises (pyCore.cpp), so the callbacks here never raise:
they record what went wrong, and the runtime raises it after `execute_async_v3` returns.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.errors import BackendError, describe_error, param

if TYPE_CHECKING:
    import torch

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


def torch_dtype(trt_dtype: Any) -> torch.dtype:
    """The torch dtype for a TensorRT DataType (by member name, so any TensorRT module works)."""
    import torch

    name = getattr(trt_dtype, "name", str(trt_dtype))
    if name not in _TORCH_DTYPES:
        raise BackendError(
            f"TensorRT type {name} has no torch equivalent; mark fewer outputs ({param('outputs')} none)"
        )
    return getattr(torch, _TORCH_DTYPES[name])


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
        torch.cuda.ExternalStream(stream).synchronize()
    elif torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def copy_debug_tensor(
    addr: int, dtype_name: str, shape: tuple[int, ...], stream: int, *, on_host: bool = False
) -> torch.Tensor:
    """Copy memory TensorRT owns (valid only during the callback) into a new torch tensor.

    The stream is synchronized first in both cases, as NVIDIA's debugTensorWriter and Polygraphy do:
    the values are only final once the work TensorRT queued before the callback has run.
    """
    import torch

    if dtype_name not in _TYPESTR:
        raise BackendError(REASON_DEBUG_DTYPE.format(dtype=dtype_name))
    if any(d < 0 for d in shape):
        raise BackendError(f"debug tensor shape {shape} has unresolved dimensions")
    count = int(np.prod(shape, dtype=np.int64))
    if on_host:
        synchronize(stream)
        itemsize = int(_TYPESTR[dtype_name][2:])
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * (count * itemsize)).from_address(addr)).copy()
        host = torch.from_numpy(raw).view(_storage_dtype(dtype_name)).reshape(shape)
        return host.view(torch.bfloat16) if dtype_name == "BF16" else host
    view = torch.as_tensor(_CudaArray(addr, shape, _TYPESTR[dtype_name]), device="cuda")
    external = torch.cuda.ExternalStream(stream) if stream else torch.cuda.current_stream()
    with torch.cuda.stream(external):
        copy = view.clone()
    external.synchronize()
    return copy.view(torch.bfloat16) if dtype_name == "BF16" else copy


class DebugCollector:
    """Keeps a copy of each debug tensor by engine-internal name; records failures instead of raising."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.errors: list[str] = []
        self.skipped: dict[str, str] = {}
        self.calls = 0

    def reset(self) -> None:
        self.tensors.clear()
        self.errors.clear()
        self.skipped.clear()
        self.calls = 0

    def process(self, addr: int, on_host: bool, dtype_name: str, shape: Sequence[int], name: str, stream: int) -> bool:
        """One debug tensor; False (and an entry in `errors`) when its copy failed."""
        self.calls += 1
        if dtype_name not in _TYPESTR:
            self.skipped[name] = REASON_DEBUG_DTYPE.format(dtype=dtype_name)
            return True
        try:
            self.tensors[name] = copy_debug_tensor(
                addr, dtype_name, tuple(int(d) for d in shape), stream, on_host=on_host
            )
        except Exception as error:  # noqa: BLE001 -- TensorRT's wrapper would print and drop it; raised after the run
            self.errors.append(f"{name}: {describe_error(error)}")
            return False
        return True

    def take(self) -> dict[str, torch.Tensor]:
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
            f"compare the final outputs only ({param('outputs')} none) or free GPU memory"
        )

    def raise_errors(self, where: str) -> None:
        error = self.failure(where)
        if error is not None:
            raise error


def make_debug_listener(trt: ModuleType) -> Any:
    """An IDebugListener whose `collector` (a DebugCollector) keeps a copy of each debug tensor."""

    class TensorCollector(trt.IDebugListener):  # type: ignore[name-defined]
        def __init__(self) -> None:
            trt.IDebugListener.__init__(self)
            self.collector = DebugCollector()

        def process_debug_tensor(self, addr: int, location: Any, type: Any, shape: Any, name: str, stream: int) -> bool:
            on_host = location == trt.TensorLocation.HOST
            dtype_name = getattr(type, "name", str(type))
            return self.collector.process(addr, on_host, dtype_name, tuple(shape), name, stream)

    return TensorCollector()


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


def make_output_allocator(trt: ModuleType, device: torch.device) -> Any:
    """An IOutputAllocator whose `outputs` (an OutputBuffers) holds each data-dependent output."""

    class Allocator(trt.IOutputAllocator):  # type: ignore[name-defined]
        def __init__(self) -> None:
            trt.IOutputAllocator.__init__(self)
            self.outputs = OutputBuffers(device)

        def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int) -> int:
            return self.outputs.reallocate(tensor_name, size, alignment)

        def reallocate_output_async(self, tensor_name: str, memory: int, size: int, alignment: int, stream: int) -> int:
            return self.outputs.reallocate(tensor_name, size, alignment)

        def notify_shape(self, tensor_name: str, shape: Any) -> None:
            self.outputs.notify(tensor_name, tuple(shape))

    return Allocator()


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
