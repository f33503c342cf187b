"""The inputs a comparison runs on: one sample, a folder's files, N seeded random inputs, or a recording.

Sample 0 is the one compared layer by layer; the gate compares the final outputs of every
sample. Samples are produced lazily, so a large folder is never held in memory at once.
Inputs holding some NaN/Inf are noted (`SampleSource.notes`); none finite at all is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

from trtdiff.options import CompareOptions
from trtdiff.source.inputs import make_inputs, non_finite_counts, refuse_non_finite

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Sample:
    """One sample to compare: its name, the model's inputs in order, and its label mask if any."""

    name: str
    values: tuple[np.ndarray, ...]
    label: np.ndarray | None = None


@dataclass
class SampleSource:
    """Where the samples come from; `first` (when known before the model loads) feeds the export.

    A folder's first file and a recording's inputs are known up front; random samples are
    made once the model's input names and dtypes are known, by `stream`.
    """

    options: CompareOptions
    first: Sample | None
    rest: Iterator[Sample] | None
    non_finite: dict[str, str] = field(default_factory=dict)  # sample name -> its partly non-finite input

    @classmethod
    def open(cls, options: CompareOptions, recorded: Mapping[str, np.ndarray] | None) -> SampleSource:
        """The samples `options` ask for; `recorded` are a recording's inputs (replayed alone)."""
        if recorded is not None:
            return cls(options, Sample("recorded", tuple(recorded.values())), None)
        if options.gate.inputs_dir is not None:
            files = folder_samples(options)
            return cls(options, next(files), files)
        return cls(options, None, None)

    def first_feeds(self) -> dict[str, np.ndarray] | None:
        """The first sample's values by position ("input_0", ...), to load the model with."""
        if self.first is None:
            return None
        return {f"input_{i}": value for i, value in enumerate(self.first.values)}

    def stream(
        self, feeds: Mapping[str, np.ndarray], input_names: tuple[str, ...], dtypes: Mapping[str, np.dtype]
    ) -> Iterator[Sample]:
        """Every sample in order; sample 0 holds `feeds`, the inputs the model was loaded and exported with."""
        if self.first is not None:
            first = Sample(self.first.name, tuple(feeds.values()), self.first.label)
            return self._watched(chain([first], self.rest or ()), input_names)
        model = self.options.load
        shapes = list(model.input_shapes)
        if not shapes and not model.input_files:  # shapes read from a given ONNX file: those of sample 0
            shapes = [
                f"{name}:{'x'.join(map(str, v.shape))}" for name, v in zip(input_names, feeds.values(), strict=False)
            ]

        def make(index: int) -> tuple[np.ndarray, ...]:
            if index == 0:
                return tuple(feeds.values())
            built = make_inputs(
                list(input_names),
                shapes=shapes,
                files=list(model.input_files),
                seed=model.seed + index,
                dtypes=dict(dtypes),
            )
            return tuple(built.values())

        return self._watched(random_samples(self.options.gate.num_samples, make), input_names)

    def notes(self) -> tuple[str, ...]:
        """A note on the samples streamed so far whose inputs hold some NaN/Inf (the first named)."""
        if not self.non_finite:
            return ()
        first = next(iter(self.non_finite.values()))
        if len(self.non_finite) == 1:
            return (f"{first}; outputs computed from them may be NaN/Inf too",)
        return (f"the inputs of {len(self.non_finite)} samples hold NaN/Inf values (first: {first})",)

    def _watched(self, samples: Iterator[Sample], names: Sequence[str]) -> Iterator[Sample]:
        """`samples`, noting inputs that hold some NaN/Inf and refusing one that holds no finite value."""
        for sample in samples:
            for index, value in enumerate(sample.values):
                nan, inf = non_finite_counts(value)
                if not nan + inf:
                    continue
                name = names[index] if index < len(names) else f"input {index}"
                recording = "recordings" if self.options.runtime.recordings else None
                refuse_non_finite(value, f"sample {sample.name}: input {name!r}", parameter=recording, value=None)
                counts = ", ".join(f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "Inf")) if n)
                self.non_finite.setdefault(
                    sample.name, f"input {name!r} of sample {sample.name} holds {counts} of {value.size} values"
                )
            yield sample


def folder_samples(options: CompareOptions) -> Iterator[Sample]:
    """The files of the inputs folder (with their label masks), read one at a time."""
    from trtdiff.source.datasets import iter_samples

    gate = options.gate
    assert gate.inputs_dir is not None
    for sample in iter_samples(
        gate.inputs_dir,
        labels=gate.labels_dir,
        mean=gate.mean,
        std=gate.std,
        size=gate.size,
        ignore_index=gate.ignore_index,
    ):
        yield Sample(sample.name, (sample.image,), sample.label)


def random_samples(count: int | None, make: Callable[[int], tuple[np.ndarray, ...]]) -> Iterator[Sample]:
    """`count` inputs made by `make(index)`; without a count, one named "input"."""
    for index in range(count or 1):
        yield Sample(f"sample-{index}" if count is not None else "input", make(index))
