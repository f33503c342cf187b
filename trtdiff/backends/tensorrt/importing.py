"""Find a TensorRT Python module and say whether this machine can build and run engines.

Three modules can provide the API: `tensorrt` (TensorRT 10/11), `tensorrt_rtx` (the
TensorRT-RTX front end) and `tensorrt_rtx_bindings` (the RTX wheel that installs from PyPI
when the front end is only a stub). Features are detected with `hasattr`, never from
version numbers: TensorRT-RTX reports 1.x while its API matches TensorRT 10.12+.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from trtdiff.errors import BackendError

if TYPE_CHECKING:
    from trtdiff.backends.tensorrt.api import TrtModule

MODULE_CANDIDATES = ("tensorrt", "tensorrt_rtx", "tensorrt_rtx_bindings")
INSTALL_HINT = (
    "pip install tensorrt-rtx-cu13-libs==1.7.1.116 tensorrt-rtx-cu13-bindings==1.7.1.116 (or NVIDIA's tensorrt)"
)

# The compute capabilities TensorRT-RTX 1.7.1 lists when it refuses a GPU (measured on an H200:
# "Supported compute capabilities: 8.0 8.6 8.9 12.0 12.1 >12.0"). The list is only a first
# answer: the runtime asks `Runtime.get_engine_validity` about the real plan before loading it.
RTX_SUPPORTED_CC = ((8, 0), (8, 6), (8, 9), (12, 0), (12, 1))
RTX_MIN_NEWER_CC = (12, 0)
NO_GPU = "no CUDA GPU: torch.cuda.is_available() is False; engines can be built here but not executed"

TRT_API = (
    "Logger",
    "ILogger",
    "Builder",
    "OnnxParser",
    "Runtime",
    "Builder.create_network",
    "Builder.create_builder_config",
    "Builder.build_serialized_network",
)
TRT_OPTIONAL_API = (
    "BuilderFlag.FP16",
    "INetworkDefinition.mark_unfused_tensors_as_debug_tensors",
    "Runtime.get_engine_validity",
)


@dataclass(frozen=True)
class TensorRTInfo:
    """Which TensorRT module was imported and what it can do (feature-detected)."""

    module_name: str
    version: str
    flavour: str  # "tensorrt" or "tensorrt-rtx"
    has_fp16_flag: bool
    has_unfused_debug: bool
    has_engine_validity: bool
    has_debug_tensors: bool = True  # INetworkDefinition.mark_debug (TensorRT 10.0+, every RTX)

    @property
    def strongly_typed_only(self) -> bool:
        """True when lower precision must come from the ONNX model's own types (TRT 11, RTX)."""
        return not self.has_fp16_flag

    def describe(self) -> str:
        return f"{self.flavour} {self.version} (module {self.module_name})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "strongly_typed_only": self.strongly_typed_only}


@dataclass(frozen=True)
class GpuInfo:
    """The CUDA device torch sees: what the engine cache key and the support check use."""

    index: int
    name: str
    compute_capability: tuple[int, int]

    def describe(self) -> str:
        major, minor = self.compute_capability
        return f"{self.name} (compute capability {major}.{minor})"


@dataclass(frozen=True)
class Probe:
    """Whether engines can be built and run here; `reason` is one line when they cannot run."""

    info: TensorRTInfo | None
    gpu: GpuInfo | None
    can_build: bool
    can_run: bool
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "info": self.info.to_dict() if self.info else None,
            "gpu": asdict(self.gpu) if self.gpu else None,
            "can_build": self.can_build,
            "can_run": self.can_run,
            "reason": self.reason,
        }


def import_tensorrt() -> TrtModule:
    """The first importable TensorRT module of MODULE_CANDIDATES; BackendError naming each failure.

    The one place the bindings are untyped: the module is returned as the `TrtModule` Protocol.
    """
    failures: list[str] = []
    for name in MODULE_CANDIDATES:
        try:
            module = importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 -- stubs raise ImportError, RuntimeError or worse at import time
            failures.append(f"{name}: {type(error).__name__}")
            continue
        if hasattr(module, "Builder") and hasattr(module, "OnnxParser"):
            return cast("TrtModule", module)
        failures.append(f"{name}: no Builder/OnnxParser (a stub)")
    raise BackendError(f"TensorRT is not installed ({'; '.join(failures)}); {INSTALL_HINT}")


def tensorrt_info(trt: TrtModule | None = None) -> TensorRTInfo:
    """Describe the imported module (imports it when not given)."""
    trt = trt or import_tensorrt()
    name = trt.__name__
    return TensorRTInfo(
        module_name=name,
        version=str(getattr(trt, "__version__", "unknown")),
        flavour="tensorrt-rtx" if "rtx" in name else "tensorrt",
        has_fp16_flag="FP16" in trt.BuilderFlag.__members__,
        has_unfused_debug=hasattr(trt.INetworkDefinition, "mark_unfused_tensors_as_debug_tensors"),
        has_engine_validity=hasattr(trt.Runtime, "get_engine_validity"),
        has_debug_tensors=hasattr(trt.INetworkDefinition, "mark_debug"),
    )


def gpu_info(index: int = 0) -> GpuInfo | None:
    """The CUDA GPU torch sees at `index`, or None when torch has no CUDA device.

    Where torch is not imported yet and the machine has no NVIDIA device node at all, the
    answer is None without importing torch (a second of `trtdiff build` on a CPU machine).
    """
    if "torch" not in sys.modules and not has_gpu_device_nodes():
        return None
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() <= index:
        return None
    major, minor = torch.cuda.get_device_capability(index)
    return GpuInfo(index=index, name=torch.cuda.get_device_name(index), compute_capability=(int(major), int(minor)))


def has_gpu_device_nodes() -> bool:
    """Whether the machine shows an NVIDIA device node (/dev/nvidia0...) or WSL's GPU node (/dev/dxg)."""
    return any(Path("/dev").glob("nvidia[0-9]*")) or Path("/dev/dxg").exists()


def rtx_supports(compute_capability: tuple[int, int]) -> bool:
    """Whether TensorRT-RTX's own list (RTX_SUPPORTED_CC) includes this compute capability."""
    return compute_capability in RTX_SUPPORTED_CC or compute_capability > RTX_MIN_NEWER_CC


def probe(device: int = 0) -> Probe:
    """Find TensorRT and the GPU; never raises for a missing piece, it says why in `reason`."""
    try:
        info = tensorrt_info()
    except BackendError as error:
        return Probe(None, None, can_build=False, can_run=False, reason=str(error))
    gpu = gpu_info(device)
    if gpu is None:
        return Probe(info, None, can_build=True, can_run=False, reason=NO_GPU)
    if info.flavour == "tensorrt-rtx" and not rtx_supports(gpu.compute_capability):
        listed = " ".join(f"{a}.{b}" for a, b in RTX_SUPPORTED_CC)
        reason = (
            f"GPU not supported: {info.describe()} runs on compute capabilities {listed} and newer than 12.0, "
            f"this is {gpu.describe()}; use a supported GPU or NVIDIA's full TensorRT"
        )
        return Probe(info, gpu, can_build=True, can_run=False, reason=reason)
    return Probe(info, gpu, can_build=True, can_run=True, reason=None)
