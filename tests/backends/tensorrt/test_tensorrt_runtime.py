"""The pieces of TensorRT's execution path that run without executing an engine, tested for real.

Real TensorRT-RTX objects (the debug listener and output allocator subclasses, the logger, a
runtime, plans built here) called directly with real host memory (numpy arrays, torch CPU
tensors), and the real helper functions the runtime calls. What only an engine run can show
(the calls into an execution context) is in the GPU-only tests at the end, which skip with
the reason `probe()` gives where no engine can run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper

trt = pytest.importorskip(
    "tensorrt_rtx_bindings",
    reason="TensorRT-RTX is not installed: pip install "
    "tensorrt-rtx-cu13-libs==1.7.1.116 tensorrt-rtx-cu13-bindings==1.7.1.116",
)
torch = pytest.importorskip("torch")

from trtdiff.analysis.metrics import compare_tensors  # noqa: E402
from trtdiff.backends.tensorrt import (  # noqa: E402
    NO_EXECUTION,
    BuildSettings,
    TensorRTBackend,
    buffers,
    build_engine,
    cache,
    execution,
    fusion,
    probe,
)
from trtdiff.backends.tensorrt.importing import GpuInfo  # noqa: E402
from trtdiff.backends.tensorrt.logger import shared_logger, step  # noqa: E402
from trtdiff.backends.tensorrt.summary import summarize  # noqa: E402
from trtdiff.errors import BackendError  # noqa: E402
from trtdiff.report import Thresholds  # noqa: E402
from trtdiff.source.onnx_graph import GraphInfo, load_graph  # noqa: E402

X = helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def dotted(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    """`out` at the top level and `out.1` inside an If branch: a dotted name that is a real, unmapped tensor."""
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["out.1"], name="then_relu")],
        "then",
        [],
        [helper.make_tensor_value_info("out.1", TP.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"], name="else_neg")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TP.FLOAT, None)],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["out"], name="relu"),
        helper.make_node("If", ["c"], ["i"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Add", ["out", "i"], ["y"], name="add"),
    ]
    inputs = [X, helper.make_tensor_value_info("c", TP.BOOL, [])]
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TP.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    path = tmp_path_factory.mktemp("dotted") / "dotted.onnx"
    onnx.save(model, str(path))
    return load_graph(path)


def test_listener_records_failed_copies_and_they_raise_after_the_run() -> None:
    """Defect 1: TensorRT's wrapper prints and drops a callback's exception, so the listener must keep it."""
    listener = buffers.make_debug_listener(trt)
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    call = listener.process_debug_tensor  # what TensorRT calls, with the argument types it passes
    assert call(host.ctypes.data, trt.TensorLocation.HOST, trt.DataType.FLOAT, trt.Dims([2, 3]), "good", 0)
    assert not call(host.ctypes.data, trt.TensorLocation.HOST, trt.DataType.FLOAT, trt.Dims([-1, 3]), "bad", 0)
    if not torch.cuda.is_available():  # a device tensor where torch has no CUDA: the copy itself fails
        assert not call(host.ctypes.data, trt.TensorLocation.DEVICE, trt.DataType.FLOAT, trt.Dims([2, 3]), "dev", 0)
    assert call(host.ctypes.data, trt.TensorLocation.HOST, trt.DataType.FP8, trt.Dims([6]), "fp8", 0)
    collector = listener.collector
    assert collector.calls == (3 if torch.cuda.is_available() else 4)
    assert collector.tensors["good"].tolist() == host.tolist() and set(collector.tensors) == {"good"}
    assert collector.errors[0].startswith("bad: BackendError") and "unresolved" in collector.errors[0]
    assert "FP8" in collector.skipped["fp8"]  # no torch type: reported as not compared, not an error
    with pytest.raises(BackendError, match=r"engine for m\.onnx: copying TensorRT debug tensors failed for bad: "):
        collector.raise_errors("engine for m.onnx")
    taken = collector.take()
    assert set(taken) == {"good"} and collector.tensors == {}  # the listener keeps no device copy after the run
    collector.reset()
    assert collector.errors == [] and collector.calls == 0
    collector.raise_errors("nothing failed")


def test_output_allocator_returns_aligned_memory_and_the_reported_shape() -> None:
    """Defect 2: data-dependent outputs (NonZero, NMS) get memory when TensorRT knows their size."""
    allocator = buffers.make_output_allocator(trt, buffers.OutputBuffers(CPU))
    assert isinstance(allocator, trt.IOutputAllocator)
    address = allocator.reallocate_output_async("nz", 0, 24, 256, 0)
    assert address != 0 and address % 256 == 0
    assert allocator.reallocate_output("nz", address, 16, 256) == address  # fits: the buffer is reused
    allocator.outputs.buffers["nz"][:24].view(torch.float32)[:] = torch.arange(6, dtype=torch.float32)
    allocator.notify_shape("nz", trt.Dims([2, 3]))
    assert allocator.outputs.result("nz", torch.float32).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert allocator.reallocate_output("empty", 0, 0, 8) != 0  # no output may have a null address
    allocator.notify_shape("empty", trt.Dims([0, 4]))
    assert tuple(allocator.outputs.result("empty", torch.int64).shape) == (0, 4)
    assert allocator.outputs.result("never_notified", torch.float32) is None
    assert allocator.reallocate_output("huge", 0, 1 << 62, 8) == 0  # a failed allocation: null, and recorded
    assert allocator.outputs.errors and allocator.outputs.errors[0].startswith("huge: ")
    allocator.outputs.reset()
    assert allocator.outputs.errors == [] and allocator.outputs.shapes == {}


def test_debug_names_never_take_real_outputs_or_dotted_tensors(dotted: GraphInfo) -> None:
    """Defect 6, on the names of a real plan: `out.1` is a tensor of the network, not a copy of `out`."""
    plan = build_engine(dotted, BuildSettings(outputs="unfused")).mark_plan
    reverse, known = plan.trt_to_onnx, plan.tensor_names
    assert "out.1" in known and "out.1" not in reverse and reverse["out"] == "out"
    values, unmapped = execution.map_debug_names({"out.1": "then-branch"}, reverse, known, frozenset())
    assert values == {} and unmapped == ("out.1",)  # not cut at the dot and attached to `out`
    debug = {"out.2": "copy of out", "i.3": "copy of i", "out": "exact", "y": "debug y"}
    values, unmapped = execution.map_debug_names(debug, reverse, known, frozenset({"y"}))
    assert values == {"i": "copy of i", "out": "exact"}  # the exact name wins over a copy that came first
    assert unmapped == ("out.2",)  # and `y`, a network output, keeps its real value (the debug copy is dropped)


def test_one_run_per_sample_switches_on_every_wanted_tensor_whatever_the_budget(dotted: GraphInfo) -> None:
    """Issue 29: one run of the one engine per sample, all its wanted debug tensors on, even under a tiny budget."""
    from trtdiff.backends.tensorrt.runtime import plan_run

    plan = build_engine(dotted, BuildSettings(mark_budget_bytes=1)).mark_plan
    assert plan.debug == ("out", "i") and plan.runs_per_sample == 2  # each tensor over the budget: two groups
    assert plan_run(plan, ["i", "out"]) == ("out", "i")  # one run for both (the groups were two runs)
    assert plan_run(plan, ["i"]) == ("i",)
    assert plan_run(plan, []) is None  # outputs only: one run, every debug tensor off
    graph_names = [f"t{i}" for i in range(20_000)]
    many = dataclasses.replace(
        plan,
        debug=tuple(graph_names),
        groups=tuple(tuple(graph_names[i : i + 100]) for i in range(0, 20_000, 100)),
        onnx_to_trt={n: n for n in graph_names},
    )
    assert many.runs_per_sample == 200
    assert plan_run(many, graph_names[::-1]) == tuple(graph_names)  # the network's order, whatever the asked order
    assert plan_run(many, graph_names[150:160]) == tuple(graph_names[150:160])
    unfused = build_engine(dotted, BuildSettings(outputs="unfused", mark_budget_bytes=1)).mark_plan
    assert unfused.runs_per_sample >= 2 and plan_run(unfused, ["out"]) == () and plan_run(unfused, []) is None


def test_the_listener_streams_a_run_through_the_one_bounded_queue(dotted: GraphInfo) -> None:
    """The real RTX listener called on a producer thread as an engine run calls it: copies taken inside each
    call, routed to their ONNX names, handed over in chunks within the bound while the run goes on."""
    from trtdiff.backends.tensorrt.stream import TensorStream, ThreadedRun

    plan = build_engine(dotted, BuildSettings(mark_budget_bytes=1)).mark_plan
    names = execution.DebugNames(plan.trt_to_onnx, plan.tensor_names, {"y"}, {"out", "i"})
    collector = buffers.DebugCollector()
    listener = buffers.make_debug_listener(trt, collector)
    scratch = np.zeros(192, dtype=np.float32)  # TensorRT's memory: valid only during the call
    fired = [("out", trt.DataType.FLOAT), ("y", trt.DataType.FLOAT), ("out.1", trt.DataType.FLOAT)]
    fired += [("i", trt.DataType.FLOAT), ("q", trt.DataType.FP8), ("out.2", trt.DataType.FLOAT)]

    def engine_run(stream: TensorStream[object]) -> str:
        collector.start(None, stream)
        for step_index, (name, kind) in enumerate(fired):
            scratch[:] = step_index  # what the layer just wrote
            shape = trt.Dims([192])
            listener.process_debug_tensor(scratch.ctypes.data, trt.TensorLocation.HOST, kind, shape, name, 0)
            scratch[:] = -1  # the engine reuses the memory once the callback returned
        return "outputs"

    run: ThreadedRun[object, str] = ThreadedRun(engine_run, 192 * 4, names.route)
    got = [{name: np.asarray(value).copy() for name, value in chunk.items()} for chunk in run.chunks()]
    assert [list(chunk) for chunk in got] == [["out"], ["i"]]  # 768 bytes each: one tensor a chunk
    assert float(got[0]["out"].max()) == 0.0 and float(got[1]["i"].min()) == 3.0  # copied inside each call
    assert run.result == "outputs" and not run.thread.is_alive() and run.stream.peak == 768
    assert names.unmapped == ["out.1", "out.2"] and names.handed == 2  # `y` is an output: its real value wins
    assert "q" in collector.skipped and collector.errors == [] and collector.calls == len(fired)


def test_streamed_debug_names_hand_each_tensor_over_once(dotted: GraphInfo) -> None:
    """map_debug_names one tensor at a time: outputs and what was handed over are taken, unwanted ones dropped."""
    plan = build_engine(dotted, BuildSettings(outputs="unfused")).mark_plan
    names = execution.DebugNames(plan.trt_to_onnx, plan.tensor_names, {"y"}, {"out", "i"})
    assert [names.route(n) for n in ("out.2", "out", "i.3", "i", "y", "out.1")] == ["out", None, "i", None, None, None]
    assert names.handed == 2 and names.unmapped == ["out.1"]  # a copy that fired first is kept: it cannot come back
    exact_first = execution.DebugNames(plan.trt_to_onnx, plan.tensor_names, {"y"}, {"out"})
    assert [exact_first.route(n) for n in ("out", "out.2", "i")] == ["out", None, None]
    assert exact_first.unmapped == ["out.2"]  # as map_debug_names lists a copy whose name is taken


def test_one_logger_for_every_builder_and_runtime(dotted: GraphInfo) -> None:
    """Defect: a logger per Builder/Runtime (full TensorRT keeps the first as its global logger and warns)."""
    from trtdiff.backends.tensorrt import parse_onnx

    logger = shared_logger(trt)
    assert shared_logger(trt) is logger
    first = parse_onnx(dotted.path, dotted.model)
    broken = dotted.path.with_name("broken.onnx")
    broken.write_bytes(b"not an onnx file")
    with pytest.raises(BackendError, match="could not read the model"):
        parse_onnx(broken, onnx.ModelProto())
    assert first.logger is logger and logger.errors and "MODEL_DESERIALIZE_FAILED" in logger.errors[0]
    with step(logger):
        assert logger.errors == []  # each step starts clean, so an error quotes that step
    runtime = trt.Runtime(logger)
    with step(logger):
        assert runtime.deserialize_cuda_engine(b"garbage" * 10) is None
        assert any("Serialization" in e for e in logger.errors)  # the runtime logs into the same logger


def test_errors_quote_what_this_step_logged() -> None:
    """Defects 8 and 9: a None context or a False from set_* raise with the error logged since the step began."""
    logger = shared_logger(trt)
    logger.log(trt.ILogger.Severity.ERROR, "stale: from deserializing another engine")
    logger.errors.clear()  # what the runtime does before each step
    logger.log(trt.ILogger.Severity.ERROR, "out of memory creating the context\nmore detail")
    with pytest.raises(BackendError, match=r"could not create an execution context for m: out of memory creating"):
        execution.require(None, logger, "create an execution context for m", "free GPU memory")
    with pytest.raises(BackendError, match="could not set the address of x: out of memory") as error:
        execution.require(False, logger, "set the address of x", "report this")
    assert "stale" not in str(error.value) and "\n" not in str(error.value)
    logger.errors.clear()
    assert execution.failure_cause(logger) == "no error logged"
    context = object()
    assert execution.require(context, logger, "x", "y") is context and execution.require(True, logger, "x", "y")


def test_engine_validity_is_asked_before_loading(tmp_path: Path, dotted: GraphInfo) -> None:
    """A real RTX runtime rates a real plan on this machine (INVALID without a supported GPU) before loading it."""
    plan = build_engine(dotted, BuildSettings(outputs="none")).plan
    runtime = trt.Runtime(shared_logger(trt))
    validity, _ = runtime.get_engine_validity(plan)
    gpu = GpuInfo(0, "NVIDIA H200", (9, 0))
    if validity == trt.EngineValidity.INVALID:
        with pytest.raises(BackendError, match=NO_EXECUTION):
            execution.check_engine_validity(trt, runtime, plan, gpu)
    else:
        execution.check_engine_validity(trt, runtime, plan, gpu)


def test_runtime_cache_files_sit_beside_the_engine(tmp_path: Path) -> None:
    """Defect 14: TensorRT-RTX's JIT kernels are kept per engine key in the engine cache folder."""
    path = cache.runtime_cache_path(tmp_path / "cache", "abc")
    assert path.name == "abc.runtime-cache" and cache.load_runtime_cache(path) == b""
    cache.save_runtime_cache(path, b"")
    assert not path.exists()  # an empty cache is not written
    cache.save_runtime_cache(path, b"kernels")
    assert cache.load_runtime_cache(path) == b"kernels"
    assert {"IRuntimeConfig", "IRuntimeCache"} <= set(dir(trt))  # what EngineSession feature-detects is here
    assert hasattr(trt.ICudaEngine, "create_runtime_config") and hasattr(trt.IRuntimeConfig, "set_runtime_cache")


