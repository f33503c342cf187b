"""Quantized (Q/DQ) models against their float PyTorch model: DequantizeLinear outputs paired, judged in steps.

The models are built here (tests/quant_models.py: a small CNN, onnxruntime.quantization.quantize_static
with a few random calibration batches). Before: every DequantizeLinear output was not compared,
a clean INT8 model failed with every Conv a culprit, and a doubled DequantizeLinear scale was
blamed on the nodes after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import trtdiff
from tests.quant_models import quantized, scale_dequantize, small_cnn
from trtdiff.analysis.noise import is_noise, quant_steps
from trtdiff.cli.app import main
from trtdiff.errors import ConfigError, OptionError
from trtdiff.options import CompareOptions
from trtdiff.options.config import load_config
from trtdiff.pairing.qdq import quantizations, unquantized, weight_dequantizers
from trtdiff.report import ErrorFigures, Report
from trtdiff.source.onnx_graph import load_graph

SHAPE = ["1x3x16x16"]
BACKENDS = ("torch", "onnxruntime")
DOUBLED = "/relu_1/Relu_output_0_DequantizeLinear"


@pytest.fixture(scope="module")
def qdq_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("qdq")
    int8 = quantized(small_cnn(), folder, "int8", "int8")
    int16 = quantized(small_cnn(), folder, "int16", "int16")
    doubled = folder / "doubled.onnx"
    assert scale_dequantize(int8, DOUBLED + "_Output", 2.0, doubled) == DOUBLED
    return {"int8": int8, "int16": int16, "doubled": doubled}


@pytest.mark.parametrize("kind", ["int8", "int16"])
def test_a_clean_quantized_model_passes_at_the_defaults(qdq_files: dict[str, Path], kind: str) -> None:
    report = trtdiff.compare(small_cnn(), onnx=str(qdq_files[kind]), input_shapes=SHAPE, backends=BACKENDS)
    assert report.passed and not report.culprits, [c.onnx_node for c in report.culprits]
    dequantized = [layer for layer in report.layers if layer.op_type == "DequantizeLinear"]
    assert len(dequantized) == 5  # every activation DequantizeLinear compared (the input's, 3 inside, the output)
    for layer in dequantized:
        (metrics,) = layer.pairs.values()
        assert metrics.quant_steps is not None and metrics.quant_steps < 8
        assert metrics.rel_err is not None and (kind == "int16" or metrics.rel_err > 1e-3)  # INT8: over float rtol
    # the DQ after conv1 stands for PyTorch's relu, which quantize_static folded into the Q/DQ
    first = next(layer for layer in dequantized if layer.onnx_node == "/relu/Relu_output_0_DequantizeLinear")
    assert first.pairing == "quantized" and first.torch_op is not None and "relu" in first.torch_op
    # against the float model, a quantized graph's outputs are judged by their direction (issue 37)
    (check,) = [c for c in report.checks if c.threshold == "quant_min_cosine" and c.scope == "outputs"]
    assert check.passed and check.metric == "cosine" and check.limit == 0.99
    outputs = [c for c in report.checks if c.scope == "outputs"]
    assert not [c for c in outputs if c.threshold in ("min_cosine", "rtol", "max_quant_steps")]


def test_a_doubled_dequantize_scale_is_the_culprit_at_that_dequantize(
    qdq_files: dict[str, Path], tmp_path: Path
) -> None:
    out, excluded = tmp_path / "r.json", tmp_path / "exclude.txt"
    args = ["compare", "tests.quant_models:small_cnn", "--onnx", str(qdq_files["doubled"]), "--input-shape", SHAPE[0]]
    args += ["--exclude-list", str(excluded)]
    result = CliRunner().invoke(main, [*args, "--backends", "torch,onnxruntime", "--json", str(out)])
    assert result.exit_code == 1, result.stdout
    report = Report.from_json(out.read_text())
    (culprit,) = report.culprits
    assert culprit.onnx_node == DOUBLED and culprit.op_type == "DequantizeLinear"
    assert culprit.local.quant_steps is not None and culprit.local.quant_steps > 50
    assert culprit.quantization.startswith(f"{DOUBLED} (scale ") and "zero point -128, int8" in culprit.quantization
    text = " ".join(result.stdout.split())
    assert f"CULPRIT: {DOUBLED}" in text and "quantization steps vs accumulated" in text
    assert "quant-min-cosine 0.99 on final outputs" in text
    # the node reading that DequantizeLinear's output, as ModelOpt's nodes_to_exclude takes it
    assert culprit.exclude == ("^/Add\\Z",) and excluded.read_text() == "^/Add\\Z\n"
    assert "keep in higher precision (ModelOpt nodes_to_exclude, --exclude-list): ^/Add\\Z" in text
    # and the list is checked: with the Q/DQ in front of /Add removed, the outputs pass again
    checked = (
        "exclusion list checked: with the Q/DQ in front of /Add removed (their float weights restored where known)"
    )
    assert f"{checked} the final outputs pass every check" in report.notes
    older = json.loads(out.read_text())  # a report written before the fields reads them as absent
    for entry in older["culprits"]:
        del entry["quantization"]
        del entry["exclude"]
        del entry["exclude_nodes"]
        del entry["local"]["quant_steps"]
    assert Report.from_json(json.dumps(older)).culprits[0].quantization == ""


def test_the_graph_says_what_is_quantized(qdq_files: dict[str, Path]) -> None:
    graph = load_graph(qdq_files["int8"])
    found = quantizations(graph)
    assert found["/relu/Relu_output_0"] == found["/relu/Relu_output_0_DequantizeLinear_Output"]
    assert found["x_DequantizeLinear_Output"].dtype == "int8"
    assert len(weight_dequantizers(graph)) == 6  # weights and biases: constants, listed, not compared
    assert quantizations(load_graph(qdq_files["int8"].with_name("float.onnx"))) == {}  # FP32: nothing


def test_each_quantized_weight_is_compared_with_its_pytorch_parameter(
    qdq_files: dict[str, Path], tmp_path: Path
) -> None:
    """A weight quantized to the nearest step is within half a step of its parameter; one whose scale was
    doubled afterwards (its own initializer) is off by up to half its range, and the weights check names it."""
    clean = trtdiff.compare(small_cnn(), onnx=str(qdq_files["int8"]), input_shapes=SHAPE, backends=BACKENDS)
    assert len(clean.weights) == 6 and all(w.parameter is not None for w in clean.weights)
    assert all(w.steps is not None and w.steps <= 0.5 + 1e-6 for w in clean.weights)
    (check,) = [c for c in clean.checks if c.scope == "weights"]
    assert check.passed and check.id == "weights/max-weight-steps/torch" and check.compared == 6

    model = onnx.load(str(qdq_files["int8"]))
    init = next(i for i in model.graph.initializer if i.name == "conv2.weight_scale")
    init.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init) * np.float32(2), init.name))
    doubled = tmp_path / "weight_doubled.onnx"
    onnx.save(model, str(doubled))
    report = trtdiff.compare(small_cnn(), onnx=str(doubled), input_shapes=SHAPE, backends=BACKENDS)
    (check,) = [c for c in report.checks if c.scope == "weights"]
    assert not check.passed and check.failing_samples == ("conv2.weight_DequantizeLinear",)
    assert check.worst is not None and check.worst > 50  # each weight off by itself: up to 127 steps
    assert not report.passed


def test_unquantizing_a_node_rewires_its_inputs_to_the_float_tensors(qdq_files: dict[str, Path]) -> None:
    """As ModelOpt's nodes_to_exclude leaves a node: its activation inputs unquantized, a clipping Q/DQ (zero point
    at the type's lowest value, where quantize_static folded a Relu) replaced by a Relu, the Q/DQ nothing reads
    any more dropped, the weights' DequantizeLinears kept."""
    graph = load_graph(qdq_files["int8"])
    model = unquantized(graph, ["/Add"])
    nodes = {node.name: node for node in model.graph.node}
    relus = [f"{t}/trtdiff.unquantized_relu" for t in ("/relu_1/Relu_output_0", "/relu/Relu_output_0")]
    assert list(nodes["/Add"].input) == relus and all(nodes[r].op_type == "Relu" for r in relus)
    assert f"{DOUBLED}" not in nodes  # read by /Add alone: dropped with its QuantizeLinear
    assert "/relu/Relu_output_0_DequantizeLinear" in nodes  # still read by conv2
    assert len([n for n in nodes.values() if n.op_type == "DequantizeLinear" and "weight" in n.name]) == 3
    onnx.checker.check_model(model)


