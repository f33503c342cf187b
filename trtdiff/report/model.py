"""The result of a comparison: frozen dataclasses that round-trip through JSON.

Renderers read a `Report` and nothing else. The JSON layout is documented in the README
(section "JSON report") and versioned by `SCHEMA_VERSION`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from trtdiff.options import Thresholds
from trtdiff.options.resolved import ResolvedOption
from trtdiff.report.runtime import RuntimeSummary as RuntimeSummary  # every compiled runtime's part, re-exported
from trtdiff.report.serialization import from_jsonable, to_jsonable
from trtdiff.report.tensorrt import (  # the report's TensorRT parts, re-exported
    BuildReport as BuildReport,
    EngineLayerInfo as EngineLayerInfo,
    FusionSplit as FusionSplit,
    LayerPrecision as LayerPrecision,
    MarkingCheck as MarkingCheck,
    NotReturned as NotReturned,
    OutputsMode as OutputsMode,
    PlainEngine as PlainEngine,
    TensorRTStatus as TensorRTStatus,
    TensorRTSummary as TensorRTSummary,
)

SCHEMA_VERSION = 3
READABLE_SCHEMAS = (2, 3)
"""The layouts this trtdiff reads back: the current one and the one before (3 added `options`)."""

ReasonMetric = Literal[
    "cosine", "rel_err", "max_abs", "non_finite", "shape", "mismatches", "quant_steps", "quant_scale", "noise_ratio"
]
CheckScope = Literal["outputs", "layers", "agreement", "labels", "weights"]
CheckMetric = Literal[
    "cosine",
    "rel_err",
    "max_abs",
    "divergence",
    "miou",
    "miou_drop",
    "non_finite",
    "non_finite_mismatches",
    "quant_steps",
    "noise_ratio",
]
Threshold = Literal[
    "min_cosine",
    "rtol",
    "max_abs",
    "layers",
    "min_miou",
    "max_miou_drop",
    "finite",
    "max_quant_steps",
    "max_weight_steps",
    "max_noise_ratio",
    "quant_min_cosine",
]
PairingMethod = Literal["op", "scope", "folded", "module", "output", "composite", "derived", "quantized"]
Verdict = Literal["export", "runtime", "unknown"]

# The threshold names as they appear in check ids ("outputs/min-cosine/torch~onnxruntime").
_THRESHOLD_IDS: dict[str, str] = {
    "min_cosine": "min-cosine",
    "rtol": "rtol",
    "max_abs": "max-abs",
    "min_miou": "min-miou",
    "max_miou_drop": "max-miou-drop",
    "finite": "finite",
    "max_quant_steps": "max-quant-steps",
    "max_weight_steps": "max-weight-steps",
    "max_noise_ratio": "max-noise-ratio",
    "quant_min_cosine": "quant-min-cosine",
}


def number(figure: float | None) -> float:
    """A figure as a float for arithmetic, ranking and plots: NaN where it is n/a (None: computed over no finite
    values), which every such use already treats as the worst figure."""
    return math.nan if figure is None else figure


@dataclass(frozen=True, order=True)
class BackendPair:
    """A reference backend and a candidate compared against it; JSON writes it as "torch~onnxruntime"."""

    reference: str
    candidate: str

    @property
    def key(self) -> str:
        return f"{self.reference}~{self.candidate}"

    def __str__(self) -> str:
        return self.key

    def json_text(self) -> str:
        return self.key

    @classmethod
    def parse(cls, key: str) -> BackendPair:
        """The pair written as "reference~candidate"."""
        reference, sep, candidate = key.partition("~")
        if not sep or not reference or not candidate or "~" in candidate:
            raise ValueError(f"not a backend pair: {key!r} (expected reference~candidate)")
        return cls(reference, candidate)

    @classmethod
    def from_json_text(cls, text: str) -> BackendPair:
        return cls.parse(text)


def all_pairs(backends: tuple[str, ...] | list[str]) -> tuple[BackendPair, ...]:
    """Every pair of `backends`, earlier ones as reference: (a, b, c) -> a~b, a~c, b~c."""
    return tuple(BackendPair(a, b) for i, a in enumerate(backends) for b in backends[i + 1 :])


@dataclass(frozen=True)
class Reason:
    """One reason a tensor counts as diverged: `metric` came out at `value` against `limit`.

    For "non_finite", `value` and `limit` count the candidate's and the reference's NaN/Inf
    and `detail` says at how many positions they differ ("3 of 64 positions");
    for "mismatches" (integer tensors), `value` counts differing elements and `limit` all;
    for "shape", `detail` holds "2x3 vs 3x2"; for "quant_scale" (a DequantizeLinear whose scale, or its
    QuantizeLinear's, is zero, negative or not finite), `value` is the largest |scale|, `limit` None and
    `detail` the DequantizeLinear with what is wrong; for a scale too coarse for the values
    (analysis.quant.COARSE_GRID), `value` is the fraction of the grid they reach and `limit` that threshold.
    """

    metric: ReasonMetric
    value: float
    limit: float | None = None
    detail: str | None = None


@dataclass(frozen=True)
class PairMetrics:
    """How far a candidate tensor is from the reference tensor it is paired with.

    `rel_err` is max-abs error divided by the reference's largest magnitude; the figures
    are computed over the positions finite on both sides. `nan_*`/`inf_*` count each side's
    NaN and Inf, and `non_finite_mismatches` the positions where the two sides are not the
    same kind of non-finite value (NaN against a number, +Inf against -Inf, ...): NaN or Inf
    at the same positions on both sides agree. For integer and bool tensors `cosine` is 1.0
    exactly when all elements are equal, and `mismatches` counts the elements that differ.
    """

    cosine: float | None
    max_abs: float | None
    mean_abs: float | None
    rel_err: float | None
    ref_max_abs: float
    nan_ref: int = 0
    nan_cand: int = 0
    inf_ref: int = 0
    inf_cand: int = 0
    mismatches: int | None = None
    shape_mismatch: str | None = None
    diverged: bool = False
    reasons: tuple[Reason, ...] = ()
    non_finite_mismatches: int = 0
    quant_steps: float | None = None
    """For a quantized tensor (an activation DequantizeLinear's output, or the float tensor a
    QuantizeLinear reads): max-abs error in steps of that DequantizeLinear's scale, the figure it
    is judged by (trtdiff.analysis.noise); None for every other tensor."""
    noise_ratio: float | None = None
    """In a reduced-precision (FP16/BF16) comparison: `rel_err` over the error the precision's
    benchmark makes at this tensor, the figure it is judged by (trtdiff.analysis.noise); None
    in FP32 comparisons and for quantized tensors."""
    drift: bool = False
    """Whether these accumulated figures are drift, not judged: a graph with Q/DQ nodes against its float model
    carries the quantization of every layer before each tensor by design, so only NaN/Inf, shapes and integers
    that differ diverge here, and the node is judged by its own error (`Layer.local`, analysis.judge)."""
    statistics: bool = False
    """Whether the figures come from per-tensor statistics (`--capture stats`), not from every value: bounds
    on their failing side (cosine no higher, errors no lower than a full comparison's; a quantized tensor's
    steps an estimate from sampled values), so a pair they fail fails in full too, and one they pass may not
    (trtdiff.analysis.statistics)."""


@dataclass(frozen=True)
class Layer:
    """One ONNX tensor, in topological order, with the metrics of every backend pair that has it.

    `index` is its number among the compared layers, counted from 1 in topological order: the
    number every renderer prints (0 in a report written before layers were numbered; `Report`
    numbers those by position).
    """

    tensor: str
    onnx_node: str
    op_type: str
    module: str | None
    shape: tuple[int, ...]
    dtype: str
    pairs: dict[BackendPair, PairMetrics]
    is_output: bool = False
    torch_op: str | None = None
    pairing: PairingMethod | None = None
    local: dict[BackendPair, PairMetrics] | None = None
    index: int = 0

    @property
    def diverged(self) -> bool:
        return any(m.diverged for m in self.pairs.values())

    @property
    def screened(self) -> bool:
        """Whether it passed on statistics alone (`--capture stats`): its figures are bounds from summaries and
        sampled positions, so a fault between the samples can hide in it. Never shown as "ok"."""
        return not self.diverged and any(m.statistics for m in self.pairs.values())


@dataclass(frozen=True)
class ErrorFigures:
    """Cosine, max-abs and relative error of one tensor against its reference (over the finite values),
    and at how many positions the two sides' NaN/Inf differ."""

    cosine: float | None
    max_abs: float | None
    rel_err: float | None
    non_finite_mismatches: int = 0
    quant_steps: float | None = None
    """Max-abs error in quantization steps, for a quantized tensor (PairMetrics.quant_steps)."""
    noise_ratio: float | None = None
    """Error over the precision's own, in a reduced-precision comparison (PairMetrics.noise_ratio)."""

    @classmethod
    def of(cls, metrics: PairMetrics) -> ErrorFigures:
        return cls(
            metrics.cosine,
            metrics.max_abs,
            metrics.rel_err,
            metrics.non_finite_mismatches,
            metrics.quant_steps,
            metrics.noise_ratio,
        )


@dataclass(frozen=True)
class Culprit:
    """A node whose own (local) error breaks the thresholds: the error is introduced here.

    `local` is the node run on the candidate with the reference's values for its inputs;
    `accumulated` the tensor as the whole candidate run produced it. `subgraph` names the
    ONNX nodes run for the local error (one, or the smallest group whose float inputs all
    have a reference value). `verdict`: "export" when the ONNX reference evaluator agrees
    with the candidate (the ONNX graph computes something else), "runtime" when it agrees
    with the reference (the runtime deviates from the ONNX spec), else "unknown".

    `advice` says what to change, in one sentence, when one of `trtdiff inspect`'s rules
    explains this node (its code in `advice_code`); both are "" when no rule applies.

    `noise_level`: the local error is rounding noise of the tensor's type (trtdiff.analysis.noise:
    for float32, rel-err within 4 ULP): a culprit only under thresholds tighter than the
    arithmetic. Views group such culprits into one line; False in reports written before.
    """

    tensor: str
    onnx_node: str
    op_type: str
    module: str | None
    pair: BackendPair
    local: ErrorFigures
    accumulated: ErrorFigures
    verdict: Verdict
    subgraph: tuple[str, ...]
    spec: ErrorFigures | None = None
    advice: str = ""
    advice_code: str = ""
    noise_level: bool = False
    quantization: str = ""
    """For a quantized tensor, the DequantizeLinear that judges it, with its scale and zero point
    ("/x_DequantizeLinear (scale 0.0094, zero point -128, int8)"); "" otherwise and in older reports."""
    exclude: tuple[str, ...] = ()
    """The nodes to keep in higher precision (in a quantized or reduced-precision comparison), as ModelOpt's
    `nodes_to_exclude` regular expressions (pairing.qdq.exclude_pattern: each matches its node alone under
    `re.match`, one line of printable text, "^/conv2/Conv\\Z"); --exclude-list writes them, one a line. A node
    no such line can name alone (unnamed in the file, or a name several nodes share) is in `exclude_nodes`
    only, and a note of the report says so."""
    exclude_nodes: tuple[str, ...] = ()
    """The names of those nodes themselves, every one of them, in the order of `exclude` (what the exclusion
    list is checked with); () in reports written before, whose `exclude` held "^" + re.escape(name) + "$"."""


@dataclass(frozen=True)
class Contributor:
    """A node's local error, for accumulated drift that no single node explains."""

    tensor: str
    onnx_node: str
    op_type: str
    module: str | None
    local: ErrorFigures


@dataclass(frozen=True)
class Drift:
    """Accumulated divergence with no culprit: the largest local contributors on `pair`, largest first."""

    pair: BackendPair
    contributors: tuple[Contributor, ...]


@dataclass(frozen=True)
class Attribution:
    """What injecting the reference's value at a culprit recovers: at it alone, and with every earlier one.

    The candidate runs the rest of the graph with the reference's value in place of the
    culprit's output (and of the culprits before it), over the same samples: the final
    output's error `before` and `after`, and with segmentation the candidate's mIoU before
    and after the injection and the points that recovers. The `_alone` figures inject at
    this culprit only: what fixing it alone gives (the same as the cumulative ones for a
    pair's first culprit).

    `measurable` / `measurable_alone`: whether the recovery is more than noise: with mIoU, at
    least `miou_pixel_share` (what one pixel is worth, see attribution.pixel_share); without,
    the final rel-err falls by more than the rtol or the cosine rises by more than
    1 - min-cosine. None in reports written before these fields existed. A final figure is
    None (n/a) where the outputs had no finite values to compute it over.
    """

    onnx_node: str
    tensor: str
    pair: BackendPair
    final_rel_err_before: float | None
    final_rel_err_after: float | None
    final_cosine_before: float | None
    final_cosine_after: float | None
    miou_before: float | None = None
    miou_after: float | None = None
    miou_recovered: float | None = None
    final_rel_err_after_alone: float | None = None
    final_cosine_after_alone: float | None = None
    miou_after_alone: float | None = None
    miou_recovered_alone: float | None = None
    measurable: bool | None = None
    measurable_alone: bool | None = None
    miou_pixel_share: float | None = None
    final_non_finite_before: int = 0
    final_non_finite_after: int = 0
    final_non_finite_after_alone: int = 0


@dataclass(frozen=True)
class FirstDivergence:
    """The first diverging tensor in topological order and the ONNX nodes that may have caused it."""

    tensor: str
    onnx_node: str
    op_type: str
    module: str | None
    pair: BackendPair
    cosine: float | None
    max_abs: float | None
    rel_err: float | None
    reasons: tuple[Reason, ...]
    suspects: tuple[str, ...]


@dataclass(frozen=True)
class NonFinite:
    """Where NaN or Inf first appear in one backend whose final outputs hold them.

    The first compared tensor, in topological order, that holds NaN/Inf in `backend` and
    from which they reach a non-finite output through non-finite (or uncompared) tensors,
    so that a legitimate -inf mask feeding a finite softmax is not named. `sample` is the
    sample whose layers were searched; `nan` and `inf` count that tensor's values.
    """

    backend: str
    tensor: str
    onnx_node: str
    op_type: str
    module: str | None
    nan: int
    inf: int
    sample: str


@dataclass(frozen=True)
class PairingSummary:
    """How many ONNX tensors got a PyTorch counterpart, and how.

    `float_tensors` counts float tensors computed from the inputs' values (not constants and
    not shape arithmetic): the ones worth pairing; `float_paired` how many of them got a
    PyTorch value. `other_tensors` counts the rest by kind: "identity" (Identity outputs),
    "constant" (computed from constants alone), "shape" (shape arithmetic), "integer"
    (integer or bool tensors computed from the inputs' values). `structure_only` counts the
    float pairs made by structure alone (kind, place and shape; methods op, scope, folded,
    module, output), whose values are compared whatever they hold; the rest were also checked
    by value (composite, derived). 0 in reports written before it was counted.
    """

    onnx_tensors: int
    float_tensors: int
    paired_with_torch: int
    by_method: dict[PairingMethod, int] = field(default_factory=dict)
    float_paired: int = 0
    other_tensors: dict[str, int] = field(default_factory=dict)
    structure_only: int = 0


@dataclass(frozen=True)
class SampleResult:
    """One input sample: final-output metrics per backend pair, and segmentation figures.

    `agreement_miou` / `changed_pixels` are keyed by pair (candidate argmax vs reference
    argmax); `label_miou` by backend (against ground truth, with a labels folder).
    """

    name: str
    outputs: dict[str, dict[BackendPair, PairMetrics]]
    agreement_miou: dict[BackendPair, float] = field(default_factory=dict)
    changed_pixels: dict[BackendPair, float] = field(default_factory=dict)
    label_miou: dict[str, float] = field(default_factory=dict)
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class WeightSource:
    """The float weight a weight DequantizeLinear quantizes (pairing.weights): a PyTorch parameter
    (`parameter`, with the BatchNorm module `folded` into it as the exporter did, `transposed` as a MatMul
    holds a Linear's), or, where no parameter explains it, the file's own float initializer (`initializer`)."""

    parameter: str | None = None
    folded: str | None = None
    transposed: bool = False
    initializer: str | None = None

    def describe(self) -> str:
        """ "conv3.weight (bn3 folded in)", "fc1.weight (transposed)" or "the file's float conv1.weight"."""
        if self.parameter is None:
            return f"the file's float {self.initializer}"
        how = [f"{self.folded} folded in"] if self.folded else []
        how += ["transposed"] if self.transposed else []
        return f"{self.parameter} ({', '.join(how)})" if how else self.parameter


@dataclass(frozen=True)
class QuantizedWeight:
    """A weight (or bias) DequantizeLinear of a QDQ file, against the float weight it quantizes.

    `parameter`: what it is compared with, in words (`source.describe()`: "conv3.weight (bn3 folded
    in)"), None where nothing explains it (listed, not compared). `steps`: the largest |dequantized -
    float| in steps of the scale of its channel or block, over the values inside the grid (a value
    beyond the grid's end saturates there by design: clip calibration): at most half a step when the
    weight is quantized correctly (round to nearest), None when not compared; inf where its scale is
    zero, negative or not finite (`fault` says which and where), with or without a float weight.
    """

    node: str
    parameter: str | None
    steps: float | None
    quantization: str
    fault: str = ""
    """What is wrong with its scale ("its scale conv2.weight_scale is 0 at channel 3 of 8: ..."); "" otherwise."""
    source: WeightSource | None = None
    """Where its float values come from (the exclusion check restores them), None where nothing explains it."""


@dataclass(frozen=True)
class ThresholdCheck:
    """One threshold on one backend pair (or one backend, against labels), over every sample.

    The CI gate's unit: a JUnit test case, a line in the Markdown summary. `scope` is
    "outputs" (final outputs), "layers" (every compared layer), "agreement" (mIoU against the
    reference's argmax) or "labels" (mIoU against ground truth). The "finite" threshold counts
    NaN/Inf in final outputs (allowed: the positions where they differ), limit 0. `worst` is the worst figure
    (for mIoU: over all samples) and `worst_sample` where, with `worst_sample_value` its own
    figure; `compared`/`failed` count samples (layers for the "layers" scope). `id` is the
    stable name CI systems track, e.g. "outputs/min-cosine/torch~onnxruntime".
    """

    id: str
    scope: CheckScope
    threshold: Threshold
    metric: CheckMetric
    pair: BackendPair | None
    backend: str | None
    limit: float
    worst: float | None
    worst_sample: str | None
    passed: bool
    failing_samples: tuple[str, ...] = ()
    compared: int = 0
    failed: int = 0
    worst_sample_value: float | None = None
    screened: int = 0
    """For the "layers" scope: how many of the layers that did not diverge passed on statistics alone
    (`--capture stats`, Layer.screened), screened rather than compared in full. 0 otherwise."""

    @staticmethod
    def make_id(scope: CheckScope, threshold: Threshold, subject: BackendPair | str) -> str:
        """The check's stable id: scope, threshold and pair (or backend)."""
        if threshold == "layers":
            return f"{scope}/{subject}"
        return f"{scope}/{_THRESHOLD_IDS[threshold]}/{subject}"

    @property
    def subject(self) -> str:
        """The pair key, or the backend for checks against labels."""
        return str(self.pair) if self.pair is not None else (self.backend or "")


@dataclass(frozen=True)
class SegmentationSummary:
    """mIoU over all samples: agreement with the reference and, with labels, against ground truth."""

    num_classes: int
    ignore_index: int | None
    agreement_miou: dict[BackendPair, float]
    agreement_per_class: dict[BackendPair, tuple[float, ...]]
    changed_pixels: dict[BackendPair, float]
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
    runtimes: tuple[RuntimeSummary, ...] = ()
    samples: tuple[SampleResult, ...] = ()
    checks: tuple[ThresholdCheck, ...] = ()
    segmentation: SegmentationSummary | None = None
    culprit: Culprit | None = None
    culprits: tuple[Culprit, ...] = ()
    drift: Drift | None = None
    attribution: tuple[Attribution, ...] = ()
    non_finite: tuple[NonFinite, ...] = ()
    weights: tuple[QuantizedWeight, ...] = ()
    simplified: Report | None = None
    options: dict[str, ResolvedOption] = field(default_factory=dict)
    trtdiff_version: str = "unknown"
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        """Number the layers by position from 1 where they carry no usable numbers (a report written
        before `Layer.index`, or layers put together by hand): numbers rise along the layers."""
        numbers = [layer.index for layer in self.layers]
        if any(n < 1 for n in numbers) or any(a >= b for a, b in pairwise(numbers)):
            numbered = tuple(replace(layer, index=n) for n, layer in enumerate(self.layers, start=1))
            object.__setattr__(self, "layers", numbered)  # frozen: set once, while constructing

    @property
    def pairs(self) -> tuple[BackendPair, ...]:
        """Every backend pair compared on some layer, in the order first seen (reference pairs first)."""
        return tuple(dict.fromkeys(pair for layer in self.layers for pair in layer.pairs))

    @property
    def from_statistics(self) -> int:
        """How many layers were judged from statistics alone (`--capture stats`): bounds, not every value."""
        return sum(1 for layer in self.layers if any(m.statistics for m in layer.pairs.values()))

    @property
    def screened(self) -> tuple[Layer, ...]:
        """The layers that passed on statistics alone (Layer.screened): not compared in full."""
        return tuple(layer for layer in self.layers if layer.screened)

    @property
    def failed_checks(self) -> tuple[ThresholdCheck, ...]:
        return tuple(check for check in self.checks if not check.passed)

    @property
    def outputs(self) -> tuple[Layer, ...]:
        """The model's final outputs among the compared layers."""
        return tuple(layer for layer in self.layers if layer.is_output)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = to_jsonable(self)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        return from_jsonable(cls, data)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.from_dict(json.loads(text))

    def write_json(self, path: str | Path) -> None:
        """Write the report as JSON to `path`: a new file renamed over the name (trtdiff.outputs)."""
        from trtdiff import outputs

        outputs.write_text(path, self.to_json() + "\n")
