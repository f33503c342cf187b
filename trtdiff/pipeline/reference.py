"""PyTorch's values in one comparison: recorded, paired, and kept one way, chosen once.

The first recording (`FirstRecording`) is the one the pairing reads; how it keeps its values
follows from the options alone. Once it is paired, how sample 0's values are kept for the rest
of the comparison is chosen once (`Reference.mode`):

- "streamed" (the default): the model is recorded again while the comparison runs, each value
  compared as the forward makes it and dropped (analysis.engine.StreamedValues); the first
  recording kept only what fits in its store, for the pairing.
- "held": the values stay in a store for the culprit pass (`--culprit`) or a reduced precision's
  layer check (each node alone on them), or on the GPU the reference ran on (`on_device`: nothing
  of it on the host, never recorded again).
- "statistics" (`--capture stats`): each value was summarized as the first recording made it and
  dropped; the layers around the first suspicious one are recorded again (`region`).
- "lent": a sweep lends one recording, held whole, to every comparison of the same model.
- "none": no PyTorch reference (ONNX backends alone).

Every later recording (sample 0 again, the statistics region, a later sample for the
non-finite search or attribution) is made here, into a store of the budget's share
(pipeline.memory.MemoryBudget).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Mapping, MutableMapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from trtdiff.analysis.control_flow import held_inside
from trtdiff.analysis.engine import CapturedValues, ForwardValues, StreamedValues, ValueSource
from trtdiff.analysis.reduced import ReducedPrecision
from trtdiff.backends.pytorch.records import is_output_key
from trtdiff.backends.store import TensorStore, release_memory
from trtdiff.pipeline.memory import MemoryBudget, store_bytes
from trtdiff.pipeline.prepare import Prepared, timed

if TYPE_CHECKING:
    import numpy as np

    from trtdiff.analysis.culprits import ValuesOf
    from trtdiff.analysis.statistics import Summary
    from trtdiff.backends.pytorch.capture import Visit
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.backends.pytorch.reference import TorchReference
    from trtdiff.options import CompareOptions
    from trtdiff.pairing.pairs import Pairing
    from trtdiff.source.samples import Sample

Mode = Literal["none", "streamed", "held", "statistics", "lent"]


@dataclass
class FirstRecording:
    """How the first recording of PyTorch is made, from the options alone, before anything runs.

    Its store (closed by `stack`) holds values within the reference's share of the memory limit.
    By statistics (`--capture stats`) each value is summarized into `summaries` as it is made and
    only the final outputs are kept past that share. Where the comparison will stream the
    reference (no culprit pass asked for whatever happens; recorded on the CPU, in float32),
    nothing reads this recording's values but the pairing: past the share they are dropped, not
    spilled (the final outputs are kept), and a derived value computed from a dropped one is not
    compared. A sweep's `shared` recording is lent whole instead.
    """

    options: CompareOptions
    stack: ExitStack
    shared: SharedRecording | None = None
    summaries: dict[str, Summary] = field(default_factory=dict)

    @property
    def statistics(self) -> bool:
        return self.options.analysis.capture == "stats"

    @property
    def lent(self) -> bool:
        return self.shared is not None and not self.statistics

    @property
    def store_bytes(self) -> int:
        return store_bytes(self.options.runtime.memory_bytes)

    def record(self, reference: TorchReference, feeds: Mapping[str, np.ndarray]) -> TorchCapture:
        """Record PyTorch once on the inputs, as the options ask."""
        if self.statistics:
            return _summarized(reference, feeds, self.summaries, self._store(beyond=is_output_key))
        if self.shared is not None:
            return self.shared.record(reference, feeds, self.store_bytes)
        from trtdiff.backends.pytorch.capture import resolve_device

        held = self.holds(reduced=reference.cast_inputs)
        drops = not held and reference.dtype == "float32" and resolve_device(reference.device) == "cpu"
        return reference.record(feeds, store=self._store(beyond=is_output_key if drops else None))

    def holds(self, *, reduced: bool) -> bool:
        """Whether sample 0's values are held through the comparison, not streamed and recorded again: for the
        culprit pass (`--culprit`), and in a reduced-precision comparison, whose layer check runs each node alone
        on every paired value (`--no-culprit` aside): streamed, the model was recorded twice more for it, and
        the values it holds are the same."""
        culprit = self.options.analysis.culprit
        return culprit is True or (culprit is None and reduced)

    def paired(self, prepared: Prepared, timings: dict[str, float]) -> Reference:
        """The recording paired with the ONNX graph and, in reduced precision, its benchmark measured; how its
        values are kept is chosen here, once."""
        recorded, recorder = prepared.capture, prepared.reference
        if recorded is None or recorder is None:
            return self._reference(prepared, reduced=_reduced(prepared, {}))
        from trtdiff.pairing.pairs import pair

        with timed(timings, "pairing"):
            pairing = pair(prepared.graph, recorded, {name for name, _ in recorder.module.named_modules()})
        notes: list[str] = []
        expected: dict[str, float] = {}
        if prepared.precision != "fp32":
            from trtdiff.analysis.metrics import finite_rel_err
            from trtdiff.backends.pytorch.benchmark import benchmark_errors

            with timed(timings, "benchmark"):
                errors, notes = benchmark_errors(recorder, recorded, prepared.precision, finite_rel_err)
            expected = {tensor: errors[p.key] for tensor, p in pairing.pairs.items() if p.key in errors}
        return self._reference(
            prepared,
            capture=recorded,
            pairing=pairing,
            recorder=recorder.as_recorded(recorded),
            reduced=_reduced(prepared, expected),
            notes=tuple(notes),
        )

    def _reference(self, prepared: Prepared, **found: Any) -> Reference:
        capture: TorchCapture | None = found.get("capture")
        on_host = capture is not None and capture.device == "cpu"
        paired = capture is not None and found.get("pairing") is not None
        mode = self._mode(paired, on_host, reduced=prepared.precision != "fp32")
        budget = MemoryBudget.plan(
            self.options.runtime, len(prepared.backends), on_host=on_host, read_back=mode in ("held", "lent")
        )
        return Reference(prepared=prepared, mode=mode, budget=budget, stack=self.stack, **found)

    def _mode(self, paired: bool, on_host: bool, *, reduced: bool) -> Mode:
        if not paired:
            return "none"
        if self.statistics:
            return "statistics"
        if self.lent:
            return "lent"
        return "held" if self.holds(reduced=reduced) or not on_host else "streamed"

    def _store(self, beyond: Callable[[Any], bool] | None = None) -> TensorStore:
        return self.stack.enter_context(TensorStore(self.store_bytes, beyond=beyond))


def _summarized(
    reference: TorchReference,
    feeds: Mapping[str, np.ndarray],
    summaries: MutableMapping[str, Summary],
    store: TensorStore,
) -> TorchCapture:
    """A recording whose every value is summarized into `summaries` as it is made (pipeline.coarse)."""
    from trtdiff.analysis.statistics import summarize

    def visit(key: str, value: Any) -> None:
        summaries[key] = summarize(value)

    recorded = reference.record(feeds, store=store, visit=visit)
    made = {record.key for record in recorded.records}  # attention "auto" may have recorded twice
    for key in [k for k in summaries if k not in made]:
        del summaries[key]
    return recorded


def _reduced(prepared: Prepared, expected: Mapping[str, float]) -> ReducedPrecision | None:
    """The reduced precision the ONNX backends compute in (they all run the same graph), None at FP32."""
    if prepared.precision == "fp32":
        return None
    backends = frozenset(b.name for b in prepared.backends)
    return ReducedPrecision(prepared.precision, expected, backends, prepared.emulated)


@dataclass(frozen=True)
class Reference:
    """The PyTorch reference of one comparison: its first recording, which ONNX tensor each value pairs with,
    how to record it again, how its values are kept (`mode`, chosen once) and the memory budget.

    `recorder` records the model as the first recording did (its settings, attention as it
    chose). `fine`: by statistics, the recording of the region compared in full (`region`).
    """

    prepared: Prepared
    mode: Mode
    budget: MemoryBudget
    stack: ExitStack
    capture: TorchCapture | None = None
    pairing: Pairing | None = None
    recorder: TorchReference | None = None
    reduced: ReducedPrecision | None = None
    notes: tuple[str, ...] = ()
    fine: CapturedValues | None = None

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self.prepared.graph.graph_outputs)

    @property
    def streams(self) -> bool:
        return self.mode == "streamed"

    def hold_what_is_read(self) -> None:
        """Drop the first recording's values nothing reads: all when streamed (the export read the outputs
        already; the streamed recording hands over its own) or compared by statistics (the summaries stand
        for them; the region is recorded again), else unpaired ones. A lent recording is left whole."""
        capture, pairing = self.capture, self.pairing
        if capture is None or pairing is None or self.mode == "lent":  # the next comparison pairs it again
            return
        capture.retain(() if self.mode in ("streamed", "statistics") else self._kept(capture, pairing))
        if self.streams:
            for key in capture.output_keys:
                capture.store.discard(key)
        release_memory()

    def _kept(self, capture: TorchCapture, pairing: Pairing) -> list[str]:
        """The recorded values the culprit pass reads: the paired ones, and those inside a paired If's branches."""
        return [*(p.key for p in pairing.pairs.values()), *held_inside(self.prepared.graph, capture, pairing)]

    @cached_property
    def captured(self) -> CapturedValues | None:
        """PyTorch's recorded values of sample 0 by ONNX tensor (built once, its key map with it).

        When sample 0 was streamed, the model is recorded again for this (the culprit pass reads it).
        """
        if self.fine is not None:
            return self.fine
        if self.capture is None or self.pairing is None:
            return None
        if not self.streams:
            return CapturedValues(self.capture, self.pairing, self.outputs)
        assert self.recorder is not None
        # sample 0, as recorded; only what is read is kept, so nothing is spilled to disk and then deleted
        recorded = self.recorder.record(self.prepared.model_feeds, store=self._store(), keep=self.read_keys)
        recorded.retain(self._kept(recorded, self.pairing))
        return CapturedValues(recorded, self.pairing, self.outputs)

    @cached_property
    def read_keys(self) -> frozenset[str]:
        """The recorded values a later recording keeps: those the culprit pass and attribution read, the outputs."""
        assert self.capture is not None and self.pairing is not None
        return frozenset((*self._kept(self.capture, self.pairing), *self.capture.output_keys))

    def first_source(self) -> ValueSource | None:
        """Sample 0's values as the comparison reads them: streamed, or as held (on a GPU: compared there)."""
        if self.streams:
            return self._streamed()
        captured = self.captured
        return dataclasses.replace(captured, native=True) if captured is not None else None

    def _streamed(self) -> StreamedValues:
        """Sample 0's reference, streamed through the comparison (the engine records it as it compares)."""
        assert self.capture is not None and self.pairing is not None and self.recorder is not None
        recorder, feeds = self.recorder, self.prepared.model_feeds

        def record(visit: Visit, keep: Container[str]) -> TorchCapture:
            with self._new_store() as store:
                return recorder.record(feeds, store=store, visit=visit, keep=keep)

        def full() -> CapturedValues:
            captured = self.captured
            assert captured is not None
            return captured

        return StreamedValues(self.capture, self.pairing, self.outputs, record, full)

    def forward(self, sample: Sample) -> ForwardValues | None:
        """A later sample's final outputs: a plain forward of the model, as recorded."""
        recorder = self.recorder
        if recorder is None:
            return None
        return ForwardValues(recorder.module, sample, self.outputs, recorder.device, recorder.tf32)

    def summaries(self, summaries: Mapping[str, Summary]) -> dict[str, Summary]:
        """PyTorch's summaries by ONNX tensor: those the first recording made (`summaries`, by key), and
        the derived values the pairing holds."""
        from trtdiff.analysis.statistics import summarize

        captured = self.captured
        if captured is None:
            return {}
        found: dict[str, Summary] = {}
        for tensor, key in captured.keys.items():
            if key in summaries:
                found[tensor] = summaries[key]
            elif captured.capture.holds(key):
                found[tensor] = summarize(captured.capture.native(key))
        return found

    def region(self, keep: frozenset[str]) -> Reference:
        """By statistics: sample 0 recorded again keeping `keep` (the region's values, what its culprit pass
        reads, the outputs); the reference then reads that recording (`fine`)."""
        assert self.recorder is not None and self.pairing is not None
        recorded = self.recorder.record(self.prepared.model_feeds, store=self._store(), keep=keep)
        return dataclasses.replace(self, fine=CapturedValues(recorded, self.pairing, self.outputs))

    def record(self, feeds: Mapping[str, np.ndarray]) -> CapturedValues | None:
        """Another sample recorded layer by layer as sample 0 was (the non-finite search); None without PyTorch."""
        recorder = self.prepared.reference  # attention "auto": checked again on this sample
        if recorder is None or self.pairing is None:
            return None
        return CapturedValues(recorder.record(feeds, store=self._store()), self.pairing, self.outputs)

    def spill_note(self) -> tuple[str, ...]:
        recorded = self.capture
        if recorded is None or not recorded.store.spilled:
            return ()
        return (f"{recorded.store.spilled} reference tensors were spilled to disk (over the memory limit)",)

    def _new_store(self) -> TensorStore:
        return TensorStore(self.budget.store)

    def _store(self) -> TensorStore:
        """A new store of the budget's share, closed with the comparison."""
        return self.stack.enter_context(self._new_store())


