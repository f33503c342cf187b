"""The CI gate: thresholds over many samples, on final outputs, every layer, and mIoU.

A single comparison gates every layer (the first divergence fails it). Over several samples
(`--inputs DIR`, `--num-samples N`) the first sample is still compared layer by layer, for
localization, and every sample's final outputs are gated; `--per-layer` gates the layers too.
Each (threshold, backend pair) is one `ThresholdCheck`: a JUnit test case, a line in the
Markdown summary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from trtdiff.backends.base import OnnxBackend, fetch
from trtdiff.backends.torch_backend import run_outputs
from trtdiff.errors import InputError, OptionError
from trtdiff.metrics import compare_tensors
from trtdiff.onnx_graph import GraphInfo
from trtdiff.prepare import onnx_feeds
from trtdiff.report import Layer, SampleResult, SegmentationSummary, ThresholdCheck, Thresholds


@dataclass(frozen=True)
class GateOptions:
    """Where the samples come from and the mIoU thresholds."""

    inputs_dir: str | None = None
    labels_dir: str | None = None
    num_samples: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    size: tuple[int, int] | None = None
    ignore_index: int | None = None
    min_miou: float | None = None
    max_miou_drop: float | None = None
    per_layer: bool = False

    def validate(self) -> None:
        if self.inputs_dir is not None and self.num_samples is not None:
            raise OptionError("--num-samples: random samples and --inputs DIR exclude each other; drop one")
        if self.num_samples is not None and self.num_samples < 1:
            raise OptionError(f"--num-samples {self.num_samples}: must be at least 1")
        if self.labels_dir is not None and self.inputs_dir is None:
            raise OptionError("--labels: masks are paired with the images of --inputs DIR; give --inputs too")
        for option, value in (("--min-miou", self.min_miou), ("--max-miou-drop", self.max_miou_drop)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise OptionError(f"{option} {value}: must be between 0 and 1, e.g. {option} 0.9")
        if self.max_miou_drop is not None and self.labels_dir is None:
            raise OptionError("--max-miou-drop: the drop is measured against ground truth; give --labels DIR")

    @property
    def many(self) -> bool:
        return self.inputs_dir is not None or self.num_samples is not None


@dataclass(frozen=True)
class GateSample:
    """One sample to compare: its name, model inputs in order, and its label mask if any."""

    name: str
    values: tuple[np.ndarray, ...]
    label: np.ndarray | None = None


def folder_samples(options: GateOptions) -> Iterator[GateSample]:
    """The files of --inputs DIR (with their --labels masks), read one at a time."""
    from trtdiff.datasets import iter_samples

    for sample in iter_samples(options.inputs_dir, labels=options.labels_dir, mean=options.mean, std=options.std,
                               size=options.size, ignore_index=options.ignore_index, option="--inputs"):
        yield GateSample(sample.name, (sample.image,), sample.label)


def random_samples(options: GateOptions, make: Callable[[int], tuple[np.ndarray, ...]]) -> Iterator[GateSample]:
    """--num-samples N inputs made by `make(index)` (one, named "input", without the option)."""
    for index in range(options.num_samples or 1):
        yield GateSample(f"sample-{index}" if options.many else "input", make(index))


def segmentation_output(shape: Sequence[int]) -> bool:
    """Whether an output of this shape is per-pixel class scores (N, C, H, W) with C > 1."""
    return len(shape) == 4 and shape[1] > 1


class SegmentationTally:
    """Confusion matrices accumulated over samples: agreement per pair, against labels per backend."""

    def __init__(self, num_classes: int, ignore_index: int | None) -> None:
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        self.agreement: dict[str, np.ndarray] = {}
        self.labels: dict[str, np.ndarray] = {}
        self.changed: dict[str, list[int]] = {}

    def add(self, logits: Mapping[str, np.ndarray], pairs: Sequence[str], label: np.ndarray | None) -> tuple[dict, dict, dict]:
        """Add one sample's logits per backend; returns its (agreement mIoU, changed share, label mIoU)."""
        from trtdiff.segmentation import SegmentationScore, argmax_masks, confusion_matrix

        masks = {backend: argmax_masks(value) for backend, value in logits.items()}
        agreement, changed, against = {}, {}, {}
        for key in pairs:
            reference, candidate = key.split("~")
            if reference not in masks or candidate not in masks:
                continue
            confusion = confusion_matrix(masks[candidate], masks[reference], self.num_classes)
            self.agreement[key] = self.agreement.get(key, 0) + confusion
            differ = int((masks[candidate] != masks[reference]).sum())
            total, seen = self.changed.setdefault(key, [0, 0]), masks[reference].size
            total[0] += differ
            total[1] += seen
            agreement[key] = SegmentationScore.from_confusion(confusion).miou
            changed[key] = differ / seen if seen else 0.0
        if label is not None:
            for backend, mask in masks.items():
                confusion = confusion_matrix(mask, label, self.num_classes, self.ignore_index)
                self.labels[backend] = self.labels.get(backend, 0) + confusion
                against[backend] = SegmentationScore.from_confusion(confusion).miou
        return agreement, changed, against

    def summary(self, reference: str) -> SegmentationSummary:
        from trtdiff.segmentation import SegmentationScore

        agreement = {k: SegmentationScore.from_confusion(c) for k, c in self.agreement.items()}
        labels = {k: SegmentationScore.from_confusion(c) for k, c in self.labels.items()}
        drop = {b: labels[reference].miou - s.miou for b, s in labels.items() if b != reference and reference in labels}
        return SegmentationSummary(
            num_classes=self.num_classes,
            ignore_index=self.ignore_index,
            agreement_miou={k: s.miou for k, s in agreement.items()},
            agreement_per_class={k: s.per_class for k, s in agreement.items()},
            changed_pixels={k: (d / n if n else 0.0) for k, (d, n) in self.changed.items()},
            label_miou={k: s.miou for k, s in labels.items()},
            label_per_class={k: s.per_class for k, s in labels.items()},
            miou_drop=drop,
        )


