"""One comparison, from a model to a Report: the body under `trtdiff.compare`.

prepare (load, inputs, export or read the ONNX file, open the backends) -> capture the
PyTorch reference -> pair tensors -> compare every tensor of sample 0 and the final
outputs of every later sample in one engine -> layers, first divergence, checks -> Report.

`compare_once` runs exactly that and nothing after it: the public facade (trtdiff.api) adds
the simplified file's comparison when asked (hypotheses.simplify), and the sweep
(hypotheses.sweep) calls it once per combination. Nothing here calls back into either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.analysis.control_flow import held_inside
from trtdiff.analysis.diagnose import Findings, Inputs, analyse, attribute_culprits
from trtdiff.analysis.engine import (
    BackendValues,
    CapturedValues,
    Engine,
    ForwardValues,
    Pass,
    StreamedValues,
    ValueSource,
)
from trtdiff.analysis.judge import Judge
from trtdiff.analysis.localize import first_divergence
from trtdiff.analysis.nonfinite import first_non_finite, non_finite_backends
from trtdiff.analysis.reduced import ReducedPrecision
from trtdiff.analysis.results import (
    build_layers,
    check_export_of_model,
    environment,
    mark_failures,
    pairing_summary,
    sample_results,
)
from trtdiff.backends.pytorch.records import is_output_key
from trtdiff.backends.store import TensorStore, release_memory, to_host
from trtdiff.errors import OptionError, param
from trtdiff.gate.checks import layer_checks, miou_checks, output_checks, weight_checks
from trtdiff.options import CompareOptions
from trtdiff.pairing.qdq import has_qdq, quantizations
from trtdiff.pipeline.coarse import kept_near, merge, record_summaries, region, statistics_note, statistics_pass
from trtdiff.pipeline.memory import check_frontier, store_bytes
from trtdiff.pipeline.prepare import Prepared, Progress, Record, onnx_feeds, prepare, timed
from trtdiff.pipeline.progress import sample_step, sample_total
from trtdiff.report import Report, all_pairs
from trtdiff.source.samples import Sample, SampleSource
from trtdiff.version import __version__

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import torch

    from trtdiff.analysis.culprits import ValuesOf
    from trtdiff.analysis.repro import OnCulprits
    from trtdiff.analysis.statistics import Summary
    from trtdiff.backends.pytorch.capture import Visit
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.backends.pytorch.reference import TorchReference
    from trtdiff.pairing.pairs import Pairing
    from trtdiff.report import (
        BackendPair,
        FirstDivergence,
        Layer,
        NonFinite,
        QuantizedWeight,
        SampleResult,
        SegmentationSummary,
        ThresholdCheck,
    )
    from trtdiff.report.inspection import Interpolation


@dataclass(frozen=True)
class Comparison:
    """What one comparison found, and the exact ONNX model it compared (what a follow-up such as simplify reads)."""

    report: Report
    onnx_model: onnx.ModelProto


def compare_once(
    model: str | Path | torch.nn.Module,
    options: CompareOptions,
    *,
    progress: Progress | None = None,
    name_of: Callable[[str], str] = str,
    shared: SharedRecording | None = None,
) -> Comparison:
    """Compare `model` layer by layer across the chosen backends, once (no simplified file: see trtdiff.api).

    Every backend, store and temporary file it opens is closed before it returns or raises.
    `progress` is called with a short description as each long step starts; a culprit's
    advice names parameters as `name_of` writes them. `shared` lends the PyTorch recording
    of the same model and inputs to several comparisons (a sweep): recorded once, held
    whole. Raises a TrtdiffError naming the parameter on bad input.
    """
    options.validate()
    _check_repro_dir(options)
    repro_notes: list[str] = []
    say = progress or _silent
    timings: dict[str, float] = {}
    samples = SampleSource.open(options, _recorded_inputs(options))
    statistics = options.analysis.capture == "stats"
    summaries: dict[str, Summary] = {}  # statistics: PyTorch's, by recorded key, made by the first recording
    with ExitStack() as stack:
        if statistics:
            record = record_summaries(stack, summaries)
        else:
            record = shared.record if shared is not None else _record_first(stack, options.analysis.culprit is not True)
        prepared = stack.enter_context(
            prepare(model, options, first_feeds=samples.first_feeds(), record=record, timings=timings, say=say)
        )
        lent = shared is not None and not statistics
        run = _open_run(prepared, options, name_of, stack, lent, timings, repro_notes)
        if statistics:
            run, layers, results, segmentation = _compare_statistics(run, samples, summaries, timings, say)
            repro_notes.insert(0, statistics_note(layers, run.region, run.region_first))
        else:
            layers, results, segmentation = _compare_samples(run, samples, timings, say)
        divergence = first_divergence(layers, prepared.graph, run.pairs)
        non_finite = _non_finite(run, layers, results, stack, timings)
        findings = _findings(run, layers, divergence, results, segmentation, stack, timings, say)
        checks = _checks(options, layers, results, segmentation, run, divergence)
        notes = (
            *prepared.notes,
            *samples.notes(),
            *_spill_note(run.reference.capture),
            *run.reference.notes,
            *findings.notes,
            *repro_notes,
        )
        report = _report(prepared, run, findings, divergence, results, checks, segmentation, notes, timings, non_finite)
        return Comparison(report, prepared.graph.model)


def _open_run(
    prepared: Prepared,
    options: CompareOptions,
    name_of: Callable[[str], str],
    stack: ExitStack,
    shared: bool,
    timings: dict[str, float],
    repro_notes: list[str],
) -> _Run:
    """The reference paired with the ONNX graph, the backends to run, and only what is read of the recording kept."""
    reference = _pair(prepared, timings)
    if options.export.onnx is not None and reference.pairing is not None and prepared.precision == "fp32":
        # at FP16/BF16 the pairing of a converted graph is weaker (GroupNorm and SiLU go unpaired): not checked there
        check_export_of_model(pairing_summary(prepared.graph, reference.pairing), options.export.onnx)
    repro = _repro(options, prepared, repro_notes)
    run = _Run(
        prepared, options, reference, _backends_run(prepared, reference), name_of, repro, stack=stack, shared=shared
    )
    engine = run.engine()
    check_frontier(prepared.graph, run.layer_tensors(), engine.sizes, engine.chunk_bytes, options.runtime.memory_bytes)
    run.hold_what_is_read()
    return run


def _compare_samples(
    run: _Run, samples: SampleSource, timings: dict[str, float], say: Progress
) -> tuple[list[Layer], list[SampleResult], SegmentationSummary | None]:
    """Every backend run and compared: sample 0 layer by layer (the layers), every sample's outputs (the results)."""
    prepared, reference = run.prepared, run.reference
    say(f"running {', '.join(b.name for b in prepared.backends)} and comparing every layer")
    compared = run.engine().run(
        run.passes(samples.stream(prepared.model_feeds, prepared.input_names, prepared.dtypes), say)
    )
    with timed(timings, "run_and_compare"):
        first = next(compared)
    layers = build_layers(prepared.graph, first.metrics, reference.pairing, reference.capture)
    with timed(timings, "samples"):
        results, segmentation = sample_results(
            chain([first], compared),
            prepared.graph.graph_outputs,
            run.pairs,
            run.backends[0],
            run.options.gate.ignore_index,
        )
    return layers, results, segmentation


