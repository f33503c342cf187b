"""`trtdiff.compare`: the whole pipeline, from a PyTorch model to a Report.

load the model and inputs -> capture the PyTorch reference -> export (or take the given
ONNX file) -> pair tensors -> run each ONNX backend (ONNX Runtime, TensorRT where it can
run) chunk by chunk, comparing as the chunks arrive -> find the first divergence.
"""

from __future__ import annotations

import platform
import tempfile
from dataclasses import replace
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, OnnxBackend, chunk_names, fetch
from trtdiff.backends.recorded import RecordedBackend, recorded_inputs
from trtdiff.backends.tensorrt.builder import BuildSettings, input_shapes_from
from trtdiff.backends.tensorrt.selection import ran_summary, tensorrt_runner
from trtdiff.backends.torch_backend import TorchCapture, capture as capture_reference
from trtdiff.gate import (
    GateOptions, GateSample, folder_samples, layer_checks, miou_checks, output_checks, random_samples, run_samples,
)
from trtdiff.inputs import make_inputs
from trtdiff.errors import OptionError
from trtdiff.localize import first_divergence
from trtdiff.metrics import compare_tensors
from trtdiff.onnx_graph import GraphInfo
from trtdiff.pairing import Pairing, pair
from trtdiff.prepare import Source, check_new_file, load_source, onnx_feeds, onnx_graph_for, timed
from trtdiff.report import (
    FirstDivergence, Layer, PairingSummary, PairMetrics, Report, SampleResult, SegmentationSummary, TensorRTSummary,
    ThresholdCheck, Thresholds, pair_key,
)
from trtdiff.store import DEFAULT_MEMORY_BYTES, TensorStore

KNOWN_BACKENDS = ("torch", "onnxruntime", "tensorrt")


