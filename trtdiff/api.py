"""`trtdiff.compare`: the whole pipeline, from a PyTorch model to a Report.

load the model -> build inputs -> capture the PyTorch reference -> export (or take the
given ONNX file) -> pair tensors -> run each ONNX backend chunk by chunk, comparing as the
chunks arrive -> find the first divergence.
"""

from __future__ import annotations

import platform
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
import numpy as np

import torch

from trtdiff.backends.base import DEFAULT_CHUNK_BYTES, OnnxBackend, chunk_names
from trtdiff.backends.torch_backend import TorchCapture, capture as capture_reference
from trtdiff.errors import InputError, OptionError
from trtdiff.export import export_onnx
from trtdiff.inputs import make_inputs
from trtdiff.loading import LoadedModel, from_module, load_model
from trtdiff.localize import first_divergence
from trtdiff.metrics import compare_tensors
from trtdiff.onnx_graph import GraphInfo, load_graph
from trtdiff.pairing import Pairing, pair
from trtdiff.report import Layer, PairingSummary, PairMetrics, Report, Thresholds, pair_key
from trtdiff.store import DEFAULT_MEMORY_BYTES, TensorStore

KNOWN_BACKENDS = ("torch", "onnxruntime")
DEFAULT_BACKENDS = ("torch", "onnxruntime")
DEFAULT_OPSET = 17


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
    backends: Sequence[str] = DEFAULT_BACKENDS,
    ort_provider: str = "CPUExecutionProvider",
    torch_device: str = "cpu",
    tf32: bool = False,
    thresholds: Thresholds | None = None,
    model_class: str | None = None,
    trust: bool = False,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Report:
    """Compare `model` layer by layer across `backends` and return the Report.

    Args:
        model: a model file or `pkg.mod:factory` spec (see README, "Models"), or an nn.Module.
        input_shapes: "1x3x512x512" or "name:1x3x512x512" per input, for seeded random inputs.
        input_files: .npy/.npz/.pt files holding inputs (positional or by name).
        opset: the ONNX opset to export at (default 17); the report states the opset written.
        exporter: "auto" (an exporter that honours `opset`), "torchscript" or "dynamo".
        onnx: compare against this ONNX file instead of exporting one.
        save_onnx: keep the exported file here (refused if it exists, unless `force`).
        backends: which backends to run; "torch" is the reference when present.
        torch_device: where the PyTorch reference runs ("cpu", "cuda", "cuda:1").
        tf32: allow TF32 in the PyTorch reference on CUDA (off: true FP32).
        thresholds: when a tensor counts as diverged (defaults: see `Thresholds`).
        memory_bytes: reference tensors kept in RAM before spilling to disk.
        chunk_bytes: how many bytes of intermediates one backend run may return at once.
    """
    thresholds = thresholds or Thresholds()
    _check_thresholds(thresholds)
    backends = _check_backends(backends)
    timings: dict[str, float] = {}
    notes: list[str] = []
    with _timed(timings, "load"):
        loaded = _load(model, model_class=model_class, trust=trust)
    if loaded.kind == "onnx":
        if onnx is not None:
            raise OptionError(f"--onnx {onnx}: MODEL is already an ONNX file; give the PyTorch model as MODEL")
        onnx = loaded.onnx_path
        if "torch" in backends:
            backends = tuple(b for b in backends if b != "torch")
            notes.append("MODEL is an ONNX file: only ONNX backends are compared")
    onnx_backends = [b for b in backends if b != "torch"]
    if len(backends) < 2:
        raise OptionError(
            f"--backends {','.join(backends)}: comparing needs two backends; give the PyTorch model as MODEL "
            "(with --onnx FILE to use this ONNX file) or add another backend"
        )
    if save_onnx is not None and onnx is not None:
        raise OptionError("--save-onnx: nothing is exported when --onnx is given; drop one of them")
    save_path = _check_save_path(save_onnx, force)

    with tempfile.TemporaryDirectory(prefix="trtdiff-") as tmp, TensorStore(memory_bytes) as store:
        given_graph = load_graph(onnx) if onnx is not None else None
        names = given_graph.graph_inputs if given_graph is not None else loaded.input_names
        dtypes = {} if given_graph is None else {
            n: dtype for n in names if (dtype := given_graph.tensor_type(n).dtype) is not None
        }
        feeds = make_inputs(list(names), shapes=list(input_shapes), files=[str(f) for f in input_files], seed=seed,
                            dtypes=dtypes)
        capture: TorchCapture | None = None
        if "torch" in backends:
            assert loaded.module is not None
            with _timed(timings, "torch"):
                capture = capture_reference(loaded.module, feeds, device=torch_device, tf32=tf32, store=store)
        if given_graph is not None:
            graph, exporter_used = given_graph, "given"
        else:
            target = save_path if save_path is not None else Path(tmp) / "model.onnx"
            with _timed(timings, "export"):
                result = export_onnx(loaded, feeds, opset=opset or DEFAULT_OPSET, exporter=exporter, path=target)
            graph, exporter_used = load_graph(result.path), result.exporter
            notes.append(f"exported with the {result.exporter} exporter at opset {result.opset}")
        if given_graph is not None and opset is not None and given_graph.opset != opset:
            notes.append(f"--opset {opset} ignored: the given ONNX file declares opset {given_graph.opset}")
        onnx_feeds = _onnx_feeds(graph, feeds)
        pairing = None
        if capture is not None:
            assert loaded.module is not None
            with _timed(timings, "pairing"):
                pairing = pair(graph, capture, {n for n, _ in loaded.module.named_modules()})
        with _timed(timings, "backends"):
            runners = [_make_backend(name, graph, ort_provider) for name in onnx_backends]
        reference = "torch" if capture is not None else onnx_backends[0]
        pair_order = [pair_key(reference, b.name) for b in runners if b.name != reference]
        pair_order += [pair_key(a.name, b.name) for i, a in enumerate(runners) for b in runners[i + 1 :] if a.name != reference]
        with _timed(timings, "run_and_compare"):
            metrics = _run_and_compare(graph, runners, onnx_feeds, capture, pairing, thresholds, chunk_bytes)
        layers = _layers(graph, metrics, pairing, capture)
        divergence = first_divergence(layers, graph, pair_order)
        compared = {layer.tensor for layer in layers}
        not_compared = tuple(t for t in graph.node_outputs if t not in compared)
        if capture is not None and store.spilled:
            notes.append(f"{store.spilled} reference tensors were spilled to disk (--memory-limit)")
        report = Report(
            passed=divergence is None,
            model=loaded.source,
            onnx_path=str(save_path or onnx) if (save_path or onnx) else None,
            opset=graph.opset,
            exporter=exporter_used,
            backends=tuple(backends),
            reference=reference,
            inputs={name: tuple(int(d) for d in value.shape) for name, value in feeds.items()},
            thresholds=thresholds,
            first_divergence=divergence,
            layers=tuple(layers),
            not_compared=not_compared,
            pairing=_pairing_summary(graph, pairing),
            environment=_environment(runners, torch_device),
            notes=tuple(notes),
            timings={k: round(v, 4) for k, v in timings.items()},
        )
    return report