def _compare_statistics(
    run: _Run, samples: SampleSource, summaries: Mapping[str, Summary], timings: dict[str, float], say: Progress
) -> tuple[_Run, list[Layer], list[SampleResult], SegmentationSummary | None]:
    """`--capture stats` (pipeline.coarse): sample 0 by statistics, the region around its first suspicious layer in
    full (the run then reads that recording), every sample's outputs in full."""
    prepared, reference = run.prepared, run.reference
    graph = prepared.graph
    say(f"running {', '.join(b.name for b in prepared.backends)} and comparing every layer's statistics")
    passes = run.passes(samples.stream(prepared.model_feeds, prepared.input_names, prepared.dtypes), say)
    current = next(passes)
    captured = run.captured
    by_tensor = _torch_summaries(captured, summaries) if captured is not None else {}
    outputs = tuple(graph.graph_outputs)
    with timed(timings, "run_and_compare"):
        first, suspicious = statistics_pass(current, by_tensor, run.engine())
    layers = build_layers(graph, first.metrics, reference.pairing, reference.capture)
    if suspicious:
        tensors = region([layer.tensor for layer in layers], suspicious[0], outputs)
        say(f"comparing the {len(tensors)} layers around {suspicious[0]} in full")
        with timed(timings, "region"):
            run, full = _region(run, current, tensors, suspicious[0])
        layers = merge(layers, full)
    with timed(timings, "samples"):
        results, segmentation = sample_results(
            chain([first], run.engine().run(passes)), outputs, run.pairs, run.backends[0], run.options.gate.ignore_index
        )
    return run, layers, results, segmentation


