"""The engine that ships beside the one measured: fusions split, precision as built, the marking check, linear planning.

Real TensorRT-RTX builds on the CPU throughout. What needs an engine to *run* is replaced,
and named as such, in two places only: the comparison step of the bisection (a stand-in
comparator that reads the real rebuilt plan instead of running it) and the inspector's JSON
(text in the documented DETAILED layout, since no engine can be deserialized here).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper, numpy_helper

trt = pytest.importorskip(
    "tensorrt_rtx_bindings",
    reason="TensorRT-RTX is not installed: pip install "
    "tensorrt-rtx-cu13-libs==1.7.1.116 tensorrt-rtx-cu13-bindings==1.7.1.116",
)

from trtdiff.analysis.metrics import compare_tensors  # noqa: E402
from trtdiff.backends.compiled.answer import AnswerCheck, minimal_marks  # noqa: E402
from trtdiff.backends.compiled.precision import asked_types, layer_precisions  # noqa: E402
from trtdiff.backends.tensorrt import (  # noqa: E402
    BuildSettings,
    budget_of,
    build_engine,
    build_with_marks,
    fusion,
    fusion_from_plan,
    fusions_split,
    marking,
    parse_onnx,
)
from trtdiff.backends.tensorrt.builder import configure  # noqa: E402
from trtdiff.backends.tensorrt.importing import tensorrt_info  # noqa: E402
from trtdiff.backends.tensorrt.marking import plan_marks  # noqa: E402
from trtdiff.backends.tensorrt.onnx_files import save_for_parser  # noqa: E402
from trtdiff.backends.tensorrt.summary import summarize  # noqa: E402
from trtdiff.report import Thresholds  # noqa: E402
from trtdiff.source.onnx_graph import GraphInfo, load_graph  # noqa: E402

SHAPE = (("x", (1, 3, 64, 64)),)


@pytest.fixture(scope="module")
def deeplab(export_example: Callable[..., Path]) -> GraphInfo:
    return load_graph(export_example(13))


def constant_add_relu(path: Path, blocks: int, named: bool) -> GraphInfo:
    """`blocks` x (Constant + Add + Relu) in a chain: the issue's generated graph (3 * blocks nodes)."""
    nodes, previous = [], "x"
    for i in range(blocks):
        out = "y" if i == blocks - 1 else f"r{i}"
        names = ({"name": f"const{i}"}, {"name": f"add{i}"}, {"name": f"relu{i}"}) if named else ({}, {}, {})
        value = numpy_helper.from_array(np.full((1, 64), 0.001 * i, np.float32))
        nodes += [
            helper.make_node("Constant", [], [f"c{i}"], value=value, **names[0]),
            helper.make_node("Add", [previous, f"c{i}"], [f"a{i}"], **names[1]),
            helper.make_node("Relu", [f"a{i}"], [out], **names[2]),
        ]
        previous = out
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TP.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [1, 64])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return load_graph(path)


def outputs_marked_plan(graph: GraphInfo) -> bytes:
    """A plan with every markable tensor as a *network output* (what trtdiff did before debug tensors)."""
    parsed = parse_onnx(graph.path, graph.model)
    plan = plan_marks(trt, parsed.index, parsed.parser, parsed.model, "all", budget_of(None))
    for name in plan.debug:
        parsed.network.mark_output(parsed.index.by_name[name][1])
    config, _, _ = configure(parsed, BuildSettings(input_shapes=SHAPE), tensorrt_info(trt))
    serialized = parsed.builder.build_serialized_network(parsed.network, config)
    assert serialized is not None
    return bytes(serialized)


