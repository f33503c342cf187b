"""The CI gate: checks over several samples, exit codes at the threshold boundary, mIoU tallies."""

from __future__ import annotations

import numpy as np
import pytest
from cli_output import without_progress
from click.testing import CliRunner
from PIL import Image

import trtdiff
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.segmentation import SegmentationTally
from trtdiff.cli.app import main
from trtdiff.errors import OptionError
from trtdiff.gate.checks import output_checks
from trtdiff.options import GateOptions
from trtdiff.report import BackendPair, SampleResult, ThresholdCheck, Thresholds

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
SHAPE = "1x3x64x64"
ORT = BackendPair("torch", "onnxruntime")


@pytest.fixture(scope="module")
def opset10_gate():
    from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet

    return trtdiff.compare(
        deeplabv3plus_resnet(),
        input_shapes=[SHAPE],
        opset=10,
        gate=GateOptions(num_samples=3, min_miou=0.5),
        thresholds=Thresholds(rtol=1.0),
    )


@pytest.mark.slow
def test_every_sample_is_gated_and_named(opset10_gate) -> None:
    report = opset10_gate
    assert [s.name for s in report.samples] == ["sample-0", "sample-1", "sample-2"]
    ids = {c.id for c in report.checks}
    assert {
        "outputs/min-cosine/torch~onnxruntime",
        "outputs/rtol/torch~onnxruntime",
        "agreement/min-miou/torch~onnxruntime",
    } <= ids
    assert not any(c.scope == "layers" for c in report.checks)  # layers are shown, not gated, without --per-layer
    cosine = next(c for c in report.checks if c.id == "outputs/min-cosine/torch~onnxruntime")
    assert not cosine.passed and set(cosine.failing_samples) <= {"sample-0", "sample-1", "sample-2"}
    assert cosine.worst == min(s.outputs[next(iter(s.outputs))][ORT].cosine for s in report.samples)
    assert report.first_divergence is not None and report.first_divergence.onnx_node == "/decoder/Resize"
    assert report.segmentation is not None and 0 < report.segmentation.changed_pixels[ORT] < 0.1


@pytest.mark.slow
def test_exit_code_flips_exactly_at_the_cosine_threshold(opset10_gate) -> None:
    worst = next(c for c in opset10_gate.checks if c.id == "outputs/min-cosine/torch~onnxruntime").worst
    common = ["compare", FACTORY, "--input-shape", SHAPE, "--opset", "10", "--num-samples", "3", "--rtol", "1", "-q"]
    at = CliRunner().invoke(main, [*common, "--min-cosine", repr(worst)])
    above = CliRunner().invoke(main, [*common, "--min-cosine", repr(float(np.nextafter(worst, 1.0)))])
    assert at.exit_code == 0, at.output
    assert above.exit_code == 1 and "FAIL: 1 of 3 checks failed: outputs/min-cosine/torch~onnxruntime" in above.stdout


@pytest.mark.slow
def test_per_layer_gates_the_layers_too() -> None:
    from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet

    report = trtdiff.compare(
        deeplabv3plus_resnet(),
        input_shapes=[SHAPE],
        opset=10,
        gate=GateOptions(num_samples=2, per_layer=True),
        thresholds=Thresholds(rtol=1.0),
    )
    layers = [c for c in report.checks if c.scope == "layers"]
    assert [c.id for c in layers] == ["layers/torch~onnxruntime"]
    diverged = [layer.onnx_node for layer in report.layers if layer.diverged]
    assert diverged and diverged[0] == "/decoder/Resize"  # opset 10's bilinear Resize breaks min-cosine 0.9999
    assert not layers[0].passed and layers[0].failing_samples == ("sample-0",)
    assert (layers[0].failed, layers[0].compared) == (len(diverged), len(report.layers))
    relaxed = trtdiff.compare(
        deeplabv3plus_resnet(),
        input_shapes=[SHAPE],
        opset=10,
        gate=GateOptions(num_samples=2, per_layer=True),
        thresholds=Thresholds(min_cosine=0.9, rtol=1.0),
    )
    assert [c.passed for c in relaxed.checks if c.scope == "layers"] == [True]


