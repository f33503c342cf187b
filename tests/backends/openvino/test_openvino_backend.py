"""The OpenVINO backend on a tiny real ONNX model: names mapped back, values, f32, the plain-vs-marked check, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("openvino")

from trtdiff.analysis.metrics import compare_tensors
from trtdiff.backends import openvino as openvino_package
from trtdiff.backends.base import fetch
from trtdiff.backends.openvino.runtime import OpenVINOBackend
from trtdiff.backends.registry import open_backend, open_backends
from trtdiff.errors import BackendError, OptionError
from trtdiff.options import BackendOptions
from trtdiff.report import Thresholds
from trtdiff.source.onnx_graph import GraphInfo, load_graph

WEIGHT = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
BIAS = np.arange(4, dtype=np.float32) - 1.5
FEEDS = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def conv_relu_model() -> onnx.ModelProto:
    """Conv (with a bias) -> Relu -> Add(r, r): OpenVINO splits the Conv in two ops and fuses the three into one."""
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Add", ["r", "r"], ["y"], name="add"),
        ],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        initializer=[numpy_helper.from_array(WEIGHT, "w"), numpy_helper.from_array(BIAS, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    path = tmp_path_factory.mktemp("openvino") / "conv_relu.onnx"
    onnx.save(conv_relu_model(), str(path))
    return load_graph(path)


def _expected() -> dict[str, np.ndarray]:
    import onnxruntime as ort

    model = conv_relu_model()
    model.graph.output.extend([onnx.ValueInfoProto(name="c"), onnx.ValueInfoProto(name="r")])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip(["y", "c", "r"], session.run(["y", "c", "r"], FEEDS), strict=True))


def test_every_onnx_tensor_maps_to_an_openvino_tensor_by_name(graph: GraphInfo) -> None:
    with OpenVINOBackend(graph) as backend:
        assert backend.available() == {"c", "r", "y"}
        assert backend.tensors.unmapped == () and backend.notes() == ()
        assert backend.tensors.outputs == {"y"}
        # The Conv with a bias became Convolution (conv/WithoutBiases, no tensor name) + Add (named conv, tensor c).
        assert backend.tensors.port_of["c"] == ("conv", 0)
        assert backend.tensors.op_types["conv/WithoutBiases"] == "Convolution"


def test_run_returns_the_wanted_tensors_as_onnx_runtime_computes_them(graph: GraphInfo) -> None:
    expected = _expected()
    with OpenVINOBackend(graph) as backend:
        values = fetch(backend, FEEDS, ["c", "r", "y"])
        assert set(values) == {"c", "r", "y"}
        for name, value in expected.items():
            np.testing.assert_allclose(values[name], value, rtol=1e-5, atol=1e-5)
        assert set(fetch(backend, FEEDS, ["r", "missing"])) == {"r"}


def test_chunks_follow_max_bytes_each_with_a_compiled_model_of_its_own(graph: GraphInfo) -> None:
    with OpenVINOBackend(graph) as backend:
        chunks = list(backend.run(FEEDS, ["c", "r", "y"], sizes={"c": 1024, "r": 1024, "y": 1024}, max_bytes=1500))
        assert [sorted(chunk) for chunk in chunks] == [["c"], ["r"], ["y"]]
        assert backend.marked_compiles == 2  # c and r each need an added output; y is the model's own output
        list(backend.run(FEEDS, ["c"], sizes={"c": 1024}, max_bytes=1500))
        assert backend.marked_compiles == 2  # kept for the next sample


def test_inference_precision_is_f32_as_compiled(graph: GraphInfo) -> None:
    """The CPU plugin runs bf16 by default where the CPU has it; the backend asks f32 and reads it back."""
    with OpenVINOBackend(graph) as backend:
        assert backend.inference_precision == "f32"
        assert backend.describe().startswith("openvino ") and "inference precision f32" in backend.describe()
        assert backend.plain.get_property("INFERENCE_PRECISION_HINT").to_string() == "f32"


def test_the_plain_and_marked_models_agree_at_fp32(graph: GraphInfo) -> None:
    """Added outputs split the fused Conv+ReLU; at FP32 the final outputs stay the same: the check says so."""
    with OpenVINOBackend(graph, compare=compare_tensors) as backend:
        fetch(backend, FEEDS, ["c", "r", "y"])
        fetch(backend, {"x": FEEDS["x"] * 2}, ["c", "r", "y"])
        check = backend.marking_check(Thresholds())
    assert check.status == "same" and check.samples == 2 and check.runs == 2 and check.worst_output == "y"
    assert check.max_abs is not None and check.max_abs <= 1e-5


def test_no_check_without_marks_or_without_a_comparison(graph: GraphInfo) -> None:
    with OpenVINOBackend(graph, compare=compare_tensors) as backend:
        fetch(backend, FEEDS, ["y"])  # the model's own output: nothing marked, the plain model runs alone
        assert backend.marking_check(Thresholds()).status == "not run" and backend.marked_compiles == 0
    with OpenVINOBackend(graph) as backend:
        assert backend.marking_check(Thresholds()).status == "not run"


def test_a_closed_backend_holds_no_compiled_model_and_refuses_to_run(graph: GraphInfo) -> None:
    with open_backend("openvino", graph) as backend:
        assert isinstance(backend, OpenVINOBackend)
        fetch(backend, FEEDS, ["r"])
    assert backend.closed and backend.plain is None and backend._marked == {}
    with pytest.raises(BackendError, match="was closed"):
        next(backend.run(FEEDS, ["r"]))


def test_an_unknown_device_names_the_option_and_the_devices_here(graph: GraphInfo) -> None:
    with pytest.raises(OptionError) as caught:
        open_backend("openvino", graph, BackendOptions(openvino_device="NPU7"))
    assert (caught.value.parameter, caught.value.value) == ("openvino_device", "NPU7")
    assert "CPU" in str(caught.value) and "\n" not in str(caught.value)


def test_a_model_openvino_cannot_read_is_one_line_naming_the_file(tmp_path: Path) -> None:
    model = conv_relu_model()
    model.graph.node[1].op_type, model.graph.node[1].domain = "NoSuchOp", "example.custom"
    model.opset_import.append(helper.make_opsetid("example.custom", 1))
    path = tmp_path / "custom.onnx"
    onnx.save(model, str(path))
    with pytest.raises(BackendError) as caught:
        OpenVINOBackend(load_graph(path))
    assert str(path) in str(caught.value) and "OpenVINO cannot" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_without_openvino_the_comparison_skips_it_with_one_line_unless_required(
    graph: GraphInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openvino_package, "MODULE", "openvino_not_installed_here")
    opened = open_backends(graph, FEEDS, BackendOptions(), ["onnxruntime", "openvino"])
    with opened:
        assert [b.name for b in opened.backends] == ["onnxruntime"]
        (note,) = opened.notes
        assert note.startswith("OpenVINO skipped: OpenVINO is not installed") and "trtdiff[openvino]" in note
    with pytest.raises(BackendError) as caught:
        open_backends(graph, FEEDS, BackendOptions(require=("openvino",)), ["openvino"])
    assert (caught.value.parameter, caught.value.value) == ("require", "openvino")


def test_openvino_runs_only_when_asked() -> None:
    from trtdiff.backends.registry import choose_backends

    assert "openvino" not in choose_backends(BackendOptions(), has_torch=True)[0]
    assert "openvino" in choose_backends(BackendOptions(backends=("torch", "openvino")), has_torch=True)[0]


def _slice_to_the_end() -> onnx.ModelProto:
    """x[:, 1:] written as exporters write it: the end is an INT64_MAX Constant, which OpenVINO holds as int32."""
    end = numpy_helper.from_array(np.array([np.iinfo(np.int64).max], np.int64), "end_value")
    nodes = [
        helper.make_node("Constant", [], ["start"], value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Constant", [], ["end"], name="end_constant", value=end),
        helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Slice", ["x", "start", "end", "axes"], ["s"], name="slice"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "slice",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_constants_are_not_returned_so_an_int64_max_held_as_int32_is_no_false_alarm(tmp_path: Path) -> None:
    import trtdiff

    path = tmp_path / "slice.onnx"
    onnx.save(_slice_to_the_end(), str(path))
    with OpenVINOBackend(load_graph(path)) as backend:
        assert backend.available() == {"s", "y"}  # not the Constant outputs: weights, not computed
    report = trtdiff.compare(path, backends=["onnxruntime", "openvino"])
    assert report.passed, [check.id for check in report.checks if not check.passed]


def test_the_chunks_of_one_sample_run_the_plain_model_once_and_count_one_sample(graph: GraphInfo) -> None:
    """The comparison fetches a sample chunk by chunk with the same input arrays: one sample, one plain run."""
    with OpenVINOBackend(graph, compare=compare_tensors) as backend:
        fetch(backend, FEEDS, ["c"])
        fetch(backend, FEEDS, ["r"])
        check = backend.marking_check(Thresholds())
        assert (check.samples, check.runs) == (1, 2)
        fetch(backend, {"x": FEEDS["x"].copy()}, ["c"])  # other arrays: the next sample
        assert backend.marking_check(Thresholds()).samples == 2


def test_an_fp16_graph_compiles_with_the_f16_hint_where_the_cpu_has_fp16_else_f32_and_says_so(
    tmp_path: Path,
) -> None:
    """`--precision fp16`'s converted graph asks INFERENCE_PRECISION_HINT f16 where the CPU has native FP16; this
    AMD EPYC has not (the plugin would compile bf16, 8x FP16's error): it is asked for f32, read back from the
    compiled model and its runtime layers' runtimePrecision, and `emulates` says so."""
    import openvino as ov

    from trtdiff.source.fp16 import convert_to_fp16

    path = tmp_path / "conv_relu.fp16.onnx"
    onnx.save(convert_to_fp16(conv_relu_model()).model, str(path))
    capabilities = set(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    with OpenVINOBackend(load_graph(path)) as backend:
        executed = {
            op.get_rt_info()["runtimePrecision"].astype(str)
            for op in backend.plain.get_runtime_model().get_ordered_ops()
            if op.get_rt_info()["layerType"].astype(str) == "Convolution"
        }
        said = backend.emulates("fp16")
        assert backend.emulates("fp32") is None and backend.precision_wanted == "f16"
        if "FP16" in capabilities:  # native FP16 (AMX-FP16, AVX512-FP16): the hint is honoured
            assert backend.precision_asked == backend.inference_precision == "f16" and executed == {"f16"}
            assert said is None
            return
        assert backend.precision_asked == backend.inference_precision == "f32" and executed == {"f32"}
        assert "inference precision f32" in backend.describe()
        assert said is not None and said.startswith("OpenVINO's CPU plugin has no native FP16 on CPU: AMD EPYC"), said
        assert ", so it was asked for f32 and compiled f32 (executed layers by runtimePrecision: " in said
        assert "FP32" in said and "FP16 overflow vanishes" in said
