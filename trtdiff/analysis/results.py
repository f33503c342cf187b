"""Turn what the engine compared into the Report's parts: layers, samples, pairing, environment."""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from trtdiff.analysis.segmentation import SegmentationTally, segmentation_output
from trtdiff.errors import InputError, OnnxFileError
from trtdiff.report import Layer, PairingSummary, SampleResult

if TYPE_CHECKING:
    from trtdiff.analysis.engine import Compared
    from trtdiff.backends.base import OnnxBackend
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.pairing.pairs import Pairing
    from trtdiff.report import BackendPair, PairingMethod, PairMetrics, SegmentationSummary, ThresholdCheck
    from trtdiff.source.onnx_graph import GraphInfo


def build_layers(
    graph: GraphInfo,
    metrics: Mapping[str, dict[BackendPair, PairMetrics]],
    pairing: Pairing | None,
    capture: TorchCapture | None,
) -> list[Layer]:
    """One Layer per compared ONNX tensor, in topological order (numbered from 1), with its PyTorch module and op."""
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
        if torch_pair is not None and capture is not None and pairing is not None:
            held = capture.shape_of(torch_pair.key)  # also of a value streamed, not held
            shape = held if held is not None else _derived_shape(pairing, capture, torch_pair.key, shape)
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
                index=len(layers) + 1,
            )
        )
    return layers


