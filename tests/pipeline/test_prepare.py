"""trtdiff.pipeline.prepare: load -> inputs -> PyTorch capture -> export or read ONNX -> open backends, in one `with`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from culprit_models import ConvReluHead
from onnx import TensorProto, helper
from torch import nn

from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.pytorch.capture import TorchCapture, capture
from trtdiff.errors import InputError, OptionError
from trtdiff.options import CompareOptions, LoadOptions
from trtdiff.pipeline.prepare import Prepared, check_new_file, load_source, onnx_feeds, prepare
from trtdiff.source.inputs import make_inputs
from trtdiff.source.onnx_graph import load_graph

SHAPE = "1x3x8x8"


class Recorder:
    """The `capture` callback prepare takes: records with the real capture and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[nn.Module, dict[str, np.ndarray]]] = []
        self.last: TorchCapture | None = None

    def __call__(self, module: nn.Module, feeds: Mapping[str, np.ndarray]) -> TorchCapture:
        self.calls.append((module, dict(feeds)))
        self.last = capture(module, feeds)
        return self.last


@pytest.fixture(scope="module")
def net() -> ConvReluHead:
    torch.manual_seed(0)
    return ConvReluHead().eval()


@pytest.fixture(scope="module")
def exported(
    net: ConvReluHead, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Prepared, Recorder, dict, list]]:
    """One export through prepare, kept with save_onnx; every other test reads the saved file."""
    folder = tmp_path_factory.mktemp("prepare")
    options = CompareOptions().with_fields(
        input_shapes=[SHAPE], opset=13, backends=["torch", "onnxruntime"], save_onnx=str(folder / "net.onnx")
    )
    recorder, timings, said = Recorder(), {}, []
    with prepare(net, options, capture=recorder, timings=timings, say=said.append) as prepared:
        yield prepared, recorder, timings, said


@pytest.fixture(scope="module")
def onnx_file(exported: tuple[Prepared, Recorder, dict, list]) -> Path:
    prepared = exported[0]
    assert prepared.onnx_path is not None
    return Path(prepared.onnx_path)


def test_the_graph_inputs_match_the_feeds(exported: tuple[Prepared, Recorder, dict, list]) -> None:
    prepared = exported[0]
    assert prepared.graph.graph_inputs == tuple(prepared.feeds) == prepared.input_names == ("x",)
    assert prepared.feeds["x"].shape == (1, 3, 8, 8) and prepared.feeds["x"].dtype == np.float32
    np.testing.assert_array_equal(prepared.feeds["x"], make_inputs(["x"], shapes=[SHAPE], seed=0)["x"])
    assert prepared.model_feeds["x"] is prepared.feeds["x"]
    assert prepared.inputs == {"x": (1, 3, 8, 8)}
    assert prepared.graph.opset == 13 and prepared.exporter == "torchscript"
    assert prepared.notes == ()  # the opset and exporter are stated once, by the report's own fields
    assert prepared.has_torch and prepared.loaded.kind == "eager"


def test_the_chosen_backends_are_opened(exported: tuple[Prepared, Recorder, dict, list]) -> None:
    prepared = exported[0]
    assert prepared.chosen == ("torch", "onnxruntime")
    assert [type(b) for b in prepared.backends] == [OnnxRuntimeBackend]
    assert prepared.backends[0].graph is prepared.graph
    assert prepared.tensorrt is None and prepared.engine_path is None


def test_torch_is_captured_once_on_the_feeds(
    exported: tuple[Prepared, Recorder, dict, list], net: ConvReluHead
) -> None:
    prepared, recorder = exported[0], exported[1]
    assert len(recorder.calls) == 1
    module, feeds = recorder.calls[0]
    assert module is net and list(feeds) == ["x"]
    np.testing.assert_array_equal(feeds["x"], prepared.feeds["x"])
    assert prepared.capture is recorder.last
    assert [r.kind for r in prepared.capture.records] == ["conv", "relu", "conv"]


def test_save_onnx_is_written_and_named(exported: tuple[Prepared, Recorder, dict, list], onnx_file: Path) -> None:
    prepared = exported[0]
    assert onnx_file.name == "net.onnx" and onnx_file.is_file()
    assert prepared.graph.path == onnx_file
    assert onnx.load(str(onnx_file)).opset_import[0].version == 13


