"""A tensor store that keeps values in memory up to a budget and spills the rest to disk.

The PyTorch reference is captured before any ONNX backend runs, so its intermediates must
live somewhere while the others run chunk by chunk; past `memory_bytes` they go to .npy
files in a temporary folder and come back memory-mapped.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Hashable
from pathlib import Path

import numpy as np

from trtdiff.options import DEFAULT_MEMORY_BYTES


class TensorStore:
    """Named numpy arrays, held in RAM while they fit in the budget, else on disk."""

    def __init__(self, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self.memory_bytes = memory_bytes
        self._in_memory: dict[Hashable, np.ndarray] = {}
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

    def put(self, key: Hashable, value: np.ndarray) -> None:
        self.discard(key)
        if self._held + value.nbytes <= self.memory_bytes:
            self._in_memory[key] = value
            self._held += value.nbytes
            return
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="trtdiff-store-"))
        self._files_written += 1
        path = self._folder / f"{self._files_written}.npy"
        np.save(path, value, allow_pickle=False)
        self._on_disk[key] = path

    def get(self, key: Hashable) -> np.ndarray:
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
