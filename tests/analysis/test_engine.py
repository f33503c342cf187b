"""trtdiff.analysis.engine: every pass compared chunk by chunk, on exactly the tensors both sources of a pair have."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from trtdiff.analysis.engine import BackendValues, CapturedValues, Compared, Engine, ForwardValues, Pass
from trtdiff.analysis.judge import Judge
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.pytorch.capture import capture
from trtdiff.pairing.pairs import Pairing, TorchPair
from trtdiff.report import BackendPair, Thresholds
from trtdiff.source.onnx_graph import load_graph
from trtdiff.source.samples import Sample

TORCH_ORT = BackendPair("torch", "onnxruntime")
TORCH_TRT = BackendPair("torch", "tensorrt")
ORT_TRT = BackendPair("onnxruntime", "tensorrt")
PAIRS = (TORCH_ORT, TORCH_TRT, ORT_TRT)
THRESHOLDS = Thresholds()
SAMPLE = Sample("input", (np.zeros((1, 3), np.float32),))


class DictSource:
    """A value source over a fixed dict, recording each request (one per chunk)."""

    def __init__(self, name: str, data: Mapping[str, np.ndarray]) -> None:
        self.name = name
        self.data = dict(data)
        self.requests: list[list[str]] = []

    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        self.requests.append(list(names))
        return {n: self.data[n] for n in names if n in self.data}


def _tensors(seed: int, names: Sequence[str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal((2, 3)).astype(np.float32) for n in names}


def _engine(outputs: tuple[str, ...] = ("d",), sizes: Mapping[str, int] | None = None, chunk: int = 1 << 30) -> Engine:
    return Engine(PAIRS, Judge(THRESHOLDS), outputs, sizes if sizes is not None else {}, chunk)


def test_only_pairs_and_tensors_both_sources_have_are_compared() -> None:
    reference = _tensors(0, "abc")
    candidate = {"a": reference["a"] * 1.5, "c": reference["c"].copy(), "d": np.ones((2, 3), np.float32)}
    torch_source, ort_source = DictSource("torch", reference), DictSource("onnxruntime", candidate)
    (result,) = _engine().run([Pass(SAMPLE, (torch_source, ort_source), ("a", "b", "c", "d"))])
    assert set(result.metrics) == {"a", "c"}  # b only in torch, d only in onnxruntime
    assert all(set(entry) == {TORCH_ORT} for entry in result.metrics.values())  # no tensorrt source
    assert result.metrics["a"][TORCH_ORT] == compare_tensors(reference["a"], candidate["a"], THRESHOLDS)
    assert result.metrics["a"][TORCH_ORT].diverged and not result.metrics["c"][TORCH_ORT].diverged
    assert result.sample is SAMPLE


def test_every_pair_among_three_sources_in_pair_order() -> None:
    data = _tensors(1, "ab")
    sources = tuple(DictSource(n, data) for n in ("tensorrt", "onnxruntime", "torch"))
    (result,) = _engine().run([Pass(SAMPLE, sources, ("a", "b"))])
    assert list(result.metrics["a"]) == list(PAIRS)
    assert all(m.cosine == pytest.approx(1.0) and m.max_abs == 0.0 for m in result.metrics["b"].values())


def test_pairs_follow_reference_and_candidate_roles() -> None:
    torch_values = {"a": np.array([1.0, 2.0], np.float32)}
    ort_values = {"a": np.array([1.0, 3.0], np.float32)}
    engine = Engine((BackendPair("onnxruntime", "torch"),), Judge(THRESHOLDS), (), {}, 1 << 30)
    sources = (DictSource("torch", torch_values), DictSource("onnxruntime", ort_values))
    (result,) = engine.run([Pass(SAMPLE, sources, ("a",))])
    metrics = result.metrics["a"][BackendPair("onnxruntime", "torch")]
    assert metrics.ref_max_abs == 3.0 and metrics.rel_err == pytest.approx(1 / 3)  # onnxruntime is the reference


def test_chunks_follow_the_byte_budget() -> None:
    data = _tensors(2, "abcde")
    sizes = {n: 24 for n in "abcde"}
    torch_source, ort_source = DictSource("torch", data), DictSource("onnxruntime", data)
    list(_engine(sizes=sizes, chunk=48).run([Pass(SAMPLE, (torch_source, ort_source), tuple("abcde"))]))
    assert torch_source.requests == ort_source.requests == [["a", "b"], ["c", "d"], ["e"]]


def _run_with_chunk(chunk: int) -> tuple[Compared, DictSource]:
    reference = _tensors(3, "abcdef")
    candidate = {n: v + np.float32(1e-3) * i for i, (n, v) in enumerate(reference.items())}
    torch_source, ort_source = DictSource("torch", reference), DictSource("onnxruntime", candidate)
    sizes = {n: v.nbytes for n, v in reference.items()}
    engine = _engine(outputs=("f",), sizes=sizes, chunk=chunk)
    (result,) = engine.run([Pass(SAMPLE, (torch_source, ort_source), tuple("abcdef"))])
    return result, torch_source


def test_chunk_size_does_not_change_the_metrics() -> None:
    small, small_source = _run_with_chunk(1)
    large, large_source = _run_with_chunk(1 << 30)
    assert len(small_source.requests) == 6 and len(large_source.requests) == 1
    assert small.metrics == large.metrics and set(small.metrics) == set("abcdef")
    assert small.outputs.keys() == large.outputs.keys()
    for name in small.outputs:
        assert small.outputs[name].keys() == large.outputs[name].keys() == {"f"}


def test_only_the_outputs_are_kept() -> None:
    data = _tensors(4, "abcd")
    sources = (DictSource("torch", data), DictSource("onnxruntime", {k: data[k] for k in "bcd"}))
    (result,) = _engine(outputs=("a", "d"), chunk=1).run([Pass(SAMPLE, sources, tuple("abcd"))])
    assert {name: sorted(values) for name, values in result.outputs.items()} == {
        "torch": ["a", "d"],
        "onnxruntime": ["d"],
    }
    np.testing.assert_array_equal(result.outputs["torch"]["a"], data["a"])


def test_a_source_without_tensors_still_appears_in_outputs() -> None:
    sources = (DictSource("torch", _tensors(5, "a")), DictSource("onnxruntime", {}))
    (result,) = _engine(outputs=("a",)).run([Pass(SAMPLE, sources, ("a",))])
    assert result.outputs == {"torch": {"a": sources[0].data["a"]}, "onnxruntime": {}}
    assert result.metrics == {}


def test_one_result_per_pass_in_order_and_lazily() -> None:
    consumed: list[str] = []

    def passes() -> Iterator[Pass]:
        for index in range(3):
            consumed.append(f"sample-{index}")
            data = _tensors(index, "d")
            yield Pass(
                Sample(f"sample-{index}", ()), (DictSource("torch", data), DictSource("onnxruntime", data)), ("d",)
            )

    results = _engine().run(passes())
    assert consumed == []
    first = next(results)
    assert first.sample.name == "sample-0" and consumed == ["sample-0"]
    assert [r.sample.name for r in results] == ["sample-1", "sample-2"]


def test_a_pass_without_tensors_compares_nothing() -> None:
    (result,) = _engine().run([Pass(SAMPLE, (DictSource("torch", {}), DictSource("onnxruntime", {})), ())])
    assert result.metrics == {} and result.outputs == {"torch": {}, "onnxruntime": {}}


# Real sources: ONNX Runtime on a graph, the PyTorch capture, a plain forward.


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.fc(x))


@pytest.fixture(scope="module")
def tiny() -> Tiny:
    torch.manual_seed(0)
    return Tiny().eval()


@pytest.fixture(scope="module")
def ort(tiny: Tiny, tmp_path_factory: pytest.TempPathFactory) -> OnnxRuntimeBackend:
    """The same computation as Tiny, written by hand: Gemm -> Relu."""
    weight = numpy_helper.from_array(tiny.fc.weight.detach().numpy(), "w")
    bias = numpy_helper.from_array(tiny.fc.bias.detach().numpy(), "b")
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["fc"], name="/fc/Gemm", transB=1),
        helper.make_node("Relu", ["fc"], ["y"], name="/relu/Relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [weight, bias],
    )
    path = Path(tmp_path_factory.mktemp("engine")) / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return OnnxRuntimeBackend(load_graph(path))


X = np.array([[0.5, -1.0, 2.0]], np.float32)


def test_backend_values_run_the_backend_on_the_feeds(ort: OnnxRuntimeBackend, tiny: Tiny) -> None:
    source = BackendValues(ort, {"x": X})
    assert source.name == "onnxruntime"
    values = source.values(["fc", "y", "not-a-tensor"])
    assert set(values) == {"fc", "y"}
    with torch.no_grad():
        np.testing.assert_allclose(values["y"], tiny(torch.from_numpy(X)).numpy(), rtol=1e-6, atol=1e-6)


def test_captured_values_by_onnx_name_and_outputs(tiny: Tiny) -> None:
    captured = capture(tiny, {"x": X})
    assert [r.kind for r in captured.records] == ["gemm", "relu"]
    pairing = Pairing({"fc": TorchPair("torch:0", "scoped", "aten.addmm.default", "fc")}, {})
    source = CapturedValues(captured, pairing, ("y",))
    assert source.name == "torch"
    assert source.keys == {"fc": "torch:0", "y": "torch:output:0"}
    values = source.values(["fc", "y", "unpaired"])
    assert set(values) == {"fc", "y"}
    np.testing.assert_array_equal(values["fc"], captured.value("torch:0"))
    np.testing.assert_array_equal(values["y"], captured.value("torch:output:0"))
    # When the graph has a different number of outputs than the model, outputs are not guessed.
    assert CapturedValues(captured, pairing, ("y", "extra")).keys == {"fc": "torch:0"}


def test_capture_against_onnxruntime_through_the_engine(ort: OnnxRuntimeBackend, tiny: Tiny) -> None:
    captured = capture(tiny, {"x": X})
    pairing = Pairing(
        {"fc": TorchPair("torch:0", "scoped", None, "fc"), "y": TorchPair("torch:1", "scoped", None, "relu")}, {}
    )
    engine = Engine((TORCH_ORT,), Judge(THRESHOLDS), ("y",), {}, 4)
    sources = (CapturedValues(captured, pairing, ("y",)), BackendValues(ort, {"x": X}))
    (result,) = engine.run([Pass(SAMPLE, sources, ("fc", "y"))])
    assert set(result.metrics) == {"fc", "y"}
    assert all(not entry[TORCH_ORT].diverged for entry in result.metrics.values())
    assert set(result.outputs["torch"]) == set(result.outputs["onnxruntime"]) == {"y"}


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        return a + b, a * b


def test_forward_values_run_once_and_name_outputs_by_the_graph() -> None:
    module = Counting()
    sample = Sample("s", (np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)))
    source = ForwardValues(module, sample, ("sum", "prod"), "cpu", False)
    assert source.name == "torch"
    assert module.calls == 0  # nothing runs until values are asked for
    first = source.values(["sum"])
    second = source.values(["prod", "other"])
    assert module.calls == 1
    np.testing.assert_array_equal(first["sum"], [4.0, 6.0])
    assert list(second) == ["prod"]
    np.testing.assert_array_equal(second["prod"], [3.0, 8.0])
    # A graph with another number of outputs than the model gets nothing, rather than a wrong pairing.
    assert ForwardValues(Counting(), sample, ("only",), "cpu", False).values(["only"]) == {}


def test_a_backend_that_runs_once_follows_another_backends_chunks_in_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX Runtime behind another backend's chunks (one tensor a chunk) is still run once for every tensor: its
    segments each run once, as its run hands them over, and every tensor is compared as when it leads."""
    from tests.culprit_models import CNN_SHAPE, export, small_cnn
    from trtdiff.backends.onnx_reference import OnnxReferenceBackend
    from trtdiff.backends.segments import plan_segments
    from trtdiff.source.inputs import make_inputs

    graph = load_graph(export(small_cnn(), CNN_SHAPE, tmp_path / "cnn.onnx", 13))
    feeds = make_inputs(list(graph.graph_inputs), shapes=[CNN_SHAPE], seed=0)
    calls: list[int] = []
    run = OnnxRuntimeBackend.run
    monkeypatch.setattr(OnnxRuntimeBackend, "run", lambda self, *a, **k: calls.append(1) or run(self, *a, **k))
    with OnnxReferenceBackend(graph) as spec, OnnxRuntimeBackend(graph) as ort:
        tensors = tuple(t for t in graph.node_outputs if t in ort.available())
        sizes = {t: n for t in tensors if (n := graph.tensor_type(t).nbytes()) is not None}
        pair = BackendPair("onnx-reference", "onnxruntime")
        engine = Engine((pair,), Judge(THRESHOLDS), tuple(graph.graph_outputs), sizes, 1)
        sources = (BackendValues(spec, feeds), BackendValues(ort, feeds))
        (followed,) = engine.run([Pass(SAMPLE, sources, tensors)])
        assert calls == [1] and ort.session_runs == len(plan_segments(graph, list(tensors), sizes, 1))
        assert list(followed.metrics) == list(tensors) and not any(m[pair].diverged for m in followed.metrics.values())
        (led,) = engine.run([Pass(SAMPLE, sources[::-1], tensors)])  # ONNX Runtime sets the chunks
    figures = {t: (m[pair].max_abs, m[pair].cosine) for t, m in followed.metrics.items()}
    assert figures == {t: (m[pair].max_abs, m[pair].cosine) for t, m in led.metrics.items()}
