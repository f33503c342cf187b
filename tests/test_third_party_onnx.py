"""ONNX files trtdiff did not write: compared whenever ONNX Runtime runs them, refused only with its reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_output import without_progress
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import trtdiff
from trtdiff.backends import base
from trtdiff.cli.app import main
from trtdiff.errors import BackendError

BACKENDS = ["onnxruntime", "onnx-reference"]


def _save(model: onnx.ModelProto, path: Path, **kwargs: object) -> Path:
    onnx.save(model, str(path), **kwargs)  # type: ignore[arg-type]
    return path


def _conv_model(batch: int | str = 1, graph_name: str = "g", value_info: bool = True) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes,
        graph_name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])],
        [weight],
        value_info=[onnx.ValueInfoProto(name="c")] if value_info else [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_value_info_without_shapes_and_an_unnamed_graph_are_compared(tmp_path: Path) -> None:
    path = _save(_conv_model(graph_name=""), tmp_path / "odd.onnx")
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(str(path))  # the checker complains; ONNX Runtime runs it
    report = trtdiff.compare(path, backends=BACKENDS)
    assert report.passed and [layer.tensor for layer in report.layers] == ["c", "y"]
    assert any("ONNX checker" in note for note in report.notes)


def test_a_dynamic_batch_defaults_to_1_with_a_note(tmp_path: Path) -> None:
    path = _save(_conv_model(batch="N"), tmp_path / "dynamic.onnx")
    report = trtdiff.compare(path, backends=BACKENDS)
    assert report.passed and report.inputs == {"x": (1, 3, 8, 8)}
    assert any("dynamic dimensions set to 1" in note and "x:1x3x8x8" in note for note in report.notes)
    given = trtdiff.compare(path, backends=BACKENDS, input_shapes=["x:2x3x8x8"])
    assert given.inputs == {"x": (2, 3, 8, 8)} and not any("dynamic" in note for note in given.notes)


def test_a_scalar_input_is_fed(tmp_path: Path) -> None:
    nodes = [helper.make_node("Mul", ["x", "s"], ["y"]), helper.make_node("Relu", ["y"], ["z"])]
    graph = helper.make_graph(
        nodes,
        "scalar",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
    )
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "scalar.onnx")
    report = trtdiff.compare(path, backends=BACKENDS)
    assert report.passed and report.inputs == {"x": (2, 3), "s": ()}
    result = CliRunner().invoke(
        main,
        [
            "compare",
            str(path),
            "--backends",
            "onnxruntime,onnx-reference",
            "--input-shape",
            "s:scalar",
            "--input-shape",
            "x:2x3",
        ],
    )
    assert result.exit_code == 0, result.output


def test_external_data_and_models_past_the_protobuf_limit_run_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _save(
        _conv_model(), tmp_path / "external.onnx", save_as_external_data=True, size_threshold=0, location="external.bin"
    )
    assert (tmp_path / "external.bin").is_file()
    assert trtdiff.compare(path, backends=BACKENDS).passed
    # Past protobuf's 2 GB an in-memory copy cannot be serialized: the session is built from a file instead.
    monkeypatch.setattr(base, "PROTOBUF_LIMIT", 0)
    report = trtdiff.compare(path, backends=BACKENDS)
    assert report.passed and len(report.layers) == 2


def test_a_file_onnx_runtime_refuses_is_one_line_with_its_reason(tmp_path: Path) -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"])  # w is neither an input nor an initializer
    graph = helper.make_graph(
        node and [node],
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "bad.onnx")
    with pytest.raises(BackendError, match="ONNX Runtime cannot load"):
        trtdiff.compare(path, backends=BACKENDS)
    result = CliRunner().invoke(main, ["compare", str(path), "--backends", "onnxruntime,onnx-reference"])
    assert result.exit_code == 2 and len(without_progress(result.stderr).strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
def test_half_precision_inputs_get_random_values(tmp_path: Path, elem: int) -> None:
    nodes = [
        helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["y"], ["z"]),
        helper.make_node("Cast", ["z"], ["w"], to=elem),
    ]
    graph = helper.make_graph(
        nodes,
        "half",
        [helper.make_tensor_value_info("x", elem, [2, 3])],
        [helper.make_tensor_value_info("w", elem, [2, 3])],
    )
    path = _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "half.onnx")
    report = trtdiff.compare(path, backends=BACKENDS)
    assert report.passed and [layer.tensor for layer in report.layers] == ["y", "z", "w"]
    assert report.layers[0].pairs[next(iter(report.layers[0].pairs))].ref_max_abs > 0  # not all zeros
