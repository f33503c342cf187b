"""A Q/DQ scale that is zero, negative or not finite is itself the finding, named at its DequantizeLinear.

The models are the tests' INT8 CNN (tests/quant_models.py) with one scale edited in the file. Before: a
zero activation scale made the Conv before it the first culprit ("inf steps" at cosine 0.99996, and
that Conv in the exclusion list); a zero weight scale passed the weights check with 0.0 steps (each
error divided by an inf step).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import trtdiff
from tests.quant_models import quantized, small_cnn
from trtdiff.cli.app import main
from trtdiff.render.format import check_message
from trtdiff.report import Report
from trtdiff.source.qdq_scales import fault_text

SHAPE = ["1x3x16x16"]
BACKENDS = ("torch", "onnxruntime")
RELU = "/relu/Relu_output_0"
DQ, Q = f"{RELU}_DequantizeLinear", f"{RELU}_QuantizeLinear"
READERS = ("^/conv2/Conv\\Z", "^/Add\\Z")  # what ModelOpt leaves unquantized to remove that Q/DQ
WEIGHT = "conv2.weight_DequantizeLinear"


@pytest.fixture(scope="module")
def int8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return quantized(small_cnn(), tmp_path_factory.mktemp("scales"))


def _edited(path: Path, out: Path, node: str, scale: np.ndarray | float, *, axis: int | None = None) -> Path:
    """`path` with `node`'s scale replaced by `scale`, in an initializer of its own (the one it shared stays)."""
    model = onnx.load(str(path))
    target = next(n for n in model.graph.node if n.name == node)
    value = np.asarray(scale, dtype=np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(value, f"{target.input[1]}_edited"))
    target.input[1] = f"{target.input[1]}_edited"
    if axis is not None:  # per channel: a zero point per channel too
        zero = f"{target.input[2]}_per_channel"
        model.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(value.size, np.int8), zero))
        target.input[2] = zero
        target.attribute.append(onnx.helper.make_attribute("axis", axis))
    onnx.save(model, str(out))
    return out


def _scale(path: Path, name: str) -> np.ndarray:
    model = onnx.load(str(path))
    return onnx.numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == name))


