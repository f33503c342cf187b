"""The comparison engine: one loop runs every source over samples and chunks of tensors and compares.

A source gives named tensors for one sample: an ONNX backend run on that sample's feeds,
the PyTorch values recorded by the capture (sample 0, every paired tensor), or a plain
PyTorch forward (later samples, final outputs only). Sample 0 is compared on every tensor
(the layer-by-layer pass), later samples on the final outputs (the gate): two uses of the
same loop. Chunks bound how many intermediates are in memory at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from trtdiff.analysis.metrics import compare_tensors
from trtdiff.backends.base import chunk_names, fetch

if TYPE_CHECKING:
    import numpy as np
    import torch

    from trtdiff.backends.base import OnnxBackend
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.pairing.pairs import Pairing
    from trtdiff.report import BackendPair, PairMetrics, Thresholds
    from trtdiff.source.samples import Sample


class ValueSource(Protocol):
    """Named tensors of one backend on one sample."""

    @property
    def name(self) -> str:
        """The backend's name, as in the report's pairs."""
        ...

    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """The tensors among `names` this source has (others are left out)."""
        ...


@dataclass(frozen=True)
class BackendValues:
    """An ONNX backend run on one sample's feeds (once per chunk)."""

    backend: OnnxBackend
    feeds: Mapping[str, np.ndarray]

    @property
    def name(self) -> str:
        return self.backend.name

    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        return fetch(self.backend, self.feeds, list(names))


@dataclass(frozen=True)
class CapturedValues:
    """PyTorch's values recorded by the capture, by the ONNX tensor each is paired with.

    The graph's outputs are the model's outputs, in order, when their counts agree.
    """

    capture: TorchCapture
    pairing: Pairing
    outputs: tuple[str, ...]
    name: str = "torch"

    @cached_property
    def keys(self) -> dict[str, str]:
        """ONNX tensor -> recorded value key."""
        keys = {tensor: pair.key for tensor, pair in self.pairing.pairs.items()}
        if len(self.outputs) == len(self.capture.output_keys):
            keys.update(zip(self.outputs, self.capture.output_keys, strict=True))
        return keys

    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Recorded values, and derived ones computed for this capture by the pairing that derived them."""
        value = self.pairing.value
        return {tensor: value(self.capture, self.keys[tensor]) for tensor in names if tensor in self.keys}


class ForwardValues:
    """A plain PyTorch forward on one sample: its outputs, by the graph's output names."""

    name = "torch"

    def __init__(
        self, module: torch.nn.Module, sample: Sample, outputs: Sequence[str], device: str, tf32: bool
    ) -> None:
        self._module, self._sample, self._outputs = module, sample, tuple(outputs)
        self._device, self._tf32 = device, tf32
        self._cached: dict[str, np.ndarray] | None = None

    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        if self._cached is None:
            from trtdiff.backends.pytorch.capture import run_outputs

            flat = run_outputs(self._module, self._sample.values, device=self._device, tf32=self._tf32)
            self._cached = dict(zip(self._outputs, flat, strict=True)) if len(flat) == len(self._outputs) else {}
        return {name: self._cached[name] for name in names if name in self._cached}


@dataclass(frozen=True)
class Pass:
    """One sample to compare: which tensors, from which sources."""

    sample: Sample
    sources: tuple[ValueSource, ...]
    tensors: tuple[str, ...]


@dataclass(frozen=True)
class Compared:
    """What one pass found: metrics per tensor and pair, and each source's final outputs."""

    sample: Sample
    metrics: dict[str, dict[BackendPair, PairMetrics]]
    outputs: dict[str, dict[str, np.ndarray]]


@dataclass(frozen=True)
class Engine:
    """How passes are compared: the pairs, the thresholds, expected sizes, the chunk budget."""

    pairs: tuple[BackendPair, ...]
    thresholds: Thresholds
    outputs: tuple[str, ...]
    sizes: Mapping[str, int]
    chunk_bytes: int

    def run(self, passes: Iterable[Pass]) -> Iterator[Compared]:
        """Compare each pass chunk by chunk, as the chunks arrive; one result per pass."""
        for current in passes:
            metrics: dict[str, dict[BackendPair, PairMetrics]] = {}
            kept: dict[str, dict[str, np.ndarray]] = {source.name: {} for source in current.sources}
            for group in chunk_names(current.tensors, self.sizes, self.chunk_bytes):
                values = {source.name: source.values(group) for source in current.sources}
                for name, tensors in values.items():
                    kept[name].update((t, v) for t, v in tensors.items() if t in self.outputs)
                for tensor in group:
                    entry = self._compare(tensor, values)
                    if entry:
                        metrics[tensor] = entry
                del values
            yield Compared(current.sample, metrics, kept)

    def _compare(self, tensor: str, values: Mapping[str, Mapping[str, np.ndarray]]) -> dict[BackendPair, PairMetrics]:
        entry: dict[BackendPair, PairMetrics] = {}
        for pair in self.pairs:
            reference, candidate = values.get(pair.reference, {}), values.get(pair.candidate, {})
            if tensor in reference and tensor in candidate:
                entry[pair] = compare_tensors(reference[tensor], candidate[tensor], self.thresholds)
        return entry
