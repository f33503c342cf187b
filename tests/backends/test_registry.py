"""trtdiff.backends.registry: which backends run (choose_backends) and opening them on a graph (open_backends)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.recorded import RecordedBackend, record
from trtdiff.backends.registry import choose_backends, open_backends
from trtdiff.errors import BackendError, OptionError
from trtdiff.options import BackendOptions
from trtdiff.source.onnx_graph import GraphInfo, load_graph

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks how TensorRT is skipped where no GPU is visible")


def test_default_is_every_backend_with_a_pytorch_model() -> None:
    assert choose_backends(BackendOptions(), has_torch=True) == (("torch", "onnxruntime", "tensorrt"), ())


def test_an_onnx_model_drops_torch_with_a_note() -> None:
    chosen, notes = choose_backends(BackendOptions(), has_torch=False)
    assert chosen == ("onnxruntime", "tensorrt")
    assert notes == ("MODEL is an ONNX file: only ONNX backends are compared",)
    # No note when torch was not asked for.
    assert choose_backends(BackendOptions(backends=("onnxruntime",)), has_torch=False) == (("onnxruntime",), ())


def test_requiring_torch_with_an_onnx_model_is_refused() -> None:
    with pytest.raises(OptionError) as caught:
        choose_backends(BackendOptions(require=("torch",)), has_torch=False)
    assert (caught.value.parameter, caught.value.value) == ("require", "torch")


def test_given_backends_are_kept_in_order_without_repeats() -> None:
    options = BackendOptions(backends=("onnxruntime", "torch", "onnxruntime"))
    assert choose_backends(options, has_torch=True) == (("onnxruntime", "torch"), ())


def test_required_and_recorded_backends_are_added_after_the_given_ones() -> None:
    options = BackendOptions(backends=("torch",), require=("onnxruntime",), recordings={"tensorrt": "trt.npz"})
    assert choose_backends(options, has_torch=True)[0] == ("torch", "onnxruntime", "tensorrt")
    options = BackendOptions(backends=("torch", "onnxruntime"), require=("onnxruntime",))
    assert choose_backends(options, has_torch=True)[0] == ("torch", "onnxruntime")


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path_factory.mktemp("factory") / "g.onnx"
    onnx.save(model, str(path))
    return load_graph(path)


FEEDS = {"x": np.array([[-1.0, 0.5, 2.0]], dtype=np.float32)}


def test_onnxruntime_is_opened_only_when_named(graph: GraphInfo) -> None:
    opened = open_backends(graph, FEEDS, BackendOptions(), ["torch", "onnxruntime"])
    assert [type(b) for b in opened.backends] == [OnnxRuntimeBackend]
    assert opened.backends[0].name == "onnxruntime" and opened.tensorrt is None and opened.notes == ()
    assert open_backends(graph, FEEDS, BackendOptions(), ["torch"]).backends == ()
    assert open_backends(graph, FEEDS, BackendOptions(), []).backends == ()


def test_an_unknown_provider_names_ort_provider(graph: GraphInfo) -> None:
    with pytest.raises(OptionError) as caught:
        open_backends(graph, FEEDS, BackendOptions(ort_provider="NoSuchExecutionProvider"), ["onnxruntime"])
    assert (caught.value.parameter, caught.value.value) == ("ort_provider", "NoSuchExecutionProvider")


class _Named:
    """ONNX Runtime under another backend name (to record a stand-in for a backend that cannot run here)."""

    def __init__(self, name: str, backend: OnnxRuntimeBackend) -> None:
        self.name, self._backend = name, backend

    def describe(self) -> str:
        return f"{self.name} stand-in"

    def available(self) -> set[str]:
        return self._backend.available()

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = 1 << 30,
    ) -> Iterator[dict[str, np.ndarray]]:
        return self._backend.run(feeds, wanted, sizes=sizes, max_bytes=max_bytes)


def test_recordings_replace_running_and_come_first(graph: GraphInfo, tmp_path: Path) -> None:
    live = OnnxRuntimeBackend(graph)
    ort_file, trt_file = tmp_path / "ort.npz", tmp_path / "trt.npz"
    record(live, graph, FEEDS, ort_file)
    record(_Named("tensorrt", live), graph, FEEDS, trt_file)

    opened = open_backends(
        graph, FEEDS, BackendOptions(recordings={"tensorrt": str(trt_file)}), ["onnxruntime", "tensorrt"]
    )
    assert [(type(b), b.name) for b in opened.backends] == [
        (RecordedBackend, "tensorrt"),
        (OnnxRuntimeBackend, "onnxruntime"),
    ]
    assert opened.tensorrt is None and opened.notes == ()  # TensorRT itself was never tried

    opened = open_backends(graph, FEEDS, BackendOptions(recordings={"onnxruntime": str(ort_file)}), ["onnxruntime"])
    assert [type(b) for b in opened.backends] == [RecordedBackend]
    replayed = opened.backends[0]
    assert replayed.available() == {"r", "y"}
    chunk = next(replayed.run(FEEDS, ["y"]))
    np.testing.assert_array_equal(chunk["y"], next(live.run(FEEDS, ["y"]))["y"])


def test_a_recording_not_among_the_names_is_not_opened(graph: GraphInfo, tmp_path: Path) -> None:
    options = BackendOptions(recordings={"onnxruntime": str(tmp_path / "missing.npz")})
    assert open_backends(graph, FEEDS, options, ["torch"]).backends == ()


@no_gpu
def test_tensorrt_is_skipped_with_a_reason_where_it_cannot_run(graph: GraphInfo, tmp_path: Path) -> None:
    engine = tmp_path / "model.engine"
    opened = open_backends(graph, FEEDS, BackendOptions(), ["onnxruntime", "tensorrt"], engine)
    assert [b.name for b in opened.backends] == ["onnxruntime"]
    assert opened.tensorrt is not None and opened.tensorrt.reason
    assert opened.notes == (
        f"TensorRT skipped: {opened.tensorrt.reason}",
        f"no engine written to {engine}: TensorRT did not run; `trtdiff build` builds one",
    )
    assert not engine.exists()
    without_engine = open_backends(graph, FEEDS, BackendOptions(), ["tensorrt"])
    assert without_engine.backends == () and len(without_engine.notes) == 1


@no_gpu
def test_required_tensorrt_that_cannot_run_names_require(graph: GraphInfo) -> None:
    with pytest.raises(BackendError) as caught:
        open_backends(graph, FEEDS, BackendOptions(require=("tensorrt",)), ["tensorrt"])
    assert (caught.value.parameter, caught.value.value) == ("require", "tensorrt")