def test_a_zero_activation_scale_is_the_culprit_at_its_dequantize(int8: Path, tmp_path: Path) -> None:
    """Q and DQ share the scale, as quantize_static writes them: that scale zeroed in the file."""
    model = onnx.load(str(int8))
    init = next(i for i in model.graph.initializer if i.name == f"{RELU}_scale")
    init.CopyFrom(onnx.numpy_helper.from_array(np.zeros((), np.float32), init.name))
    zeroed, saved, excluded = tmp_path / "zero.onnx", tmp_path / "r.json", tmp_path / "exclude.txt"
    onnx.save(model, str(zeroed))
    args = ["compare", "--no-config", "tests.quant_models:small_cnn", "--onnx", str(zeroed), "--input-shape", SHAPE[0]]
    args += ["--backends", ",".join(BACKENDS), "--json", str(saved), "--exclude-list", str(excluded)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    report = Report.from_json(saved.read_text())
    assert [c.onnx_node for c in report.culprits] == [DQ]  # not /conv1/Conv, whose output is right
    (culprit,) = report.culprits
    cause = f"its scale {RELU}_scale is 0: every value dequantizes to 0"
    assert culprit.quantization.endswith(cause) and culprit.advice_code == "qdq-scale"
    assert culprit.advice.startswith(f"DequantizeLinear {DQ}: {cause}; give it a positive, finite scale")
    assert culprit.exclude == READERS and excluded.read_text() == "".join(f"{p}\n" for p in READERS)
    text = " ".join(result.stdout.split())
    assert f"CULPRIT: {DQ}" in text and "CULPRIT: /conv1/Conv" not in text and cause in text
    conv1 = next(layer for layer in report.layers if layer.onnx_node == "/conv1/Conv")
    assert not any(m.diverged for m in conv1.pairs.values())  # not judged in steps of a zero scale
    assert any(n.startswith("exclusion list checked") and n.endswith("pass every check") for n in report.notes)


@pytest.mark.parametrize(
    ("node", "factor", "cause"),
    [
        (DQ, 0.0, f"its scale {RELU}_scale_edited is 0: every value dequantizes to 0"),
        (DQ, -1.0, f"its scale {RELU}_scale_edited is -0.0"),  # then the digits the file has, and:
        (DQ, -1.0, "every value dequantizes with its sign flipped"),
        (DQ, math.nan, f"its scale {RELU}_scale_edited is nan: every value dequantizes to NaN"),
        (Q, 0.0, f"the scale of its QuantizeLinear {Q}, {RELU}_scale_edited, is 0: every value quantizes to the type"),
    ],
)
def test_a_scale_zero_negative_or_nan_names_the_dequantize(
    int8: Path, tmp_path: Path, node: str, factor: float, cause: str
) -> None:
    """The DequantizeLinear's own scale, or its QuantizeLinear's, edited alone."""
    edited = _edited(int8, tmp_path / "edited.onnx", node, _scale(int8, f"{RELU}_scale") * factor)
    report = trtdiff.compare(small_cnn(), onnx=str(edited), input_shapes=SHAPE, backends=BACKENDS)
    assert not report.passed and [c.onnx_node for c in report.culprits] == [DQ]
    (culprit,) = report.culprits
    assert cause in culprit.quantization and culprit.advice_code == "qdq-scale", culprit.quantization
    assert culprit.exclude == READERS
    layer = next(layer for layer in report.layers if layer.onnx_node == DQ)
    assert any(reason.metric == "quant_scale" for m in layer.pairs.values() for reason in m.reasons)


def test_a_zero_scale_is_an_export_problem_where_the_spec_evaluator_runs_it(tmp_path: Path) -> None:
    """INT16 Q/DQ is written at opset 21, which the ONNX reference evaluator runs: it computes the zeros too, so
    the file is at fault (the scale's own reason, which holds whatever the values, decides nothing there)."""
    int16 = quantized(small_cnn(), tmp_path, "int16", "int16")
    zeroed = _edited(int16, tmp_path / "zero16.onnx", DQ, 0.0)
    report = trtdiff.compare(small_cnn(), onnx=str(zeroed), input_shapes=SHAPE, backends=BACKENDS)
    (culprit,) = report.culprits
    assert culprit.onnx_node == DQ and culprit.verdict == "export", culprit.verdict


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_zero_weight_scale_fails_the_weights_check_naming_its_dequantize(
    int8: Path, tmp_path: Path, per_channel: bool
) -> None:
    scale = _scale(int8, "conv2.weight_scale")
    if per_channel:  # one scale per output channel, the fourth zero
        scale = np.full(8, scale, np.float32)
        scale[3] = 0.0
    else:
        scale = np.zeros((), np.float32)
    path = _edited(int8, tmp_path / "weight.onnx", WEIGHT, scale, axis=0 if per_channel else None)
    report = trtdiff.compare(small_cnn(), onnx=str(path), input_shapes=SHAPE, backends=BACKENDS)
    (check,) = [c for c in report.checks if c.scope == "weights"]
    assert not check.passed and check.failing_samples == (WEIGHT,) and check.worst == math.inf
    (weight,) = [w for w in report.weights if w.fault]
    where = " at channel 3 of 8: every value there" if per_channel else ": every value"
    cause = f"its scale conv2.weight_scale_edited is 0{where} dequantizes to 0"
    assert weight.node == WEIGHT and weight.steps == math.inf and weight.fault == cause
    assert check_message(check, report).endswith(f"worst inf steps ({WEIGHT}: {cause})")
    # the culprit is the Conv that reads the weight, and its fix names the DequantizeLinear and why
    (culprit,) = report.culprits
    assert culprit.onnx_node == "/conv2/Conv" and culprit.advice_code == "qdq-scale"
    assert culprit.advice.startswith(f"DequantizeLinear {WEIGHT}: {cause}; give it a positive, finite scale")
    assert culprit.exclude == ("^/conv2/Conv\\Z",)
    # the check keeps /conv2/Conv in float, its weight read as PyTorch's conv2.weight: the outputs then pass
    (note,) = [n for n in report.notes if n.startswith("exclusion list checked")]
    assert "float weights restored" in note and note.endswith("the final outputs pass every check")


def test_what_a_faulty_scale_does() -> None:
    assert fault_text(np.float32(0.01), "DequantizeLinear") is None
    assert fault_text(np.array([0.1, 0.0, 0.2, -1.0]), "DequantizeLinear") == (
        "is 0 at channel 1 and 1 more of 4: every value there dequantizes to 0"
    )
    assert (
        fault_text(np.float32(np.inf), "QuantizeLinear") == "is inf: every value quantizes to the zero point (x / inf)"
    )
    assert fault_text(np.array([-0.5]), "QuantizeLinear") == "is -0.5: every value quantizes with its sign flipped"
