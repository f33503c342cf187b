"""One deserialized engine, its execution context and CUDA stream, and one execution of it.

Written against the documented TensorRT 10/11 Python API and never executed: no machine this
project has can run an engine (notes/tensorrt.md). Every step that can fail is checked, with
the TensorRT error logged during that step (the logger's list is cleared before each):
deserialization, context creation, `set_tensor_address`, `set_output_allocator`,
`set_debug_listener`, `execute_async_v3`. Everything runs under `torch.cuda.device(gpu)` on a
dedicated stream (the legacy default stream costs extra device synchronizations).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from trtdiff.backends.tensorrt import cache
from trtdiff.backends.tensorrt.buffers import (
    allocate,
    make_debug_listener,
    make_output_allocator,
    stage_input,
    torch_dtype,
)
from trtdiff.errors import BackendError, InputError, first_line

if TYPE_CHECKING:
    import torch

    from trtdiff.backends.tensorrt.buffers import DebugCollector
    from trtdiff.backends.tensorrt.importing import GpuInfo

NO_EXECUTION = "no machine here can execute a TensorRT engine"
REASON_NO_SHAPE = "data-dependent output: TensorRT reported no shape for it through the output allocator"
_COPY = re.compile(r"(.+)\.(\d+)")

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
    "IExecutionContext.set_input_shape",
    "IExecutionContext.get_tensor_shape",
    "IExecutionContext.set_tensor_address",
    "IExecutionContext.set_output_allocator",
    "IExecutionContext.execute_async_v3",
    "IExecutionContext.set_debug_listener",
)
TRT_OPTIONAL_API = (
    "Runtime.get_engine_validity",
    "EngineValidity.INVALID",
    "EngineInvalidityDiagnostics",
    "IExecutionContext.unfused_tensors_debug_state",
    "ICudaEngine.create_runtime_config",
    "IRuntimeConfig.create_runtime_cache",
    "IRuntimeConfig.set_runtime_cache",
    "IRuntimeCache.serialize",
    "IRuntimeCache.deserialize",
)


def failure_cause(logger: Any) -> str:
    """The last error TensorRT logged since the logger's list was last cleared."""
    return first_line(logger.errors[-1]) if logger.errors else "no error logged"


def require(value: Any, logger: Any, what: str, hint: str) -> Any:
    """`value` unless it is None or False (TensorRT's failure results): then BackendError with the logged cause."""
    if value is None or value is False:
        raise BackendError(f"TensorRT could not {what}: {failure_cause(logger)}; {hint}")
    return value


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