def output_checks(samples: Sequence[SampleResult], thresholds: Thresholds, pairs: Sequence[str]) -> list[ThresholdCheck]:
    """Cosine, relative and (if set) absolute error of every sample's final outputs, per pair."""
    checks: list[ThresholdCheck] = []
    rules = [("cosine", "min-cosine", thresholds.min_cosine, min), ("rel_err", "rtol", thresholds.rtol, max)]
    if thresholds.max_abs is not None:
        rules.append(("max_abs", "max-abs", thresholds.max_abs, max))
    for key in pairs:
        figures = [(s.name, m) for s in samples for per_pair in s.outputs.values() if (m := per_pair.get(key)) is not None]
        if not figures:
            continue
        for metric, option, limit, pick in rules:
            values = [(name, _value(m, metric)) for name, m in figures]
            failing = tuple(dict.fromkeys(name for name, v in values if _breaks(v, limit, pick is min)))
            worst_name, worst = _worst(values, pick)
            checks.append(ThresholdCheck(
                id=f"outputs/{option}/{key}", metric=metric, scope="outputs", pair=key, limit=limit, worst=worst,
                worst_sample=worst_name, passed=not failing, failing_samples=failing,
                message=f"{option} {limit:g} on final outputs of {len(samples)} sample(s): worst {metric} {worst:.6g} ({worst_name})",
            ))
    return checks


def layer_checks(layers: Sequence[Layer], sample: str, pairs: Sequence[str], first: str | None) -> list[ThresholdCheck]:
    """Every compared layer of `sample` agrees, per pair (the single-comparison gate)."""
    checks: list[ThresholdCheck] = []
    for key in pairs:
        metrics = [m for layer in layers if (m := layer.pairs.get(key)) is not None]
        if not metrics:
            continue
        diverged = [m for m in metrics if m.diverged]
        worst = min((m.cosine for m in metrics), key=lambda v: -math.inf if math.isnan(v) else v)
        message = f"{len(diverged)} of {len(metrics)} layers diverge; lowest cosine {worst:.6g}"
        if diverged and first:
            message += f"; first divergence {first}"
        checks.append(ThresholdCheck(
            id=f"layers/{key}", metric="divergence", scope="layers", pair=key, limit=0.0, worst=worst,
            worst_sample=sample, passed=not diverged, failing_samples=(sample,) if diverged else (), message=message,
        ))
    return checks