def test_the_step_figure_and_its_noise_level() -> None:
    assert quant_steps(0.02, 0.004) == pytest.approx(5.0) and quant_steps(0.0, 0.0) == 0.0
    assert is_noise(ErrorFigures(0.9, 0.1, 0.5, quant_steps=0.9), "float32")  # within a step: quantization noise
    assert not is_noise(ErrorFigures(1.0, 0.1, 0.0, quant_steps=3.0), "float32")
    assert is_noise(ErrorFigures(1.0, 4.0e-7, 4 * 2.0**-23), "float32")  # float figures unchanged


def test_a_config_file_cannot_name_the_exclude_list(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.trtdiff]\nexclude_list = "x.txt"\n')
    with pytest.raises(ConfigError, match="command line only"):
        load_config(start=tmp_path)


def test_max_quant_steps_is_read_from_the_command_line_and_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.trtdiff]\nmax_quant_steps = 3\n')
    config = load_config(start=tmp_path)
    assert config is not None and config.values == {"max_quant_steps": 3}
    with pytest.raises(OptionError, match="must be 0 or more"):
        CompareOptions().with_fields(max_quant_steps=-1.0).validate()
    result = CliRunner().invoke(main, ["compare", "m.pt", "--max-quant-steps", "-2"])
    assert result.exit_code == 2 and "--max-quant-steps" in result.output