def map_debug_names(
    debug: Mapping[str, Any], reverse: Mapping[str, str], known: frozenset[str], taken: frozenset[str]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Engine-internal debug names -> ONNX names; (values, unmapped names).

    An exact TensorRT name wins. `base.N` is taken as a copy of `base` only when `base.N` is no
    tensor of the network (`output.1` is a normal TorchScript name) and no exact `base` arrived.
    ONNX names in `taken` (real network outputs) are never overwritten by a debug copy.
    """
    values: dict[str, Any] = {}
    for name, tensor in debug.items():
        onnx_name = reverse.get(name)
        if onnx_name is not None and onnx_name not in taken:
            values[onnx_name] = tensor
    unmapped: list[str] = []
    for name, tensor in debug.items():
        if name in reverse:
            continue
        match = _COPY.fullmatch(name)
        base = match.group(1) if match and name not in known else None
        onnx_name = reverse.get(base) if base is not None else None
        if onnx_name is not None and onnx_name not in taken and onnx_name not in values:
            values[onnx_name] = tensor
        else:
            unmapped.append(name)
    return values, tuple(unmapped)


class EngineSession:
    """A deserialized engine with its context, stream, debug listener and output allocator."""

    def __init__(
        self,
        trt: ModuleType,
        runtime: Any,
        logger: Any,
        plan: bytes,
        gpu: GpuInfo,
        *,
        label: str,
        debug: bool,
        runtime_cache: Path | None = None,
    ) -> None:
        import torch

        self.trt, self.logger, self.label = trt, logger, label
        self.device = torch.device("cuda", gpu.index)
        self.runtime_cache_path = runtime_cache
        self.notes: list[str] = []
        with torch.cuda.device(self.device):
            check_engine_validity(trt, runtime, plan, gpu)
            logger.errors.clear()
            rebuild = "rebuild it without the engine cache"
            self.engine = require(
                runtime.deserialize_cuda_engine(plan), logger, f"load the engine for {label}", rebuild
            )
            self._runtime_cache, config = self._open_runtime_cache()
            logger.errors.clear()
            engine = self.engine
            context = (
                engine.create_execution_context(config) if config is not None else engine.create_execution_context()
            )
            hint = "free GPU memory (TensorRT-RTX also compiles kernels here) or use a smaller mark budget"
            self.context = require(context, logger, f"create an execution context for {label}", hint)
            self.stream = torch.cuda.Stream(self.device)
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self.allocator = make_output_allocator(trt, self.device)
        self.listener = make_debug_listener(trt) if debug else None
        if self.listener is not None:
            require(self.context.set_debug_listener(self.listener), logger, "attach the debug listener", rebuild)
            self.context.unfused_tensors_debug_state = True
        self._cache_saved = False

    def _open_runtime_cache(self) -> tuple[Any, Any]:
        """TensorRT-RTX's runtime cache (JIT-compiled kernels), loaded from the engine cache folder if there."""
        path = self.runtime_cache_path
        if path is None or not hasattr(self.engine, "create_runtime_config"):
            return None, None
        config = self.engine.create_runtime_config()
        if config is None or not hasattr(config, "create_runtime_cache"):
            return None, None
        runtime_cache = config.create_runtime_cache()
        data = cache.load_runtime_cache(path)
        if data and not runtime_cache.deserialize(data):
            self._note(f"runtime cache {path.name}: made for another GPU, driver or TensorRT; recompiled")
        config.set_runtime_cache(runtime_cache)
        return runtime_cache, config

    def execute(self, feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Run once; (output tensors by TensorRT name, debug tensors by engine-internal name), all on the GPU."""
        import torch

        collector = self.listener.collector if self.listener is not None else None
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            staged = self._bind_inputs(feeds)
            buffers, dynamic = self._bind_outputs()
            if collector is not None:
                collector.reset()
            self.allocator.outputs.reset()
            self.logger.errors.clear()
            ran = self.context.execute_async_v3(self.stream.cuda_stream)
            self.stream.synchronize()  # outputs, and host debug tensors, are only final after this
            del staged
            debug = collector.take() if collector is not None else {}
            failure = self._failure(ran, collector)
            if failure is not None:
                debug.clear()  # the traceback would keep these device copies alive
                buffers.clear()
                raise failure
            for name in dynamic:
                value = self.allocator.outputs.result(name, torch_dtype(self.engine.get_tensor_dtype(name)))
                if value is None:
                    self._note(f"{name}: {REASON_NO_SHAPE}")
                else:
                    buffers[name] = value
            self.allocator.outputs.release()  # the returned views keep their memory only as long as needed
        self._save_runtime_cache()
        return buffers, debug

    def _failure(self, ran: bool, collector: DebugCollector | None) -> BackendError | None:
        """Why the run failed: TensorRT said so (with what the callbacks recorded), or a debug copy failed."""
        callbacks = [*self.allocator.outputs.errors, *(collector.errors if collector is not None else [])]
        if not ran:
            extra = f" (callbacks: {callbacks[0]})" if callbacks else ""
            return BackendError(
                f"TensorRT failed to run the engine for {self.label}: {failure_cause(self.logger)}{extra}"
            )
        return collector.failure(f"TensorRT engine for {self.label}") if collector is not None else None

    def _bind_inputs(self, feeds: Mapping[str, np.ndarray]) -> list[torch.Tensor]:
        """Stage each input on the device (never at a null address) and give TensorRT its shape and address."""
        trt, engine, context = self.trt, self.engine, self.context
        staged = []
        for name in self.inputs:
            if name not in feeds:
                raise InputError(f"TensorRT engine input {name} was not given; inputs are {', '.join(self.inputs)}")
            if engine.get_tensor_location(name) != trt.TensorLocation.DEVICE:
                raise BackendError(
                    f"TensorRT engine input {name} is a host (shape) tensor, which trtdiff does not "
                    "feed; export the model with static shapes"
                )
            array = feeds[name]
            if not context.set_input_shape(name, tuple(array.shape)):
                shape_text = "x".join(map(str, array.shape))
                raise InputError(
                    f"input {name}: shape {shape_text} is outside the engine's profile; rebuild with this shape"
                )
            tensor, address = stage_input(array, torch_dtype(engine.get_tensor_dtype(name)), self.device)
            self._set_address(name, address)
            staged.append(tensor)
        return staged

    def _bind_outputs(self) -> tuple[dict[str, torch.Tensor], list[str]]:
        """Buffers for outputs of known shape; the output allocator for data-dependent ones (returned by name)."""
        buffers: dict[str, torch.Tensor] = {}
        dynamic: list[str] = []
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                require(
                    self.context.set_output_allocator(name, self.allocator),
                    self.logger,
                    f"set an output allocator for the data-dependent output {name}",
                    "report this with the model",
                )
                dynamic.append(name)
                continue
            buffers[name], address = allocate(shape, torch_dtype(self.engine.get_tensor_dtype(name)), self.device)
            self._set_address(name, address)
        return buffers, dynamic

    def _set_address(self, name: str, address: int) -> None:
        self.logger.errors.clear()
        require(
            self.context.set_tensor_address(name, address),
            self.logger,
            f"set the address of {name}",
            "report this with the model",
        )

    def _save_runtime_cache(self) -> None:
        """After the first successful run, keep the JIT-compiled kernels for the next process."""
        if self._runtime_cache is None or self._cache_saved or self.runtime_cache_path is None:
            return
        cache.save_runtime_cache(self.runtime_cache_path, bytes(self._runtime_cache.serialize()))
        self._cache_saved = True

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def release(self) -> None:
        """Free the GPU memory this engine holds: the context first (it points at the rest), then the engine."""
        self.allocator.outputs.release()
        self.context = None
        self._runtime_cache = None
        self.engine = None
