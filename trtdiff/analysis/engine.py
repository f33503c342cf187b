"""The comparison engine: one loop runs every source over samples and chunks of tensors and compares.

A source gives named tensors for one sample: an ONNX backend run on that sample's feeds,
the PyTorch values recorded by the capture (sample 0, every paired tensor), or a plain
PyTorch forward (later samples, final outputs only). Sample 0 is compared on every tensor
(the layer-by-layer pass), later samples on the final outputs (the gate): two uses of the
same loop. Chunks bound how many intermediates are in memory at once.

A *streamed* reference (`StreamedValues`) is not held at all: PyTorch is recorded again and
each value compared as the forward produces it (on the device it is on) and dropped. The
other sources' chunks are fetched in lockstep with it, each when the forward first makes a
value it holds, and each candidate tensor is dropped once every pair that reads it is
compared: one forward and one run of the graph, whatever the number of chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from trtdiff.analysis.judge import Judge
from trtdiff.backends.base import chunk_names, fetch
from trtdiff.backends.store import to_host

if TYPE_CHECKING:
    import torch

    from trtdiff.backends.base import OnnxBackend
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.pairing.pairs import Pairing
    from trtdiff.report import BackendPair, PairMetrics
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

    def chunks(self, names: Sequence[str], sizes: Mapping[str, int], budget: int) -> Iterator[dict[str, np.ndarray]]:
        """`names` in the backend's own chunks under `budget`: one run of the graph for all of them where it can."""
        return self.backend.run(self.feeds, names, sizes=sizes, max_bytes=budget)


