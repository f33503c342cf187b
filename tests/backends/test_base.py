"""trtdiff.backends.base: names split into chunks by expected bytes, and one chunk fetched whole."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from trtdiff.backends.base import chunk_names, fetch, serialized
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.source.onnx_graph import load_graph


def test_chunks_keep_order_and_stay_under_the_budget() -> None:
    sizes = {"a": 4, "b": 4, "c": 4, "d": 4, "e": 4}
    assert chunk_names(list("abcde"), sizes, 8) == [["a", "b"], ["c", "d"], ["e"]]
    assert chunk_names(list("abcde"), sizes, 12) == [["a", "b", "c"], ["d", "e"]]
    assert chunk_names(list("abcde"), sizes, 1 << 30) == [list("abcde")]


def test_a_tensor_larger_than_the_budget_gets_a_chunk_of_its_own() -> None:
    sizes = {"a": 1, "big": 100, "b": 1}
    assert chunk_names(["a", "big", "b"], sizes, 10) == [["a"], ["big"], ["b"]]
    assert chunk_names(["big"], sizes, 1) == [["big"]]


def test_unknown_sizes_count_as_one_byte() -> None:
    assert chunk_names(list("abc"), None, 2) == [["a", "b"], ["c"]]
    assert chunk_names(list("abc"), {"b": 2}, 2) == [["a"], ["b"], ["c"]]
    assert chunk_names(list("abcd"), {}, 1) == [["a"], ["b"], ["c"], ["d"]]


def test_no_names_no_chunks() -> None:
    assert chunk_names([], {"a": 1}, 8) == []


def test_every_name_lands_in_exactly_one_chunk() -> None:
    rng = np.random.default_rng(0)
    names = [f"t{i}" for i in range(50)]
    sizes = {n: int(rng.integers(1, 20)) for n in names}
    for budget in (1, 7, 20, 64, 10_000):
        groups = chunk_names(names, sizes, budget)
        assert [n for g in groups for n in g] == names
        assert all(sum(sizes[n] for n in g) <= budget for g in groups if len(g) > 1)


class _Parts:
    """An OnnxBackend yielding one dict per tensor, recording what it was asked."""

    name = "parts"

    def __init__(self, data: Mapping[str, np.ndarray]) -> None:
        self.data = dict(data)
        self.calls: list[tuple[list[str], int]] = []

    def describe(self) -> str:
        return "parts"

    def available(self) -> set[str]:
        return set(self.data)

    def run(
        self,
        feeds: Mapping[str, np.ndarray],
        wanted: Sequence[str],
        *,
        sizes: Mapping[str, int] | None = None,
        max_bytes: int = 1 << 30,
    ) -> Iterator[dict[str, np.ndarray]]:
        self.calls.append((list(wanted), max_bytes))
        for name in wanted:
            if name in self.data:
                yield {name: self.data[name]}


def test_fetch_merges_every_part_in_one_run_without_splitting() -> None:
    runner = _Parts({"a": np.zeros(2), "b": np.ones(3)})
    values = fetch(runner, {}, ["a", "b", "missing"])
    assert set(values) == {"a", "b"}
    np.testing.assert_array_equal(values["b"], np.ones(3))
    assert len(runner.calls) == 1
    names, budget = runner.calls[0]
    assert names == ["a", "b", "missing"] and budget >= 1 << 62


@pytest.fixture(scope="module")
def ort_backend(tmp_path_factory: pytest.TempPathFactory) -> OnnxRuntimeBackend:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["y"], name="neg")],
        "g",
        [x],
        [y],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = Path(tmp_path_factory.mktemp("base")) / "g.onnx"
    onnx.save(model, str(path))
    return OnnxRuntimeBackend(load_graph(path))


def test_fetch_from_onnxruntime_returns_the_chunk_by_name(ort_backend: OnnxRuntimeBackend) -> None:
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], dtype=np.float32)
    values = fetch(ort_backend, {"x": x}, ["y", "r", "x"])
    assert list(values) == ["y", "r"]  # graph inputs are not node outputs
    np.testing.assert_array_equal(values["r"], np.maximum(x, 0))
    np.testing.assert_array_equal(values["y"], -np.maximum(x, 0))


@pytest.mark.slow  # 15 s and 4.4 GB: a real model past 2 GB
def test_a_model_is_serialized_once_and_none_past_protobufs_2gb() -> None:
    """backends.base.serialized: the bytes a runtime reads from memory; past 2 GB protobuf refuses, and the
    runtime reads the file instead (tests/test_third_party_onnx.py lowers the limit to take that path)."""
    import gc

    model = helper.make_model(helper.make_graph([], "g", [], []))
    assert serialized(model) == model.SerializeToString()
    weight = model.graph.initializer.add()
    weight.name, weight.data_type = "w", TensorProto.UINT8
    weight.dims.append((1 << 31) + 1)
    weight.raw_data = bytes((1 << 31) + 1)
    assert serialized(model) is None
    del weight, model
    gc.collect()