def test_steps_are_timed_and_announced(exported: tuple[Prepared, Recorder, dict, list]) -> None:
    _prepared, _recorder, timings, said = exported
    assert set(timings) == {"load", "torch", "export", "backends"}
    assert all(t >= 0 for t in timings.values())
    assert said == [  # exported first: the export's own peak does not come on top of the recording
        "loading the model",
        "exporting to ONNX",
        "running PyTorch, recording every op",
        "preparing backends (a TensorRT engine build can take minutes)",
    ]


def test_an_archive_is_recorded_first_and_its_export_reads_the_recording(net: ConvReluHead, tmp_path: Path) -> None:
    """One forward serves both: the TorchScript exporter is handed what the recorded forward returned."""
    path = tmp_path / "net.pt"
    torch.jit.save(torch.jit.trace(net, torch.zeros(1, 3, 8, 8)), str(path))
    options = CompareOptions().with_fields(input_shapes=[SHAPE], opset=13, backends=["torch", "onnxruntime"])
    recorder, timings, said = Recorder(), {}, []
    with prepare(path, options, capture=recorder, timings=timings, say=said.append) as prepared:
        assert prepared.exporter == "torchscript" and len(recorder.calls) == 1
    assert said == [
        "loading the model",
        "running PyTorch, recording every op",
        "exporting to ONNX",
        "preparing backends (a TensorRT engine build can take minutes)",
    ]
    assert set(timings) == {"load", "torch", "export", "backends"}


def test_save_onnx_is_never_overwritten_without_force(onnx_file: Path) -> None:
    before = onnx_file.read_bytes()
    options = CompareOptions().with_fields(input_shapes=[SHAPE], save_onnx=str(onnx_file))
    said: list[str] = []
    # Checked before anything is loaded: even a model that does not exist fails on the path first.
    with pytest.raises(OptionError) as caught, prepare("no/such/model.pt", options, say=said.append):
        pass
    assert (caught.value.parameter, caught.value.value) == ("save_onnx", onnx_file)
    assert "exists" in str(caught.value)
    assert said == [] and onnx_file.read_bytes() == before


def test_save_engine_is_checked_the_same_way(onnx_file: Path) -> None:
    options = CompareOptions().with_fields(save_engine=str(onnx_file))
    with pytest.raises(OptionError) as caught, prepare("no/such/model.pt", options):
        pass
    assert caught.value.parameter == "save_engine"


def test_a_given_onnx_file_is_read_not_exported(net: ConvReluHead, onnx_file: Path) -> None:
    options = CompareOptions().with_fields(onnx=str(onnx_file), opset=10, backends=["onnxruntime"])
    recorder, said = Recorder(), []
    with prepare(net, options, capture=recorder, say=said.append) as prepared:
        assert prepared.exporter == "given" and prepared.onnx_path == str(onnx_file)
        assert prepared.graph.path == onnx_file and prepared.graph.opset == 13
        assert prepared.notes == ("opset 10 ignored: the given ONNX file declares opset 13",)
        assert prepared.feeds["x"].shape == (1, 3, 8, 8)  # the file's static shape, no input_shapes given
        # "torch" was not chosen: nothing is captured.
        assert prepared.chosen == ("onnxruntime",) and prepared.capture is None and recorder.calls == []
    assert "reading the ONNX file" in said


def test_capture_runs_when_torch_is_chosen_with_a_given_file(net: ConvReluHead, onnx_file: Path) -> None:
    options = CompareOptions().with_fields(onnx=str(onnx_file), backends=["torch", "onnxruntime"])
    recorder = Recorder()
    with prepare(net, options, capture=recorder) as prepared:
        assert len(recorder.calls) == 1 and prepared.capture is recorder.last
        assert prepared.notes == ()
    # Explicit backends replace the chosen ones.
    recorder = Recorder()
    with prepare(net, options, backends=("onnxruntime",), capture=recorder) as prepared:
        assert prepared.chosen == ("onnxruntime",) and recorder.calls == [] and prepared.capture is None
    with prepare(net, options, backends=()) as prepared:
        assert prepared.backends == () and prepared.capture is None


