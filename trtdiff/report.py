"""The result of a comparison: frozen dataclasses that round-trip through JSON.

Renderers read a `Report` and nothing else. The JSON layout is documented in the README
(section "JSON report") and versioned by `SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from trtdiff.serialization import from_jsonable, to_jsonable

SCHEMA_VERSION = 1


def pair_key(reference: str, candidate: str) -> str:
    """The key of a backend pair in `Layer.pairs`, e.g. "torch~onnxruntime"."""
    return f"{reference}~{candidate}"


@dataclass(frozen=True)
class Thresholds:
    """When a tensor counts as diverged: direction (cosine) and magnitude (relative, absolute)."""

    min_cosine: float = 0.9999
    rtol: float = 1e-3
    max_abs: float | None = None


@dataclass(frozen=True)
class PairMetrics:
    """How far a candidate tensor is from the reference tensor it is paired with.

    `rel_err` is max-abs error divided by the reference's largest magnitude. For integer
    and bool tensors `cosine` is 1.0 exactly when all elements are equal, and `mismatches`
    counts the elements that differ.
    """

    cosine: float
    max_abs: float
    mean_abs: float
    rel_err: float
    ref_max_abs: float
    nan_ref: int = 0
    nan_cand: int = 0
    inf_ref: int = 0
    inf_cand: int = 0
    mismatches: int | None = None
    shape_mismatch: str | None = None
    diverged: bool = False
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Layer:
    """One ONNX tensor, in topological order, with the metrics of every backend pair that has it."""

    tensor: str
    onnx_node: str
    op_type: str
    module: str | None
    shape: tuple[int, ...]
    dtype: str
    pairs: dict[str, PairMetrics]
    is_output: bool = False
    torch_op: str | None = None
    pairing: str | None = None

    @property
    def diverged(self) -> bool:
        return any(m.diverged for m in self.pairs.values())


@dataclass(frozen=True)
class FirstDivergence:
    """The first diverging tensor in topological order and the ONNX nodes that may have caused it."""

    tensor: str
    onnx_node: str
    op_type: str
    module: str | None
    pair: str
    cosine: float
    max_abs: float
    rel_err: float
    reasons: tuple[str, ...]
    suspects: tuple[str, ...]


@dataclass(frozen=True)
class PairingSummary:
    """How many ONNX tensors got a PyTorch counterpart, and how.

    `float_tensors` counts float tensors computed from the inputs' values (not constants and
    not shape arithmetic): the ones worth pairing.
    """

    onnx_tensors: int
    float_tensors: int
    paired_with_torch: int
    by_method: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NotReturned:
    """A tensor the TensorRT engine does not return, and why (from the mark plan)."""

    tensor: str
    reason: str


@dataclass(frozen=True)
class EngineLayerInfo:
    """An engine layer that computes several ONNX nodes (a fusion)."""

    name: str
    onnx_nodes: tuple[str, ...]


@dataclass(frozen=True)
class TensorRTSummary:
    """What TensorRT did: skipped (and why), built, or ran; how outputs were marked; what fused.

    `outputs_mode` matters when reading the numbers: "all" marks every tensor, which disables
    fusion and can hide the very error being chased; "unfused" keeps fusion and returns what
    survives it as debug tensors; "none" returns the final outputs only.
    """

    status: str
    reason: str | None = None
    version: str | None = None
    gpu: str | None = None
    outputs_mode: str | None = None
    precision: str | None = None
    tf32: bool = False
    flags: tuple[str, ...] = ()
    marked: int = 0
    not_returned: tuple[NotReturned, ...] = ()
    fused_layers: tuple[EngineLayerInfo, ...] = ()
    fusion_source: str | None = None
    engine_layers: int = 0
    plan_bytes: int = 0
    build_seconds: float = 0.0
    cache_key: str | None = None
    from_cache: bool = False
    name_map: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SampleResult:
    """One input sample: final-output metrics per backend pair, and segmentation figures.

    `agreement_miou` / `changed_pixels` are keyed by pair (candidate argmax vs reference
    argmax); `label_miou` by backend (against ground truth, with --labels).
    """

    name: str
    outputs: dict[str, dict[str, PairMetrics]]
    agreement_miou: dict[str, float] = field(default_factory=dict)
    changed_pixels: dict[str, float] = field(default_factory=dict)
    label_miou: dict[str, float] = field(default_factory=dict)
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class ThresholdCheck:
    """One threshold on one backend pair (or backend), over every sample: the CI gate's unit.

    `scope` is "outputs" (final outputs), "layers" (every compared layer), "agreement" (mIoU
    against the reference's argmax) or "labels" (mIoU against ground truth); `worst` is the
    worst figure seen and `worst_sample` where.
    """

    id: str
    metric: str
    scope: str
    pair: str
    limit: float
    worst: float
    worst_sample: str | None
    passed: bool
    failing_samples: tuple[str, ...] = ()
    message: str = ""


@dataclass(frozen=True)
class SegmentationSummary:
    """mIoU over all samples: agreement with the reference and, with labels, against ground truth."""

    num_classes: int
    ignore_index: int | None
    agreement_miou: dict[str, float]
    agreement_per_class: dict[str, tuple[float, ...]]
    changed_pixels: dict[str, float]
    label_miou: dict[str, float] = field(default_factory=dict)
    label_per_class: dict[str, tuple[float, ...]] = field(default_factory=dict)
    miou_drop: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """Everything `trtdiff.compare` found, in the order a reader needs it."""

    passed: bool
    model: str
    onnx_path: str | None
    opset: int
    exporter: str
    backends: tuple[str, ...]
    reference: str
    inputs: dict[str, tuple[int, ...]]
    thresholds: Thresholds
    first_divergence: FirstDivergence | None
    layers: tuple[Layer, ...]
    not_compared: tuple[str, ...]
    pairing: PairingSummary
    environment: dict[str, str]
    notes: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    tensorrt: TensorRTSummary | None = None
    samples: tuple[SampleResult, ...] = ()
    checks: tuple[ThresholdCheck, ...] = ()
    segmentation: SegmentationSummary | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def pair_keys(self) -> tuple[str, ...]:
        """Every backend pair compared on some layer, in the order first seen (reference pairs first)."""
        return tuple(dict.fromkeys(key for layer in self.layers for key in layer.pairs))

    @property
    def failed_checks(self) -> tuple[ThresholdCheck, ...]:
        return tuple(check for check in self.checks if not check.passed)

    @property
    def outputs(self) -> tuple[Layer, ...]:
        """The model's final outputs among the compared layers."""
        return tuple(layer for layer in self.layers if layer.is_output)

    def to_dict(self) -> dict:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        return from_jsonable(cls, data)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.from_dict(json.loads(text))

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")


@dataclass(frozen=True)
class BuildReport:
    """What `trtdiff build` did: the ONNX file, the TensorRT mark plan and name map, the plan."""

    model: str
    onnx_path: str | None
    opset: int
    exporter: str
    inputs: dict[str, tuple[int, ...]]
    tensorrt: TensorRTSummary
    saved_engine: str | None = None
    notes: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self), indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> BuildReport:
        return from_jsonable(cls, json.loads(text))
