"""ModelOpt's quantized and FP16 files (tests/fixtures/modelopt, issue 37), judged as TensorRT users bring them.

Every clean file ModelOpt 0.47.0 made passes against the PyTorch model it came from; every planted fault
fails with the faulty node first: an activation DequantizeLinear's scale at that DQ, a weight's at the
node whose inputs ModelOpt quantizes (the exclusion list ModelOpt reads), a LayerNorm weight at the
LayerNorm; the scales calibrated on inputs x100 are named as too coarse. The fixtures and how they were
made: tests/fixtures/modelopt/PROVENANCE.md.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from modelopt_models import MODELS

import trtdiff
from trtdiff.analysis.quant import COARSE_GRID
from trtdiff.errors import OnnxFileError
from trtdiff.report import Report

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "modelopt"
FIXTURES: dict[str, dict[str, Any]] = {
    f["file"]: f
    for f in json.loads((FOLDER / "PROVENANCE.json").read_text())["fixtures"]
    if f["file"].endswith(".onnx")
}
COARSE = "cnn_ts17_int8_fp32_max_calib_x100.onnx"
TORCH_INT4 = "llm_ts17_torch_int4.onnx"  # trt::DequantizeLinear, read as int4 QuantizeLinear + DequantizeLinear
CLEAN = sorted(n for n, f in FIXTURES.items() if f["kind"] != "fp32" and not f["fault"] and n != COARSE)
FAULTS = sorted(n for n, f in FIXTURES.items() if f["fault"])
WEIGHT_FAULTS = [n for n in FAULTS if "weight_ch" in n or "block" in n]


def compare(name: str, **options: Any) -> Report:
    fixture = FIXTURES[name]
    return trtdiff.compare(MODELS[fixture["model"]][0](), onnx=FOLDER / name, **options)


@pytest.mark.parametrize("name", CLEAN)
def test_every_clean_file_passes(name: str) -> None:
    report = compare(name)
    assert report.passed, [c.id for c in report.checks if not c.passed]
    assert not report.culprits


@pytest.mark.parametrize("name", ["cnn_ts17_int8.onnx", "llm_ts17_fp8.onnx", "llm_ts17_int4_awq_clip.onnx"])
def test_clean_files_pass_on_an_input_calibration_never_saw(name: str) -> None:
    """Calibration sample 0 is trtdiff's seed-0 input; seed 1000 is none of the 16 samples."""
    assert compare(name, seed=1000).passed


@pytest.mark.parametrize("name", FAULTS)
def test_every_planted_fault_is_the_first_culprit(name: str) -> None:
    fault = FIXTURES[name]["fault"]
    report = compare(name)
    assert not report.passed and report.culprits
    first = report.culprits[0]
    if fault["op_type"] == "DequantizeLinear" and name not in WEIGHT_FAULTS:  # an activation's scale: at its DQ
        assert first.onnx_node == fault["node"]
        assert list(first.exclude_nodes) == fault["consumers"]
    elif name in WEIGHT_FAULTS:  # a weight's: the node ModelOpt quantizes, and the weights check names the DQ
        assert first.exclude_nodes and set(first.exclude_nodes) <= set(fault["consumers"])
        weights = next(c for c in report.checks if c.scope == "weights")
        assert not weights.passed and weights.worst_sample == fault["node"]
    else:
        assert first.onnx_node == fault["node"]


@pytest.mark.parametrize("name", WEIGHT_FAULTS)
def test_the_exclusion_list_of_a_weight_fault_is_checked_with_the_float_weight_restored(name: str) -> None:
    (note,) = [n for n in compare(name).notes if n.startswith("exclusion list checked")]
    assert "float weights restored" in note and note.endswith("the final outputs pass every check")


def test_scales_calibrated_on_inputs_x100_are_named_too_coarse_at_their_dequantize_linear() -> None:
    report = compare(COARSE)
    assert not report.passed
    assert any(not c.passed for c in report.checks if c.id.startswith("outputs/quant-min-cosine/"))
    first = report.culprits[0]
    assert first.onnx_node == "x_DequantizeLinear"
    layer = next(layer for layer in report.layers if layer.tensor == first.tensor)
    (reason,) = [r for m in layer.pairs.values() for r in m.reasons if r.metric == "quant_scale"]
    assert reason.limit == COARSE_GRID and reason.value < 1 / 50
    assert "coarser than they need" in (reason.detail or "")