def test_an_onnx_file_as_model_names_the_note(onnx_file: Path) -> None:
    options = CompareOptions().with_fields(backends=["torch", "onnxruntime"])
    recorder = Recorder()
    with prepare(str(onnx_file), options, capture=recorder) as prepared:
        assert prepared.notes == ("MODEL is an ONNX file: only ONNX backends are compared",)
        assert prepared.chosen == ("onnxruntime",) and recorder.calls == [] and prepared.capture is None
        assert not prepared.has_torch and prepared.loaded.kind == "onnx" and prepared.exporter == "given"
        assert prepared.onnx_path == str(onnx_file) and prepared.inputs == {"x": (1, 3, 8, 8)}
        assert [b.name for b in prepared.backends] == ["onnxruntime"]


def test_an_onnx_file_as_model_with_onnx_is_refused(onnx_file: Path) -> None:
    options = CompareOptions().with_fields(onnx=str(onnx_file), backends=["onnxruntime"])
    with pytest.raises(OptionError) as caught, prepare(str(onnx_file), options):
        pass
    assert (caught.value.parameter, caught.value.value) == ("onnx", str(onnx_file))


def test_first_feeds_replace_the_built_inputs(net: ConvReluHead, onnx_file: Path) -> None:
    first = np.full((1, 3, 8, 8), 0.25, np.float32)
    options = CompareOptions().with_fields(onnx=str(onnx_file), input_shapes=["1x3x4x4"], backends=["onnxruntime"])
    with prepare(net, options, first_feeds={"input_0": first}) as prepared:
        assert list(prepared.feeds) == ["x"] and prepared.feeds["x"] is first


def test_inputs_that_do_not_fit_the_file_are_refused(net: ConvReluHead, onnx_file: Path) -> None:
    options = CompareOptions().with_fields(onnx=str(onnx_file), input_shapes=["1x3x4x4"], backends=["onnxruntime"])
    with (
        pytest.raises(InputError, match=r"shape 1x3x4x4 does not fit net.onnx, which expects 1x3x8x8"),
        prepare(net, options),
    ):
        pass


def test_load_source_builds_seeded_inputs_for_a_module(net: ConvReluHead) -> None:
    source = load_source(net, LoadOptions(input_shapes=(SHAPE,), seed=3), None)
    assert source.has_torch and source.given_graph is None and source.input_names == ("x",)
    np.testing.assert_array_equal(source.feeds["x"], make_inputs(["x"], shapes=[SHAPE], seed=3)["x"])
    other = load_source(net, LoadOptions(input_shapes=(SHAPE,), seed=4), None)
    assert not np.array_equal(other.feeds["x"], source.feeds["x"])


def test_check_new_file(tmp_path: Path) -> None:
    assert check_new_file(None, False, "save_onnx") is None
    assert check_new_file(str(tmp_path / "new.onnx"), False, "save_onnx") == tmp_path / "new.onnx"
    existing = tmp_path / "mine.onnx"
    existing.write_bytes(b"my model")
    with pytest.raises(OptionError) as caught:
        check_new_file(existing, False, "save_onnx")
    assert (caught.value.parameter, caught.value.value) == ("save_onnx", existing)
    assert existing.read_bytes() == b"my model"
    assert check_new_file(existing, True, "save_onnx") == existing  # force: the caller may overwrite it
    assert existing.read_bytes() == b"my model"  # ... but checking writes nothing
    with pytest.raises(OptionError, match="does not exist") as caught:
        check_new_file(tmp_path / "missing" / "m.onnx", True, "save_engine")
    assert caught.value.parameter == "save_engine"


