"""OnnxReferenceBackend: the ONNX spec evaluator as a backend, on hand-built files and the example model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import trtdiff
from trtdiff.backends.onnx_reference import OnnxReferenceBackend
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.recorded import RecordedBackend, record
from trtdiff.backends.registry import choose_backends, open_backends
from trtdiff.cli.app import main
from trtdiff.errors import BackendError
from trtdiff.options import DEFAULT_BACKENDS, KNOWN_BACKENDS, ONNX_BACKENDS, BackendOptions
from trtdiff.report import BackendPair
from trtdiff.source.onnx_graph import GraphInfo, load_graph

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
TENSORS = ["/conv/Conv_output_0", "/act/Relu_output_0", "y"]
REF_PAIR = BackendPair("onnxruntime", "onnx-reference")


def _save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _conv_relu_resize() -> onnx.ModelProto:
    """x (1x2x5x5) -> Conv 3x3 pad 1 -> Relu -> Resize bilinear x2 (half_pixel) -> y (1x3x10x10), opset 13."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], [TENSORS[0]], name="/conv/Conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [TENSORS[0]], [TENSORS[1]], name="/act/Relu"),
        helper.make_node(
            "Resize",
            [TENSORS[1], "", "scales"],
            ["y"],
            name="/up/Resize",
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_relu_resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 10, 10])],
        initializer=[
            numpy_helper.from_array(weight, "w"),
            numpy_helper.from_array(bias, "b"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        ],
        value_info=[
            helper.make_tensor_value_info(TENSORS[0], TensorProto.FLOAT, [1, 3, 5, 5]),
            helper.make_tensor_value_info(TENSORS[1], TensorProto.FLOAT, [1, 3, 5, 5]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(_conv_relu_resize(), tmp_path_factory.mktemp("reference") / "conv_relu_resize.onnx")


@pytest.fixture(scope="module")
def graph(model_file: Path) -> GraphInfo:
    return load_graph(model_file)


@pytest.fixture(scope="module")
def backend(graph: GraphInfo) -> OnnxReferenceBackend:
    return OnnxReferenceBackend(graph)


@pytest.fixture
def feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)}


def _collect(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for chunk in chunks:
        assert not set(chunk) & set(values), "a tensor came back twice"
        values.update(chunk)
    return values


def test_name_describe_and_available(backend: OnnxReferenceBackend) -> None:
    assert backend.name == "onnx-reference"
    assert backend.describe() == f"onnx.reference (onnx {onnx.__version__}, spec evaluator on the CPU)"
    assert backend.available() == set(TENSORS)


def test_every_intermediate_equals_onnxruntime(
    backend: OnnxReferenceBackend, graph: GraphInfo, feeds: dict[str, np.ndarray]
) -> None:
    chunks = list(backend.run(feeds, TENSORS))
    assert len(chunks) == 1 and list(chunks[0]) == TENSORS
    expected = _collect(list(OnnxRuntimeBackend(graph).run(feeds, TENSORS)))
    for name in TENSORS:
        value = chunks[0][name]
        assert isinstance(value, np.ndarray) and value.dtype == np.float32, name
        assert value.shape == expected[name].shape, name
        np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-5, err_msg=name)
    assert chunks[0]["y"].shape == (1, 3, 10, 10)
    assert (chunks[0][TENSORS[1]] >= 0).all() and (chunks[0][TENSORS[0]] < 0).any()


def test_chunks_follow_max_bytes_yield_each_tensor_once_and_evaluate_once(
    backend: OnnxReferenceBackend, graph: GraphInfo, feeds: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = {t: n for t in TENSORS if (n := graph.tensor_type(t).nbytes()) is not None}
    assert sizes == {TENSORS[0]: 300, TENSORS[1]: 300, "y": 1200}
    whole = _collect(list(backend.run(feeds, TENSORS)))
    evaluations: list[list[str]] = []
    evaluate = backend._evaluator.run

    def counted(names: list[str], inputs: dict[str, np.ndarray]) -> Any:
        evaluations.append(list(names))
        return evaluate(names, inputs)

    monkeypatch.setattr(backend._evaluator, "run", counted)
    chunks = list(backend.run(feeds, TENSORS, sizes=sizes, max_bytes=600))
    assert [list(c) for c in chunks] == [TENSORS[:2], ["y"]]
    assert evaluations == [TENSORS]
    values = _collect(chunks)
    for name in TENSORS:
        np.testing.assert_array_equal(values[name], whole[name], err_msg=name)
    assert [list(c) for c in backend.run(feeds, TENSORS, sizes=sizes, max_bytes=1)] == [[t] for t in TENSORS]
    assert len(evaluations) == 2


def test_names_it_cannot_return_are_skipped_and_nothing_wanted_runs_nothing(
    backend: OnnxReferenceBackend, feeds: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert list(_collect(list(backend.run(feeds, ["x", "w", "no_such_tensor", "y"])))) == ["y"]
    monkeypatch.setattr(backend._evaluator, "run", lambda *_: pytest.fail("evaluated with nothing wanted"))
    assert list(backend.run(feeds, [])) == []
    assert list(backend.run(feeds, ["x", "no_such_tensor"])) == []


def test_custom_domain_op_raises_backend_error_naming_the_node(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("FancyBlur", ["r"], ["y"], name="mystery_blur", domain="com.example.ops"),
    ]
    graph_proto = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(
        graph_proto, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example.ops", 1)]
    )
    graph = load_graph(_save(model, tmp_path / "custom_op_model.onnx"))
    with pytest.raises(BackendError) as caught:
        OnnxReferenceBackend(graph)
    message = str(caught.value)
    assert "custom_op_model.onnx" in message
    assert "node mystery_blur" in message
    assert "com.example.ops::FancyBlur" in message


def test_run_failure_raises_backend_error_naming_the_file_and_node(backend: OnnxReferenceBackend) -> None:
    with pytest.raises(BackendError) as caught:
        list(backend.run({"x": np.zeros((1, 4, 5, 5), np.float32)}, ["y"]))
    message = str(caught.value)
    assert "conv_relu_resize.onnx" in message
    assert re.search(r"\(node /conv/Conv, op Conv\)", message), message


@pytest.mark.parametrize(("mode", "scales"), [("linear", [1, 1, 2, 2]), ("nearest", [1, 1, 2, 3])])
def test_opset10_resize_follows_its_own_spec_like_onnxruntime(tmp_path: Path, mode: str, scales: list[float]) -> None:
    """Resize-10 takes (X, scales) and maps output pixel i to input i / scale; the evaluator alone reads Resize-11."""
    node = helper.make_node("Resize", ["x", "scales"], ["y"], name="/up/Resize", mode=mode)
    graph_proto = helper.make_graph(
        [node],
        "resize10",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(scales, np.float32), "scales")],
    )
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 10)])
    graph = load_graph(_save(model, tmp_path / "resize10.onnx"))
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    got = next(OnnxReferenceBackend(graph).run({"x": x}, ["y"]))["y"]
    np.testing.assert_allclose(got, next(OnnxRuntimeBackend(graph).run({"x": x}, ["y"]))["y"], atol=1e-6)
    if mode == "linear":  # asymmetric: the first row is 0, 0.5, 1, 1.5, 2, 2 (edge clamped)
        np.testing.assert_allclose(got[0, 0, 0], [0, 0.5, 1, 1.5, 2, 2], atol=1e-6)