def test_segmentation_tally_on_hand_made_masks() -> None:
    def logits(mask: np.ndarray) -> np.ndarray:
        return np.eye(3, dtype=np.float32)[mask].transpose(2, 0, 1)[None]

    label = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 2, 2], [2, 2, 2, 2]])
    candidate = label.copy()
    candidate[0, 2] = 0  # one class-1 pixel becomes class 0
    tally = SegmentationTally(3, ignore_index=None)
    agreement, changed, against = tally.add(
        {"torch": logits(label), "onnxruntime": logits(candidate)}, [ORT], label[None]
    )
    # class 0: IoU 4/5, class 1: 3/4, class 2: 8/8
    assert agreement[ORT] == pytest.approx((4 / 5 + 3 / 4 + 1) / 3)
    assert changed[ORT] == pytest.approx(1 / 16)
    assert against == {"torch": 1.0, "onnxruntime": pytest.approx((4 / 5 + 3 / 4 + 1) / 3)}
    summary = tally.summary("torch")
    assert summary.miou_drop["onnxruntime"] == pytest.approx(1 - (4 / 5 + 3 / 4 + 1) / 3)


@pytest.mark.slow
def test_images_and_labels_from_folders(tmp_path) -> None:
    images, labels = tmp_path / "images", tmp_path / "labels"
    images.mkdir()
    labels.mkdir()
    rng = np.random.default_rng(0)
    for index in range(2):
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(images / f"img{index}.png")
        Image.fromarray(rng.integers(0, 5, (64, 64), dtype=np.uint8)).save(labels / f"img{index}.png")
    result = CliRunner().invoke(
        main,
        [
            "compare",
            FACTORY,
            "--inputs",
            str(images),
            "--labels",
            str(labels),
            "--opset",
            "13",
            "--mean",
            "0.485,0.456,0.406",
            "--std",
            "0.229,0.224,0.225",
            "--min-miou",
            "0.0",
            "--max-miou-drop",
            "0.01",
            "--json",
            str(tmp_path / "r.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    report = trtdiff.Report.from_json((tmp_path / "r.json").read_text())
    assert [s.name for s in report.samples] == ["img0", "img1"]
    assert set(report.segmentation.label_miou) == {"torch", "onnxruntime"}
    assert report.segmentation.miou_drop["onnxruntime"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        (GateOptions(num_samples=0), "num_samples 0"),
        (GateOptions(inputs_dir="x", num_samples=2), "exclude"),
        (GateOptions(labels_dir="x"), "labels_dir"),
        (GateOptions(min_miou=1.5), "min_miou 1.5"),
        (GateOptions(max_miou_drop=0.1), "labels_dir"),
    ],
)
def test_bad_gate_options(gate: GateOptions, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        gate.validate()


def test_label_with_a_class_the_model_lacks_names_the_file(tmp_path) -> None:
    images, labels = tmp_path / "images", tmp_path / "labels"
    images.mkdir()
    labels.mkdir()
    Image.fromarray(np.zeros((64, 64, 3), dtype=np.uint8)).save(images / "odd.png")
    Image.fromarray(np.full((64, 64), 9, dtype=np.uint8)).save(labels / "odd.png")  # the model has 5 classes
    result = CliRunner().invoke(main, ["compare", FACTORY, "--inputs", str(images), "--labels", str(labels)])
    assert result.exit_code == 2
    lines = without_progress(result.stderr).strip().splitlines()
    assert len(lines) == 1 and "odd" in lines[0] and "--labels" in lines[0], result.stderr


# Non-finite final outputs


def _one_output(name: str, reference: np.ndarray, candidate: np.ndarray) -> SampleResult:
    return SampleResult(name, {"out": {ORT: compare_tensors(reference, candidate, Thresholds())}})


def _finite(samples: list[SampleResult], thresholds: Thresholds) -> ThresholdCheck:
    (check,) = [c for c in output_checks(samples, thresholds, [ORT]) if c.threshold == "finite"]
    assert check.id == "outputs/finite/torch~onnxruntime" and check.scope == "outputs" and check.limit == 0
    return check


def test_non_finite_outputs_fail_on_either_side_even_at_the_same_positions() -> None:
    x = np.random.default_rng(0).standard_normal(16)
    nan = x.copy()
    nan[3] = np.nan
    inf = x.copy()
    inf[5] = -np.inf
    samples = [_one_output("clean", x, x), _one_output("both", nan, nan), _one_output("one", x, inf)]
    checks = {c.id: c for c in output_checks(samples, Thresholds(), [ORT])}
    finite = checks["outputs/finite/torch~onnxruntime"]
    assert not finite.passed and finite.metric == "non_finite"
    assert finite.failing_samples == ("both", "one") and (finite.worst, finite.worst_sample) == (2.0, "both")
    assert (finite.compared, finite.failed) == (3, 2)
    assert checks["outputs/min-cosine/torch~onnxruntime"].passed  # cosine over the finite positions is 1: blind to NaN
    assert _finite([samples[0]], Thresholds()).passed


def test_allow_nonfinite_asks_for_identical_positions() -> None:
    x = np.random.default_rng(1).standard_normal(16)
    nan = x.copy()
    nan[[3, 7]] = [np.nan, np.inf]
    moved = x.copy()
    moved[[4, 7]] = [np.nan, np.inf]  # the NaN moved by one position, the Inf stayed
    allow = Thresholds(allow_nonfinite=True)
    same = _finite([_one_output("same", nan, nan.copy())], allow)
    assert same.passed and same.metric == "non_finite_mismatches" and same.worst == 0
    differ = _finite([_one_output("same", nan, nan.copy()), _one_output("moved", nan, moved)], allow)
    assert not differ.passed and differ.failing_samples == ("moved",) and differ.worst == 2
    sign = x.copy()
    sign[7] = -np.inf
    assert not _finite([_one_output("sign", nan, np.where(np.arange(16) == 7, -np.inf, nan))], allow).passed
    assert not _finite([_one_output("finite", x, sign)], allow).passed  # one side only


def test_a_later_sample_with_nan_outputs_fails_and_is_searched(tmp_path) -> None:
    from tests.nonfinite_models import root_of_input

    folder = tmp_path / "inputs"
    folder.mkdir()
    rng = np.random.default_rng(2)
    np.save(folder / "a.npy", np.abs(rng.standard_normal((1, 8))).astype(np.float32))
    np.save(folder / "b.npy", rng.standard_normal((1, 8)).astype(np.float32))  # negative values: sqrt is NaN
    report = trtdiff.compare(root_of_input(), gate=GateOptions(inputs_dir=str(folder)))
    finite = next(c for c in report.checks if c.id == "outputs/finite/torch~onnxruntime")
    assert not report.passed and not finite.passed and finite.failing_samples == ("b",)
    assert report.first_divergence is None  # sample a, compared layer by layer, is finite
    assert [(e.backend, e.onnx_node, e.module, e.sample) for e in report.non_finite] == [
        ("torch", "/root/Sqrt", "root", "b"),
        ("onnxruntime", "/root/Sqrt", "root", "b"),
    ]
    # b's outputs are NaN everywhere: its cosine and error are n/a, so those checks fail there too (issue #30)
    assert report.samples[1].failed == (
        "outputs/min-cosine/torch~onnxruntime",
        "outputs/rtol/torch~onnxruntime",
        "outputs/finite/torch~onnxruntime",
    )
    assert not report.samples[0].failed


def test_every_random_sample_with_nan_outputs_fails() -> None:
    from tests.nonfinite_models import SEQUENCE_SHAPE, log_of_input

    report = trtdiff.compare(log_of_input(), input_shapes=[SEQUENCE_SHAPE], gate=GateOptions(num_samples=3))
    finite = next(c for c in report.checks if c.threshold == "finite")
    assert finite.failing_samples == ("sample-0", "sample-1", "sample-2") and not report.passed
    allowed = trtdiff.compare(
        log_of_input(), input_shapes=[SEQUENCE_SHAPE], gate=GateOptions(num_samples=3), allow_nonfinite=True
    )
    assert allowed.passed and [e.onnx_node for e in allowed.non_finite] == ["/Log", "/Log"]
