"""The parts of TensorRT's Python bindings this package uses, as small Protocols.

`importing.import_tensorrt()` is the one place the module is taken as `Any` (it is a C
extension without type information); everything else sees it through these Protocols, so
mypy checks each call against what the bindings really offer (the test
`test_every_tensorrt_attribute_the_code_uses_exists` checks the names on the installed module).
Enumerations are read through `__members__` (`member(trt.LayerType, "CONSTANT")`), which
pybind11 enums all have, so a member that one TensorRT lacks is a None, not an AttributeError.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol


class EnumValue(Protocol):
    """A member of a pybind11 enum (`trt.DataType.FLOAT`): a name and an integer value."""

    @property
    def name(self) -> str: ...

    def __int__(self) -> int: ...


class EnumNamespace(Protocol):
    """A pybind11 enum class (`trt.LayerType`): its members by name."""

    @property
    def __members__(self) -> Mapping[str, EnumValue]: ...


def member(namespace: EnumNamespace, name: str) -> EnumValue | None:
    """`namespace.NAME`, or None where this TensorRT has no such member (feature detection)."""
    return namespace.__members__.get(name)


def members(namespace: EnumNamespace, names: Sequence[str]) -> frozenset[EnumValue]:
    """The members of `namespace` among `names` (those this TensorRT has)."""
    found = (member(namespace, name) for name in names)
    return frozenset(value for value in found if value is not None)


class Dims(Protocol):
    def __iter__(self) -> Iterator[int]: ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> int: ...


class Tensor(Protocol):
    """ITensor."""

    @property
    def name(self) -> str: ...

    @property
    def dtype(self) -> EnumValue: ...

    @property
    def shape(self) -> Dims: ...

    @property
    def is_network_input(self) -> bool: ...

    @property
    def is_network_output(self) -> bool: ...

    @property
    def is_shape_tensor(self) -> bool: ...


class Layer(Protocol):
    """ILayer."""

    @property
    def name(self) -> str: ...

    @property
    def type(self) -> EnumValue: ...

    @property
    def num_outputs(self) -> int: ...

    @property
    def num_inputs(self) -> int: ...

    @property
    def metadata(self) -> str: ...

    def get_output(self, index: int) -> Tensor | None: ...

    def get_input(self, index: int) -> Tensor | None: ...


class Network(Protocol):
    """INetworkDefinition."""

    @property
    def num_layers(self) -> int: ...

    @property
    def num_inputs(self) -> int: ...

    @property
    def num_outputs(self) -> int: ...

    def get_layer(self, index: int) -> Layer: ...

    def get_input(self, index: int) -> Tensor: ...

    def get_output(self, index: int) -> Tensor: ...

    def mark_debug(self, tensor: Tensor) -> bool: ...

    def unmark_debug(self, tensor: Tensor) -> bool: ...

    def is_debug_tensor(self, tensor: Tensor) -> bool: ...

    def mark_unfused_tensors_as_debug_tensors(self) -> bool: ...

    def unmark_unfused_tensors_as_debug_tensors(self) -> bool: ...


class ParserError(Protocol):
    def desc(self) -> str: ...

    def code(self) -> EnumValue: ...


class OnnxParser(Protocol):
    @property
    def num_errors(self) -> int: ...

    def parse_from_file(self, path: str) -> bool: ...

    def parse(self, model: bytes) -> bool: ...

    def get_error(self, index: int) -> ParserError: ...

    def get_layer_output_tensor(self, node_name: str, index: int) -> Tensor | None: ...


class OptimizationProfile(Protocol):
    def set_shape(self, name: str, minimum: Sequence[int], optimum: Sequence[int], maximum: Sequence[int]) -> None: ...


class HostMemory(Protocol):
    @property
    def nbytes(self) -> int: ...

    def __bytes__(self) -> bytes: ...


class TimingCache(Protocol):
    def serialize(self) -> HostMemory: ...


class BuilderConfig(Protocol):
    """IBuilderConfig (the attributes set here; profiling_verbosity and the like are plain attributes)."""

    profiling_verbosity: EnumValue
    builder_optimization_level: int
    num_compute_capabilities: int

    def set_flag(self, flag: EnumValue) -> None: ...

    def clear_flag(self, flag: EnumValue) -> None: ...

    def get_flag(self, flag: EnumValue) -> bool: ...

    def set_memory_pool_limit(self, pool: EnumValue, size: int) -> None: ...

    def add_optimization_profile(self, profile: OptimizationProfile) -> int: ...

    def set_compute_capability(self, capability: EnumValue, index: int) -> bool: ...

    def create_timing_cache(self, data: bytes) -> TimingCache: ...

    def set_timing_cache(self, cache: TimingCache, ignore_mismatch: bool) -> bool: ...

    def get_timing_cache(self) -> TimingCache: ...


class Builder(Protocol):
    def create_network(self, flags: int) -> Network: ...

    def create_builder_config(self) -> BuilderConfig: ...

    def create_optimization_profile(self) -> OptimizationProfile: ...

    def build_serialized_network(self, network: Network, config: BuilderConfig) -> HostMemory | None: ...


class EngineInspector(Protocol):
    def get_engine_information(self, format: EnumValue) -> str: ...


class RuntimeCache(Protocol):
    def serialize(self) -> HostMemory: ...

    def deserialize(self, data: bytes) -> bool: ...


class RuntimeConfig(Protocol):
    def create_runtime_cache(self) -> RuntimeCache: ...

    def set_runtime_cache(self, cache: RuntimeCache) -> bool: ...


class DebugListener(Protocol):
    """What `set_debug_listener` takes: an `IDebugListener` subclass instance."""

    def process_debug_tensor(
        self, addr: int, location: EnumValue, type: EnumValue, shape: Dims, name: str, stream: int
    ) -> bool: ...


class OutputAllocator(Protocol):
    def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int) -> int: ...

    def notify_shape(self, tensor_name: str, shape: Dims) -> None: ...


class ExecutionContext(Protocol):
    unfused_tensors_debug_state: bool

    def set_input_shape(self, name: str, shape: Sequence[int]) -> bool: ...

    def get_tensor_shape(self, name: str) -> Dims: ...

    def set_tensor_address(self, name: str, address: int) -> bool: ...

    def set_output_allocator(self, name: str, allocator: OutputAllocator) -> bool: ...

    def set_debug_listener(self, listener: DebugListener) -> bool: ...

    def set_all_tensors_debug_state(self, flag: bool) -> bool: ...

    def set_tensor_debug_state(self, name: str, flag: bool) -> bool: ...

    def execute_async_v3(self, stream_handle: int) -> bool: ...


class Engine(Protocol):
    """ICudaEngine."""

    @property
    def num_io_tensors(self) -> int: ...

    def get_tensor_name(self, index: int) -> str: ...

    def get_tensor_mode(self, name: str) -> EnumValue: ...

    def get_tensor_dtype(self, name: str) -> EnumValue: ...

    def get_tensor_location(self, name: str) -> EnumValue: ...

    def create_execution_context(self, config: RuntimeConfig | None = None) -> ExecutionContext | None: ...

    def create_engine_inspector(self) -> EngineInspector: ...

    def create_runtime_config(self) -> RuntimeConfig | None: ...


class Runtime(Protocol):
    def deserialize_cuda_engine(self, plan: bytes) -> Engine | None: ...

    def get_engine_validity(self, plan: bytes) -> tuple[EnumValue, int]: ...


class Logger(Protocol):
    """Our ILogger subclass (logger.py): TensorRT calls `log`; we read what it kept."""

    errors: list[str]
    warnings: list[str]

    def log(self, severity: EnumValue, msg: str) -> None: ...


BuilderApi = Builder
ParserApi = OnnxParser
RuntimeApi = Runtime


class TrtModule(Protocol):
    """The TensorRT module (`tensorrt`, `tensorrt_rtx` or `tensorrt_rtx_bindings`) as this package uses it.

    The classes TensorRT calls back into (`ILogger`, `IDebugListener`, `IOutputAllocator`) are
    bases for our subclasses; `INetworkDefinition` is only probed with `hasattr`.
    """

    __name__: str
    __version__: str
    ILogger: type
    IDebugListener: type
    IOutputAllocator: type
    INetworkDefinition: type
    BuilderFlag: EnumNamespace
    DataType: EnumNamespace
    LayerType: EnumNamespace
    ProfilingVerbosity: EnumNamespace
    MemoryPoolType: EnumNamespace
    TensorIOMode: EnumNamespace
    TensorLocation: EnumNamespace
    LayerInformationFormat: EnumNamespace
    EngineValidity: EnumNamespace
    EngineInvalidityDiagnostics: EnumNamespace
    ComputeCapability: EnumNamespace

    def Builder(self, logger: Logger) -> BuilderApi: ...

    def OnnxParser(self, network: Network, logger: Logger) -> ParserApi: ...

    def Runtime(self, logger: Logger) -> RuntimeApi: ...