def miou_checks(samples: Sequence[SampleResult], summary: SegmentationSummary, options: GateOptions,
                pairs: Sequence[str], reference: str) -> list[ThresholdCheck]:
    """--min-miou against labels (or agreement without them) and --max-miou-drop, per candidate."""
    checks: list[ThresholdCheck] = []
    candidates = [key.split("~")[1] for key in pairs if key.startswith(reference + "~")]
    if options.min_miou is not None:
        labelled = bool(summary.label_miou)
        for backend, key in ((c, f"{reference}~{c}") for c in candidates):
            figure = summary.label_miou.get(backend) if labelled else summary.agreement_miou.get(key)
            if figure is None:
                continue
            per_sample = [(s.name, s.label_miou.get(backend) if labelled else s.agreement_miou.get(key)) for s in samples]
            failing = tuple(name for name, v in per_sample if v is not None and v < options.min_miou)
            scope = "labels" if labelled else "agreement"
            worst_name, worst = _worst([(n, v) for n, v in per_sample if v is not None], min)
            checks.append(ThresholdCheck(
                id=f"{scope}/min-miou/{backend if labelled else key}", metric="miou", scope=scope,
                pair=backend if labelled else key, limit=options.min_miou, worst=figure, worst_sample=worst_name,
                passed=not (figure < options.min_miou), failing_samples=failing,
                message=f"mIoU {figure:.4f} {'against labels' if labelled else f'agreement with {reference}'} "
                        f"(min {options.min_miou:g}); worst sample {worst_name} {worst:.4f}",
            ))
    if options.max_miou_drop is not None:
        for backend, drop in summary.miou_drop.items():
            checks.append(ThresholdCheck(
                id=f"labels/max-miou-drop/{backend}", metric="miou_drop", scope="labels", pair=backend,
                limit=options.max_miou_drop, worst=drop, worst_sample=None, passed=not (drop > options.max_miou_drop),
                message=f"mIoU drop {drop:.4f} relative to {reference} (max {options.max_miou_drop:g}): "
                        f"{summary.label_miou.get(reference, float('nan')):.4f} -> {summary.label_miou[backend]:.4f}",
            ))
    return checks


def _value(metrics, metric: str) -> float:  # noqa: ANN001
    return float(getattr(metrics, metric))


def _breaks(value: float, limit: float, is_minimum: bool) -> bool:
    if math.isnan(value):
        return True
    return value < limit if is_minimum else value > limit


def _worst(values: Sequence[tuple[str, float]], pick) -> tuple[str | None, float]:  # noqa: ANN001
    if not values:
        return None, float("nan")
    nan = [(n, v) for n, v in values if math.isnan(v)]
    if nan:
        return nan[0]
    return pick(values, key=lambda item: item[1])


def _sample_outputs(sample: GateSample, graph: GraphInfo, module: torch.nn.Module | None, runners: Sequence[OnnxBackend],
                    torch_device: str, tf32: bool) -> dict[str, dict[str, np.ndarray]]:
    """Every backend's final outputs on one sample, by ONNX output name."""
    outputs = list(graph.graph_outputs)
    feeds = onnx_feeds(graph, dict(zip(graph.graph_inputs, sample.values)))
    values: dict[str, dict[str, np.ndarray]] = {}
    if module is not None:
        flat = run_outputs(module, sample.values, device=torch_device, tf32=tf32)
        if len(flat) == len(outputs):
            values["torch"] = dict(zip(outputs, flat, strict=True))
    for runner in runners:
        values[runner.name] = fetch(runner, feeds, outputs)
    return values


def run_samples(
    stream: Iterable[GateSample], graph: GraphInfo, module: torch.nn.Module | None, runners: Sequence[OnnxBackend],
    pairs: Sequence[str], thresholds: Thresholds, gate: GateOptions, torch_device: str, tf32: bool, reference: str,
    first_outputs: Mapping[str, Mapping[str, np.ndarray]] | None = None,
) -> tuple[list[SampleResult], SegmentationSummary | None]:
    """Final outputs of every backend on every sample, compared per pair, with mIoU for segmentation.

    `first_outputs` (backend -> output tensor -> value) are the first sample's outputs when the
    layer-by-layer comparison already produced them, so that sample is not run again.
    """
    outputs = list(graph.graph_outputs)
    results: list[SampleResult] = []
    tally: SegmentationTally | None = None
    seg_output: str | None = None
    for index, sample in enumerate(stream):
        if index == 0 and first_outputs is not None:
            values = {backend: dict(tensors) for backend, tensors in first_outputs.items()}
        else:
            values = _sample_outputs(sample, graph, module, runners, torch_device, tf32)
        per_output = {
            tensor: {key: compare_tensors(values[a][tensor], values[b][tensor], thresholds)
                     for key in pairs for a, b in [key.split("~")] if tensor in values.get(a, {}) and tensor in values.get(b, {})}
            for tensor in outputs
        }
        if seg_output is None:
            seg_output = next((t for t in outputs if reference in values and segmentation_output(values[reference][t].shape)), "")
            if seg_output:
                tally = SegmentationTally(int(values[reference][seg_output].shape[1]), gate.ignore_index)
        agreement = changed = against = {}
        if tally is not None and seg_output:
            try:
                agreement, changed, against = tally.add({b: v[seg_output] for b, v in values.items()}, pairs, sample.label)
            except InputError as error:
                raise InputError(f"--labels: the mask of {sample.name}: {error}") from error
        results.append(SampleResult(sample.name, per_output, agreement, changed, against))
    summary = tally.summary(reference) if tally is not None else None
    return results, summary