def test_fusions_split_read_from_the_real_plans(deeplab: GraphInfo) -> None:
    """The plain engine's fused layers against a marked engine's, from the two real plans (plan scan, CPU)."""
    built = build_engine(deeplab, BuildSettings(input_shapes=SHAPE))
    plain = fusion_from_plan(built.plain_plan, deeplab)
    assert plain.source == fusion.SOURCE_PLAN and len(plain.fused()) >= 15  # Conv+Relu(+Add) kernels
    assert all(node in {n.name for n in deeplab.nodes} for layer in plain.layers for node in layer.onnx_nodes)
    conv_relu = next(layer for layer in plain.fused() if layer.onnx_nodes[0].endswith("/Conv"))
    assert conv_relu.onnx_nodes[-1].endswith("/Relu") or conv_relu.onnx_nodes[-1].endswith("/Add")
    # Network outputs on every tensor split those kernels: the comparison reads the split from the plans.
    split = fusions_split(plain, fusion_from_plan(outputs_marked_plan(deeplab), deeplab))
    assert len(split) >= len(plain.fused()) - 3 and all(len(s.split_into) >= 2 for s in split)
    assert {s.layer for s in split} <= {layer.name for layer in plain.fused()}
    assert all(s.onnx_nodes for s in split)
    # Debug tensors: TensorRT-RTX 1.7.1 compiles the same kernels as the plain engine (measured, stated as such).
    debug = fusion_from_plan(built.plan, deeplab)
    assert fusions_split(plain, debug) == () and [k.onnx_nodes for k in debug.layers] == [
        k.onnx_nodes for k in plain.layers
    ]
    summary = summarize(built, debug, status="built", gpu=None, graph=deeplab, plain_fusion=plain)
    assert summary.fusions_split == () and summary.fusions_split_source == fusion.SOURCE_PLAN
    assert any(n.startswith("debug marks: the marked engine keeps every fused layer") for n in summary.notes)
    assert not any("disables fusion" in n for n in summary.notes)
    unfused = build_engine(deeplab, BuildSettings(input_shapes=SHAPE, outputs="unfused"))
    unfused_summary = summarize(
        unfused, unfused.fusion_hint(deeplab), status="built", gpu=None, graph=deeplab, plain_fusion=plain
    )
    assert unfused_summary.fusions_split == () and not any(n.startswith("debug marks") for n in unfused_summary.notes)


def test_precision_as_built_from_real_plans(deeplab: GraphInfo) -> None:
    """Each kernel's written type (plan descriptors) against the ONNX type asked; TF32 as the plan header says."""
    fp32 = build_engine(deeplab, BuildSettings(input_shapes=SHAPE))
    report = fusion_from_plan(fp32.plan, deeplab)
    assert report.tf32 is False  # TF32 cleared by default: the plan's header agrees
    summary = summarize(fp32, report, status="built", gpu=None, graph=deeplab)
    rows = summary.layer_precisions
    assert len(rows) == len(report.layers) >= 20 and summary.tf32_built is False
    assert {(r.asked, r.built) for r in rows} == {("FP32", "FP32")} and not any(r.flag for r in rows)
    assert (summary.precision_missing or "").startswith(
        "the engine inspector's figures (it needs a deserialized engine"
    )
    tf32 = build_engine(deeplab, BuildSettings(input_shapes=SHAPE, tf32=True, outputs="none"))
    assert fusion_from_plan(tf32.plan, deeplab).tf32 is True
    fp16 = build_engine(deeplab, BuildSettings(input_shapes=SHAPE, precision="fp16", outputs="none"))
    assert fp16.parsed_graph is not None and fp16.parsed_graph is not deeplab  # the converted model, with Casts
    half = summarize(
        fp16,
        fusion_from_plan(fp16.plan, deeplab),
        status="built",
        gpu=None,
        graph=deeplab,
        precision_fusion=fusion_from_plan(fp16.plan, fp16.parsed_graph),
    )
    convs = [r for r in half.layer_precisions if r.onnx_nodes[-1].endswith(("/Relu", "/Add"))]
    assert convs and {(r.asked, r.built) for r in convs} == {("FP16", "FP16")}  # strongly typed: as converted
    # The Resizes the converter kept in FP32 between Casts: read against the converted model, no false flag.
    assert not [r for r in half.layer_precisions if r.flag] and {r.built for r in half.layer_precisions} == {
        "FP16",
        "FP32",
    }


def test_precision_flags_lower_and_higher_and_names_what_is_missing(deeplab: GraphInfo) -> None:
    """Inspector JSON in the DETAILED layout (a stand-in: no engine loads here) against the model's types."""
    nodes = [n.name for n in deeplab.nodes if n.op_type in ("Conv", "Relu")]
    text = json.dumps(
        {
            "Layers": [
                {"Name": f"{nodes[0]} + {nodes[1]}", "Outputs": [{"Format/Datatype": "Channel major FP16 format"}]},
                {"Name": nodes[2], "Outputs": [{"Format/Datatype": "Row major linear FP32"}]},
                {"Name": nodes[3], "Outputs": []},
            ]
        }
    )
    inspected = fusion.fusion_from_inspector(text, deeplab)
    asked = {**asked_types(deeplab), nodes[2]: "FP16"}
    rows = layer_precisions(inspected, asked, {n.name: n.index for n in deeplab.nodes})
    assert [(r.asked, r.built, r.flag) for r in rows] == [
        ("FP32", "FP16", "lower"),
        ("FP16", "FP32", "higher"),
        ("FP32", None, None),
    ]
    assert rows[2].missing is not None and rows[2].missing.startswith("built:")


