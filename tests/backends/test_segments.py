"""The ONNX graph run in segments (backends.segments): the values of one whole run, every node run once.

Real exports and real ONNX Runtime sessions: a CNN, the transformer block, a scripted If, DeepLabV3+,
and the transformer block converted to FP16 as trtdiff converts it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.culprit_models import export, small_cnn, transformer_block
from tests.graph_models import CASES, export_case
from tests.precision_models import fp16_file
from trtdiff.backends.base import chunk_names, fetch
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.segments import needed_nodes, plan_segments
from trtdiff.source.inputs import make_inputs
from trtdiff.source.onnx_graph import GraphInfo, load_graph


def _cnn(folder: Path) -> tuple[Path, str]:
    return export(small_cnn(), "1x3x32x32", folder / "cnn.onnx", 13), "1x3x32x32"


def _block(folder: Path) -> tuple[Path, str]:
    return export(transformer_block(), "1x16x32", folder / "block.onnx", 17), "1x16x32"


def _deeplab(folder: Path) -> tuple[Path, str]:
    from trtdiff.examples.deeplabv3plus import deeplabv3plus_resnet

    return export(deeplabv3plus_resnet(), "1x3x64x64", folder / "deeplab.onnx", 13), "1x3x64x64"


def _if(folder: Path) -> tuple[Path, str]:
    case = next(c for c in CASES if c.name == "if-branch")
    return export_case(case, folder), case.shape


def _fp16(folder: Path) -> tuple[Path, str]:
    return fp16_file(transformer_block(), folder, "block"), "1x16x32"


MODELS: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "cnn": _cnn,
    "transformer": _block,
    "if": _if,
    "deeplab": _deeplab,  # Resize fed its sizes across a cut
    "fp16": _fp16,
}


def _opened(make: Callable[[Path], tuple[Path, str]], folder: Path) -> tuple[OnnxRuntimeBackend, GraphInfo, dict]:
    path, shape = make(folder)
    graph = load_graph(path)
    feeds = make_inputs(list(graph.graph_inputs), shapes=[shape], seed=0)
    return OnnxRuntimeBackend(graph), graph, feeds


def _sizes(graph: GraphInfo, names: list[str]) -> dict[str, int]:
    return {t: n for t in names if (n := graph.tensor_type(t).nbytes()) is not None}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("budget", [1, 4096])
def test_segments_give_the_values_of_one_whole_run_bit_for_bit(model: str, budget: int, tmp_path: Path) -> None:
    backend, graph, feeds = _opened(MODELS[model], tmp_path)
    with backend:
        wanted = [t for t in graph.node_outputs if t in backend.available()]
        sizes = _sizes(graph, wanted)
        assert len(chunk_names(wanted, sizes, budget)) > 1  # several chunks: the graph runs in segments
        whole = fetch(backend, feeds, wanted)  # one run of the whole graph, every tensor at once
        before = backend.session_runs
        chunks = list(backend.run(feeds, wanted, sizes=sizes, max_bytes=budget))
        # FP16 on the CPU provider: not cut (its float32 kernels carry unrounded values across nodes)
        assert backend.cuts_exact == (model != "fp16")
        runs = plan_segments(graph, wanted, sizes, budget) if backend.cuts_exact else chunk_names(wanted, sizes, budget)
        assert len(chunks) == len(runs) == backend.session_runs - before > 1
        seen: dict[str, np.ndarray] = {}
        for chunk in chunks:
            assert not set(chunk) & set(seen), "a tensor came back twice"
            assert sum(sizes.get(t, 1) for t in chunk) <= budget or len(chunk) <= len(
                next(n.outputs for n in graph.nodes if set(chunk) <= set(n.outputs))
            )  # over the budget only where one node's outputs are
            seen.update(chunk)
        assert sorted(seen) == sorted(whole)
        for name, value in whole.items():
            assert seen[name].dtype == value.dtype and seen[name].shape == value.shape, name
            np.testing.assert_array_equal(seen[name], value, err_msg=name, strict=True)


def test_the_fp16_graph_keeps_float16_at_its_cuts(tmp_path: Path) -> None:
    """Where a provider computes in float16 the graph is cut: each cut is fed float16, as it came out."""
    backend, graph, feeds = _opened(_fp16, tmp_path)
    with backend:
        wanted = [t for t in graph.node_outputs if t in backend.available()]
        sizes = _sizes(graph, wanted)
        opened = backend._open_segments(plan_segments(graph, wanted, sizes, 1))
        assert opened is not None
        fed = {arg.name: arg.type for _, session in opened for arg in session.get_inputs()}
        halves = [t for t, kind in fed.items() if kind == "tensor(float16)"]
        assert len(halves) > 10 and all(graph.tensor_type(t).dtype == np.float16 for t in halves)
        assert all(kind == "tensor(float)" for t, kind in fed.items() if graph.tensor_type(t).dtype == np.float32)
        whole = fetch(backend, feeds, wanted)
        values = {t: v for chunk in backend._run_segments(opened, feeds) for t, v in chunk.items()}
        for name, value in whole.items():  # the CPU provider's float32 kernels: within a few float16 steps
            assert values[name].dtype == value.dtype, name
            np.testing.assert_allclose(values[name].astype(np.float32), value.astype(np.float32), atol=0.02, rtol=0.02)


@pytest.mark.parametrize("model", ["cnn", "if"])
def test_every_node_runs_once_per_sample_one_session_run_per_segment(model: str, tmp_path: Path) -> None:
    backend, graph, feeds = _opened(MODELS[model], tmp_path)
    with backend:
        wanted = [t for t in graph.node_outputs if t in backend.available()]
        sizes = _sizes(graph, wanted)
        segments = plan_segments(graph, wanted, sizes, 1)
        ran = [i for s in segments for i in s.nodes]
        assert len(ran) == len(set(ran)) and ran == needed_nodes(graph, wanted) == list(range(len(graph.nodes)))
        if model == "if":  # the If stays whole in one segment, with what its branches read from outside
            holder = next(s for s in segments if any(graph.nodes[i].op_type == "If" for i in s.nodes))
            node = next(graph.nodes[i] for i in holder.nodes if graph.nodes[i].op_type == "If")
            assert node.implicit and all(t in holder.inputs or t in graph.initializers for t in node.implicit)
        for sample in range(2):  # sessions are made once: the second sample reuses them
            before, made = backend.session_runs, backend.sessions_made
            chunks = list(backend.run(feeds, wanted, sizes=sizes, max_bytes=1))
            assert backend.session_runs - before == len(segments) == len(chunks)
            assert backend.sessions_made - made == (len(segments) if sample == 0 else 0)
        before = backend.session_runs
        list(backend.run(feeds, list(graph.graph_outputs), sizes=sizes, max_bytes=1 << 30))
        assert backend.session_runs - before == 1  # the final outputs alone: one plain run of the whole graph


def test_a_segment_reads_only_its_frontier_and_hands_on_only_what_later_segments_read(tmp_path: Path) -> None:
    # x -> a -> b -> c (output); d = a + c reads `a` two segments later: it crosses both cuts, b does not.
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="n0"),
        helper.make_node("Neg", ["a"], ["b"], name="n1"),
        helper.make_node("Mul", ["b", "w"], ["c"], name="n2"),
        helper.make_node("Add", ["a", "c"], ["d"], name="n3"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 3])],
            [numpy_helper.from_array(np.full((2, 3), 2.0, np.float32), "w")],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "g.onnx"))
    graph = load_graph(tmp_path / "g.onnx")
    segments = plan_segments(graph, ["a", "b", "c", "d"], {}, 1)
    assert [s.nodes for s in segments] == [(0,), (1,), (2,), (3,)]
    assert [s.inputs for s in segments] == [("x",), ("a",), ("b",), ("a", "c")]  # `w` is copied into its segment
    assert [s.handed_on for s in segments] == [("a",), ("b",), ("c",), ()]
    with OnnxRuntimeBackend(graph) as backend:
        x = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32)
        values = {t: v for c in backend.run({"x": x}, ["a", "b", "c", "d"], max_bytes=1) for t, v in c.items()}
    a = np.maximum(x, 0)
    np.testing.assert_array_equal(values["d"], a + (-a * 2))
    assert backend.session_runs == 4


def test_a_chunked_comparison_runs_onnx_runtime_once_per_segment_with_the_figures_of_one_chunk(
    opened_backends: list,
) -> None:
    """The engine takes ONNX Runtime's chunks as they come: sample 0 is one pass through the segments, not a whole
    run per chunk, and the report is the one-chunk comparison's."""
    import trtdiff

    kwargs = {"input_shapes": ["1x3x32x32"], "opset": 13, "backends": ["torch", "onnxruntime"], "culprit": False}
    one = trtdiff.compare(small_cnn(), torch_device="cpu", **kwargs)
    chunked = trtdiff.compare(small_cnn(), torch_device="cpu", chunk_bytes=8192, **kwargs)
    backend = opened_backends[-1]
    assert isinstance(backend, OnnxRuntimeBackend) and backend.sessions_made > 2  # the whole graph, and segments
    assert backend.session_runs == backend.sessions_made - 1  # each segment ran once; the whole graph never
    assert [(la.tensor, la.pairs) for la in one.layers] == [(la.tensor, la.pairs) for la in chunked.layers]
    assert one.samples[0].outputs == chunked.samples[0].outputs and one.passed and chunked.passed


def test_segments_made_at_one_batch_run_another_of_a_dynamic_batch_graph(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "groupnorm")
    graph = load_graph(export_case(case, tmp_path, dynamic_batch=True))
    with OnnxRuntimeBackend(graph) as backend:
        wanted = [t for t in graph.node_outputs if t in backend.available()]
        for batch in (1, 3):  # the segments' sessions are made at the first batch and reused at the second
            shape = "x".join([str(batch), *case.shape.split("x")[1:]])
            feeds = make_inputs(["x"], shapes=[shape], seed=batch)
            whole = fetch(backend, feeds, wanted)
            values = {t: v for c in backend.run(feeds, wanted, max_bytes=1) for t, v in c.items()}
            assert backend.sessions_made > 2 and values.keys() == whole.keys()
            for name, value in whole.items():
                np.testing.assert_array_equal(values[name], value, err_msg=name, strict=True)
