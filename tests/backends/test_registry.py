"""trtdiff.backends.registry: the backends by name, which run (choose_backends), and opening and closing them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from trtdiff.backends.base import OnnxBackend
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.recorded import RecordedBackend, record
from trtdiff.backends.registry import (
    BACKENDS,
    backend_class,
    choose_backends,
    engine_settings,
    exact_backend,
    open_backend,
    open_backends,
    ran_summary,
    reopen_backend,
    repro_backends,
    repro_readme_lines,
    saved_beside,
    spec_evaluator,
)
from trtdiff.errors import BackendError, OptionError
from trtdiff.options import KNOWN_BACKENDS, ONNX_BACKENDS, BackendOptions
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


def test_the_registry_names_exactly_the_declared_backends() -> None:
    assert tuple(BACKENDS) == KNOWN_BACKENDS
    assert tuple(name for name, spec in BACKENDS.items() if spec.kind == "onnx") == ONNX_BACKENDS
    for name in ONNX_BACKENDS:
        cls = backend_class(name)  # imports the class's module now, by its path
        assert issubclass(cls, OnnxBackend) and cls.name == name
    assert [n for n, spec in BACKENDS.items() if spec.needs_gpu] == ["tensorrt"]
    assert BACKENDS["tensorrt"].extra == "tensorrt-rtx" and BACKENDS["onnxruntime"].extra is None
    assert BACKENDS["openvino"].extra == "openvino"


def test_an_unknown_backend_is_refused_in_one_line_naming_the_choices(graph: GraphInfo) -> None:
    with pytest.raises(OptionError) as caught:
        open_backend("onnxrt", graph)
    message = str(caught.value)
    assert "\n" not in message and (caught.value.parameter, caught.value.value) == ("backends", "onnxrt")
    assert f"choose from {', '.join(KNOWN_BACKENDS)}" in message
    with pytest.raises(OptionError, match="runs no ONNX file"):
        open_backend("torch", graph)


def test_a_backend_closes_once_and_refuses_to_run_after(graph: GraphInfo) -> None:
    with open_backend("onnxruntime", graph) as backend:
        assert not backend.closed
        np.testing.assert_array_equal(next(backend.run(FEEDS, ["r"]))["r"], np.maximum(FEEDS["x"], 0))
    assert backend.closed and backend._session is None  # the ONNX Runtime session is gone
    backend.close()  # idempotent
    with pytest.raises(BackendError, match="was closed"):
        next(backend.run(FEEDS, ["r"]))


def test_each_backend_closes_what_it_holds(graph: GraphInfo, tmp_path: Path) -> None:
    reference = open_backend("onnx-reference", graph)
    reference.close()
    assert reference._evaluator is None
    with open_backend("onnxruntime", graph) as live:
        record(live, graph, FEEDS, tmp_path / "ort.npz")
    (replay,) = open_backends(
        graph, FEEDS, BackendOptions(recordings={"onnxruntime": str(tmp_path / "ort.npz")}), ["onnxruntime"]
    ).backends
    assert replay._archive.zip is not None
    replay.close()
    assert replay._archive.zip is None and replay.closed  # the .npz file is closed
    with pytest.raises(BackendError, match="was closed"):
        next(replay.run(FEEDS, ["y"]))


def test_opened_backends_close_together_and_when_a_later_one_fails(
    graph: GraphInfo, tmp_path: Path, opened_backends: list
) -> None:
    with OnnxRuntimeBackend(graph) as live:
        record(_Named("tensorrt", live), graph, FEEDS, tmp_path / "trt.npz")
    recordings = {"tensorrt": str(tmp_path / "trt.npz")}
    del opened_backends[:]
    with open_backends(graph, FEEDS, BackendOptions(recordings=recordings), ["onnxruntime", "tensorrt"]) as opened:
        assert [b.name for b in opened.backends] == ["tensorrt", "onnxruntime"]
        assert not any(b.closed for b in opened.backends)
    assert all(b.closed for b in opened.backends)
    del opened_backends[:]
    bad = BackendOptions(recordings=recordings, ort_provider="NoSuchExecutionProvider")
    with pytest.raises(OptionError):  # ONNX Runtime refuses after the recording was opened
        open_backends(graph, FEEDS, bad, ["onnxruntime", "tensorrt"])
    assert [type(b) for b in opened_backends] == [RecordedBackend] and opened_backends[0].closed


@no_gpu
def test_tensorrt_opened_by_name_where_it_cannot_run_says_why(graph: GraphInfo) -> None:
    from trtdiff.backends.tensorrt import NO_EXECUTION

    with pytest.raises(BackendError, match=NO_EXECUTION):
        open_backend("tensorrt", graph, feeds=FEEDS)


HOOKS = ("opens", "unavailable", "reopens", "repro_readme", "engine_settings", "saves_beside", "builds", "summarizes")


def test_every_hook_a_spec_declares_is_a_function_there() -> None:
    """A capability is one line of a spec ("module:function" for a hook), its module imported when asked."""
    import importlib

    declared = [
        (spec.name, hook, path) for spec in BACKENDS.values() for hook in HOOKS if (path := getattr(spec, hook))
    ]
    assert {hook for _, hook, _ in declared} == set(HOOKS)
    for name, hook, path in declared:
        module, _, attribute = path.partition(":")
        assert callable(getattr(importlib.import_module(module), attribute)), f"{name}.{hook}: {path}"


def test_the_roles_name_the_runtime_that_plays_them(graph: GraphInfo) -> None:
    """What the culprit step, repro and inspect ask for instead of a runtime's name."""
    assert (exact_backend(), spec_evaluator(), repro_backends()) == (
        "onnxruntime",
        "onnx-reference",
        ("onnxruntime", "onnx-reference"),
    )
    assert [n for n, spec in BACKENDS.items() if spec.compiled] == ["tensorrt", "openvino"]
    assert saved_beside(Path("out/m.engine")) == Path("out/m.marked.engine")
    assert repro_readme_lines("torch", graph, "subgraph.onnx") == []
    assert "import numpy as np, openvino as ov" in repro_readme_lines("openvino", graph, "subgraph.onnx")
    assert engine_settings(BackendOptions(tf32=True), FEEDS).input_shapes == (("x", (1, 3)),)


def test_a_backend_without_a_reopen_hook_is_opened_on_a_rewritten_model_as_on_the_original(graph: GraphInfo) -> None:
    with reopen_backend("onnxruntime", graph, FEEDS, BackendOptions()) as backend:
        assert isinstance(backend, OnnxRuntimeBackend)
        np.testing.assert_array_equal(next(backend.run(FEEDS, ["r"]))["r"], np.maximum(FEEDS["x"], 0))
    assert ran_summary([backend]) is None  # no backend that summarizes its run (TensorRT) among them