def test_folded_weights_are_compared_with_the_batch_norm_folded_in() -> None:
    """The TorchScript export names the folded conv weights onnx::Conv_NN; each is within half a step."""
    weights = compare("cnn_ts17_int8_fp32_max_dq_only.onnx").weights
    assert [w.parameter for w in weights] == [f"conv{i}.weight (bn{i} folded in)" for i in range(1, 5)]
    assert all(w.steps is not None and w.steps <= 0.5 + 1e-6 for w in weights)


def test_the_pytorch_routes_int4_weights_are_read_as_standard_int4_blocks() -> None:
    """trt::DequantizeLinear(float weight in rows of 128, scale (rows, 1)): each weight quantized to int4 and back
    at opset 21, compared with its float values (within half a step), the output's cosine that of INT4."""
    report = compare(TORCH_INT4)
    assert report.passed
    assert any(n.startswith("onnx: read 6 trt::DequantizeLinear") for n in report.notes)
    assert len(report.weights) == 6 and all(w.steps is not None and w.steps <= 0.5 + 1e-6 for w in report.weights)
    assert all("int4" in w.quantization for w in report.weights)


def test_a_trt_dequantize_linear_of_another_form_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """A scale of two values per row does not say which blocks they scale: refused (exit 2), not guessed."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(FOLDER / TORCH_INT4))
    dequantize = next(n for n in model.graph.node if n.domain == "trt")
    constant = next(n for n in model.graph.node if n.output[0] == dequantize.input[1])
    scale = numpy_helper.to_array(constant.attribute[0].t)
    constant.attribute[0].t.CopyFrom(numpy_helper.from_array(np.repeat(scale, 2, axis=1)))
    onnx.save(model, str(tmp_path / "two_scales.onnx"))
    with pytest.raises(OnnxFileError, match=r"trt::DequantizeLinear.*modelopt\.onnx\.quantization"):
        trtdiff.compare(MODELS["llm"][0](), onnx=tmp_path / "two_scales.onnx")


@pytest.mark.parametrize("name", ["cnn_ts17_autocast_fp16.onnx", "llm_ts17_autocast_fp16.onnx"])
def test_an_autocast_file_with_float16_inputs_gets_its_float16_benchmark(name: str) -> None:
    """Its inputs are float16: the benchmark (float32 kernels, float16 rounding on the CPU) runs on them."""
    report = compare(name)
    assert report.passed
    assert not [note for note in report.notes if "benchmark of the PyTorch model could not run" in note]


def test_a_weight_scale_coarse_in_both_its_quantize_and_dequantize_is_named() -> None:
    """One scale serves a weight's QuantizeLinear and DequantizeLinear (ModelOpt's dynamo INT8 file; the PyTorch
    route's INT4): four times too large in one channel, every value stays within half a (coarser) step of the
    float weight, but reaches a quarter of the grid: the weights check names the DequantizeLinear and why."""
    import onnx
    from onnx import numpy_helper

    from trtdiff.analysis.quant import WEIGHT_GRID

    model = onnx.load(str(FOLDER / "cnn_dynamo18_int8_fp32_max.onnx"))
    init = next(i for i in model.graph.initializer if i.name == "conv1.weight_scale")
    scale = numpy_helper.to_array(init).copy()
    scale[3] *= 4
    init.CopyFrom(numpy_helper.from_array(scale, init.name))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "coarse.onnx"
        onnx.save(model, str(path))
        report = trtdiff.compare(MODELS["cnn"][0](), onnx=path)
    weights = next(c for c in report.checks if c.scope == "weights")
    assert not weights.passed and weights.worst_sample == "conv1.weight_DequantizeLinear"
    (weight,) = [w for w in report.weights if w.fault]
    assert weight.fault == (
        "its scale conv1.weight_scale is 4x coarser than the values of channel 3 of 16 need: they reach 1/4 of "
        f"its grid, < 1/{1 / WEIGHT_GRID:.0f}"
    )
    assert weight.steps == math.inf and not report.passed