def _torch_summaries(captured: CapturedValues, summaries: Mapping[str, Summary]) -> dict[str, Summary]:
    """PyTorch's summaries by ONNX tensor: those the recording made, and the derived values the pairing holds."""
    from trtdiff.analysis.statistics import summarize

    found: dict[str, Summary] = {}
    for tensor, key in captured.keys.items():
        if key in summaries:
            found[tensor] = summaries[key]
        elif captured.capture.holds(key):
            found[tensor] = summarize(captured.capture.native(key))
    return found


def _region(run: _Run, current: Pass, tensors: tuple[str, ...], first: str) -> tuple[_Run, list[Layer]]:
    """The layers `tensors` compared in full: PyTorch (where it takes part) recorded again keeping what they and
    their culprit pass read, every ONNX backend asked for them."""
    prepared, reference = run.prepared, run.reference
    graph, pairing, recorder, capture = prepared.graph, reference.pairing, reference.recorder, reference.capture
    sources: list[ValueSource] = [BackendValues(b, prepared.feeds) for b in prepared.backends]
    captured = recorded = None
    if recorder is not None and pairing is not None and capture is not None:
        keep = kept_near(graph, pairing, capture, tensors) | set(capture.output_keys)
        store = TensorStore(store_bytes(recorder.memory_bytes))
        if run.stack is not None:
            run.stack.enter_context(store)
        recorded = recorder.record(prepared.model_feeds, store=store, keep=keep)
        captured = CapturedValues(recorded, pairing, tuple(graph.graph_outputs))
        sources.insert(0, captured)
    compared = next(run.engine().run([Pass(current.sample, tuple(sources), tensors)]))
    fine = dataclasses.replace(run, fine=captured, region=tensors, region_first=first)
    return fine, build_layers(graph, compared.metrics, pairing, recorded)


