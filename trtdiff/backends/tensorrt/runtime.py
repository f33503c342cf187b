"""TensorRT as an `OnnxBackend`: deserialize the plan, run it on torch CUDA buffers, return numpy.

No machine this project has can execute a TensorRT engine (notes/tensorrt.md: the RTX
runtime refuses the H200, and full TensorRT cannot be installed), so `_execute` is written
against the documented TensorRT 10/11 Python API, kept small, and never ran. What did run,
on an H200 with TensorRT-RTX 1.7.1: `check_engine_validity` (INVALID, UNSUPPORTED_CC),
`copy_debug_tensor` on device memory for every dtype, `allocate`, and the refusal in
`TensorRTBackend.__init__`. Buffers are torch CUDA tensors (no PyCUDA); debug tensors are
copied through `__cuda_array_interface__`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, chunk_names
from trtdiff.backends.tensorrt.builder import build_engine, make_logger
from trtdiff.backends.tensorrt.fusion import engine_fusion
from trtdiff.backends.tensorrt.importing import import_tensorrt, probe
from trtdiff.errors import BackendError, InputError, first_line, param

if TYPE_CHECKING:
    import torch

    from trtdiff.backends.tensorrt.builder import BuildResult, BuildSettings
    from trtdiff.backends.tensorrt.fusion import FusionReport
    from trtdiff.backends.tensorrt.importing import GpuInfo
    from trtdiff.onnx_graph import GraphInfo

NO_EXECUTION = "no machine here can execute a TensorRT engine"
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

TRT_API = (
    "Runtime.deserialize_cuda_engine",
    "ICudaEngine.create_execution_context",
    "ICudaEngine.num_io_tensors",
    "ICudaEngine.get_tensor_name",
    "ICudaEngine.get_tensor_mode",
    "ICudaEngine.get_tensor_dtype",
    "ICudaEngine.get_tensor_location",
    "TensorIOMode.INPUT",
    "TensorIOMode.OUTPUT",
    "TensorLocation.DEVICE",
    "TensorLocation.HOST",
    "IExecutionContext.set_input_shape",
    "IExecutionContext.get_tensor_shape",
    "IExecutionContext.set_tensor_address",
    "IExecutionContext.execute_async_v3",
    "IExecutionContext.set_debug_listener",
    "IDebugListener.process_debug_tensor",
)
TRT_OPTIONAL_API = (
    "Runtime.get_engine_validity",
    "EngineValidity.INVALID",
    "EngineInvalidityDiagnostics",
    "IExecutionContext.unfused_tensors_debug_state",
)


class TensorRTBackend:
    """Builds (or loads from `cache_dir`) and runs the engine for the exact ONNX file in `graph`."""

    name = "tensorrt"

    def __init__(
        self,
        graph: GraphInfo,
        settings: BuildSettings | None = None,
        *,
        cache_dir: Path | None = None,
        device: int = 0,
        build: BuildResult | None = None,
    ) -> None:
        found = probe(device)
        if not found.can_run or found.gpu is None:
            raise BackendError(f"{NO_EXECUTION}: {found.reason}")
        self.graph, self.gpu = graph, found.gpu
        self.build = build or build_engine(graph, settings, cache_dir=cache_dir, gpu=found.gpu)
        self._trt = import_tensorrt()
        self._logger = make_logger(self._trt)
        self._runtime = self._trt.Runtime(self._logger)
        check_engine_validity(self._trt, self._runtime, self.build.plan, self.gpu)
        self._engine = self._runtime.deserialize_cuda_engine(self.build.plan)
        if self._engine is None:
            cause = first_line(self._logger.errors[-1]) if self._logger.errors else "no message"
            raise BackendError(
                f"TensorRT could not load the engine built from {graph.path}: {cause}; "
                "rebuild it without the engine cache"
            )
        self._context = self._engine.create_execution_context()
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        self._inputs = [n for n in names if self._engine.get_tensor_mode(n) == self._trt.TensorIOMode.INPUT]
        self._outputs = [n for n in names if self._engine.get_tensor_mode(n) == self._trt.TensorIOMode.OUTPUT]
        self._reverse = self.build.mark_plan.trt_to_onnx
        self._available = self._returnable()
        self._listener = None
        if self.build.mark_plan.debug_unfused:
            self._listener = make_debug_listener(self._trt)
            self._context.set_debug_listener(self._listener)
            self._context.unfused_tensors_debug_state = True
        self.unmapped_debug: tuple[str, ...] = ()

    def describe(self) -> str:
        settings = self.build.settings
        precision = settings.precision + ("+tf32" if settings.tf32 else "")
        return f"{self.build.info.describe()} on {self.gpu.describe()} ({precision}, outputs {settings.outputs})"

    def available(self) -> set[str]:
        """Marked outputs; in unfused mode every mapped tensor, of which the engine reports those it kept."""
        return set(self._available)

    def _returnable(self) -> frozenset[str]:
        """What `available` returns, computed once: the mark plan does not change after the build."""
        plan = self.build.mark_plan
        if plan.debug_unfused:
            return frozenset(plan.onnx_to_trt) - frozenset(self.graph.graph_inputs)
        return frozenset(plan.returned_onnx())

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Execute once; copy the wanted tensors to the host chunk by chunk (all stay on the GPU meanwhile)."""
        names = [t for t in wanted if t in self._available]
        if not names:
            return
        values = self._execute(feeds)
        for group in chunk_names(names, sizes, max_bytes):
            yield {name: to_numpy(values[name]) for name in group if name in values}

    def fusion(self) -> FusionReport:
        """Which ONNX nodes each engine layer computes, from the engine inspector."""
        return engine_fusion(self._engine, self._trt, self.graph)

    def _execute(self, feeds: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
        import torch

        trt, engine, context = self._trt, self._engine, self._context
        device = torch.device("cuda", self.gpu.index)
        keep: list[torch.Tensor] = []
        buffers: dict[str, torch.Tensor] = {}
        with torch.cuda.device(device):
            for name in self._inputs:
                if name not in feeds:
                    raise InputError(
                        f"TensorRT engine input {name} was not given; inputs are {', '.join(self._inputs)}"
                    )
                if engine.get_tensor_location(name) != trt.TensorLocation.DEVICE:
                    raise BackendError(
                        f"TensorRT engine input {name} is a host (shape) tensor, which trtdiff does not "
                        "feed; export the model with static shapes"
                    )
                array = np.require(feeds[name], requirements=["C", "W"])
                tensor = torch.from_numpy(array).to(device=device, dtype=torch_dtype(engine.get_tensor_dtype(name)))
                if not context.set_input_shape(name, tuple(array.shape)):
                    shape_text = "x".join(map(str, array.shape))
                    raise InputError(
                        f"input {name}: shape {shape_text} is outside the engine's profile; rebuild with this shape"
                    )
                context.set_tensor_address(name, tensor.data_ptr())
                keep.append(tensor)
            for name in self._outputs:
                shape = tuple(context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise BackendError(
                        f"TensorRT output {name} has a data-dependent shape {shape}; trtdiff has no "
                        f"output allocator for it, use {param('outputs')} none"
                    )
                buffers[name], address = allocate(shape, torch_dtype(engine.get_tensor_dtype(name)), device)
                context.set_tensor_address(name, address)
            if self._listener is not None:
                self._listener.tensors.clear()
            stream = torch.cuda.current_stream(device)
            if not context.execute_async_v3(stream.cuda_stream):
                cause = first_line(self._logger.errors[-1]) if self._logger.errors else "no message"
                raise BackendError(f"TensorRT failed to run the engine for {self.graph.path}: {cause}")
            stream.synchronize()
        values = {self._reverse[n]: t for n, t in buffers.items() if n in self._reverse}
        if self._listener is not None:
            values.update(self._debug_values(self._listener.tensors))
        return values

    def _debug_values(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Engine-internal debug names -> ONNX names: exact TRT name, or `name.N` copies Myelin makes."""
        values: dict[str, torch.Tensor] = {}
        unmapped: list[str] = []
        for name, tensor in tensors.items():
            base = name if name in self._reverse else name.rsplit(".", 1)[0]
            if base in self._reverse:
                values.setdefault(self._reverse[base], tensor)
            else:
                unmapped.append(name)
        self.unmapped_debug = tuple(unmapped)
        return values


def check_engine_validity(trt: ModuleType, runtime: Any, plan: bytes, gpu: GpuInfo) -> None:
    """Ask TensorRT-RTX whether this GPU can run `plan` before loading it (where the API exists)."""
    if not hasattr(runtime, "get_engine_validity"):
        return
    validity, diagnostics = runtime.get_engine_validity(plan)
    if validity != trt.EngineValidity.INVALID:
        return
    reasons = [
        name for name, flag in trt.EngineInvalidityDiagnostics.__members__.items() if int(diagnostics) & int(flag)
    ]
    raise BackendError(
        f"{NO_EXECUTION}: TensorRT says the engine cannot run on {gpu.describe()} "
        f"({', '.join(reasons) or 'no diagnostics'}); use a GPU this TensorRT supports"
    )


def make_debug_listener(trt: ModuleType) -> Any:
    """An IDebugListener keeping a device copy of each debug tensor, by engine-internal name."""

    class TensorCollector(trt.IDebugListener):  # type: ignore[name-defined]
        def __init__(self) -> None:
            trt.IDebugListener.__init__(self)
            self.tensors: dict[str, Any] = {}

        def process_debug_tensor(self, addr: int, location: Any, type: Any, shape: Any, name: str, stream: int) -> bool:
            on_host = location == trt.TensorLocation.HOST
            self.tensors[name] = copy_debug_tensor(addr, type.name, tuple(shape), stream, on_host=on_host)
            return True

    return TensorCollector()


def copy_debug_tensor(
    addr: int, dtype_name: str, shape: tuple[int, ...], stream: int, *, on_host: bool = False
) -> torch.Tensor:
    """Copy memory TensorRT owns (valid only during the callback) into a new torch tensor."""
    import torch

    if dtype_name not in _TYPESTR:
        raise BackendError(
            f"debug tensor of TensorRT type {dtype_name}: no torch equivalent; use {param('outputs')} all"
        )
    count = int(np.prod(shape, dtype=np.int64))
    if on_host:
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


def allocate(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, int]:
    """A device tensor of `shape` and an address for TensorRT that is never null, even for an empty tensor.

    torch reports data_ptr() 0 for any tensor with no elements (CPU and H200 alike), so the address
    comes from a one-element backing buffer that the returned view keeps alive.
    """
    import torch

    count = int(np.prod(shape, dtype=np.int64))
    backing = torch.empty(max(count, 1), dtype=dtype, device=device)
    return backing[:count].view(shape), backing.data_ptr()
