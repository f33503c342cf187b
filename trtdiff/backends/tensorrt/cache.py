"""Engine cache: a key over everything that changes the plan, and plans saved under it.

The key is sha256 over the ONNX bytes (and its external-data files), the build settings,
the TensorRT flavour/version/module, the GPU name and compute capability, and anything else
the builder passes in `extra` (the FP16 converter's version, say). A plan is only valid for
the TensorRT that built it and, for TensorRT-RTX, the compute capabilities it targets.
A build keeps two engines: the marked one and the plain one (keyed as a build that marks
nothing, so `--trt-outputs none` finds it too). TensorRT-RTX's runtime cache (its
just-in-time kernels) sits beside the engine it was made for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff import outputs

if TYPE_CHECKING:
    import onnx

    from trtdiff.backends.tensorrt.importing import GpuInfo, TensorRTInfo

TIMING_CACHE_NAME = "timing.cache"
RUNTIME_CACHE_SUFFIX = ".runtime-cache"


def cache_key(
    onnx_bytes: bytes,
    settings: Mapping[str, Any],
    info: TensorRTInfo,
    gpu: GpuInfo | None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """Hex sha256 identifying one engine build."""
    digest = hashlib.sha256(onnx_bytes)
    context = {
        "settings": dict(settings),
        "tensorrt": [info.flavour, info.version, info.module_name],
        "gpu": [gpu.name, list(gpu.compute_capability)] if gpu else None,
        "extra": dict(extra or {}),
    }
    digest.update(json.dumps(context, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def onnx_file_bytes(path: Path, model: onnx.ModelProto) -> bytes:
    """The ONNX file's bytes followed by every external-data file it names (weights live there)."""
    chunks = [path.read_bytes()]
    locations = sorted(
        {entry.value for init in model.graph.initializer for entry in init.external_data if entry.key == "location"}
    )
    chunks += [(path.parent / location).read_bytes() for location in locations if (path.parent / location).is_file()]
    return b"".join(chunks)


def save_engine(cache_dir: Path, key: str, plan: bytes, meta: Mapping[str, Any]) -> Path:
    """Write `<key>.engine` (and `<key>.json` with `meta`) atomically; return the engine path."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"{key}.engine"
    _atomic_write(target, plan)
    _atomic_write(cache_dir / f"{key}.json", json.dumps(dict(meta), indent=1, default=str).encode())
    return target


def load_engine(cache_dir: Path, key: str) -> bytes | None:
    """The cached plan for `key`, or None."""
    path = cache_dir / f"{key}.engine"
    return path.read_bytes() if path.is_file() else None


def load_timing_cache(cache_dir: Path) -> bytes:
    path = cache_dir / TIMING_CACHE_NAME
    return path.read_bytes() if path.is_file() else b""


def save_timing_cache(cache_dir: Path, data: bytes) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(cache_dir / TIMING_CACHE_NAME, data)


def runtime_cache_path(cache_dir: Path, key: str) -> Path:
    """Where TensorRT-RTX's runtime cache (kernels compiled just in time) for engine `key` is kept."""
    return cache_dir / f"{key}{RUNTIME_CACHE_SUFFIX}"


def load_runtime_cache(path: Path) -> bytes:
    """The saved runtime cache, or b"" when there is none."""
    return path.read_bytes() if path.is_file() else b""


def save_runtime_cache(path: Path, data: bytes) -> None:
    """Write a serialized runtime cache atomically (nothing for an empty one)."""
    if data:
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, data)


def _atomic_write(path: Path, data: bytes) -> None:
    """A new file under a name of its own, renamed over `path`: no reader sees half a plan, and a link there
    (at the name or at a name a temporary file could take) is never followed (trtdiff.outputs)."""
    outputs.write_bytes(path, data)
