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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.analysis.diagnose import Findings, LocalCheck, analyse, attribute_culprits, local_check
from trtdiff.analysis.engine import (
    BackendValues,
    Pass,
    ValueSource,
)
from trtdiff.analysis.localize import first_divergence
from trtdiff.analysis.nonfinite import first_non_finite, non_finite_backends
from trtdiff.analysis.results import (
    build_layers,
    check_export_of_model,
    environment,
    mark_failures,
    pairing_summary,
    sample_results,
)
from trtdiff.errors import OptionError
from trtdiff.gate.checks import layer_checks, miou_checks, output_checks, weight_checks
from trtdiff.options import CompareOptions
from trtdiff.pipeline.coarse import compare_statistics, merge, statistics_note
from trtdiff.pipeline.memory import check_frontier
from trtdiff.pipeline.prepare import Prepared, Progress, onnx_feeds, prepare, timed
from trtdiff.pipeline.reference import FirstRecording, Recapture, SharedRecording
from trtdiff.pipeline.run import Run, backends_run
from trtdiff.report import Report
from trtdiff.source.samples import Sample, SampleSource
from trtdiff.version import __version__

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import torch

    from trtdiff.analysis.repro import OnCulprits
    from trtdiff.report import (
        FirstDivergence,
        Layer,
        NonFinite,
        SampleResult,
        SegmentationSummary,
        ThresholdCheck,
    )


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
    with ExitStack() as stack:
        first = FirstRecording(options, stack, shared)
        prepared = stack.enter_context(
            prepare(model, options, first_feeds=samples.first_feeds(), record=first.record, timings=timings, say=say)
        )
        run = _open_run(prepared, options, name_of, first, timings, repro_notes)
        if first.statistics:
            run, layers, results, segmentation = compare_statistics(run, samples, first.summaries, timings, say)
            repro_notes.insert(0, statistics_note(layers, run.region, run.region_first))
        else:
            layers, results, segmentation = _compare_samples(run, samples, timings, say)
        layers, checked = _local_check(run, layers, timings, say)
        divergence = first_divergence(layers, prepared.graph, run.pairs)
        non_finite = _non_finite(run, layers, results, timings)
        findings = _findings(run, layers, divergence, results, segmentation, stack, timings, say, checked)
        checks = _checks(options, layers, results, segmentation, run, divergence)
        notes = (
            *prepared.notes,
            *samples.notes(),
            *run.reference.spill_note(),
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
    first: FirstRecording,
    timings: dict[str, float],
    repro_notes: list[str],
) -> Run:
    """The reference paired with the ONNX graph, the backends to run, and only what is read of the recording kept."""
    reference = first.paired(prepared, timings)
    if options.export.onnx is not None and reference.pairing is not None:
        check_export_of_model(prepared.graph, reference.pairing, options.export.onnx)
    repro = _repro(options, prepared, repro_notes)
    run = Run(prepared, options, reference, backends_run(prepared, reference), name_of, repro)
    engine = run.engine()
    check_frontier(prepared.graph, run.layer_tensors(), engine.sizes, engine.chunk_bytes, reference.budget.limit)
    reference.hold_what_is_read()
    return run