class Recapture:
    """PyTorch's values on sample N for attribution: sample 0's recording, or a new recording (one at a time)."""

    def __init__(self, reference: Reference) -> None:
        self.reference = reference
        self.store: TensorStore | None = None

    def __enter__(self) -> Recapture:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()

    def __call__(self, index: int, sample: Sample) -> ValuesOf | None:
        captured = self.reference.captured
        recorder = self.reference.recorder  # records as sample 0 was recorded (attention too)
        if captured is None or recorder is None:
            return None
        if index == 0:
            return captured.values
        if self.store is not None:
            self.store.close()
        self.store = TensorStore(self.reference.budget.store)
        feeds = dict(zip(self.reference.prepared.input_names, sample.values, strict=False))
        recorded = recorder.record(feeds, store=self.store, keep=self.reference.read_keys)  # what attribution reads
        return CapturedValues(recorded, captured.pairing, captured.outputs).values


class SharedRecording:
    """One PyTorch recording lent to every comparison of the same model, inputs, device and TF32 (a sweep).

    A context manager: the recording's store is closed when it ends. A comparison whose inputs or
    settings differ records anew, and that recording is lent on.
    """

    def __init__(self) -> None:
        self._recorded: TorchCapture | None = None
        self._settings: tuple[str, bool, str, bool] | None = None

    def record(self, reference: TorchReference, feeds: Mapping[str, np.ndarray], memory_bytes: int) -> TorchCapture:
        """The first recording of a comparison: the lent one where it fits, else a new one (then lent on), its
        store holding `memory_bytes` in memory."""
        import numpy as np

        lent = self._recorded
        if lent is not None and self._settings == reference.settings and len(lent.inputs) == len(feeds):
            if all(np.array_equal(a, b) for a, b in zip(lent.inputs, feeds.values(), strict=True)):
                return lent
        self.close()
        recorded = reference.record(feeds, store=TensorStore(memory_bytes))
        self._recorded, self._settings = recorded, reference.settings
        return recorded

    def close(self) -> None:
        """Drop the recording lent (its store closed)."""
        if self._recorded is not None:
            self._recorded.store.close()
        self._recorded = self._settings = None

    def __enter__(self) -> SharedRecording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
