"""One deserialized engine, its execution context and CUDA stream, and one execution of it.

Written against the documented TensorRT 10/11 Python API and never executed: no machine this
project has can run an engine (docs/tensorrt.md). Every step that can fail is checked, with
the TensorRT error logged during that step (the logger's list is cleared before each):
deserialization, context creation, `set_tensor_address`, `set_output_allocator`,
`set_debug_listener`, the debug states, `execute_async_v3`. Everything runs under
`torch.cuda.device(gpu)` on a dedicated stream (the legacy default stream costs extra device
synchronizations).

Debug tensors, as NVIDIA's debugTensorWriter sample and Polygraphy's runner use them: one
listener set once on the context; before each run the debug state of every tensor is switched
off and that of the tensors the run reports switched on (`set_tensor_debug_state`), or, for
tensors the engine chose (unfused mode), `unfused_tensors_debug_state` is on. The listener
keeps each copy for the caller, or hands it to a sink as the tensor fires (a streamed run,
stream.py). The runtime config given to the context (TensorRT-RTX's runtime cache) lives as
long as the context.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence, Set
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

import numpy as np

from trtdiff.backends.tensorrt import cache
from trtdiff.backends.tensorrt.buffers import (
    DebugCollector,
    DebugSink,
    OutputBuffers,
    allocate,
    make_debug_listener,
    make_output_allocator,
    stage_input,
    torch_dtype,
)
from trtdiff.backends.tensorrt.logger import step
from trtdiff.errors import BackendError, InputError, first_line

if TYPE_CHECKING:
    import torch

    from trtdiff.backends.tensorrt.api import (
        DebugListener,
        Engine,
        ExecutionContext,
        Logger,
        OutputAllocator,
        Runtime,
        RuntimeCache,
        RuntimeConfig,
        TrtModule,
    )
    from trtdiff.backends.tensorrt.importing import GpuInfo

T = TypeVar("T")
DebugMode = Literal["names", "unfused"] | None

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
    "IExecutionContext.set_all_tensors_debug_state",
    "IExecutionContext.set_tensor_debug_state",
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


def failure_cause(logger: Logger) -> str:
    """The last error TensorRT logged since the logger's list was last cleared."""
    return first_line(logger.errors[-1]) if logger.errors else "no error logged"


def require(value: T | None, logger: Logger, what: str, hint: str) -> T:
    """`value` unless it is None or False (TensorRT's failure results): then BackendError with the logged cause."""
    if value is None or value is False:
        raise BackendError(f"TensorRT could not {what}: {failure_cause(logger)}; {hint}")
    return value


def check_engine_validity(trt: TrtModule, runtime: Runtime, plan: bytes, gpu: GpuInfo) -> None:
    """Ask TensorRT-RTX whether this GPU can run `plan` before loading it (where the API exists)."""
    if not hasattr(runtime, "get_engine_validity"):
        return
    validity, diagnostics = runtime.get_engine_validity(plan)
    if validity != trt.EngineValidity.__members__.get("INVALID"):
        return
    reasons = [
        name for name, flag in trt.EngineInvalidityDiagnostics.__members__.items() if int(diagnostics) & int(flag)
    ]
    raise BackendError(
        f"{NO_EXECUTION}: TensorRT says the engine cannot run on {gpu.describe()} "
        f"({', '.join(reasons) or 'no diagnostics'}); use a GPU this TensorRT supports"
    )


def map_debug_names(
    debug: Mapping[str, T], reverse: Mapping[str, str], known: Set[str], taken: Set[str]
) -> tuple[dict[str, T], tuple[str, ...]]:
    """Engine-internal debug names -> ONNX names; (values, unmapped names).

    An exact TensorRT name wins. `base.N` is taken as a copy of `base` only when `base.N` is no
    tensor of the network (`output.1` is a normal TorchScript name) and no exact `base` arrived.
    ONNX names in `taken` (real network outputs) are never overwritten by a debug copy.
    """
    values: dict[str, T] = {}
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