def test_inspector_json_with_control_characters_and_fallbacks(dotted: GraphInfo) -> None:
    """Defects 3 and 14: raw \\x1e in metadata, TacticValue, a one-node ForeignNode; never a failed comparison."""
    text = (
        '{"Layers": [{"Name": "relu + add", "LayerType": "PointWiseV2", '
        '"Metadata": "[ONNX Layer: relu]\x1e[ONNX Layer: add]", "TacticValue": "0x0000000000000001"}, '
        '{"Name": "{ForeignNode[if]}", "Metadata": ""}]}'
    )
    report = fusion.fusion_from_inspector(text, dotted)
    assert [(layer.onnx_nodes, layer.tactic) for layer in report.layers] == [
        (("relu", "add"), "0x0000000000000001"),
        (("if",), None),
    ]
    assert fusion.nodes_from_name("{ForeignNode[relu]}", dotted) == ("relu",)
    plan = build_engine(dotted, BuildSettings(outputs="none")).plan
    broken = fusion.fusion_from_text_or_plans('{"Layers": [{"Name": "relu"', [plan], dotted)
    assert broken.source == fusion.SOURCE_PLAN and "could not be read" in (broken.note or "")
    assert broken.layers == fusion.fusion_from_plan(plan, dotted).layers
    no_engine = fusion.engine_fusion(None, trt, dotted, [plan])  # the inspector itself fails
    assert no_engine.source == fusion.SOURCE_PLAN and "inspector failed" in (no_engine.note or "")
    nothing = fusion.fusion_fallback([b"not a plan"], dotted, "why")
    assert nothing.layers == () and nothing.note == "why"