def test_check_new_file_refuses_a_folder_even_with_force(tmp_path: Path) -> None:
    with pytest.raises(OptionError) as caught:
        check_new_file(tmp_path, True, "save_onnx")
    assert caught.value.parameter == "save_onnx"


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """a (1, 2) and b (N, 3) -> Concat along the last axis: one static and one dynamic input."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 2])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])
    graph = helper.make_graph([helper.make_node("Concat", ["a", "b"], ["y"], axis=1)], "g", [a, b], [y])
    path = tmp_path_factory.mktemp("feeds") / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


A, B = np.zeros((1, 2), np.float32), np.ones((1, 3), np.float32)


def test_onnx_feeds_by_name_in_graph_order(two_inputs: Path) -> None:
    graph = load_graph(two_inputs)
    named = onnx_feeds(graph, {"b": B, "a": A, "extra": A})
    assert list(named) == ["a", "b"] and named["a"] is A and named["b"] is B


def test_onnx_feeds_by_position_when_names_differ(two_inputs: Path) -> None:
    named = onnx_feeds(load_graph(two_inputs), {"input_0": A, "input_1": B})
    assert list(named) == ["a", "b"] and named["a"] is A and named["b"] is B


def test_onnx_feeds_accept_any_size_for_a_dynamic_dimension(two_inputs: Path) -> None:
    named = onnx_feeds(load_graph(two_inputs), {"a": A, "b": np.ones((4, 3), np.float32)})
    assert named["b"].shape == (4, 3)


def test_onnx_feeds_refuse_a_wrong_count(two_inputs: Path) -> None:
    with pytest.raises(InputError, match="the ONNX file has inputs a, b but the model was given x"):
        onnx_feeds(load_graph(two_inputs), {"x": A})


@pytest.mark.parametrize(
    ("value", "shape"), [(np.zeros((1, 3), np.float32), "1x3"), (np.zeros((1, 2, 1), np.float32), "1x2x1")]
)
def test_onnx_feeds_refuse_a_shape_that_does_not_fit(two_inputs: Path, value: np.ndarray, shape: str) -> None:
    with pytest.raises(InputError, match=f"input a: shape {shape} does not fit two.onnx, which expects 1x2"):
        onnx_feeds(load_graph(two_inputs), {"a": value, "b": B})


def test_onnx_feeds_suggest_a_shape_for_a_dynamic_input(two_inputs: Path) -> None:
    with pytest.raises(InputError, match=r"which expects \?x3; use input_shapes b:1x3"):
        onnx_feeds(load_graph(two_inputs), {"a": A, "b": np.ones((1, 4), np.float32)})


def _with_batch(onnx_file: Path, folder: Path, value: int) -> Path:
    """The exported file with its input's first dimension written as `value` (as some writers do)."""
    model = onnx.load(str(onnx_file))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = value
    path = folder / f"batch{value}.onnx"
    onnx.save(model, str(path))
    return path


def test_a_dimension_written_as_minus_one_is_dynamic(net: ConvReluHead, onnx_file: Path, tmp_path: Path) -> None:
    import trtdiff

    path = _with_batch(onnx_file, tmp_path, -1)
    assert load_graph(path).tensor_type("x").shape == (None, 3, 8, 8)  # as ONNX Runtime reads it
    report = trtdiff.compare(path, backends=["onnxruntime", "onnx-reference"])
    assert report.passed and report.inputs == {"x": (1, 3, 8, 8)}
    assert "dynamic dimensions set to 1 (give x a shape to choose): x:1x3x8x8" in report.notes
    chosen = trtdiff.compare(net, onnx=str(path), input_shapes=["2x3x8x8"], backends=["torch", "onnxruntime"])
    assert chosen.passed and chosen.inputs == {"x": (2, 3, 8, 8)}


def test_a_dimension_written_as_zero_is_fed_an_empty_tensor(net: ConvReluHead, onnx_file: Path, tmp_path: Path) -> None:
    import trtdiff

    path = _with_batch(onnx_file, tmp_path, 0)
    report = trtdiff.compare(net, onnx=str(path), backends=["torch", "onnxruntime", "onnx-reference"])
    assert report.passed and report.inputs == {"x": (0, 3, 8, 8)}
    assert [layer.shape[0] for layer in report.layers] == [0] * len(report.layers) and report.layers
    assert all(m.max_abs == 0 and m.cosine == 1 for layer in report.layers for m in layer.pairs.values())
    assert report.segmentation is None  # an empty output has no pixels to score
    assert any(note.startswith("empty input x:0x3x8x8: the file writes a 0 dimension") for note in report.notes)
    with pytest.raises(InputError, match="which expects 0x3x8x8; drop input_shapes for it to feed the empty input"):
        trtdiff.compare(net, onnx=str(path), input_shapes=["1x3x8x8"])