def _load(model: str | Path | torch.nn.Module, *, model_class: str | None, trust: bool) -> LoadedModel:
    if isinstance(model, (str, Path)):
        return load_model(str(model), model_class=model_class, trust=trust)
    return from_module(model)


def _check_thresholds(thresholds: Thresholds) -> None:
    if not -1.0 <= thresholds.min_cosine <= 1.0:
        raise OptionError(f"--min-cosine {thresholds.min_cosine}: must be between -1 and 1, e.g. 0.9999")
    if thresholds.rtol < 0:
        raise OptionError(f"--rtol {thresholds.rtol}: must not be negative, e.g. 1e-3")
    if thresholds.max_abs is not None and thresholds.max_abs < 0:
        raise OptionError(f"--max-abs {thresholds.max_abs}: must not be negative, e.g. 1e-4")


def _check_backends(backends: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(b.strip() for b in backends if b.strip()))
    unknown = [b for b in chosen if b not in KNOWN_BACKENDS]
    if unknown:
        raise OptionError(f"--backends {','.join(backends)}: unknown backend {unknown[0]!r}; choose from {', '.join(KNOWN_BACKENDS)}")
    return chosen


def _check_save_path(save_onnx: str | Path | None, force: bool) -> Path | None:
    if save_onnx is None:
        return None
    path = Path(save_onnx)
    if path.exists() and not force:
        raise OptionError(f"--save-onnx {path}: the file exists; choose another path or pass --force to overwrite it")
    if not path.parent.is_dir():
        raise OptionError(f"--save-onnx {path}: folder {path.parent} does not exist; create it first")
    return path