def test_the_marking_check_judges_raw_figures_against_the_thresholds() -> None:
    """Plain against marked outputs, collected raw over every run and judged at the end."""
    x = {"x": np.ones((1, 3), np.float32)}
    plain = {"y": np.linspace(-1, 1, 100, dtype=np.float32)}
    check = AnswerCheck(compare_tensors)
    check.add(x, plain, {"y": plain["y"].copy()})
    assert not check.differs() and check.verdict(Thresholds()).status == "same" and check.witness is None
    check.add(x, plain, {"y": plain["y"] + 1e-6})  # a second run of the same sample, within the thresholds
    assert check.differs() and not check.changed(Thresholds()) and check.witness is not None
    assert check.changed(Thresholds(max_abs=1e-7))
    check.new_sample()
    check.add({"x": np.zeros((1, 3), np.float32)}, plain, {"y": plain["y"] * 1.5})
    verdict = check.verdict(Thresholds())
    assert verdict.status == "changed" and verdict.samples == 2 and verdict.runs == 3 and verdict.worst_output == "y"
    assert verdict.rel_err == pytest.approx(0.5) and float(check.witness["x"].sum()) == 0.0  # the worst sample
    assert AnswerCheck(compare_tensors).verdict(Thresholds()).status == "not run"


def test_bisection_names_the_marks_with_a_stand_in_comparator() -> None:
    """The search logic alone; `changes` is a stand-in for "rebuild, run, compare with the plain engine"."""
    marks = [f"t{i}" for i in range(1000)]
    calls: list[int] = []

    def one_culprit(subset: list[str]) -> bool:
        calls.append(len(subset))
        return "t613" in subset

    found = minimal_marks(marks, one_culprit)
    assert found.marks == ("t613",) and found.note is None
    assert 10 <= found.builds <= 20 and calls[0] == 500  # log2(1000) to 2*log2(1000) builds, halving each time
    together = minimal_marks(marks, lambda subset: "t10" in subset and "t900" in subset)
    assert together.marks == ("t10", "t900")  # two marks that change the answer only together are both named
    stopped = minimal_marks(marks, one_culprit, max_builds=4)
    assert stopped.builds == 4 and "stopped after 4 builds" in (stopped.note or "") and "t613" in stopped.marks


