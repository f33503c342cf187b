"""OnnxRuntimeBackend on small hand-built ONNX files: exposed tensors, values, chunks, errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.errors import BackendError, OptionError
from trtdiff.source.onnx_graph import GraphInfo, load_graph

WEIGHT = np.array([[0.5, -2.0, 4.0], [1.5, 0.25, -1.0]], dtype=np.float32)


def _save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _tiny_model() -> onnx.ModelProto:
    """x -> /blk/Relu -> r; r * w -> m; m + x -> out (graph output); Shape(x) -> s; Neg(x) -> n."""
    nodes = [
        helper.make_node("Relu", ["x"], ["/blk/Relu_output_0"], name="/blk/Relu"),
        helper.make_node("Mul", ["/blk/Relu_output_0", "w"], ["m"], name="mul"),
        helper.make_node("Add", ["m", "x"], ["out"], name="add"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Neg", ["x"], ["n"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(WEIGHT, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _expected(x: np.ndarray) -> dict[str, np.ndarray]:
    relu = np.maximum(x, np.float32(0))
    mul = relu * WEIGHT
    return {
        "/blk/Relu_output_0": relu,
        "m": mul,
        "out": mul + x,
        "s": np.array([2, 3], dtype=np.int64),
        "n": -x,
    }


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    return load_graph(_save(_tiny_model(), tmp_path_factory.mktemp("ort") / "tiny.onnx"))


@pytest.fixture(scope="module")
def backend(graph: GraphInfo) -> OnnxRuntimeBackend:
    return OnnxRuntimeBackend(graph)


@pytest.fixture
def feeds() -> dict[str, np.ndarray]:
    return {"x": np.array([[1.0, -2.0, 3.5], [-0.25, 0.0, 7.0]], dtype=np.float32)}


def _collect(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for chunk in chunks:
        assert not set(chunk) & set(values), "a tensor came back twice"
        values.update(chunk)
    return values


def test_every_node_output_is_available_except_graph_inputs(backend: OnnxRuntimeBackend) -> None:
    assert backend.available() == {"/blk/Relu_output_0", "m", "out", "s", "n"}
    assert "x" not in backend.available() and "w" not in backend.available()


def test_describe_names_runtime_and_provider(backend: OnnxRuntimeBackend) -> None:
    import onnxruntime as ort

    assert backend.name == "onnxruntime"
    assert backend.describe() == f"onnxruntime {ort.__version__} (CPUExecutionProvider)"


def test_run_returns_the_wanted_tensors_equal_to_numpy(
    backend: OnnxRuntimeBackend, feeds: dict[str, np.ndarray]
) -> None:
    wanted = ["/blk/Relu_output_0", "m", "out", "s", "n"]
    chunks = list(backend.run(feeds, wanted))
    assert len(chunks) == 1
    values = chunks[0]
    assert list(values) == wanted
    expected = _expected(feeds["x"])
    for name in wanted:
        assert values[name].dtype == expected[name].dtype, name
        np.testing.assert_array_equal(values[name], expected[name], err_msg=name)


def test_run_returns_only_what_was_asked(backend: OnnxRuntimeBackend, feeds: dict[str, np.ndarray]) -> None:
    values = _collect(list(backend.run(feeds, ["n", "m"])))
    assert list(values) == ["n", "m"]
    np.testing.assert_array_equal(values["n"], -feeds["x"])


def test_run_skips_names_it_cannot_return(backend: OnnxRuntimeBackend, feeds: dict[str, np.ndarray]) -> None:
    values = _collect(list(backend.run(feeds, ["x", "w", "no_such_tensor", "out"])))
    assert list(values) == ["out"]


def test_run_with_nothing_wanted_yields_nothing(backend: OnnxRuntimeBackend, feeds: dict[str, np.ndarray]) -> None:
    assert list(backend.run(feeds, [])) == []


def test_chunks_follow_max_bytes_and_cover_every_wanted_tensor_once(
    backend: OnnxRuntimeBackend, graph: GraphInfo, feeds: dict[str, np.ndarray]
) -> None:
    wanted = list(graph.node_outputs)
    sizes = {t: n for t in wanted if (n := graph.tensor_type(t).nbytes()) is not None}
    assert sizes == {"/blk/Relu_output_0": 24, "m": 24, "out": 24, "s": 16, "n": 24}
    chunks = list(backend.run(feeds, wanted, sizes=sizes, max_bytes=48))
    assert [list(c) for c in chunks] == [["/blk/Relu_output_0", "m"], ["out", "s"], ["n"]]
    values = _collect(chunks)
    expected = _expected(feeds["x"])
    for name in wanted:
        np.testing.assert_array_equal(values[name], expected[name], err_msg=name)


def test_a_tensor_larger_than_max_bytes_gets_a_chunk_of_its_own(
    backend: OnnxRuntimeBackend, feeds: dict[str, np.ndarray]
) -> None:
    chunks = list(backend.run(feeds, ["m", "n"], sizes={"m": 24, "n": 24}, max_bytes=1))
    assert [list(c) for c in chunks] == [["m"], ["n"]]


def test_unknown_sizes_count_as_one_byte(backend: OnnxRuntimeBackend, feeds: dict[str, np.ndarray]) -> None:
    chunks = list(backend.run(feeds, ["/blk/Relu_output_0", "m", "out", "n"], max_bytes=2))
    assert [list(c) for c in chunks] == [["/blk/Relu_output_0", "m"], ["out", "n"]]


def test_the_file_is_run_as_is_without_graph_optimizations(tmp_path: Path, feeds: dict[str, np.ndarray]) -> None:
    # Relu(Relu(x)) and x + 0 would be folded away by graph optimizations; every tensor must still come back.
    nodes = [
        helper.make_node("Relu", ["x"], ["r1"], name="r1"),
        helper.make_node("Relu", ["r1"], ["r2"], name="r2"),
        helper.make_node("Identity", ["r2"], ["i"], name="id"),
        helper.make_node("Add", ["i", "zero"], ["y"], name="add0"),
    ]
    graph_proto = helper.make_graph(
        nodes,
        "redundant",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.zeros((1,), np.float32), "zero")],
    )
    graph = load_graph(
        _save(helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "r.onnx")
    )
    runner = OnnxRuntimeBackend(graph)
    assert runner.available() == {"r1", "r2", "i", "y"}
    values = _collect(list(runner.run(feeds, ["r1", "r2", "i", "y"])))
    relu = np.maximum(feeds["x"], 0)
    for name in ("r1", "r2", "i", "y"):
        np.testing.assert_array_equal(values[name], relu, err_msg=name)


def test_unknown_provider_raises_option_error_naming_it(graph: GraphInfo) -> None:
    with pytest.raises(OptionError, match="NoSuchExecutionProvider"):
        OnnxRuntimeBackend(graph, provider="NoSuchExecutionProvider")


def test_op_onnxruntime_lacks_raises_backend_error_naming_the_node(tmp_path: Path) -> None:
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
        OnnxRuntimeBackend(graph)
    message = str(caught.value)
    assert "mystery_blur" in message
    assert "custom_op_model.onnx" in message
    assert "FancyBlur" in message


def test_run_failure_raises_backend_error_naming_the_file(backend: OnnxRuntimeBackend) -> None:
    with pytest.raises(BackendError, match=re.escape("tiny.onnx")):
        list(backend.run({"x": np.zeros((4, 4), np.float32)}, ["out"]))


def test_a_run_failure_is_one_line_and_onnx_runtime_logs_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([5, -1], np.int64), "shape")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [shape]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    path = tmp_path / "reshape.onnx"
    onnx.save(model, str(path))
    backend = OnnxRuntimeBackend(load_graph(path))
    with pytest.raises(BackendError) as caught:  # 48 values do not make 5 rows: known only at run time
        list(backend.run({"x": np.ones((1, 3, 4, 4), np.float32)}, ["y"]))
    message = str(caught.value)
    assert "\n" not in message and "onnxruntime_src" not in message and " was false." not in message
    assert "The input tensor cannot be reshaped to the requested shape. Input shape:{1,3,4,4}" in message
    captured = capfd.readouterr()
    assert "onnxruntime" not in captured.err + captured.out  # ONNX Runtime logged it too; that stays silent


def test_auto_takes_cuda_where_onnxruntime_gpu_has_it_with_tf32_off_unless_asked() -> None:
    from trtdiff.backends.onnxruntime_backend import choose_provider

    gpu = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    heuristic = {"cudnn_conv_algo_search": "HEURISTIC"}  # not every algorithm timed on each session's first run
    assert choose_provider("auto", gpu, tf32=False) == ("CUDAExecutionProvider", {"use_tf32": "0", **heuristic})
    assert choose_provider("auto", gpu, tf32=True) == ("CUDAExecutionProvider", {"use_tf32": "1", **heuristic})
    assert choose_provider("CPUExecutionProvider", gpu, tf32=False) == ("CPUExecutionProvider", {})
    assert choose_provider("auto", ["CPUExecutionProvider"], tf32=True) == ("CPUExecutionProvider", {})


def test_a_provider_this_onnxruntime_lacks_names_ort_provider_and_the_choices() -> None:
    from trtdiff.backends.onnxruntime_backend import choose_provider
    from trtdiff.errors import OptionError

    with pytest.raises(OptionError, match="choose auto or one of CPUExecutionProvider") as caught:
        choose_provider("CUDAExecutionProvider", ["CPUExecutionProvider"], tf32=False)
    assert caught.value.parameter == "ort_provider"


def test_the_provider_chosen_here_is_the_one_installed(graph: GraphInfo) -> None:
    import onnxruntime as ort

    with OnnxRuntimeBackend(graph, provider="auto") as opened:
        expected = "CUDAExecutionProvider" if "CUDAExecutionProvider" in ort.get_available_providers() else "CPU"
        assert opened.provider.startswith(expected) and opened.provider in opened.describe()