class DebugNames:
    """`map_debug_names` one tensor at a time, for a streamed run: the ONNX name each debug tensor is handed over under.

    A tensor is handed over once, only if wanted; what a run already handed over counts as
    taken, like the network outputs (`outputs`). So the first of an exact name and its
    `base.N` copy to fire wins: a streamed tensor cannot be taken back (the collected run
    prefers the exact name whichever fires first).
    """

    def __init__(self, reverse: Mapping[str, str], known: Set[str], outputs: Set[str], wanted: Set[str]) -> None:
        self.reverse, self.known, self.wanted = reverse, known, wanted
        self.taken = set(outputs)
        self.handed = 0
        self.unmapped: list[str] = []

    def route(self, name: str) -> str | None:
        mapped, unmapped = map_debug_names({name: name}, self.reverse, self.known, self.taken)
        self.unmapped.extend(unmapped)
        onnx_name = next(iter(mapped), None)
        if onnx_name is None or onnx_name not in self.wanted:
            return None
        self.taken.add(onnx_name)
        self.handed += 1
        return onnx_name


class EngineSession:
    """A deserialized engine with its context, stream, debug listener and output allocator.

    `debug`: "names" (debug tensors marked by name: each run switches on the group it is
    given), "unfused" (the engine's own choice: each run copies one budget-sized group), or
    None (outputs only). `release()` (also on a failure while loading) frees everything.
    """

    def __init__(
        self,
        trt: TrtModule,
        runtime: Runtime,
        logger: Logger,
        plan: bytes,
        gpu: GpuInfo,
        *,
        label: str,
        debug: DebugMode,
        budget: int | None = None,
        runtime_cache: Path | None = None,
    ) -> None:
        import torch

        self.trt, self.logger, self.label, self.debug = trt, logger, label, debug
        self.device = torch.device("cuda", gpu.index)
        self.runtime_cache_path = runtime_cache
        self.notes: list[str] = []
        self.engine: Engine | None = None
        self.context: ExecutionContext | None = None
        self._runtime_config: RuntimeConfig | None = None  # must outlive the context made with it
        self._runtime_cache: RuntimeCache | None = None
        self._cache_saved = False
        self.collector = DebugCollector(budget=budget if debug == "unfused" else None)
        self.output_buffers = OutputBuffers(self.device)
        self.listener: DebugListener | None = None
        try:
            self._open(runtime, plan, gpu)
        except BaseException:
            self.release()
            raise

    def _open(self, runtime: Runtime, plan: bytes, gpu: GpuInfo) -> None:
        import torch

        trt, logger, label = self.trt, self.logger, self.label
        rebuild = "rebuild it without the engine cache"
        with torch.cuda.device(self.device):
            check_engine_validity(trt, runtime, plan, gpu)
            with step(logger):
                self.engine = require(
                    runtime.deserialize_cuda_engine(plan), logger, f"load the engine for {label}", rebuild
                )
            self._open_runtime_cache(self.engine)
            with step(logger):
                config = self._runtime_config
                made = (
                    self.engine.create_execution_context(config)
                    if config is not None
                    else self.engine.create_execution_context()  # TensorRT 10 has no runtime-config overload
                )
                hint = "free GPU memory (TensorRT-RTX also compiles kernels here) or give a smaller mark budget"
                self.context = require(made, logger, f"create an execution context for {label}", hint)
            make_stream: Callable[[torch.device], torch.cuda.Stream] = torch.cuda.Stream  # unannotated in torch
            self.stream = make_stream(self.device)
        engine = self.engine
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.__members__["INPUT"]]
        self.outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.__members__["OUTPUT"]]
        self.allocator: OutputAllocator = make_output_allocator(trt, self.output_buffers)
        if self.debug is not None:
            self.listener = make_debug_listener(trt, self.collector)
            with step(logger):
                require(self.context.set_debug_listener(self.listener), logger, "attach the debug listener", rebuild)
            if self.debug == "unfused":
                self.context.unfused_tensors_debug_state = True

    def _open_runtime_cache(self, engine: Engine) -> None:
        """TensorRT-RTX's runtime cache (JIT-compiled kernels), loaded from the engine cache folder if there."""
        path = self.runtime_cache_path
        if path is None or not hasattr(engine, "create_runtime_config"):
            return
        config = engine.create_runtime_config()
        if config is None or not hasattr(config, "create_runtime_cache"):
            return
        runtime_cache = config.create_runtime_cache()
        data = cache.load_runtime_cache(path)
        if data and not runtime_cache.deserialize(data):
            self._note(f"runtime cache {path.name}: made for another GPU, driver or TensorRT; recompiled")
        config.set_runtime_cache(runtime_cache)
        self._runtime_config, self._runtime_cache = config, runtime_cache

    def execute(
        self,
        feeds: Mapping[str, np.ndarray],
        *,
        debug_names: Sequence[str] = (),
        group: int | None = None,
        sink: DebugSink | None = None,
    ) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray | torch.Tensor]]:
        """Run once; (outputs by TensorRT name, on the GPU; debug copies by name, on the host).

        `debug_names`: the debug tensors this run reports (debug "names"); `group`: the group of
        the engine's own debug tensors this run copies (debug "unfused"; `collector.groups` then
        says how many there are). `sink`: each debug copy is handed to it as the tensor fires
        (while `execute_async_v3` runs, on the thread that called it: stream.py), none returned.
        """
        import torch

        context = self._context()
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            staged = self._bind_inputs(feeds)
            buffers, dynamic = self._bind_outputs()
            self._set_debug_states(debug_names)
            self.collector.start(group, sink)
            self.output_buffers.reset()
            with step(self.logger):
                ran = context.execute_async_v3(self.stream.cuda_stream)
                self.stream.synchronize()  # outputs, and host debug tensors, are only final after this
                failure = self._failure(ran)
            del staged
            debug = self.collector.take()
            if failure is not None:
                debug.clear()  # the traceback would keep these copies alive
                buffers.clear()
                raise failure
            for name in dynamic:
                value = self.output_buffers.result(name, torch_dtype(self._engine().get_tensor_dtype(name)))
                if value is None:
                    self._note(f"{name}: {REASON_NO_SHAPE}")
                else:
                    buffers[name] = value
            self.output_buffers.release()  # the returned views keep their memory only as long as needed
        self._save_runtime_cache()
        return buffers, debug

    def _set_debug_states(self, names: Sequence[str]) -> None:
        """Switch every debug tensor off, then this run's group on (debug "names" only)."""
        if self.debug != "names":
            return
        context, logger = self._context(), self.logger
        with step(logger):
            require(context.set_all_tensors_debug_state(False), logger, "switch the debug tensors off", "report this")
            for name in names:
                require(
                    context.set_tensor_debug_state(name, True), logger, f"switch on debug tensor {name}", "report this"
                )

    def _failure(self, ran: bool) -> BackendError | None:
        """Why the run failed: TensorRT said so (with what the callbacks recorded), or a debug copy failed."""
        callbacks = [*self.output_buffers.errors, *self.collector.errors]
        if not ran:
            extra = f" (callbacks: {callbacks[0]})" if callbacks else ""
            return BackendError(
                f"TensorRT failed to run the engine for {self.label}: {failure_cause(self.logger)}{extra}"
            )
        return self.collector.failure(f"TensorRT engine for {self.label}")

    def _context(self) -> ExecutionContext:
        if self.context is None:
            raise BackendError(f"the engine for {self.label} was released; open the backend again")
        return self.context

    def _engine(self) -> Engine:
        if self.engine is None:
            raise BackendError(f"the engine for {self.label} was released; open the backend again")
        return self.engine

    def _bind_inputs(self, feeds: Mapping[str, np.ndarray]) -> list[torch.Tensor]:
        """Stage each input on the device (never at a null address) and give TensorRT its shape and address."""
        engine, context = self._engine(), self._context()
        device_location = self.trt.TensorLocation.__members__["DEVICE"]
        staged = []
        for name in self.inputs:
            if name not in feeds:
                raise InputError(f"TensorRT engine input {name} was not given; inputs are {', '.join(self.inputs)}")
            if engine.get_tensor_location(name) != device_location:
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
        engine, context = self._engine(), self._context()
        buffers: dict[str, torch.Tensor] = {}
        dynamic: list[str] = []
        for name in self.outputs:
            shape = tuple(int(d) for d in context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                with step(self.logger):
                    require(
                        context.set_output_allocator(name, self.allocator),
                        self.logger,
                        f"set an output allocator for the data-dependent output {name}",
                        "report this with the model",
                    )
                dynamic.append(name)
                continue
            buffers[name], address = allocate(shape, torch_dtype(engine.get_tensor_dtype(name)), self.device)
            self._set_address(name, address)
        return buffers, dynamic

    def _set_address(self, name: str, address: int) -> None:
        with step(self.logger):
            require(
                self._context().set_tensor_address(name, address),
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
        """Free what this engine holds: buffers, the context (it points at the rest), its runtime config, the engine."""
        self.output_buffers.release()
        self.collector.start()
        self.listener = None
        self.context = None
        self._runtime_config = None
        self._runtime_cache = None
        self.engine = None