def test_summary_reports_what_the_runs_and_the_fusion_fallback_found(dotted: GraphInfo) -> None:
    """Defect 12: unmapped or missing debug tensors reach the report's notes."""
    build = build_engine(dotted, BuildSettings(outputs="unfused"))
    fallback = fusion.fusion_fallback([build.plan], dotted, "the engine inspector failed (RuntimeError)")
    note = "unfused: the engine reported no debug tensors at all; only the network outputs were compared"
    summary = summarize(build, fallback, status="ran", gpu=None, run_notes=(note,))
    assert note in summary.notes
    assert any(n.startswith("fusion: the engine inspector failed") for n in summary.notes)


def test_a_run_reports_one_run_per_sample_whatever_the_groups(dotted: GraphInfo) -> None:
    """Issue 29: a comparison that ran says 1 run per sample; a build still reports its planned groups."""
    build = build_engine(dotted, BuildSettings(mark_budget_bytes=1))
    assert build.mark_plan.runs_per_sample == 2
    assert summarize(build, None, status="built", gpu=None).runs_per_sample == 2
    assert summarize(build, None, status="ran", gpu="NVIDIA RTX 4090").runs_per_sample == 1


# --- only a supported GPU can run these -------------------------------------------------------


def _needs_engine_run() -> None:
    found = probe()
    if not found.can_run:
        pytest.skip(f"{NO_EXECUTION}: {found.reason}")