def compare(
    model: str | Path | torch.nn.Module,
    *,
    input_shapes: Sequence[str] = (),
    input_files: Sequence[str | Path] = (),
    seed: int = 0,
    opset: int | None = None,
    exporter: str = "auto",
    onnx: str | Path | None = None,
    save_onnx: str | Path | None = None,
    force: bool = False,
    backends: Sequence[str] | None = None,
    require: Sequence[str] = (),
    ort_provider: str = "CPUExecutionProvider",
    torch_device: str = "cpu",
    tf32: bool = False,
    tensorrt: BuildSettings | None = None,
    engine_cache: str | Path | None = None,
    save_engine: str | Path | None = None,
    thresholds: Thresholds | None = None,
    gate: GateOptions | None = None,
    load: Mapping[str, str | Path] | None = None,
    progress: Callable[[str], None] | None = None,
    model_class: str | None = None,
    trust: bool = False,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Report:
    """Compare `model` layer by layer across backends and return the Report.

    Args:
        model: a model file or `pkg.mod:factory` spec (see README, "Models"), or an nn.Module.
        input_shapes: "1x3x512x512" or "name:1x3x512x512" per input, for seeded random inputs.
        input_files: .npy/.npz/.pt files holding inputs (positional or by name).
        opset: the ONNX opset to export at (default 17); the report states the opset written.
        exporter: "auto" (an exporter that honours `opset`), "torchscript" or "dynamo".
        onnx: compare against this ONNX file instead of exporting one.
        save_onnx: keep the exported file here (refused if it exists, unless `force`).
        backends: which backends to run (default: torch, onnxruntime, and tensorrt where it
            can run); "torch" is the reference when present.
        require: backends whose absence is an error instead of a note (e.g. ["tensorrt"]).
        torch_device: where the PyTorch reference runs ("cpu", "cuda", "cuda:1").
        tf32: allow TF32 in the PyTorch reference on CUDA and in TensorRT (off: true FP32).
        tensorrt: TensorRT build settings (outputs marked, precision, ...); input shapes and
            `tf32` are filled in here.
        engine_cache: folder of cached TensorRT engines and timing cache.
        save_engine: write the TensorRT engine here (refused if it exists, unless `force`).
        thresholds: when a tensor counts as diverged (defaults: see `Thresholds`).
        gate: samples (a folder, N random inputs) and mIoU thresholds for the CI gate.
        load: backend -> recording from `trtdiff run --save`, compared instead of running it
            (the recorded inputs are used).
        progress: called with a short description as each long step starts (the CLI shows it).
        memory_bytes: reference tensors kept in RAM before spilling to disk.
        chunk_bytes: how many bytes of intermediates one backend run may return at once.
    """
    thresholds = thresholds or Thresholds()
    _check_thresholds(thresholds)
    gate = gate or GateOptions()
    gate.validate()
    if gate.num_samples and gate.num_samples > 1 and input_files:
        raise OptionError("--num-samples: random samples need --input-shape, not --input files; drop one")
    timings: dict[str, float] = {}
    notes: list[str] = []
    say = progress or (lambda _text: None)
    load = dict(load or {})
    if load and gate.many:
        raise OptionError("--load: a recording holds one sample; drop --inputs/--num-samples")
    folder = folder_samples(gate) if gate.inputs_dir else None
    first = next(folder) if folder is not None else None
    if load:
        first = GateSample("recorded", tuple(recorded_inputs(load).values()))
    say("loading the model")
    with timed(timings, "load"):
        source = load_source(model, model_class=model_class, trust=trust, onnx=onnx, input_shapes=input_shapes,
                             input_files=input_files, seed=seed,
                             first_feeds={f"input_{i}": v for i, v in enumerate(first.values)} if first else None)
    chosen = _check_backends(backends, require, source.has_torch, notes)
    chosen = tuple(dict.fromkeys((*chosen, *load)))
    if save_onnx is not None and source.given_graph is not None:
        raise OptionError("--save-onnx: nothing is exported when an ONNX file is given; drop one of them")
    save_path = check_new_file(save_onnx, force, "--save-onnx")
    engine_path = check_new_file(save_engine, force, "--save-engine")

    with tempfile.TemporaryDirectory(prefix="trtdiff-") as tmp, TensorStore(memory_bytes) as store:
        capture: TorchCapture | None = None
        if "torch" in chosen:
            assert source.loaded.module is not None
            say("running PyTorch, recording every op")
            with timed(timings, "torch"):
                capture = capture_reference(source.loaded.module, source.feeds, device=torch_device, tf32=tf32, store=store)
        say("exporting to ONNX" if source.given_graph is None else "reading the ONNX file")
        with timed(timings, "export"):
            graph, exporter_used = onnx_graph_for(source, opset=opset, exporter=exporter, save_path=save_path,
                                                  folder=Path(tmp), notes=notes)
        feeds = onnx_feeds(graph, source.feeds)
        pairing = None
        if capture is not None:
            assert source.loaded.module is not None
            with timed(timings, "pairing"):
                pairing = pair(graph, capture, {n for n, _ in source.loaded.module.named_modules()})
        runners: list[OnnxBackend] = []
        trt_summary: TensorRTSummary | None = None
        say("preparing backends (a TensorRT engine build can take minutes)")
        with timed(timings, "backends"):
            for name, path in load.items():
                runners.append(RecordedBackend(name, path, graph))
            if "onnxruntime" in chosen and "onnxruntime" not in load:
                from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend

                runners.append(OnnxRuntimeBackend(graph, provider=ort_provider))
            if "tensorrt" in chosen and "tensorrt" not in load:
                settings = replace(tensorrt or BuildSettings(), tf32=tf32, input_shapes=input_shapes_from(feeds))
                trt_runner, trt_summary = tensorrt_runner(graph, settings, engine_cache, engine_path, "tensorrt" in require)
                if trt_runner is not None:
                    runners.append(trt_runner)
                elif trt_summary is not None:
                    notes.append(f"TensorRT skipped: {trt_summary.reason}")
                    if engine_path is not None:
                        notes.append(f"--save-engine {engine_path}: nothing written; `trtdiff build` builds without running")
        backends_run = (("torch",) if capture is not None else ()) + tuple(r.name for r in runners)
        if len(backends_run) < 2:
            raise OptionError(
                f"only {', '.join(backends_run) or 'no backend'} can run here, and comparing needs two; "
                + ("give the PyTorch model as MODEL with --onnx FILE" if capture is None else "add --backends onnxruntime")
            )
        reference = backends_run[0]
        pair_order = [pair_key(a, b) for i, a in enumerate(backends_run) for b in backends_run[i + 1 :]]
        say(f"running {', '.join(r.name for r in runners)} and comparing every layer")
        with timed(timings, "run_and_compare"):
            metrics, first_outputs = _run_and_compare(graph, runners, feeds, capture, pairing, thresholds, chunk_bytes)
        trt_summary = ran_summary(runners) or trt_summary
        layers = _layers(graph, metrics, pairing, capture)
        divergence = first_divergence(layers, graph, pair_order)
        compared = {layer.tensor for layer in layers}

        stream = _sample_stream(gate, source, first, folder, input_shapes, input_files, seed, bool(load))
        with timed(timings, "samples"):
            results, segmentation = run_samples(_announced(stream, say, gate.num_samples), graph,
                                                source.loaded.module if capture is not None else None, runners,
                                                pair_order, thresholds, gate, torch_device, tf32, reference,
                                                first_outputs=first_outputs)
        checks = _checks(gate, layers, results, segmentation, thresholds, pair_order, reference, divergence)
        if store.spilled:
            notes.append(f"{store.spilled} reference tensors were spilled to disk (--memory-limit)")
        return Report(
            passed=all(check.passed for check in checks),
            model=source.loaded.source,
            onnx_path=str(save_path or source.given_graph.path) if (save_path or source.given_graph) else None,
            opset=graph.opset,
            exporter=exporter_used,
            backends=backends_run,
            reference=reference,
            inputs={name: tuple(int(d) for d in value.shape) for name, value in source.feeds.items()},
            thresholds=thresholds,
            first_divergence=divergence,
            layers=tuple(layers),
            not_compared=tuple(t for t in graph.node_outputs if t not in compared),
            pairing=_pairing_summary(graph, pairing),
            environment=_environment(runners, torch_device if capture is not None else None),
            notes=tuple(notes),
            timings={k: round(v, 4) for k, v in timings.items()},
            tensorrt=trt_summary,
            samples=_mark_failures(results, checks),
            checks=tuple(checks),
            segmentation=segmentation,
        )


def _sample_stream(gate: GateOptions, source: Source, first: GateSample | None, folder: Iterator[GateSample] | None,
                   input_shapes: Sequence[str], input_files: Sequence[str | Path], seed: int,
                   recorded: bool) -> Iterable[GateSample]:
    """The gate's samples: the recorded one, a folder's files, or seeded random inputs (sample 0 = the analysed one)."""
    if recorded and first is not None:
        return [first]
    if first is not None and folder is not None:
        return [first, *folder]

    def random_sample(index: int) -> tuple[np.ndarray, ...]:
        if index == 0:
            return tuple(source.feeds.values())
        built = make_inputs(list(source.input_names), shapes=list(input_shapes), files=[str(f) for f in input_files],
                            seed=seed + index, dtypes=source.dtypes or {})
        return tuple(built.values())

    return random_samples(gate, random_sample)


def _checks(gate: GateOptions, layers: Sequence[Layer], results: Sequence[SampleResult],
            segmentation: SegmentationSummary | None, thresholds: Thresholds, pairs: Sequence[str], reference: str,
            divergence: FirstDivergence | None) -> list[ThresholdCheck]:
    """Every check of this comparison: layers (one sample, or --per-layer), final outputs, mIoU."""
    checks: list[ThresholdCheck] = []
    if not gate.many or gate.per_layer:
        where = f"{divergence.onnx_node} ({divergence.op_type})" if divergence else None
        checks += layer_checks(layers, results[0].name if results else "input", pairs, where)
    checks += output_checks(results, thresholds, pairs)
    if segmentation is not None:
        checks += miou_checks(results, segmentation, gate, pairs, reference)
    elif gate.min_miou is not None or gate.max_miou_drop is not None:
        raise OptionError("--min-miou: no output has the (N, C, H, W) shape of segmentation scores; drop the option")
    return checks


def _mark_failures(results: Sequence[SampleResult], checks: Sequence[ThresholdCheck]) -> tuple[SampleResult, ...]:
    failed: dict[str, list[str]] = {}
    for check in checks:
        for name in check.failing_samples:
            failed.setdefault(name, []).append(check.id)
    return tuple(replace(r, failed=tuple(failed.get(r.name, ()))) for r in results)


def _announced(stream: Iterable[GateSample], say: Callable[[str], None], total: int | None) -> Iterator[GateSample]:
    for index, sample in enumerate(stream, start=1):
        say(f"final outputs of sample {index}{f'/{total}' if total else ''} ({sample.name})")
        yield sample


def _check_thresholds(thresholds: Thresholds) -> None:
    if not -1.0 <= thresholds.min_cosine <= 1.0:
        raise OptionError(f"--min-cosine {thresholds.min_cosine}: must be between -1 and 1, e.g. 0.9999")
    if thresholds.rtol < 0:
        raise OptionError(f"--rtol {thresholds.rtol}: must not be negative, e.g. 1e-3")
    if thresholds.max_abs is not None and thresholds.max_abs < 0:
        raise OptionError(f"--max-abs {thresholds.max_abs}: must not be negative, e.g. 1e-4")


def _check_backends(backends: Sequence[str] | None, require: Sequence[str], has_torch: bool, notes: list[str]) -> tuple[str, ...]:
    """The backends to try: as given, or torch (when there is a PyTorch model), onnxruntime, tensorrt."""
    for option, names in (("--backends", backends or ()), ("--require", require)):
        unknown = [b for b in names if b not in KNOWN_BACKENDS]
        if unknown:
            raise OptionError(f"{option} {','.join(names)}: unknown backend {unknown[0]!r}; choose from {', '.join(KNOWN_BACKENDS)}")
    chosen = tuple(dict.fromkeys(backends)) if backends else KNOWN_BACKENDS
    chosen = tuple(dict.fromkeys((*chosen, *require)))
    if "torch" in chosen and not has_torch:
        notes.append("MODEL is an ONNX file: only ONNX backends are compared")
        if "torch" in require:
            raise OptionError("--require torch: MODEL is an ONNX file; give the PyTorch model as MODEL and the file with --onnx")
        chosen = tuple(b for b in chosen if b != "torch")
    return chosen


def _run_and_compare(
    graph: GraphInfo,
    runners: Sequence[OnnxBackend],
    feeds: Mapping[str, np.ndarray],
    capture: TorchCapture | None,
    pairing: Pairing | None,
    thresholds: Thresholds,
    chunk_bytes: int,
) -> tuple[dict[str, dict[str, PairMetrics]], dict[str, dict[str, np.ndarray]] | None]:
    """Run every backend over the same chunks of tensors and compare each chunk as it arrives.

    Returns the metrics per tensor, and every backend's final outputs (kept for the gate, so
    the first sample is not run twice), or None where some backend did not return them all.
    """
    paired = pairing.pairs if pairing is not None else {}
    outputs = list(graph.graph_outputs)
    wanted = [t for t in graph.node_outputs if t in paired or len(runners) > 1 or t in outputs]
    sizes = {t: n for t in wanted if (n := graph.tensor_type(t).nbytes()) is not None}
    results: dict[str, dict[str, PairMetrics]] = {}
    kept: dict[str, dict[str, np.ndarray]] = {runner.name: {} for runner in runners}
    if capture is not None and len(capture.output_keys) == len(outputs):
        kept["torch"] = {tensor: capture.value(key) for tensor, key in zip(outputs, capture.output_keys, strict=True)}
    for group in chunk_names(wanted, sizes, chunk_bytes):
        values = {runner.name: fetch(runner, feeds, group) for runner in runners}
        for name, tensors in values.items():
            kept[name].update((t, v) for t, v in tensors.items() if t in outputs)
        for tensor in group:
            entry: dict[str, PairMetrics] = {}
            if capture is not None and tensor in paired:
                ref = capture.value(paired[tensor].key)
                for runner in runners:
                    if tensor in values[runner.name]:
                        entry[pair_key("torch", runner.name)] = compare_tensors(ref, values[runner.name][tensor], thresholds)
            for i, a in enumerate(runners):
                for b in runners[i + 1 :]:
                    if tensor in values[a.name] and tensor in values[b.name]:
                        entry[pair_key(a.name, b.name)] = compare_tensors(values[a.name][tensor], values[b.name][tensor], thresholds)
            if entry:
                results[tensor] = entry
        del values
    complete = all(set(outputs) <= set(tensors) for tensors in kept.values()) and (capture is None or "torch" in kept)
    return results, kept if complete else None


def _layers(
    graph: GraphInfo,
    metrics: Mapping[str, dict[str, PairMetrics]],
    pairing: Pairing | None,
    capture: TorchCapture | None,
) -> list[Layer]:
    outputs = set(graph.graph_outputs)
    layers: list[Layer] = []
    for tensor in graph.node_outputs:
        if tensor not in metrics:
            continue
        node = graph.node_of(tensor)
        assert node is not None
        torch_pair = pairing.pairs.get(tensor) if pairing is not None else None
        module = pairing.node_modules.get(node.name) if pairing is not None else None
        if module is None and torch_pair is not None:
            module = torch_pair.module_path
        tensor_type = graph.tensor_type(tensor)
        shape = tuple(int(d) if d is not None else -1 for d in (tensor_type.shape or ()))
        if torch_pair is not None and capture is not None:
            shape = tuple(capture.value(torch_pair.key).shape)
        layers.append(
            Layer(
                tensor=tensor,
                onnx_node=node.name,
                op_type=node.op_type,
                module=module,
                shape=shape,
                dtype=str(tensor_type.dtype) if tensor_type.dtype is not None else "unknown",
                pairs=dict(metrics[tensor]),
                is_output=tensor in outputs,
                torch_op=torch_pair.torch_op if torch_pair else None,
                pairing=torch_pair.method if torch_pair else None,
            )
        )
    return layers


def _pairing_summary(graph: GraphInfo, pairing: Pairing | None) -> PairingSummary:
    float_tensors = [t for t in graph.node_outputs if graph.tensor_type(t).is_float and t in graph.data_tensors]
    by_method: dict[str, int] = {}
    for torch_pair in (pairing.pairs.values() if pairing is not None else ()):
        by_method[torch_pair.method] = by_method.get(torch_pair.method, 0) + 1
    return PairingSummary(
        onnx_tensors=len(graph.node_outputs),
        float_tensors=len(float_tensors),
        paired_with_torch=len(pairing.pairs) if pairing is not None else 0,
        by_method=by_method,
    )


def _environment(runners: Sequence[OnnxBackend], torch_device: str | None) -> dict[str, str]:
    import onnx

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "onnx": onnx.__version__,
    }
    if torch_device is not None:
        env["torch_device"] = torch_device
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(torch_device if torch_device and torch_device.startswith("cuda") else "cuda"))
    for runner in runners:
        env[runner.name] = runner.describe()
    return env
