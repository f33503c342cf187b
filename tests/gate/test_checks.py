"""The CI gate: checks over several samples, exit codes at the threshold boundary, mIoU tallies."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import trtdiff
from trtdiff.cli.app import main
from trtdiff.errors import OptionError
from trtdiff.gate.checks import SegmentationTally
from trtdiff.options import GateOptions
from trtdiff.report import BackendPair, Thresholds

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


def test_exit_code_flips_exactly_at_the_cosine_threshold(opset10_gate) -> None:
    worst = next(c for c in opset10_gate.checks if c.id == "outputs/min-cosine/torch~onnxruntime").worst
    common = ["compare", FACTORY, "--input-shape", SHAPE, "--opset", "10", "--num-samples", "3", "--rtol", "1", "-q"]
    at = CliRunner().invoke(main, [*common, "--min-cosine", repr(worst)])
    above = CliRunner().invoke(main, [*common, "--min-cosine", repr(float(np.nextafter(worst, 1.0)))])
    assert at.exit_code == 0, at.output
    assert above.exit_code == 1 and "FAIL: 1 of 2 checks failed: outputs/min-cosine/torch~onnxruntime" in above.stdout


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
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "odd" in lines[0] and "--labels" in lines[0], result.stderr