@dataclass(frozen=True)
class CapturedValues:
    """PyTorch's values recorded by the capture, by the ONNX tensor each is paired with.

    The graph's outputs are the model's outputs, in order, when their counts agree.
    """

    capture: TorchCapture
    pairing: Pairing
    outputs: tuple[str, ...]
    name: str = "torch"
    native: bool = False
    """Recorded values as held (torch tensors on the GPU the reference ran on), for the metrics; else on the host."""

    @cached_property
    def keys(self) -> dict[str, str]:
        """ONNX tensor -> recorded value key."""
        keys = {tensor: pair.key for tensor, pair in self.pairing.pairs.items()}
        if len(self.outputs) == len(self.capture.output_keys):
            keys.update(zip(self.outputs, self.capture.output_keys, strict=True))
        return keys

    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Recorded values, and derived ones computed for this capture by the pairing that derived them."""
        value, derivation = self.pairing.value, self.pairing.derivation
        if self.native:
            return {
                tensor: value(self.capture, key)
                if derivation is not None and derivation.owns(key)
                else self.capture.native(key)
                for tensor in names
                if (key := self.keys.get(tensor)) is not None
            }
        return {tensor: value(self.capture, self.keys[tensor]) for tensor in names if tensor in self.keys}


class StreamedValues:
    """PyTorch's values on sample 0, recorded again and handed over one by one as the forward produces them.

    `capture` is the first recording, whose recorded values were dropped once paired (it keeps
    the records, the final outputs and the derived values); `record(visit, keep)` records the
    model again the same way, calling `visit(key, tensor)` with each value as it is produced
    and keeping only the keys in `keep`. `values` (several chunks, or a reader such as the
    culprit pass) reads `full()`: one recording held in a store, made on first use.
    """

    name = "torch"

    def __init__(
        self,
        capture: TorchCapture,
        pairing: Pairing,
        outputs: Sequence[str],
        record: Callable[[Callable[[str, Any], None], Container[str]], TorchCapture],
        full: Callable[[], CapturedValues],
    ) -> None:
        self.first = CapturedValues(capture, pairing, tuple(outputs))
        self._record, self._full = record, full

    @property
    def keys(self) -> dict[str, str]:
        return self.first.keys

    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        return self._full().values(names)

    def final(self, tensor: str) -> bool:
        """Whether `tensor` is handed over as one of the model's outputs, once the forward has returned
        (nothing writes to it any more), not while the forward runs."""
        return self.keys.get(tensor) in self.first.capture.output_keys

    def handed_over(self, names: Sequence[str]) -> frozenset[str]:
        """Those of `names` that `stream` may hand over: the ones the reference has a value for."""
        return frozenset(t for t in names if t in self.keys)

    def stream(self, names: Sequence[str], visit: Callable[[str, Any], None]) -> None:
        """Call `visit(tensor, value)` for each of `names` it has, recorded values as the forward makes them.

        Then the rest (derived values, model inputs), computed from the first recording where the values
        they are computed from were held (a first recording past the memory limit keeps only what fits).
        """
        keys, capture = self.keys, self.first.capture
        recorded = {f"torch:{r.index}" for r in capture.records} | set(capture.output_keys)
        by_key: dict[str, list[str]] = {}
        for tensor in names:
            if tensor in keys and keys[tensor] in recorded:
                by_key.setdefault(keys[tensor], []).append(tensor)

        def seen(key: str, value: Any) -> None:
            for tensor in by_key.get(key, ()):
                visit(tensor, value)

        self._record(seen, frozenset())
        for tensor in (t for t in names if t in keys and keys[t] not in recorded):  # derived values, model inputs
            try:
                value = self.first.values([tensor]).get(tensor)
            except KeyError:  # computed from a value the first recording did not hold
                continue
            if value is not None:
                visit(tensor, value)


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


class _Following:
    """An ONNX backend that runs once for every tensor (`runs_once`), read as another backend's chunks ask.

    Its one run is started on the first chunk and read on as far as each chunk needs: values it
    hands over ahead of the chunks wait, within one chunk's budget (past it, what a chunk still
    lacks is left out rather than everything read ahead), and a value for a chunk already gone
    by is dropped. Both backends order the tensors as the graph does, so nothing waits long.
    """

    def __init__(self, source: BackendValues, tensors: Sequence[str], sizes: Mapping[str, int], budget: int) -> None:
        self._has = source.backend.available()
        self._run = source.chunks([t for t in tensors if t in self._has], sizes, budget)
        self._sizes, self._budget = sizes, budget
        self._ahead: dict[str, np.ndarray] = {}
        self._asked: set[str] = set()
        self._done = False

    def values(self, group: Sequence[str]) -> dict[str, np.ndarray]:
        self._asked.update(group)
        wanted = set(group)
        while not self._done and any(t in self._has and t not in self._ahead for t in wanted):
            if sum(self._sizes.get(t, 1) for t in self._ahead if t not in wanted) > self._budget:
                break
            part = next(self._run, None)
            if part is None:
                self._done = True
                break
            self._ahead.update((t, v) for t, v in part.items() if t in wanted or t not in self._asked)
        return {t: self._ahead.pop(t) for t in group if t in self._ahead}

    def close(self) -> None:
        """Stop the run where it is (a backend streaming from a thread joins it) and drop what waits."""
        close = getattr(self._run, "close", None)
        if close is not None:
            close()
        self._ahead.clear()


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
    """How passes are compared: the pairs, how a pair of values is judged, expected sizes, the chunk budget."""

    pairs: tuple[BackendPair, ...]
    judge: Judge
    outputs: tuple[str, ...]
    sizes: Mapping[str, int]
    chunk_bytes: int

    def run(self, passes: Iterable[Pass]) -> Iterator[Compared]:
        """Compare each pass chunk by chunk, as the chunks arrive; one result per pass."""
        for current in passes:
            streamed = next((s for s in current.sources if isinstance(s, StreamedValues)), None)
            if streamed is not None:
                yield self._streamed(current, streamed)
                continue
            metrics: dict[str, dict[BackendPair, PairMetrics]] = {}
            kept: dict[str, dict[str, np.ndarray]] = {source.name: {} for source in current.sources}
            for group, values in self.chunks(current):
                for name, tensors in values.items():
                    kept[name].update((t, to_host(v)) for t, v in tensors.items() if t in self.outputs)
                for tensor in group:
                    entry = self.compare(tensor, values)
                    if entry:
                        metrics[tensor] = entry
                del values
            ordered = {t: metrics[t] for t in current.tensors if t in metrics}  # as asked, whatever the chunks' order
            yield Compared(current.sample, ordered, kept)

    def chunks(self, current: Pass) -> Iterator[tuple[list[str], dict[str, dict[str, np.ndarray]]]]:
        """Each chunk's tensors and every source's values of them, one chunk at a time.

        The first ONNX backend sets the chunks: it runs its graph once for all of them
        (segment by segment where they do not fit in one chunk, backends.segments). Another
        ONNX backend that runs once for every tensor (`runs_once`) is read alongside, as its
        own run hands them over (`_Following`); every other source is asked for each chunk's
        tensors. Tensors the first backend does not have come after, in chunks of the budget.
        """
        driver = next((s for s in current.sources if isinstance(s, BackendValues)), None)
        following = {
            s.name: _Following(s, current.tensors, self.sizes, self.chunk_bytes)
            for s in current.sources
            if isinstance(s, BackendValues) and s is not driver and s.backend.runs_once
        }

        def others(group: list[str]) -> dict[str, dict[str, np.ndarray]]:
            return {
                s.name: following[s.name].values(group) if s.name in following else s.values(group)
                for s in current.sources
                if s is not driver
            }

        done: set[str] = set()
        try:
            if driver is not None:
                for part in driver.chunks(current.tensors, self.sizes, self.chunk_bytes):
                    group = list(part)
                    done.update(group)
                    yield group, {driver.name: part, **others(group)}
                    del part  # compared and dropped by the caller: not held through the backend's next run
            rest = [t for t in current.tensors if t not in done]
            for group in chunk_names(rest, self.sizes, self.chunk_bytes) if rest else []:
                yield group, {**({driver.name: {}} if driver is not None else {}), **others(group)}
        finally:
            for follower in following.values():
                follower.close()

    def _streamed(self, current: Pass, streamed: StreamedValues) -> Compared:
        """The reference recorded again and compared as it comes (see the module docstring), in lockstep with
        the other sources' chunks: a chunk is fetched when the forward first makes a value it holds (the
        first ONNX backend runs its next segments then), compared among the other sources at once, and its
        values wait for the reference's; each is dropped once every pair that reads it is compared."""
        name = streamed.name
        others = Pass(current.sample, tuple(s for s in current.sources if s is not streamed), current.tensors)
        among_others = tuple(p for p in self.pairs if name not in (p.reference, p.candidate))
        with_reference = tuple(p for p in self.pairs if name in (p.reference, p.candidate))
        awaited = streamed.handed_over(current.tensors)
        kept: dict[str, dict[str, np.ndarray]] = {s.name: {} for s in current.sources}
        metrics: dict[str, dict[BackendPair, PairMetrics]] = {}
        waiting: dict[str, dict[str, Any]] = {}  # tensor -> the other sources' values, until the reference's comes
        fetched: set[str] = set()
        chunks = self.chunks(others)

        def fetch_until(tensor: str | None) -> None:
            for group, values in chunks:  # resumes where the last call stopped
                for source, tensors in values.items():
                    kept[source].update((t, to_host(v)) for t, v in tensors.items() if t in self.outputs)
                for t in group:
                    fetched.add(t)
                    entry = {p: m for p, m in self.compare(t, values).items() if p in among_others}
                    if entry:
                        metrics[t] = entry
                    if t in awaited:
                        waiting[t] = {source: tensors[t] for source, tensors in values.items() if t in tensors}
                del values
                if tensor is not None and tensor in fetched:
                    return

        def visit(tensor: str, value: Any) -> None:
            if tensor not in fetched:
                fetch_until(tensor)
            theirs = waiting.pop(tensor, {})  # compared with the reference: no pair reads them again
            for pair in with_reference:
                other = pair.candidate if pair.reference == name else pair.reference
                if other in theirs:
                    ref, cand = (value, theirs[other]) if pair.reference == name else (theirs[other], value)
                    metrics.setdefault(tensor, {})[pair] = self._judge(tensor, ref, cand, pair)
            if tensor in self.outputs:  # copied where the forward may still write to it
                kept[name][tensor] = to_host(value) if streamed.final(tensor) else np.array(to_host(value), copy=True)

        streamed.stream(current.tensors, visit)
        fetch_until(None)  # what the reference has no value for
        ordered = {  # as the chunked loop orders them: tensors as asked, pairs as declared
            tensor: {pair: metrics[tensor][pair] for pair in self.pairs if pair in metrics[tensor]}
            for tensor in current.tensors
            if metrics.get(tensor)
        }
        return Compared(current.sample, ordered, kept)

    def compare(self, tensor: str, values: Mapping[str, Mapping[str, np.ndarray]]) -> dict[BackendPair, PairMetrics]:
        entry: dict[BackendPair, PairMetrics] = {}
        for pair in self.pairs:
            reference, candidate = values.get(pair.reference, {}), values.get(pair.candidate, {})
            if tensor in reference and tensor in candidate:
                entry[pair] = self._judge(tensor, reference[tensor], candidate[tensor], pair)
        return entry

    def _judge(self, tensor: str, reference: Any, candidate: Any, pair: BackendPair) -> PairMetrics:
        """The pair's metrics, judged in the tensor's units (analysis.judge)."""
        return self.judge.accumulated(tensor, reference, candidate, pair)