def _compare_samples(
    run: Run, samples: SampleSource, timings: dict[str, float], say: Progress
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


def _silent(_text: str) -> None:
    """The default progress callback: say nothing."""


def _recorded_inputs(options: CompareOptions) -> dict[str, Any] | None:
    if not options.runtime.recordings:
        return None
    from trtdiff.backends.recorded import recorded_inputs

    return recorded_inputs(options.runtime.recordings)


def _checks(
    options: CompareOptions,
    layers: Sequence[Layer],
    results: Sequence[SampleResult],
    segmentation: SegmentationSummary | None,
    run: Run,
    divergence: FirstDivergence | None,
) -> list[ThresholdCheck]:
    """Every check of this comparison: layers (one sample, or per_layer), final outputs, mIoU."""
    gate = options.gate
    checks: list[ThresholdCheck] = []
    if not gate.many or gate.per_layer:
        checks += layer_checks(layers, results[0].name if results else "input", run.pairs)
    checks += output_checks(results, options.thresholds, run.pairs, run.judge.unquantized)
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
    run: Run, layers: Sequence[Layer], results: Sequence[SampleResult], timings: dict[str, float]
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
                found += first_non_finite(_layers_of(run, index), graph, later, result.name)
            break
    return found


def _layers_of(run: Run, index: int) -> list[Layer]:
    """Sample `index` compared layer by layer, as sample 0 is: PyTorch recorded anew, every ONNX backend run."""
    prepared, options, reference = run.prepared, run.options, run.reference
    graph = prepared.graph
    stream = SampleSource.open(options, _recorded_inputs(options)).stream(
        prepared.model_feeds, prepared.input_names, prepared.dtypes
    )
    sample = next(islice(stream, index, None))
    recorded = reference.record(dict(zip(prepared.input_names, sample.values, strict=False)))
    sources: list[ValueSource] = [recorded] if recorded is not None else []
    feeds = onnx_feeds(graph, dict(zip(graph.graph_inputs, sample.values, strict=False)))
    sources += [BackendValues(backend, feeds) for backend in prepared.backends]
    compared = next(run.engine().run([Pass(sample, tuple(sources), run.layer_tensors())]))
    return build_layers(graph, compared.metrics, reference.pairing, recorded.capture if recorded else None)


def _local_check(
    run: Run, layers: list[Layer], timings: dict[str, float], say: Progress
) -> tuple[list[Layer], LocalCheck | None]:
    """In a reduced-precision or quantized comparison compared in full, every node's local error against what
    its precision explains there, made part of the layer check (analysis.diagnose.local_check); elsewhere
    nothing, until something diverges. `--no-culprit` leaves it out too: the layers are then judged on their
    accumulated error alone (in a quantized graph against the float model: not judged, drift)."""
    reduced, quantized = run.reference.reduced, bool(run.judge.unquantized)
    if (reduced is None and not quantized) or run.summarized or run.options.analysis.culprit is False:
        return layers, None
    precision = " and ".join(p for p in ("quantized" if quantized else "", reduced.words if reduced else "") if p)
    say(f"running each node alone, {precision}, against what its precision explains")
    with timed(timings, "local"):
        judged, checked = local_check(run.analysis_inputs(say), layers, run.pairs)
    return judged, checked


def _findings(
    run: Run,
    layers: list[Layer],
    divergence: FirstDivergence | None,
    results: list[SampleResult],
    segmentation: SegmentationSummary | None,
    stack: ExitStack,
    timings: dict[str, float],
    say: Progress,
    checked: LocalCheck | None = None,
) -> Findings:
    """Culprits (or drift), then what injecting the reference at each culprit recovers."""
    with timed(timings, "culprits"):
        findings = _culprits(run, layers, divergence, say, checked)
    if findings.culprits:
        say("injecting the reference's values at each culprit (attribution)")
        with timed(timings, "attribution"):
            findings = _attribution(run, findings, results, segmentation, stack, say)
    return findings


def _culprits(
    run: Run, layers: list[Layer], divergence: FirstDivergence | None, say: Progress, checked: LocalCheck | None
) -> Findings:
    """Local errors, culprits and drift: when a divergence is found, or when asked either way (local errors
    measured already, `checked`, are not measured again)."""
    wanted = run.options.analysis.culprit
    if wanted is False or (wanted is None and divergence is None):
        return Findings(tuple(layers), notes=checked.notes if checked is not None else ())
    if checked is None:
        say("running each node alone on the reference's inputs (local error)")
    if not run.summarized:
        return analyse(run.analysis_inputs(say), layers, run.pairs, checked)
    if not run.region:  # nothing suspicious: no layer but the outputs has its values compared
        return Findings(tuple(layers))
    findings = analyse(run.analysis_inputs(say), [x for x in layers if x.tensor in run.region], run.pairs)
    return dataclasses.replace(findings, layers=tuple(merge(layers, findings.layers)))


def _attribution(
    run: Run,
    findings: Findings,
    results: list[SampleResult],
    segmentation: SegmentationSummary | None,
    stack: ExitStack,
    say: Progress,
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

    recapture = stack.enter_context(Recapture(run.reference))
    return attribute_culprits(run.analysis_inputs(say), findings, samples, recapture, results, segmentation)


def _report(
    prepared: Prepared,
    run: Run,
    findings: Findings,
    divergence: FirstDivergence | None,
    results: list[SampleResult],
    checks: list[ThresholdCheck],
    segmentation: SegmentationSummary | None,
    notes: tuple[str, ...],
    timings: dict[str, float],
    non_finite: tuple[NonFinite, ...] = (),
) -> Report:
    from trtdiff.backends.registry import ran_summary

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
