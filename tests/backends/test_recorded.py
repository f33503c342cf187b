"""Recording a real ONNX Runtime run to .npz and replaying it with RecordedBackend."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.recorded import INPUT_PREFIX, META, RecordedBackend, onnx_digest, record, recorded_inputs
from trtdiff.errors import InputError
from trtdiff.source.onnx_graph import GraphInfo, load_graph

TENSORS = ["/enc/Relu_output_0", "/enc/Mul_output_0", "out", "idx"]


def _model(scale: float) -> onnx.ModelProto:
    """Two inputs: x -> Relu -> * scale -> + y -> out; ArgMax(out) -> idx (int64)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["/enc/Relu_output_0"], name="/enc/Relu"),
        helper.make_node("Mul", ["/enc/Relu_output_0", "scale"], ["/enc/Mul_output_0"], name="/enc/Mul"),
        helper.make_node("Add", ["/enc/Mul_output_0", "y"], ["out"], name="/Add"),
        helper.make_node("ArgMax", ["out"], ["idx"], name="/ArgMax", axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "rec",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
        ],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [2]),
        ],
        initializer=[numpy_helper.from_array(np.array(scale, dtype=np.float32), "scale")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _load(model: onnx.ModelProto, path: Path) -> GraphInfo:
    onnx.save(model, str(path))
    return load_graph(path)


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    return _load(_model(2.0), tmp_path_factory.mktemp("rec") / "model.onnx")


@pytest.fixture(scope="module")
def feeds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((2, 4)).astype(np.float32),
        "y": rng.standard_normal((2, 4)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def recording(graph: GraphInfo, feeds: dict[str, np.ndarray], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rec") / "ort_run.npz"
    count = record(OnnxRuntimeBackend(graph), graph, feeds, path, chunk_bytes=40)
    assert count == len(TENSORS)
    return path


def _live(graph: GraphInfo, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    values: dict[str, np.ndarray] = {}
    for chunk in OnnxRuntimeBackend(graph).run(feeds, TENSORS):
        values.update(chunk)
    return values


def test_record_writes_every_tensor_the_inputs_and_metadata(recording: Path, graph: GraphInfo) -> None:
    with np.load(recording, allow_pickle=False) as archive:
        assert set(archive.files) == {*TENSORS, INPUT_PREFIX + "x", INPUT_PREFIX + "y", META}
        meta = json.loads(str(archive[META]))
    assert meta["backend"] == "onnxruntime"
    assert meta["onnx_sha256"] == onnx_digest(graph)
    assert meta["tensors"] == len(TENSORS)
    assert meta["describe"].startswith("onnxruntime ")


def test_record_is_uncompressed_npy_entries(recording: Path) -> None:
    with zipfile.ZipFile(recording) as archive:
        infos = archive.infolist()
    assert all(info.filename.endswith(".npy") for info in infos)
    assert {info.compress_type for info in infos} == {zipfile.ZIP_STORED}


def test_replay_gives_the_recorded_values(recording: Path, graph: GraphInfo, feeds: dict[str, np.ndarray]) -> None:
    replay = RecordedBackend("onnxruntime", recording, graph)
    assert replay.name == "onnxruntime"
    assert replay.available() == set(TENSORS)
    values: dict[str, np.ndarray] = {}
    for chunk in replay.run(feeds, TENSORS):
        values.update(chunk)
    live = _live(graph, feeds)
    assert list(values) == TENSORS
    for name in TENSORS:
        assert values[name].dtype == live[name].dtype, name
        np.testing.assert_array_equal(values[name], live[name], err_msg=name)
    np.testing.assert_array_equal(values["/enc/Relu_output_0"], np.maximum(feeds["x"], 0))
    np.testing.assert_array_equal(values["idx"], np.argmax(values["out"], axis=1))


def test_replay_keeps_the_recorded_inputs(recording: Path, graph: GraphInfo, feeds: dict[str, np.ndarray]) -> None:
    replay = RecordedBackend("onnxruntime", recording, graph)
    assert set(replay.inputs) == {"x", "y"}
    for name, value in feeds.items():
        assert replay.inputs[name].dtype == value.dtype
        np.testing.assert_array_equal(replay.inputs[name], value)


def test_replay_describes_the_recording(recording: Path, graph: GraphInfo) -> None:
    description = RecordedBackend("onnxruntime", recording, graph).describe()
    assert description.startswith("onnxruntime ") and recording.name in description


def test_replay_chunks_by_max_bytes_and_skips_unknown_names(
    recording: Path, graph: GraphInfo, feeds: dict[str, np.ndarray]
) -> None:
    replay = RecordedBackend("onnxruntime", recording, graph)
    sizes = {"/enc/Relu_output_0": 32, "/enc/Mul_output_0": 32, "out": 32, "idx": 16}
    chunks = list(replay.run(feeds, [*TENSORS, "x", "no_such_tensor"], sizes=sizes, max_bytes=64))
    assert [list(c) for c in chunks] == [["/enc/Relu_output_0", "/enc/Mul_output_0"], ["out", "idx"]]


def test_replay_refuses_inputs_that_differ_from_the_recorded_ones(
    recording: Path, graph: GraphInfo, feeds: dict[str, np.ndarray]
) -> None:
    replay = RecordedBackend("onnxruntime", recording, graph)
    changed = {**feeds, "y": feeds["y"] + 1}
    with pytest.raises(InputError, match=r"\by\b"):
        list(replay.run(changed, TENSORS))


def test_recorded_inputs_returns_the_inputs(recording: Path, feeds: dict[str, np.ndarray]) -> None:
    inputs = recorded_inputs({"onnxruntime": recording})
    assert set(inputs) == {"x", "y"}
    for name, value in feeds.items():
        np.testing.assert_array_equal(inputs[name], value)


def test_recorded_inputs_accepts_a_string_path(recording: Path, feeds: dict[str, np.ndarray]) -> None:
    np.testing.assert_array_equal(recorded_inputs({"onnxruntime": str(recording)})["x"], feeds["x"])


def test_recording_of_another_onnx_file_is_refused(recording: Path, tmp_path: Path) -> None:
    other = _load(_model(3.0), tmp_path / "other_model.onnx")
    with pytest.raises(InputError) as caught:
        RecordedBackend("onnxruntime", recording, other)
    assert "ort_run.npz" in str(caught.value)
    assert "other_model.onnx" in str(caught.value)


def test_recording_of_the_same_model_saved_elsewhere_is_accepted(recording: Path, tmp_path: Path) -> None:
    same = _load(_model(2.0), tmp_path / "copy.onnx")
    assert RecordedBackend("onnxruntime", recording, same).available() == set(TENSORS)


def test_wrong_backend_name_is_refused(recording: Path, graph: GraphInfo) -> None:
    with pytest.raises(InputError) as caught:
        RecordedBackend("tensorrt", recording, graph)
    assert "ort_run.npz" in str(caught.value) and "onnxruntime" in str(caught.value)


def test_missing_recording_is_refused(graph: GraphInfo, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape("missing_run.npz")):
        RecordedBackend("onnxruntime", tmp_path / "missing_run.npz", graph)


def test_non_npz_file_is_refused(graph: GraphInfo, tmp_path: Path) -> None:
    path = tmp_path / "notes_run.npz"
    path.write_text("not a zip archive\n")
    with pytest.raises(InputError, match=re.escape("notes_run.npz")):
        RecordedBackend("onnxruntime", path, graph)


def test_npz_without_metadata_is_refused(graph: GraphInfo, feeds: dict[str, np.ndarray], tmp_path: Path) -> None:
    path = tmp_path / "plain_arrays.npz"
    np.savez(path, **{"out": feeds["x"]})
    with pytest.raises(InputError, match=re.escape("plain_arrays.npz")):
        RecordedBackend("onnxruntime", path, graph)


def test_recorded_inputs_of_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape("gone_run.npz")):
        recorded_inputs({"onnxruntime": tmp_path / "gone_run.npz"})


def test_recorded_inputs_of_a_non_npz_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "text_run.npz"
    path.write_text("hello")
    with pytest.raises(InputError, match=re.escape("text_run.npz")):
        recorded_inputs({"onnxruntime": path})


def test_onnx_digest_depends_on_the_model_not_the_path(graph: GraphInfo, tmp_path: Path) -> None:
    assert onnx_digest(_load(_model(2.0), tmp_path / "a.onnx")) == onnx_digest(graph)
    assert onnx_digest(_load(_model(2.5), tmp_path / "b.onnx")) != onnx_digest(graph)
    assert len(onnx_digest(graph)) == 64