def _onnx_feeds(graph: GraphInfo, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs keyed by the ONNX file's input names, checked against its static dimensions."""
    values = list(feeds.values())
    if set(graph.graph_inputs) <= set(feeds):
        named = {name: feeds[name] for name in graph.graph_inputs}
    elif len(graph.graph_inputs) == len(values):
        named = dict(zip(graph.graph_inputs, values, strict=True))
    else:
        raise InputError(
            f"{graph.path}: the ONNX file has inputs {', '.join(graph.graph_inputs)} but the model was given "
            f"{', '.join(feeds)}; check that --onnx belongs to this model"
        )
    for name, value in named.items():
        expected = graph.tensor_type(name)
        if expected.shape is None:
            continue
        fits = len(expected.shape) == value.ndim and all(d is None or d == v for d, v in zip(expected.shape, value.shape))
        if not fits:
            want = "x".join("?" if d is None else str(d) for d in expected.shape)
            got = "x".join(map(str, value.shape))
            raise InputError(f"input {name}: shape {got} does not fit {graph.path.name}, which expects {want}; use --input-shape {name}:{want.replace('?', '1')}")
    return named


def _make_backend(name: str, graph: GraphInfo, ort_provider: str) -> OnnxBackend:
    if name == "onnxruntime":
        from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend

        return OnnxRuntimeBackend(graph, provider=ort_provider)
    raise OptionError(f"--backends: {name} is not an ONNX backend")


def _run_and_compare(
    graph: GraphInfo,
    runners: Sequence[OnnxBackend],
    feeds: Mapping[str, np.ndarray],
    capture: TorchCapture | None,
    pairing: Pairing | None,
    thresholds: Thresholds,
    chunk_bytes: int,
) -> dict[str, dict[str, PairMetrics]]:
    """Run every backend over the same chunks of tensors and compare each chunk as it arrives."""
    paired = pairing.pairs if pairing is not None else {}
    wanted = [t for t in graph.node_outputs if t in paired or len(runners) > 1]
    sizes = {t: n for t in wanted if (n := graph.tensor_type(t).nbytes()) is not None}
    results: dict[str, dict[str, PairMetrics]] = {}
    for group in chunk_names(wanted, sizes, chunk_bytes):
        values = {runner.name: _fetch(runner, feeds, group) for runner in runners}
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
    return results


def _fetch(runner: OnnxBackend, feeds: Mapping[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """One chunk's tensors from one backend (the chunk is already sized; no further split)."""
    values: dict[str, np.ndarray] = {}
    for part in runner.run(feeds, names, max_bytes=1 << 62):
        values.update(part)
    return values


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


def _environment(runners: Sequence[OnnxBackend], torch_device: str) -> dict[str, str]:
    import onnx

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "torch_device": torch_device,
    }
    if torch_device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(torch.device(torch_device))
    for runner in runners:
        env[runner.name] = runner.describe()
    return env


@contextmanager
def _timed(timings: dict[str, float], step: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[step] = timings.get(step, 0.0) + time.perf_counter() - start
