"""Small Reports built by hand for the renderer tests, and one real comparison for the end-to-end tests.

The hand-built reports are exact and tiny, so a test can state the text a renderer must
write: `passing` (one pair, every tensor agrees), `diverged` (the decoder Resize diverges,
with suspects), `gated` (three samples, failing output and mIoU checks, segmentation),
`trt_skipped` and `trt_ran` (three backends, TensorRT fused some layers away); and, from
culprit_reports.py, `culprits` (two culprits with mIoU attribution), `advised` (the same with
the Resize's fix and what fixing each culprit alone recovers), `drift` (accumulated drift, no
culprit) and `inherited` (the first divergence inherits a culprit's error).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from culprit_reports import advised_report, culprit_report, drift_report, inherited_report

import trtdiff
from trtdiff.report import (
    BackendPair,
    BuildReport,
    EngineLayerInfo,
    FirstDivergence,
    Layer,
    NotReturned,
    PairingSummary,
    PairMetrics,
    Reason,
    Report,
    SampleResult,
    SegmentationSummary,
    TensorRTSummary,
    ThresholdCheck,
    Thresholds,
)

TORCH_ORT = BackendPair("torch", "onnxruntime")
TORCH_TRT = BackendPair("torch", "tensorrt")
ORT_TRT = BackendPair("onnxruntime", "tensorrt")
VERSION = "9.8.7"
ENVIRONMENT = {
    "python": "3.11.7",
    "platform": "Linux-x86_64",
    "cpu": "x86_64",
    "torch": "2.13.0+cpu",
    "onnx": "1.23.2",
    "onnxruntime": "onnxruntime 1.32.0 (CPUExecutionProvider)",
}
SUSPECTS = ("/decoder/Resize", "/decoder/Concat", "/decoder/Div", "/decoder/Cast", "/decoder/Slice", "/decoder/Shape")
RESIZE_REASONS = (Reason("cosine", 0.999854, 0.9999), Reason("rel_err", 0.0264, 0.001))
TRT_SKIPPED = "no CUDA GPU: torch.cuda.is_available() is False"


def agree(cosine: float = 1.0, max_abs: float = 6e-7, rel_err: float = 2.3e-7) -> PairMetrics:
    """Metrics of a tensor that agrees."""
    return PairMetrics(cosine=cosine, max_abs=max_abs, mean_abs=max_abs / 10, rel_err=rel_err, ref_max_abs=2.6)


def differ(cosine: float, max_abs: float, rel_err: float, *reasons: Reason) -> PairMetrics:
    """Metrics of a tensor that diverged for `reasons`."""
    return dataclasses.replace(agree(cosine, max_abs, rel_err), diverged=True, reasons=reasons)


def layer(node: str, op_type: str, module: str | None, pairs: dict, *, is_output: bool = False) -> Layer:
    return Layer(
        tensor=f"{node}_output_0",
        onnx_node=node,
        op_type=op_type,
        module=module,
        shape=(1, 8, 16, 16),
        dtype="float32",
        pairs=pairs,
        is_output=is_output,
        pairing="op",
    )


def output_check(
    threshold: str,
    limit: float,
    worst: float,
    *,
    failing: tuple[str, ...] = (),
    compared: int = 1,
    worst_sample: str = "input",
    pair: BackendPair = TORCH_ORT,
) -> ThresholdCheck:
    metric = {"min_cosine": "cosine", "rtol": "rel_err", "max_abs": "max_abs"}[threshold]
    return ThresholdCheck(
        id=ThresholdCheck.make_id("outputs", threshold, pair),  # type: ignore[arg-type]
        scope="outputs",
        threshold=threshold,  # type: ignore[arg-type]
        metric=metric,  # type: ignore[arg-type]
        pair=pair,
        backend=None,
        limit=limit,
        worst=worst,
        worst_sample=worst_sample,
        passed=not failing,
        failing_samples=failing,
        compared=compared,
        failed=len(failing),
    )


def layer_check(compared: int, failed: int, worst: float, pair: BackendPair = TORCH_ORT) -> ThresholdCheck:
    return ThresholdCheck(
        id=ThresholdCheck.make_id("layers", "layers", pair),
        scope="layers",
        threshold="layers",
        metric="divergence",
        pair=pair,
        backend=None,
        limit=0.0,
        worst=worst,
        worst_sample="input",
        passed=not failed,
        failing_samples=("input",) if failed else (),
        compared=compared,
        failed=failed,
    )


def base_report(**changes: object) -> Report:
    """A passing comparison of three layers on one pair; `changes` replace fields."""
    layers = (
        layer("/backbone/Conv", "Conv", "backbone.stem.0", {TORCH_ORT: agree()}),
        layer("/backbone/Relu", "Relu", "backbone.stem.1", {TORCH_ORT: agree(max_abs=5.4e-7, rel_err=2.2e-7)}),
        layer("/head/Conv", "Conv", "head", {TORCH_ORT: agree(max_abs=1.2e-6, rel_err=3.1e-7)}, is_output=True),
    )
    report = Report(
        passed=True,
        model="examples:tiny",
        onnx_path=None,
        opset=13,
        exporter="torchscript",
        backends=("torch", "onnxruntime"),
        reference="torch",
        inputs={"x": (1, 3, 32, 32)},
        thresholds=Thresholds(),
        first_divergence=None,
        layers=layers,
        not_compared=("/Constant_output_0", "/Shape_output_0"),
        pairing=PairingSummary(
            onnx_tensors=5,
            float_tensors=3,
            paired_with_torch=3,
            by_method={"op": 3},
            float_paired=3,
            other_tensors={"shape": 2},
        ),
        environment=dict(ENVIRONMENT),
        notes=("1 reference tensors were spilled to disk (over the memory limit)",),
        timings={"export": 0.5, "run": 0.25},
        samples=(SampleResult("input", {"/head/Conv_output_0": {TORCH_ORT: layers[-1].pairs[TORCH_ORT]}}),),
        checks=(
            layer_check(3, 0, 1.0),
            output_check("min_cosine", 0.9999, 1.0),
            output_check("rtol", 0.001, 3.1e-7),
        ),
        trtdiff_version=VERSION,
    )
    return dataclasses.replace(report, **changes)  # type: ignore[arg-type]


def first_divergence(pair: BackendPair = TORCH_ORT) -> FirstDivergence:
    return FirstDivergence(
        tensor="/decoder/Resize_output_0",
        onnx_node="/decoder/Resize",
        op_type="Resize",
        module="decoder",
        pair=pair,
        cosine=0.999854,
        max_abs=0.0104,
        rel_err=0.0264,
        reasons=RESIZE_REASONS,
        suspects=SUSPECTS,
    )


def diverged_report() -> Report:
    """Opset 10: the decoder Resize diverges, and the output after it."""
    base = base_report()
    resize = layer(
        "/decoder/Resize", "Resize", "decoder", {TORCH_ORT: differ(0.999854, 0.0104, 0.0264, *RESIZE_REASONS)}
    )
    out = layer(
        "/head/Conv", "Conv", "head", {TORCH_ORT: differ(0.999225, 0.31, 0.114, *RESIZE_REASONS)}, is_output=True
    )
    return dataclasses.replace(
        base,
        passed=False,
        opset=10,
        first_divergence=first_divergence(),
        layers=(*base.layers[:2], resize, out),
        samples=(SampleResult("input", {"/head/Conv_output_0": {TORCH_ORT: out.pairs[TORCH_ORT]}}),),
        checks=(
            layer_check(4, 2, 0.999225),
            output_check("min_cosine", 0.9999, 0.999225, failing=("input",)),
            output_check("rtol", 0.001, 0.114, failing=("input",)),
        ),
    )


def miou_check(
    scope: str, threshold: str, subject: BackendPair | str, limit: float, worst: float, **fields: object
) -> ThresholdCheck:
    """An mIoU check on a pair (agreement) or a backend (labels); `fields` set the rest."""
    pair = subject if isinstance(subject, BackendPair) else None
    return ThresholdCheck(
        id=ThresholdCheck.make_id(scope, threshold, subject),  # type: ignore[arg-type]
        scope=scope,  # type: ignore[arg-type]
        threshold=threshold,  # type: ignore[arg-type]
        metric="miou" if threshold == "min_miou" else "miou_drop",
        pair=pair,
        backend=None if pair else str(subject),
        limit=limit,
        worst=worst,
        **{"worst_sample": None, "passed": True, "compared": 3, **fields},  # type: ignore[arg-type]
    )


def gated_report() -> Report:
    """Three samples gated on outputs and mIoU (agreement, labels, drop), with segmentation."""
    names = ("sample-0", "sample-1", "sample-2")
    cosines, mious = (0.99995, 0.99971, 0.99942), (0.97, 0.88, 0.81)
    samples = tuple(
        SampleResult(
            name,
            {"out": {TORCH_ORT: agree(cosine, 0.01, 0.0005)}},
            agreement_miou={TORCH_ORT: miou},
            changed_pixels={TORCH_ORT: 0.001},
            label_miou={"torch": 0.8, "onnxruntime": miou - 0.1},
        )
        for name, cosine, miou in zip(names, cosines, mious, strict=True)
    )
    failing = ("sample-1", "sample-2")
    checks = (
        output_check("min_cosine", 0.9999, 0.99942, failing=failing, compared=3, worst_sample="sample-2"),
        output_check("rtol", 0.001, 0.0005, compared=3, worst_sample="sample-0"),
        miou_check(
            "agreement",
            "min_miou",
            TORCH_ORT,
            0.9,
            0.8875,
            worst_sample="sample-2",
            passed=False,
            failing_samples=failing,
            failed=2,
            worst_sample_value=0.81,
        ),
        miou_check("labels", "min_miou", "onnxruntime", 0.6, 0.7, worst_sample="sample-2", worst_sample_value=0.71),
        miou_check("labels", "max_miou_drop", "onnxruntime", 0.05, 0.1, passed=False, failed=1),
    )
    segmentation = SegmentationSummary(
        num_classes=4,
        ignore_index=255,
        agreement_miou={TORCH_ORT: 0.8875},
        agreement_per_class={TORCH_ORT: (1.0, 0.9, 0.8, 0.85)},
        changed_pixels={TORCH_ORT: 0.001},
        label_miou={"torch": 0.8, "onnxruntime": 0.7},
        label_per_class={"torch": (0.9, 0.8, 0.7, 0.8), "onnxruntime": (0.8, 0.7, 0.6, 0.7)},
        miou_drop={"onnxruntime": 0.1},
    )
    return dataclasses.replace(diverged_report(), samples=samples, checks=checks, segmentation=segmentation)


def trt_skipped_report() -> Report:
    base = base_report()
    return dataclasses.replace(
        base,
        tensorrt=TensorRTSummary(status="skipped", reason=TRT_SKIPPED),
        notes=(*base.notes, f"TensorRT skipped: {TRT_SKIPPED}"),
    )


TRT_SUMMARY = TensorRTSummary(
    status="ran",
    version="tensorrt 10.9.0",
    gpu="NVIDIA H200",
    outputs_mode="unfused",
    precision="fp32",
    tf32=False,
    marked=2,
    not_returned=(NotReturned("/backbone/Relu_output_0", "fused into a Conv layer"),),
    fused_layers=(EngineLayerInfo("conv+relu", ("/backbone/Conv", "/backbone/Relu")),),
    fusion_source="engine inspector",
    engine_layers=3,
    plan_bytes=123456,
    build_seconds=1.5,
    name_map={"/backbone/Conv_output_0": "conv_out", "/head/Conv_output_0": "out"},
    notes=("built with 1 GiB workspace",),
)


def trt_ran_report() -> Report:
    """Three backends: TensorRT fused the Relu away, so that layer has the torch~onnxruntime pair only."""
    pairs = {TORCH_ORT: agree(), TORCH_TRT: agree(0.999998, 2.1e-5, 8.0e-6), ORT_TRT: agree(0.999998, 2.1e-5, 8.0e-6)}
    layers = (
        layer("/backbone/Conv", "Conv", "backbone.stem.0", pairs),
        layer("/backbone/Relu", "Relu", "backbone.stem.1", {TORCH_ORT: agree()}),
        layer("/head/Conv", "Conv", "a.very.long.module.name.that.is.cut.from.the.left", pairs, is_output=True),
    )
    return dataclasses.replace(
        base_report(),
        backends=("torch", "onnxruntime", "tensorrt"),
        layers=layers,
        environment={**ENVIRONMENT, "tensorrt": "tensorrt 10.9.0", "gpu": "NVIDIA H200"},
        tensorrt=TRT_SUMMARY,
        checks=(layer_check(3, 0, 1.0), layer_check(2, 0, 0.999998, TORCH_TRT), layer_check(2, 0, 0.999998, ORT_TRT)),
    )


def build_report() -> BuildReport:
    return BuildReport(
        model="examples:tiny",
        onnx_path="tiny.onnx",
        opset=17,
        exporter="torchscript",
        inputs={"x": (1, 3, 32, 32)},
        tensorrt=dataclasses.replace(TRT_SUMMARY, status="built", gpu=None, from_cache=True),
        saved_engine="tiny.plan",
        trtdiff_version=VERSION,
    )


@pytest.fixture
def build() -> SimpleNamespace:
    """The builders and pairs above, for tests that make a variant of a report."""
    return SimpleNamespace(
        TORCH_ORT=TORCH_ORT,
        TORCH_TRT=TORCH_TRT,
        ORT_TRT=ORT_TRT,
        agree=agree,
        differ=differ,
        layer=layer,
        output_check=output_check,
        layer_check=layer_check,
        first_divergence=first_divergence,
        base_report=base_report,
        build_report=build_report,
    )


@pytest.fixture
def passing() -> Report:
    return base_report()


@pytest.fixture
def diverged() -> Report:
    return diverged_report()


@pytest.fixture
def gated() -> Report:
    return gated_report()


@pytest.fixture
def trt_skipped() -> Report:
    return trt_skipped_report()


@pytest.fixture
def trt_ran() -> Report:
    return trt_ran_report()


@pytest.fixture
def culprits() -> Report:
    return culprit_report(diverged_report())


@pytest.fixture
def advised() -> Report:
    return advised_report(diverged_report())


@pytest.fixture
def drift() -> Report:
    return drift_report(diverged_report())


@pytest.fixture
def inherited() -> Report:
    return inherited_report(diverged_report())


REAL_MODEL = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"


@pytest.fixture(scope="session")
def real_report() -> Report:
    """A real comparison of the embedded DeepLabV3+ at opset 10, where the decoder Resize diverges.

    It runs the whole pipeline (export, torch, ONNX Runtime), once per session, through the public call.
    """
    return trtdiff.compare(REAL_MODEL, input_shapes=["1x3x32x32"], opset=10)


FOUR_BACKENDS = ("torch", "onnxruntime", "onnx-reference", "openvino")


@pytest.fixture
def three() -> Report:
    """`advised` on torch, onnxruntime and onnx-reference: each culprit node on two pairs."""
    from culprit_reports import many_backends_report

    return many_backends_report(advised_report(diverged_report()), FOUR_BACKENDS[:3])


@pytest.fixture
def four() -> Report:
    """`advised` on torch, onnxruntime, onnx-reference and openvino: each culprit node on three pairs."""
    from culprit_reports import many_backends_report

    return many_backends_report(advised_report(diverged_report()), FOUR_BACKENDS)