def test_it_is_known_and_recordable_but_not_a_default() -> None:
    assert "onnx-reference" in KNOWN_BACKENDS and "onnx-reference" in ONNX_BACKENDS
    assert DEFAULT_BACKENDS == ("torch", "onnxruntime", "tensorrt")
    assert choose_backends(BackendOptions(), has_torch=True)[0] == DEFAULT_BACKENDS
    assert choose_backends(BackendOptions(), has_torch=False)[0] == ("onnxruntime", "tensorrt")
    BackendOptions(backends=("onnxruntime", "onnx-reference"), recordings={"onnx-reference": "r.npz"}).validate()


def test_factory_opens_it_after_onnxruntime_unless_replayed(
    graph: GraphInfo, feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    names = ["onnx-reference", "onnxruntime"]
    opened = open_backends(graph, feeds, BackendOptions(), names)
    assert [(type(b), b.name) for b in opened.backends] == [
        (OnnxRuntimeBackend, "onnxruntime"),
        (OnnxReferenceBackend, "onnx-reference"),
    ]
    assert open_backends(graph, feeds, BackendOptions(), ["onnxruntime"]).backends[0].name == "onnxruntime"
    recording = tmp_path / "reference.npz"
    record(opened.backends[1], graph, feeds, recording)
    replayed = open_backends(graph, feeds, BackendOptions(recordings={"onnx-reference": str(recording)}), names)
    assert [(type(b), b.name) for b in replayed.backends] == [
        (RecordedBackend, "onnx-reference"),
        (OnnxRuntimeBackend, "onnxruntime"),
    ]


def test_compare_an_onnx_file_with_onnxruntime(model_file: Path) -> None:
    report = trtdiff.compare(model_file, backends=["onnxruntime", "onnx-reference"])
    assert report.passed, report.first_divergence
    assert report.pairs == (REF_PAIR,)
    assert [layer.tensor for layer in report.layers] == TENSORS


def test_cli_compares_an_onnx_file_without_tensorrt(model_file: Path) -> None:
    result = CliRunner().invoke(main, ["compare", str(model_file), "--backends", "onnxruntime,onnx-reference"])
    assert result.exit_code == 0, result.output


def test_example_at_opset13_agrees_on_all_three_pairs() -> None:
    report = trtdiff.compare(
        FACTORY, input_shapes=["1x3x32x32"], opset=13, backends=["torch", "onnxruntime", "onnx-reference"]
    )
    assert report.passed, report.first_divergence
    assert report.pairs == (
        BackendPair("torch", "onnxruntime"),
        BackendPair("torch", "onnx-reference"),
        REF_PAIR,
    )
    for layer in report.layers:
        assert REF_PAIR in layer.pairs, layer.tensor
        if BackendPair("torch", "onnxruntime") in layer.pairs:
            assert BackendPair("torch", "onnx-reference") in layer.pairs, layer.tensor


@pytest.mark.slow
def test_example_at_opset10_reference_sides_with_onnxruntime_at_the_decoder_resize() -> None:
    report = trtdiff.compare(
        FACTORY, input_shapes=["1x3x32x32"], opset=10, backends=["torch", "onnxruntime", "onnx-reference"]
    )
    first = report.first_divergence
    assert first is not None and not report.passed
    assert (first.onnx_node, first.pair) == ("/decoder/Resize", BackendPair("torch", "onnxruntime"))
    layer = next(layer for layer in report.layers if layer.onnx_node == "/decoder/Resize")
    assert layer.pairs[BackendPair("torch", "onnx-reference")].diverged
    assert not layer.pairs[REF_PAIR].diverged
    earlier = report.layers[: report.layers.index(layer)]
    assert earlier and not any(other.diverged for other in earlier)