def test_one_run_per_sample_on_a_supported_gpu(export_example: Callable[..., Path]) -> None:
    """Issue 29: under a tiny budget and small chunks, one run of the marked engine per sample, chunks within bound."""
    _needs_engine_run()
    graph = load_graph(export_example(17))
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)
    for outputs in ("all", "unfused"):
        settings = BuildSettings(outputs=outputs, mark_budget_bytes=1 << 12)
        with TensorRTBackend(graph, settings, compare=compare_tensors) as backend:
            assert backend.build.mark_plan.runs_per_sample > 1  # the groups a sample used to take as runs
            for sample in range(2):
                chunks = list(backend.run({"x": x + sample}, sorted(backend.available()), max_bytes=1 << 16))
                assert all(sum(v.nbytes for v in c.values()) <= 1 << 16 or len(c) == 1 for c in chunks)
                assert backend.answer is not None and backend.answer.runs == sample + 1
            assert backend._streaming is None and "1 run per sample" in backend.describe()


def test_engine_run_paths_on_a_supported_gpu(export_example: Callable[..., Path]) -> None:
    """Defects 1, 4-12 end to end: only a GPU this TensorRT supports runs an engine."""
    _needs_engine_run()
    import onnxruntime as ort

    graph = load_graph(export_example(17))
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)
    ref = ort.InferenceSession(str(graph.path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for outputs in ("all", "unfused"):
        settings = BuildSettings(outputs=outputs, mark_budget_bytes=1 << 16)
        with TensorRTBackend(graph, settings, compare=compare_tensors) as backend:
            chunks = list(backend.run({"x": x}, sorted(backend.available()), max_bytes=1 << 20))
            values = {k: v for chunk in chunks for k, v in chunk.items()}
            assert np.abs(values[graph.graph_outputs[0]] - ref).max() < 1e-3
            assert backend._marked is not None and backend._marked.listener is not None
            assert backend.answer.runs >= 1 and backend.marking_check(Thresholds()).status in ("same", "changed")
        assert backend._marked is None and backend._plain is None  # close() released both engines