@dataclass(frozen=True)
class _Reference:
    """The PyTorch reference: what the capture recorded, which ONNX tensor each value pairs with, how to record again.

    `recorder` records the model as the first recording did (its settings, attention as it chose).
    """

    capture: TorchCapture | None = None
    pairing: Pairing | None = None
    recorder: TorchReference | None = None
    reduced: ReducedPrecision | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Run:
    """One comparison's backends, pairs and passes."""

    prepared: Prepared
    options: CompareOptions
    reference: _Reference
    backends: tuple[str, ...]
    name_of: Callable[[str], str] = str
    repro: OnCulprits | None = None
    stack: ExitStack | None = None  # where a recording made for the culprit pass is closed
    shared: bool = False  # the recording is lent by a SharedRecording: held whole, never streamed
    fine: CapturedValues | None = None  # `--capture stats`: the recording of the region compared in full
    region: tuple[str, ...] = ()  # `--capture stats`: the layers compared in full (pipeline.coarse)
    region_first: str | None = None  # the first suspicious layer, which the region is around

    @property
    def pairs(self) -> tuple[BackendPair, ...]:
        return all_pairs(self.backends)

    @property
    def summarized(self) -> bool:
        """Whether sample 0's layers are compared by statistics (`--capture stats`, pipeline.coarse)."""
        return self.options.analysis.capture == "stats"

    def engine(self) -> Engine:
        graph = self.prepared.graph
        return Engine(self.pairs, self.judge, tuple(graph.graph_outputs), self.sizes, self.chunk_bytes)

    @cached_property
    def sizes(self) -> dict[str, int]:
        """Expected bytes of sample 0's tensors, where the graph's types say."""
        graph = self.prepared.graph
        return {t: n for t in self.layer_tensors() if (n := graph.tensor_type(t).nbytes()) is not None}

    @cached_property
    def chunk_bytes(self) -> int:
        """What one source returns at once, within `--memory-limit` (L).

        Held on a GPU (nothing of the reference on the host): up to L. Streamed, or compared by
        statistics (`--capture stats`): one chunk of each ONNX backend in half of L (`store_bytes`),
        its values waiting for the reference's; the other half holds the final outputs and the values
        being compared. Held over several chunks: the reference's values take up to L/2 in memory
        (its store), and the other half is shared by one chunk of each ONNX backend and the
        reference's values of that chunk read back from the store.
        """
        runtime, capture = self.options.runtime, self.reference.capture
        half, backends = store_bytes(runtime.memory_bytes), len(self.prepared.backends)
        if capture is None or capture.device != "cpu":  # none of the reference held on the host
            return min(runtime.chunk_bytes, runtime.memory_bytes)
        if self.streams or self.summarized:  # no value of the reference read back
            return max(1, min(runtime.chunk_bytes, half // backends))
        return max(1, min(runtime.chunk_bytes, half // (1 + backends)))

    @cached_property
    def judge(self) -> Judge:
        """How each pair of values is judged: the thresholds, in quantization steps or noise ratio where they apply."""
        return Judge(self.options.thresholds, quantizations(self.prepared.graph), self.reference.reduced)

    @cached_property
    def weights(self) -> tuple[QuantizedWeight, ...]:
        """A QDQ file's weight DequantizeLinears against the PyTorch parameters (analysis.quant); () without Q/DQ."""
        module, graph = self.prepared.loaded.module, self.prepared.graph
        if module is None or not has_qdq(graph):
            return ()
        from trtdiff.analysis.quant import quantized_weights

        parameters = {name: to_host(value.float()) for name, value in module.state_dict().items()}
        return quantized_weights(graph, parameters)

    @cached_property
    def streams(self) -> bool:
        """Whether sample 0's reference is streamed (recorded again, each value compared and dropped), not held.

        So unless the culprit pass is asked for whatever happens (it reads the reference's values:
        they are then held) or the recording is lent (a sweep); the other backends' chunks are
        fetched in lockstep with it (analysis.engine). A reference recorded on a GPU is held there
        instead (no host memory, no second forward).
        """
        capture, pairing = self.reference.capture, self.reference.pairing
        if capture is None or pairing is None or capture.device != "cpu":
            return False
        return not (self.options.analysis.culprit or self.shared or self.summarized)

    def hold_what_is_read(self) -> None:
        """Drop the first recording's values nothing reads: all when streamed (the export read the outputs
        already; the streamed recording hands over its own) or compared by statistics (the summaries stand
        for them; the region is recorded again), else unpaired ones."""
        capture, pairing = self.reference.capture, self.reference.pairing
        if capture is None or pairing is None or self.shared:  # the next comparison pairs it again
            return
        capture.retain(() if self.streams or self.summarized else self._kept(capture, pairing))
        if self.streams:
            for key in capture.output_keys:
                capture.store.discard(key)
        release_memory()

    def _kept(self, capture: TorchCapture, pairing: Pairing) -> list[str]:
        """The recorded values the culprit pass reads: the paired ones, and those inside a paired If's branches."""
        return [*(p.key for p in pairing.pairs.values()), *held_inside(self.prepared.graph, capture, pairing)]

    def layer_tensors(self) -> tuple[str, ...]:
        """Sample 0's tensors: those paired with PyTorch, every one several backends share, the outputs."""
        graph, pairing = self.prepared.graph, self.reference.pairing
        paired = pairing.pairs if pairing is not None else {}
        several = len(self.prepared.backends) > 1
        outputs = set(graph.graph_outputs)
        return tuple(t for t in graph.node_outputs if t in paired or several or t in outputs)

    def analysis_inputs(self) -> Inputs:
        """What the culprit step reads from this comparison."""
        prepared = self.prepared
        return Inputs(
            prepared.graph,
            prepared.feeds,
            prepared.backends,
            self.captured,
            self.options.runtime,
            prepared.engine,
            self.judge,
            self.interpolations,
            self.name_of,
            self.repro,
        )

    def interpolations(self) -> list[Interpolation]:
        """The PyTorch model's upsampling calls on sample 0 (one forward pass), for the culprits' advice."""
        recorder = self.reference.recorder
        if recorder is None:
            return []
        from trtdiff.backends.pytorch.interpolations import record_interpolations

        return record_interpolations(recorder.module, self.prepared.model_feeds)

    @cached_property
    def captured(self) -> CapturedValues | None:
        """PyTorch's recorded values by ONNX tensor (sample 0; built once, its key map with it).

        When sample 0 was streamed, the model is recorded again for this (the culprit pass reads it).
        """
        reference = self.reference
        if self.fine is not None:
            return self.fine
        if reference.capture is None or reference.pairing is None:
            return None
        outputs = tuple(self.prepared.graph.graph_outputs)
        if not self.streams:
            return CapturedValues(reference.capture, reference.pairing, outputs)
        assert reference.recorder is not None
        stack = self.stack if self.stack is not None else ExitStack()
        store = stack.enter_context(TensorStore(store_bytes(reference.recorder.memory_bytes)))
        # sample 0, as recorded; only what is read is kept, so nothing is spilled to disk and then deleted
        recorded = reference.recorder.record(self.prepared.model_feeds, store=store, keep=self.read_keys)
        recorded.retain(self._kept(recorded, reference.pairing))
        return CapturedValues(recorded, reference.pairing, outputs)

    @cached_property
    def read_keys(self) -> frozenset[str]:
        """The recorded values a later recording keeps: those the culprit pass and attribution read, the outputs."""
        capture, pairing = self.reference.capture, self.reference.pairing
        assert capture is not None and pairing is not None
        return frozenset((*self._kept(capture, pairing), *capture.output_keys))

    def _streamed(self) -> StreamedValues:
        """Sample 0's reference, streamed through the comparison (the engine records it as it compares)."""
        reference, feeds = self.reference, self.prepared.model_feeds
        assert reference.capture is not None and reference.pairing is not None and reference.recorder is not None
        recorder = reference.recorder

        def record(visit: Visit, keep: Container[str]) -> TorchCapture:
            with recorder.store() as store:
                return recorder.record(feeds, store=store, visit=visit, keep=keep)

        def full() -> CapturedValues:
            captured = self.captured
            assert captured is not None
            return captured

        outputs = tuple(self.prepared.graph.graph_outputs)
        return StreamedValues(reference.capture, reference.pairing, outputs, record, full)

    def passes(self, samples: Iterator[Sample], say: Progress) -> Iterator[Pass]:
        """Sample 0 on every tensor (from the capture), then each later sample's final outputs."""
        graph, recorder = self.prepared.graph, self.reference.recorder
        outputs = tuple(graph.graph_outputs)
        total = sample_total(self.options)
        for index, sample in enumerate(samples):
            say(sample_step(index, total, sample.name))
            sources: list[ValueSource] = []
            if index == 0:
                captured = self._streamed() if self.streams else self.captured
                if isinstance(captured, CapturedValues):  # compared where it is held (a GPU)
                    captured = dataclasses.replace(captured, native=True)
                if captured is not None:
                    sources.append(captured)
                feeds = self.prepared.feeds
            else:
                if recorder is not None:
                    sources.append(ForwardValues(recorder.module, sample, outputs, recorder.device, recorder.tf32))
                feeds = onnx_feeds(graph, dict(zip(graph.graph_inputs, sample.values, strict=False)))
            sources += [BackendValues(backend, feeds) for backend in self.prepared.backends]
            yield Pass(sample, tuple(sources), self.layer_tensors() if index == 0 else outputs)


def _silent(_text: str) -> None:
    """The default progress callback: say nothing."""


def _recorded_inputs(options: CompareOptions) -> dict[str, Any] | None:
    if not options.runtime.recordings:
        return None
    from trtdiff.backends.recorded import recorded_inputs

    return recorded_inputs(options.runtime.recordings)


def _record_first(stack: ExitStack, streams: bool) -> Record:
    """Record PyTorch once on the inputs, into a store of the reference's that `stack` closes.

    Where the comparison will stream the reference (`streams`: the culprit pass not asked for
    whatever happens; recorded on the CPU, in float32), nothing reads this recording's values
    but the pairing: past the reference's share of the memory limit they are dropped, not
    spilled (the final outputs are kept), and a derived value computed from a dropped one is
    not compared.
    """

    def record(reference: TorchReference, feeds: Mapping[str, np.ndarray]) -> TorchCapture:
        from trtdiff.backends.pytorch.capture import resolve_device

        drops = streams and reference.dtype == "float32" and resolve_device(reference.device) == "cpu"
        store = TensorStore(store_bytes(reference.memory_bytes), beyond=is_output_key if drops else None)
        return reference.record(feeds, store=stack.enter_context(store))

    return record


class SharedRecording:
    """One PyTorch recording lent to every comparison of the same model, inputs, device and TF32 (a sweep).

    A context manager: the recording's store (with the reference's memory limit) is closed when
    it ends. A comparison whose inputs or settings differ records anew, and that recording is lent on.
    """

    def __init__(self) -> None:
        self._recorded: TorchCapture | None = None
        self._settings: tuple[str, bool, str] | None = None

    def record(self, reference: TorchReference, feeds: Mapping[str, np.ndarray]) -> TorchCapture:
        """The first recording of a comparison: the lent one where it fits, else a new one (then lent on)."""
        import numpy as np

        lent = self._recorded
        if lent is not None and self._settings == reference.settings and len(lent.inputs) == len(feeds):
            if all(np.array_equal(a, b) for a, b in zip(lent.inputs, feeds.values(), strict=True)):
                return lent
        self.close()
        self._recorded, self._settings = reference.record(feeds), reference.settings
        return self._recorded

    def close(self) -> None:
        """Drop the recording lent (its store closed)."""
        if self._recorded is not None:
            self._recorded.store.close()
        self._recorded = self._settings = None

    def __enter__(self) -> SharedRecording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pair(prepared: Prepared, timings: dict[str, float]) -> _Reference:
    """Pair the recorded PyTorch values with ONNX tensors; in reduced precision, measure its benchmark."""
    recorded, recorder = prepared.capture, prepared.reference
    if recorded is None or recorder is None:
        return _Reference(reduced=_reduced(prepared, {}))
    from trtdiff.pairing.pairs import pair

    with timed(timings, "pairing"):
        pairing = pair(prepared.graph, recorded, {name for name, _ in recorder.module.named_modules()})
    notes: list[str] = []
    expected: dict[str, float] = {}
    if prepared.precision != "fp32":
        from trtdiff.backends.pytorch.benchmark import benchmark_errors

        with timed(timings, "benchmark"):
            errors, notes = benchmark_errors(recorder, recorded, prepared.precision)
        expected = {tensor: errors[p.key] for tensor, p in pairing.pairs.items() if p.key in errors}
    reduced = _reduced(prepared, expected)
    return _Reference(recorded, pairing, recorder.as_recorded(recorded), reduced, tuple(notes))


def _reduced(prepared: Prepared, expected: Mapping[str, float]) -> ReducedPrecision | None:
    """The reduced precision the ONNX backends compute in (they all run the same graph), None at FP32."""
    if prepared.precision == "fp32":
        return None
    backends = frozenset(b.name for b in prepared.backends)
    return ReducedPrecision(prepared.precision, expected, backends, prepared.emulated)


def _backends_run(prepared: Prepared, reference: _Reference) -> tuple[str, ...]:
    """The backends compared, the reference first; two are needed."""
    names = (("torch",) if reference.capture is not None else ()) + tuple(b.name for b in prepared.backends)
    if len(names) < 2:
        hint = (
            f"give the PyTorch model as MODEL with {param('onnx')} FILE"
            if reference.capture is None
            else f"add {param('backends')} onnxruntime"
        )
        raise OptionError(f"only {', '.join(names) or 'no backend'} can run here, and comparing needs two; {hint}")
    return names


def _checks(
    options: CompareOptions,
    layers: Sequence[Layer],
    results: Sequence[SampleResult],
    segmentation: SegmentationSummary | None,
    run: _Run,
    divergence: FirstDivergence | None,
) -> list[ThresholdCheck]:
    """Every check of this comparison: layers (one sample, or per_layer), final outputs, mIoU."""
    gate = options.gate
    checks: list[ThresholdCheck] = []
    if not gate.many or gate.per_layer:
        checks += layer_checks(layers, results[0].name if results else "input", run.pairs)
    checks += output_checks(results, options.thresholds, run.pairs)
    checks += weight_checks(run.weights, options.thresholds)
    if segmentation is not None:
        checks += miou_checks(results, segmentation, gate, run.pairs, run.backends[0])
    elif gate.min_miou is not None or gate.max_miou_drop is not None:
        raise OptionError(
            "no output has the (N, C, H, W) shape of segmentation scores; drop the option",
            parameter="min_miou" if gate.min_miou is not None else "max_miou_drop",
        )
    return checks


def _non_finite(
    run: _Run, layers: Sequence[Layer], results: Sequence[SampleResult], stack: ExitStack, timings: dict[str, float]
) -> tuple[NonFinite, ...]:
    """Where NaN/Inf first appear, per backend whose final outputs hold them.

    Searched in sample 0's layers; a backend whose outputs turn non-finite only on a later
    sample is searched in that sample's layers, compared in one more pass (the first such sample).
    """
    graph = run.prepared.graph
    found = first_non_finite(layers, graph, run.backends, results[0].name if results else "input")
    named = {entry.backend for entry in found}
    for index, result in enumerate(results[1:], start=1):
        later = [b for b in non_finite_backends(result.outputs, run.backends) if b not in named]
        if later:
            with timed(timings, "non_finite"):
                found += first_non_finite(_layers_of(run, index, stack), graph, later, result.name)
            break
    return found


def _layers_of(run: _Run, index: int, stack: ExitStack) -> list[Layer]:
    """Sample `index` compared layer by layer, as sample 0 is: PyTorch recorded anew, every ONNX backend run."""
    prepared, options, reference = run.prepared, run.options, run.reference
    graph, recorder = prepared.graph, prepared.reference  # attention "auto": checked again on this sample
    stream = SampleSource.open(options, _recorded_inputs(options)).stream(
        prepared.model_feeds, prepared.input_names, prepared.dtypes
    )
    sample = next(islice(stream, index, None))
    sources: list[ValueSource] = []
    recorded = None
    if recorder is not None and reference.pairing is not None:
        feeds = dict(zip(prepared.input_names, sample.values, strict=False))
        recorded = recorder.record(feeds, store=stack.enter_context(recorder.store()))
        sources.append(CapturedValues(recorded, reference.pairing, tuple(graph.graph_outputs)))
    feeds = onnx_feeds(graph, dict(zip(graph.graph_inputs, sample.values, strict=False)))
    sources += [BackendValues(backend, feeds) for backend in prepared.backends]
    compared = next(run.engine().run([Pass(sample, tuple(sources), run.layer_tensors())]))
    return build_layers(graph, compared.metrics, reference.pairing, recorded)


def _spill_note(recorded: TorchCapture | None) -> tuple[str, ...]:
    if recorded is None or not recorded.store.spilled:
        return ()
    return (f"{recorded.store.spilled} reference tensors were spilled to disk (over the memory limit)",)


def _findings(
    run: _Run,
    layers: list[Layer],
    divergence: FirstDivergence | None,
    results: list[SampleResult],
    segmentation: SegmentationSummary | None,
    stack: ExitStack,
    timings: dict[str, float],
    say: Progress,
) -> Findings:
    """Culprits (or drift), then what injecting the reference at each culprit recovers."""
    with timed(timings, "culprits"):
        findings = _culprits(run, layers, divergence, say)
    if findings.culprits:
        say("injecting the reference's values at each culprit (attribution)")
        with timed(timings, "attribution"):
            findings = _attribution(run, findings, results, segmentation, stack)
    return findings


def _culprits(run: _Run, layers: list[Layer], divergence: FirstDivergence | None, say: Progress) -> Findings:
    """Local errors, culprits and drift: when a divergence is found, or when asked either way."""
    wanted = run.options.analysis.culprit
    if wanted is False or (wanted is None and divergence is None):
        return Findings(tuple(layers))
    say("running each node alone on the reference's inputs (local error)")
    if not run.summarized:
        return analyse(run.analysis_inputs(), layers, run.pairs)
    if not run.region:  # nothing suspicious: no layer but the outputs has its values compared
        return Findings(tuple(layers))
    findings = analyse(run.analysis_inputs(), [x for x in layers if x.tensor in run.region], run.pairs)
    return dataclasses.replace(findings, layers=tuple(merge(layers, findings.layers)))


def _attribution(
    run: _Run,
    findings: Findings,
    results: list[SampleResult],
    segmentation: SegmentationSummary | None,
    stack: ExitStack,
) -> Findings:
    """What injecting the reference's value at each culprit recovers, over the same samples."""
    prepared, options = run.prepared, run.options
    graph = prepared.graph

    def samples() -> Iterator[tuple[Sample, Mapping[str, np.ndarray]]]:
        source = SampleSource.open(options, _recorded_inputs(options))
        stream = source.stream(prepared.model_feeds, prepared.input_names, prepared.dtypes)
        for index, sample in enumerate(stream):
            feeds = (
                prepared.feeds
                if index == 0
                else onnx_feeds(graph, dict(zip(graph.graph_inputs, sample.values, strict=False)))
            )
            yield sample, feeds

    recapture = stack.enter_context(_Recapture(run))
    return attribute_culprits(run.analysis_inputs(), findings, samples, recapture, results, segmentation)


class _Recapture:
    """PyTorch's values on sample N: sample 0's recording, or a new recording (one kept at a time)."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.store: TensorStore | None = None

    def __enter__(self) -> _Recapture:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()

    def __call__(self, index: int, sample: Sample) -> ValuesOf | None:
        captured = self.run.captured
        recorder = self.run.reference.recorder  # records as sample 0 was recorded (attention too)
        if captured is None or recorder is None:
            return None
        if index == 0:
            return captured.values
        if self.store is not None:
            self.store.close()
        self.store = TensorStore(store_bytes(recorder.memory_bytes))
        feeds = dict(zip(self.run.prepared.input_names, sample.values, strict=False))
        recorded = recorder.record(feeds, store=self.store, keep=self.run.read_keys)  # what attribution reads
        return CapturedValues(recorded, captured.pairing, captured.outputs).values


def _report(
    prepared: Prepared,
    run: _Run,
    findings: Findings,
    divergence: FirstDivergence | None,
    results: list[SampleResult],
    checks: list[ThresholdCheck],
    segmentation: SegmentationSummary | None,
    notes: tuple[str, ...],
    timings: dict[str, float],
    non_finite: tuple[NonFinite, ...] = (),
) -> Report:
    from trtdiff.backends.tensorrt.selection import ran_summary

    graph = prepared.graph
    layers = findings.layers
    compared = {layer.tensor for layer in layers}
    torch_device = run.reference.capture.device if run.reference.capture is not None else None  # "auto" resolved
    return Report(
        passed=all(check.passed for check in checks),
        model=prepared.loaded.source,
        onnx_path=prepared.onnx_path,
        opset=graph.opset,
        exporter=prepared.exporter,
        backends=run.backends,
        reference=run.backends[0],
        inputs=prepared.inputs,
        thresholds=run.options.thresholds,
        first_divergence=divergence,
        layers=tuple(layers),
        not_compared=tuple(t for t in graph.node_outputs if t not in compared),
        pairing=pairing_summary(graph, run.reference.pairing),
        environment=environment(prepared.backends, torch_device),
        notes=notes,
        timings={k: round(v, 4) for k, v in timings.items()},
        tensorrt=ran_summary(prepared.backends, run.judge.between_runs()) or prepared.tensorrt,
        runtimes=tuple(s for b in prepared.backends if (s := b.runtime_summary(run.judge.between_runs())) is not None),
        samples=mark_failures(results, checks),
        checks=tuple(checks),
        segmentation=segmentation,
        culprit=findings.culprits[0] if findings.culprits else None,
        culprits=findings.culprits,
        drift=findings.drift,
        attribution=findings.attribution,
        non_finite=non_finite,
        weights=run.weights,
        trtdiff_version=__version__,
    )


def _check_repro_dir(options: CompareOptions) -> None:
    """The repro folder is checked before any work (nothing the user made is overwritten)."""
    if options.analysis.save_repro is not None:
        from trtdiff.analysis.repro import check_repro_dir

        check_repro_dir(options.analysis.save_repro)


def _repro(options: CompareOptions, prepared: Prepared, notes: list[str]) -> OnCulprits | None:
    """The culprit step's repro writer, when `save_repro` asks for one."""
    if options.analysis.save_repro is None:
        return None
    from trtdiff.analysis.repro import repro_writer
    from trtdiff.analysis.repro_readme import ReproContext

    context = ReproContext(
        Path(options.analysis.save_repro),
        prepared.graph,
        options.thresholds,
        prepared.loaded.source,
        options.runtime.ort_provider,
    )
    return repro_writer(context, notes)