def _derived_shape(pairing: Pairing, capture: TorchCapture, key: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A derived value's shape, computed from the capture; the graph's `shape` where the values it is computed
    from were not held (a recording that only summarized them: `--capture stats`)."""
    try:
        return tuple(pairing.value(capture, key).shape)
    except KeyError:
        return shape


def sample_results(
    compared: Iterable[Compared],
    outputs: Sequence[str],
    pairs: Sequence[BackendPair],
    reference: str,
    ignore_index: int | None,
) -> tuple[list[SampleResult], SegmentationSummary | None]:
    """Final-output metrics of every sample, with mIoU where an output is segmentation scores."""
    results: list[SampleResult] = []
    tally: SegmentationTally | None = None
    seg_output: str | None = None
    for item in compared:
        values = item.outputs
        per_output = {tensor: dict(item.metrics.get(tensor, {})) for tensor in outputs}
        if seg_output is None:
            ref_values = values.get(reference, {})
            seg_output = next((t for t in outputs if t in ref_values and segmentation_output(ref_values[t].shape)), "")
            if seg_output:
                tally = SegmentationTally(int(values[reference][seg_output].shape[1]), ignore_index)
        agreement: dict[BackendPair, float] = {}
        changed: dict[BackendPair, float] = {}
        against: dict[str, float] = {}
        if tally is not None and seg_output:
            logits = {backend: v[seg_output] for backend, v in values.items() if seg_output in v}
            try:
                agreement, changed, against = tally.add(logits, pairs, item.sample.label)
            except InputError as error:
                raise InputError(f"the mask of {item.sample.name}: {error.template}", parameter="labels_dir") from error
        results.append(SampleResult(item.sample.name, per_output, agreement, changed, against))
    return results, (tally.summary(reference) if tally is not None else None)


def mark_failures(results: Sequence[SampleResult], checks: Sequence[ThresholdCheck]) -> tuple[SampleResult, ...]:
    """Each sample with the ids of the checks it fails."""
    failed: dict[str, list[str]] = {}
    for check in checks:
        for name in check.failing_samples:
            failed.setdefault(name, []).append(check.id)
    return tuple(dataclasses.replace(r, failed=tuple(failed.get(r.name, ()))) for r in results)


STRUCTURE_METHODS = frozenset({"op", "scope", "folded", "module", "output"})
"""Pairs made by structure alone: their values are compared, never used to decide the pair."""


def pairing_summary(graph: GraphInfo, pairing: Pairing | None) -> PairingSummary:
    """How many float tensors got a PyTorch counterpart, and how; the other tensors counted by kind."""
    pairs = pairing.pairs if pairing is not None else {}
    kinds = tensor_kinds(graph)
    float_tensors = [t for t in graph.node_outputs if kinds[t] == "float"]
    other: dict[str, int] = {}
    for tensor in graph.node_outputs:
        if kinds[tensor] != "float":
            other[kinds[tensor]] = other.get(kinds[tensor], 0) + 1
    by_method: dict[PairingMethod, int] = {}
    for torch_pair in pairs.values():
        by_method[torch_pair.method] = by_method.get(torch_pair.method, 0) + 1
    return PairingSummary(
        onnx_tensors=len(graph.node_outputs),
        float_tensors=len(float_tensors),
        paired_with_torch=len(pairs),
        by_method=by_method,
        float_paired=sum(t in pairs for t in float_tensors),
        other_tensors=other,
        structure_only=sum(t in pairs and pairs[t].method in STRUCTURE_METHODS for t in float_tensors),
    )


_NOT_COMPUTED = frozenset(
    {"QuantizeLinear", "DequantizeLinear", "TRT_FP8QuantizeLinear", "TRT_FP8DequantizeLinear", "Cast", "CastLike"}
)
"""Ops whose float outputs stand for no value the model computes: a quantizer's grid (a Q/DQ pair, in float8 too)
and a converter's type change. A quantized or converted export of the model holds many of them."""


def check_export_of_model(graph: GraphInfo, pairing: Pairing, path: str) -> None:
    """Refuse a given ONNX file fewer than half of whose computed float tensors pair with a PyTorch value.

    An export of the model pairs nearly all of them (every one in the architectures the tests
    hold, 90% at least in transformer blocks, at FP32 and FP16); another network's file pairs a
    few by chance (1 of 82 to 14 of 52 measured), and a culprit named from such a pairing would
    be invented. Q/DQ and Cast outputs are not counted: ModelOpt's FP8 file of a transformer
    block holds 46 of them, which pair with nothing.
    """
    kinds = tensor_kinds(graph)
    computed = [
        t
        for t in graph.node_outputs
        if kinds[t] == "float" and (node := graph.node_of(t)) is not None and node.op_type not in _NOT_COMPUTED
    ]
    paired = sum(t in pairing.pairs for t in computed)
    if computed and 2 * paired < len(computed):
        raise OnnxFileError(
            f"does not look like an export of this model: {paired} of {len(computed)} float tensors it computes "
            "pair with a PyTorch value (an export of it pairs at least half); give the file exported from this "
            "model, or leave the option out and trtdiff exports it",
            parameter="onnx",
            value=path,
        )


def tensor_kinds(graph: GraphInfo) -> dict[str, str]:
    """Each node output's kind: float (worth pairing), identity, constant, shape or integer."""
    from_shapes: set[str] = set()
    kinds: dict[str, str] = {}
    for node in graph.nodes:
        shaped = node.op_type in ("Shape", "Size") or any(t in from_shapes for t in node.inputs)
        for tensor in (t for t in node.outputs if t):
            if shaped:
                from_shapes.add(tensor)
            if node.op_type == "Identity":
                kinds[tensor] = "identity"
            elif tensor not in graph.data_tensors:
                kinds[tensor] = "shape" if shaped else "constant"
            else:
                kinds[tensor] = "float" if graph.tensor_type(tensor).is_float else "integer"
    return kinds


def environment(backends: Sequence[OnnxBackend], torch_device: str | None) -> dict[str, str]:
    """Versions and devices of what ran, for the report.

    The GPU is named where the PyTorch reference ran on it (TensorRT names its own in the
    report's `tensorrt`): asking CUDA on a CPU comparison would start it for nothing (0.2 s
    on the H200 machine). An ONNX-only comparison reads torch's version from its metadata.
    """
    import importlib.metadata
    import sys

    import onnx

    ran_torch = "torch" in sys.modules
    if ran_torch:
        import torch

    env = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__ if ran_torch else importlib.metadata.version("torch"),
        "onnx": onnx.__version__,
    }
    if torch_device is not None:
        env["torch_device"] = torch_device
    if ran_torch and torch_device is not None and torch_device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(torch.device(torch_device))
    for backend in backends:
        env[backend.name] = backend.describe()
    return env
