"""A tensor store that keeps values in memory up to a budget and spills the rest to disk.

The PyTorch reference is captured before any ONNX backend runs, so what the pairing and the
culprit pass read of it must live somewhere; past `memory_bytes` values go to .npy files in
a temporary folder and come back memory-mapped. A value is a numpy array or a torch tensor
(a reference recorded on a GPU stays there; it is copied to the host only to spill).
"""

from __future__ import annotations

import ctypes
import shutil
import tempfile
from collections.abc import Callable, Hashable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from trtdiff.options import DEFAULT_MEMORY_BYTES


class TensorStore:
    """Named numpy arrays, held in RAM while they fit in the budget, else on disk.

    `beyond`, when given, replaces the disk: past the budget a value is held in memory all the
    same where `beyond(key)` says so, and not kept at all otherwise (`dropped` counts those). A
    recording that only summarizes its values (`--capture stats`) so keeps what fits and the
    final outputs, which every check reads, and writes nothing to disk.
    """

    def __init__(
        self, memory_bytes: int = DEFAULT_MEMORY_BYTES, beyond: Callable[[Hashable], bool] | None = None
    ) -> None:
        self.memory_bytes = memory_bytes
        self.beyond = beyond
        self.dropped = 0
        self._in_memory: dict[Hashable, Any] = {}
        self._on_disk: dict[Hashable, Path] = {}
        self._held = 0
        self._folder: Path | None = None
        self._files_written = 0  # spill files are numbered by this, never reused

    def __contains__(self, key: Hashable) -> bool:
        return key in self._in_memory or key in self._on_disk

    def __len__(self) -> int:
        return len(self._in_memory) + len(self._on_disk)

    @property
    def spilled(self) -> int:
        return len(self._on_disk)

    @property
    def held_bytes(self) -> int:
        """Bytes of the values held in memory (on the host or a GPU)."""
        return self._held

    def put(self, key: Hashable, value: Any) -> None:
        """Hold `value` (a numpy array or a torch tensor) under `key`, in memory within the budget, else on disk
        (or, with `beyond`, in memory all the same or nowhere)."""
        self.discard(key)
        fits = self._held + value.nbytes <= self.memory_bytes
        if fits or (self.beyond is not None and self.beyond(key)):
            self._in_memory[key] = value
            self._held += value.nbytes
            return
        if self.beyond is not None:
            self.dropped += 1
            return
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="trtdiff-store-"))
        self._files_written += 1
        path = self._folder / f"{self._files_written}.npy"
        np.save(path, to_host(value), allow_pickle=False)
        self._on_disk[key] = path

    def get(self, key: Hashable) -> Any:
        """The value as it was put (a spilled one as a read-only memory-mapped numpy array)."""
        if key in self._in_memory:
            return self._in_memory[key]
        mapped: np.ndarray = np.load(self._on_disk[key], mmap_mode="r", allow_pickle=False)
        return mapped

    def discard(self, key: Hashable) -> None:
        value = self._in_memory.pop(key, None)
        if value is not None:
            self._held -= value.nbytes
        path = self._on_disk.pop(key, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        """Drop every value and remove the spill folder."""
        self._in_memory.clear()
        self._on_disk.clear()
        self._held = 0
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> TensorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def to_host(value: Any) -> np.ndarray:
    """A numpy array on the host: a torch tensor (on any device) copied there, an array as it is.

    bfloat16, which numpy has no type for, arrives as float32 (every bfloat16 value is one).
    """
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # a torch tensor (torch is not imported here)
        tensor = value.detach()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()
        return np.asarray(tensor.cpu().numpy())
    return np.asarray(value)


def release_memory() -> None:
    """Hand memory freed by dropped tensors back to the operating system (glibc keeps it otherwise).

    glibc serves allocations below its (adaptive) mmap threshold from its heap and keeps what is
    freed there for reuse, so hundreds of MB of dropped tensors would still count in the
    process's resident memory while the next step allocates its own. A no-op where the C
    library has no malloc_trim.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@cache
def _malloc_trim() -> Any:
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # the C library the process already runs on
    except (OSError, TypeError):  # no such handle (Windows)
        return None