@pytest.mark.slow
def test_each_bisection_step_is_a_real_rebuild_with_half_the_marks(deeplab: GraphInfo) -> None:
    """Real TensorRT-RTX rebuilds with a subset of the debug marks; the comparator is a stand-in reading the plan."""
    built = build_engine(deeplab, BuildSettings(input_shapes=SHAPE))
    marks = built.mark_plan.debug
    culprit = marks[len(marks) * 2 // 3]
    sizes: list[int] = []

    def stand_in_changes(subset: list[str]) -> bool:
        plan = build_with_marks(deeplab, built.settings, subset)  # a real build of the marked engine
        sizes.append(len(subset))
        return culprit.encode() in plan  # stand-in for running it: is the culprit marked in this engine?

    found = minimal_marks(marks, stand_in_changes)
    assert found.marks == (culprit,) and sizes[0] == len(marks) // 2
    assert found.builds <= 2 * int(np.ceil(np.log2(len(marks))))


@pytest.mark.slow
def test_planning_the_marks_of_3000_nodes_costs_less_than_tensorrts_own_build(tmp_path: Path) -> None:
    """Defect: a per-name regular-expression scan made marking quadratic (87 s on 3,000 named nodes)."""
    planning: dict[bool, float] = {}
    for named in (False, True):
        graph = constant_add_relu(tmp_path / f"chain_{named}.onnx", 1000, named)
        start = time.perf_counter()
        parsed = parse_onnx(graph.path, graph.model)
        plan = plan_marks(trt, parsed.index, parsed.parser, parsed.model, "all", budget_of(None))
        planning[named] = time.perf_counter() - start
        computed = [t for t in graph.node_outputs if not t.startswith("c")]
        assert all(t in plan.onnx_to_trt for t in computed) and len(plan.debug) == 1999
        skipped = {s.onnx_name: s.reason for s in plan.skipped if s.onnx_name}
        assert skipped["c5"] == marking.REASON_CONSTANT
    config, _, _ = configure(parsed, BuildSettings(), tensorrt_info(trt))
    start = time.perf_counter()
    assert parsed.builder.build_serialized_network(parsed.network, config) is not None
    tensorrt_build = time.perf_counter() - start
    assert max(planning.values()) < tensorrt_build, (planning, tensorrt_build)


@pytest.mark.slow
def test_reading_thousands_of_engine_layers_is_linear(tmp_path: Path) -> None:
    """Defect: fusion reading rebuilt the node list per layer (7.3 s on 2,000 layers)."""
    graph = constant_add_relu(tmp_path / "chain.onnx", 2000, named=True)
    entries = [{"Name": f"PWN(add{i}, relu{i})", "Outputs": [{"Format/Datatype": "FP32"}]} for i in range(2000)]
    entries += [{"Name": "{ForeignNode[add0...relu1999]}", "Metadata": ""}]
    start = time.perf_counter()
    report = fusion.fusion_from_inspector(json.dumps({"Layers": entries}), graph)
    seconds = time.perf_counter() - start
    assert len(report.fused()) == 2001 and len(report.layers[-1].onnx_nodes) == 5999  # the range, constants too
    assert seconds < 2.0, seconds
    built = build_engine(constant_add_relu(tmp_path / "small.onnx", 300, named=False), BuildSettings(outputs="none"))
    start = time.perf_counter()
    kernels = fusion_from_plan(built.plan, load_graph(tmp_path / "small.onnx"))
    assert time.perf_counter() - start < 2.0 and sum(len(k.onnx_nodes) for k in kernels.layers) == 600


def test_qdq_tensors_are_not_marked_inside_their_pairs(tmp_path: Path) -> None:
    """Defect: marks inside quantize/dequantize pairs stop TensorRT fusing them into the quantized layer."""
    scale = numpy_helper.from_array(np.array(0.02, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    weights = numpy_helper.from_array(np.random.default_rng(0).random((4, 3, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_x"),
        helper.make_node("QuantizeLinear", ["w", "s", "z"], ["wq"], name="q_w"),
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"], name="dq_w"),
        helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "qdq",
            [helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info("y", TP.FLOAT, None)],
            [weights, scale, zero],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.save(model, str(tmp_path / "qdq.onnx"))
    built = build_engine(load_graph(tmp_path / "qdq.onnx"))
    reasons = {s.onnx_name: s.reason for s in built.mark_plan.skipped if s.onnx_name}
    assert {reasons[t] for t in ("xq", "xd", "wq", "wd")} == {marking.REASON_QDQ}
    assert built.mark_plan.returned_onnx() == ("y", "c")


def test_models_over_the_protobuf_limit_are_written_with_external_data(deeplab: GraphInfo, tmp_path: Path) -> None:
    """Defect: the culprit and FP16 paths saved models over 2 GB without external data (a protobuf error)."""
    before = deeplab.model.SerializeToString()
    path = save_for_parser(deeplab.model, tmp_path / "big.onnx", external_above=1000)  # as if over 2 GB
    data = tmp_path / "big.onnx.data"
    assert data.is_file() and data.stat().st_size > path.stat().st_size
    assert deeplab.model.SerializeToString() == before  # the model given is not changed
    parsed = parse_onnx(path, deeplab.model)  # TensorRT's parser reads the weights beside it
    assert parsed.network.num_layers > 50
    small = save_for_parser(deeplab.model, tmp_path / "small.onnx")
    assert not (tmp_path / "small.onnx.data").exists() and small.stat().st_size > 100_000


def test_a_timing_cache_tensorrt_ignores_or_rejects_is_said(deeplab: GraphInfo, tmp_path: Path) -> None:
    """Defect: a rejected timing cache was ignored silently. TensorRT-RTX's are no-ops: the note says so."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "timing.cache").write_bytes(b"made by another TensorRT" * 10)
    built = build_engine(deeplab, BuildSettings(input_shapes=SHAPE, outputs="none"), cache_dir=cache)
    assert any(n.startswith("timing cache: this TensorRT says timing-cache operations are no-ops") for n in built.notes)
