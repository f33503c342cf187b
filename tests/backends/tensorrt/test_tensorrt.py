"""The TensorRT backend against the real TensorRT-RTX bindings: parse, mark, map names, build.

TensorRT-RTX builds on the CPU; executing needs a GPU it supports, which no machine here has
(docs/tensorrt.md), so the execution test skips with the reason `probe()` gives.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
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

from trtdiff.backends.tensorrt import (  # noqa: E402
    NO_EXECUTION,
    BuildSettings,
    TensorRTBackend,
    buffers,
    build_engine,
    builder,
    cache_key,
    fusion,
    fusion_from_inspector,
    marking,
    parse_onnx,
    probe,
    runtime,
)
from trtdiff.backends.tensorrt.importing import GpuInfo, rtx_supports, tensorrt_info  # noqa: E402
from trtdiff.errors import BackendError, OptionError  # noqa: E402
from trtdiff.source.fp16 import convert_to_fp16  # noqa: E402
from trtdiff.source.onnx_graph import GraphInfo, load_graph  # noqa: E402

X = helper.make_tensor_value_info("x", TP.FLOAT, [1, 3, 8, 8])
Y = helper.make_tensor_value_info("y", TP.FLOAT, None)


def save(
    tmp_path: Path,
    nodes: list,
    inputs: list | None = None,
    outputs: list | None = None,
    initializers: list | None = None,
    name: str = "m",
) -> GraphInfo:
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs or [X], outputs or [Y], initializers or []),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return load_graph(path)


def scalar(name: str, value: object, dtype: type = np.float32) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name=f"const_{name}", value=numpy_helper.from_array(np.array(value, dtype))
    )


@pytest.fixture(scope="module")
def every_reason(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    """A graph with a tensor for each skip reason: inputs, constant, bool, shape, If and Loop bodies."""
    then_g = helper.make_graph(
        [
            helper.make_node("Relu", ["r"], ["t1"], name="then_relu"),
            helper.make_node("Neg", ["t1"], ["tout"], name="then_neg"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("tout", TP.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sigmoid", ["r"], ["eout"], name="else_sig")],
        "else",
        [],
        [helper.make_tensor_value_info("eout", TP.FLOAT, None)],
    )
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc", "one"], ["acc2"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"),
        ],
        "body",
        [
            helper.make_tensor_value_info("iter", TP.INT64, []),
            helper.make_tensor_value_info("cond_in", TP.BOOL, []),
            helper.make_tensor_value_info("acc", TP.FLOAT, [1, 3, 8, 8]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TP.BOOL, []),
            helper.make_tensor_value_info("acc2", TP.FLOAT, [1, 3, 8, 8]),
        ],
    )
    nodes = [
        scalar("k", 2.0),
        scalar("one", 1.0),
        scalar("trip", 2, np.int64),
        scalar("keep", True, np.bool_),
        helper.make_node("Mul", ["x", "k"], ["m"], name="mul"),
        helper.make_node("Greater", ["m", "k"], ["g"], name="gt"),
        helper.make_node("Where", ["g", "m", "x"], ["w"], name="where"),
        helper.make_node("Shape", ["w"], ["s"], name="shape"),
        helper.make_node("Reshape", ["w", "s"], ["r"], name="reshape"),
        helper.make_node("If", ["c"], ["i"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trip", "keep", "i"], ["y"], name="loop", body=body),
    ]
    cond = helper.make_tensor_value_info("c", TP.BOOL, [])
    return save(tmp_path_factory.mktemp("reasons"), nodes, inputs=[X, cond])


@pytest.mark.slow
def test_import_does_not_import_tensorrt_or_torch() -> None:
    code = (
        "import sys, trtdiff.backends.tensorrt; "
        "heavy = ('tensorrt', 'tensorrt_rtx', 'tensorrt_rtx_bindings', 'torch'); "
        "bad = [m for m in sys.modules if m.split('.')[0] in heavy]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_probe_finds_rtx_and_says_why_it_cannot_run() -> None:
    found = probe()
    assert found.info is not None and found.info.flavour == "tensorrt-rtx"
    assert found.info.module_name in ("tensorrt_rtx", "tensorrt_rtx_bindings")
    assert found.info.strongly_typed_only and found.info.has_unfused_debug and found.can_build
    if found.gpu is None:
        assert not found.can_run and found.reason.startswith("no CUDA GPU")
    json.dumps(found.to_dict())
    assert rtx_supports((8, 6)) and rtx_supports((12, 0)) and rtx_supports((13, 0))
    assert not rtx_supports((9, 0)) and not rtx_supports((7, 5))


def test_every_tensorrt_attribute_the_code_uses_exists() -> None:
    import trtdiff.backends.tensorrt as package

    required, optional = set(package.TRT_API), set(package.TRT_OPTIONAL_API)
    modules = (runtime, package.execution, package.buffers, package.budget, package.logger, package.names)
    assert len(required) > 50 and set().union(*(m.TRT_API for m in modules)) <= required

    def has(name: str) -> bool:
        obj: object = trt
        for part in name.split("."):
            if not hasattr(obj, part):
                return False
            obj = getattr(obj, part)
        return True

    assert [n for n in sorted(required) if not has(n)] == []
    # TensorRT-RTX is strongly typed: exactly the weak-typing flags are absent, which the code feature-detects.
    assert {n for n in optional if not has(n)} == {
        "BuilderFlag.FP16",
        "BuilderFlag.OBEY_PRECISION_CONSTRAINTS",
        "BuilderFlag.PREFER_PRECISION_CONSTRAINTS",
    }
    # The typed Protocols (api.py) name only methods the bindings have.
    from trtdiff.backends.tensorrt import api

    protocols = {
        api.Network: trt.INetworkDefinition,
        api.Layer: trt.ILayer,
        api.Tensor: trt.ITensor,
        api.Builder: trt.Builder,
        api.BuilderConfig: trt.IBuilderConfig,
        api.OnnxParser: trt.OnnxParser,
        api.Runtime: trt.Runtime,
        api.Engine: trt.ICudaEngine,
        api.ExecutionContext: trt.IExecutionContext,
        api.RuntimeConfig: trt.IRuntimeConfig,
        api.EngineInspector: trt.EngineInspector,
    }

    def declared(protocol: type) -> set[str]:
        members = {k for k, v in vars(protocol).items() if callable(v) or isinstance(v, property)}
        return {k for k in members | set(inspect.get_annotations(protocol)) if not k.startswith("_")}

    missing = [f"{p.__name__}.{n}" for p, real in protocols.items() for n in declared(p) if not hasattr(real, n)]
    assert sum(len(declared(p)) for p in protocols) > 60
    assert missing == []


def test_parser_error_names_the_node_and_op(tmp_path: Path) -> None:
    graph = save(
        tmp_path,
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("NoSuchOp", ["a"], ["y"], name="bad_node"),
        ],
        name="unknown",
    )
    with pytest.raises(BackendError, match=r"rejected node bad_node \(op NoSuchOp\)") as error:
        parse_onnx(graph.path, graph.model)
    assert "\n" not in str(error.value)
    uint8 = save(
        tmp_path,
        [
            helper.make_node("Cast", ["x"], ["u"], name="to_u8", to=TP.UINT8),
            helper.make_node("Cast", ["u"], ["y"], name="to_f", to=TP.FLOAT),
        ],
        name="uint8",
    )
    with pytest.raises(BackendError, match=r"node to_u8 \(op Cast\).*UINT8"):
        build_engine(uint8)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx file")
    with pytest.raises(BackendError, match="could not read the model"):
        parse_onnx(broken, onnx.ModelProto())


def test_mark_all_lists_every_skip_reason(every_reason: GraphInfo) -> None:
    result = build_engine(every_reason)
    plan = result.mark_plan
    reasons = {s.onnx_name: s.reason for s in plan.skipped if s.onnx_name}
    assert reasons["x"] == reasons["c"] == marking.REASON_INPUT
    assert reasons["k"] == marking.REASON_CONSTANT
    assert reasons["g"] == marking.REASON_BOOL
    assert reasons["s"] == marking.REASON_SHAPE
    for body_tensor in ("t1", "tout", "eout", "acc2"):
        assert reasons[body_tensor] == marking.REASON_CONTROL
    assert set(plan.returned_onnx()) == {"m", "w", "r", "i", "y"}
    assert result.plan_nbytes > 0 and not result.from_cache  # an engine with every allowed tensor marked builds
    json.dumps(result.to_dict())


def test_bool_tensors_can_be_marked_on_request(tmp_path: Path) -> None:
    graph = save(
        tmp_path,
        [
            helper.make_node("Greater", ["x", "x"], ["g"], name="gt"),
            helper.make_node("Where", ["g", "x", "x"], ["y"], name="where"),
        ],
    )
    result = build_engine(graph, BuildSettings(mark_bool=True))
    assert "g" in result.mark_plan.returned_onnx()  # RTX 1.7.1 builds with a bool tensor marked


def test_names_map_back_across_clashes(tmp_path: Path) -> None:
    then_g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="then_relu"),
            helper.make_node("Neg", ["a"], ["tout"], name="then_neg"),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("tout", TP.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["eout"], name="else_sig")],
        "else",
        [],
        [helper.make_tensor_value_info("eout", TP.FLOAT, None)],
    )
    nodes = [
        helper.make_node("If", ["c"], ["i"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Abs", ["i"], ["a"], name="abs"),  # clashes with the then-branch's "a"
        helper.make_node("Relu", ["a"], ["b"], name="dup"),
        helper.make_node("Neg", ["b"], ["c2"], name="dup"),  # duplicate node name
        helper.make_node("Relu", ["c2"], ["y"]),
    ]  # no node name
    graph = save(tmp_path, nodes, inputs=[X, helper.make_tensor_value_info("c", TP.BOOL, [])])
    plan = build_engine(graph).mark_plan
    network = parse_onnx(graph.path, graph.model).network
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    abs_out = next(layer.get_output(0).name for layer in layers if layer.name == "abs")
    assert abs_out == "a_0" and plan.onnx_to_trt["a"] == abs_out  # the parser suffixed the top-level value
    assert plan.onnx_to_trt["b"] == "b" and plan.onnx_to_trt["c2"] == "c2" and plan.onnx_to_trt["y"] == "y"
    assert {"a", "b", "c2", "i", "y"} <= set(plan.returned_onnx())
    then_a = [s for s in plan.skipped if s.trt_name == "a"]
    assert then_a and then_a[0].reason == marking.REASON_CONTROL


def test_unfused_mode_marks_debug_tensors_and_keeps_fusion(every_reason: GraphInfo) -> None:
    result = build_engine(every_reason, BuildSettings(outputs="unfused"))
    plan = result.mark_plan
    assert plan.debug_unfused and plan.marked == ("y",)
    assert any("debug tensors" in note for note in plan.notes)
    none = build_engine(every_reason, BuildSettings(outputs="none")).mark_plan
    assert none.marked == ("y",) and not none.debug_unfused


@pytest.mark.slow
def test_deeplab_builds_with_every_output_marked(export_example: Callable[..., Path]) -> None:
    graph = load_graph(export_example(17))
    result = build_engine(graph)
    returned = set(result.mark_plan.returned_onnx())
    skipped = {s.onnx_name for s in result.mark_plan.skipped}
    assert returned <= set(graph.node_outputs)
    assert [t for t in graph.node_outputs if t not in returned | skipped] == []
    assert {graph.node_of(t).op_type for t in returned} >= {"Conv", "Relu", "Add", "Resize"}
    assert result.flags == () and result.plan_nbytes > 100_000
    hint = result.fusion_hint(graph)
    assert hint.source == fusion.SOURCE_PLAN and hint.fused()
    assert all(node in {n.name for n in graph.nodes} for layer in hint.layers for node in layer.onnx_nodes)


@pytest.mark.slow
def test_fp16_converts_the_model_types(export_example: Callable[..., Path]) -> None:
    import onnxruntime as ort

    graph = load_graph(export_example(17))
    conversion = convert_to_fp16(graph.model)
    model = conversion.model
    assert all(v.type.tensor_type.elem_type == TP.FLOAT for v in [*model.graph.input, *model.graph.output])
    assert {i.data_type for i in model.graph.initializer if i.dims and len(i.dims) == 4} == {TP.FLOAT16}
    # onnxruntime's converter runs Resize in FP16 (this one reads sizes, no float scales) and writes the output Casts
    resizes = [n for n in model.graph.node if n.op_type == "Resize"]
    assert resizes and conversion.kept_fp32_ops == () and conversion.repairs.cast_outputs == ()
    typed = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    assert {typed[n.input[0]] for n in resizes} == {TP.FLOAT16}
    original = {o for n in graph.model.graph.node for o in n.output}
    assert original <= {o for n in model.graph.node for o in n.output}  # names survive, so tensors still pair
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)
    ref = ort.InferenceSession(graph.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]
    half = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert half.dtype == np.float32 and np.abs(half - ref).max() < 0.05 * (np.abs(ref).max() + 1)
    result = build_engine(graph, BuildSettings(precision="fp16"))
    assert "FP16 conversion" in result.parsed and any("onnxruntime.transformers.float16" in n for n in result.notes)
    with pytest.raises(OptionError, match="strongly typed"):
        build_engine(graph, BuildSettings(precision="fp16", precision_constraints="obey"))


def test_precision_flags_and_targets(tmp_path: Path) -> None:
    graph = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")])
    parsed = parse_onnx(graph.path, graph.model)
    info = tensorrt_info()
    off, flags, _ = builder.configure(parsed, BuildSettings(), info)
    on, flags_on, _ = builder.configure(
        parsed, BuildSettings(tf32=True, optimization_level=2, workspace_bytes=1 << 26), info
    )
    assert not off.get_flag(trt.BuilderFlag.TF32) and on.get_flag(trt.BuilderFlag.TF32)
    assert flags == () and flags_on == ("TF32",) and on.builder_optimization_level == 2
    assert off.profiling_verbosity == trt.ProfilingVerbosity.DETAILED
    assert build_engine(graph, BuildSettings(compute_capabilities=("8.6", "SM120"))).plan_nbytes > 0
    with pytest.raises(OptionError, match=r"compute_capabilities 9\.0: unknown"):
        build_engine(graph, BuildSettings(compute_capabilities=("9.0",)))
    with pytest.raises(OptionError, match="outputs some: unknown"):
        build_engine(graph, BuildSettings(outputs="some"))


def test_dynamic_inputs_need_a_shape(tmp_path: Path) -> None:
    dynamic = helper.make_tensor_value_info("x", TP.FLOAT, ["N", 3, 8, 8])
    graph = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")], inputs=[dynamic])
    with pytest.raises(
        OptionError, match=r"input x: dynamic shape \?x3x8x8; give its shape \(input_shapes x:1x3x8x8\)"
    ):
        build_engine(graph)
    assert build_engine(graph, BuildSettings(input_shapes=(("x", (2, 3, 8, 8)),))).plan_nbytes > 0


def test_cache_key_changes_with_any_input_and_engines_reload(tmp_path: Path) -> None:
    info = tensorrt_info()
    gpu = GpuInfo(0, "NVIDIA RTX 4090", (8, 9))
    base = cache_key(b"onnx", BuildSettings().to_dict(), info, gpu)
    assert base == cache_key(b"onnx", BuildSettings().to_dict(), info, gpu)
    variants = [
        cache_key(b"onnx2", BuildSettings().to_dict(), info, gpu),
        cache_key(b"onnx", BuildSettings(tf32=True).to_dict(), info, gpu),
        cache_key(b"onnx", BuildSettings(outputs="none").to_dict(), info, gpu),
        cache_key(b"onnx", BuildSettings().to_dict(), info, GpuInfo(0, "NVIDIA RTX 4090", (8, 6))),
        cache_key(b"onnx", BuildSettings().to_dict(), info, None),
    ]
    assert len({base, *variants}) == 1 + len(variants)
    graph = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="relu")])
    first = build_engine(graph, cache_dir=tmp_path / "cache")
    again = build_engine(graph, cache_dir=tmp_path / "cache")
    assert again.from_cache and again.plan == first.plan and again.cache_key == first.cache_key
    assert (tmp_path / "cache" / f"{first.cache_key}.json").is_file()
    assert any("no-ops" in n for n in first.notes)  # RTX says its timing cache does nothing


def test_the_engine_cache_writes_through_no_link(tmp_path: Path) -> None:
    """Before: each file was written first as `.NAME.PID.part`, a name anyone could plant a link at."""
    import os

    from trtdiff.backends.tensorrt.cache import save_engine

    victim = tmp_path / "victim"
    victim.write_bytes(b"the user's")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f".key.engine.{os.getpid()}.part").symlink_to(victim)
    (cache / "key.json").symlink_to(victim)
    save_engine(cache, "key", b"plan", {"trtdiff": 1})
    assert victim.read_bytes() == b"the user's"
    assert (cache / "key.engine").read_bytes() == b"plan" and json.loads((cache / "key.json").read_text())
    assert not (cache / "key.json").is_symlink()


def test_layer_names_and_inspector_json_map_to_onnx_nodes(every_reason: GraphInfo) -> None:
    assert fusion.nodes_from_name("mul + gt + where", every_reason) == ("mul", "gt", "where")
    assert fusion.nodes_from_name("PWN(PWN(mul, gt), where)", every_reason) == ("mul", "gt", "where")
    assert fusion.nodes_from_name("{ForeignNode[mul...reshape]}", every_reason) == (
        "mul",
        "gt",
        "where",
        "shape",
        "reshape",
    )
    assert fusion.nodes_from_name("Reformatting CopyNode for Input Tensor 0 to mul", every_reason) == ()
    assert fusion.nodes_from_metadata(
        "[ONNX Layer: then_relu | then (then_branch) | if (If)]\x1e[ONNX Layer: mul]"
    ) == ("then_relu", "mul")
    text = json.dumps(
        {
            "Layers": [
                {
                    "Name": "mul + gt",
                    "LayerType": "PointWiseV2",
                    "Metadata": "[ONNX Layer: mul]\x1e[ONNX Layer: gt]",
                    "TacticName": "t0",
                },
                {"Name": "reshape", "LayerType": "Shuffle", "Metadata": ""},
                "where",
            ]
        }
    )
    report = fusion_from_inspector(text, every_reason)
    assert [(layer.onnx_nodes, layer.how) for layer in report.layers] == [
        (("mul", "gt"), "metadata"),
        (("reshape",), "name"),
        (("where",), "name"),
    ]
    assert report.layer_of()["gt"] == "mul + gt" and len(report.fused()) == 1


def test_dtype_mapping_and_host_debug_copy() -> None:
    import torch

    assert (
        buffers.torch_dtype(trt.DataType.HALF) == torch.float16 and buffers.torch_dtype(trt.DataType.BOOL) == torch.bool
    )
    with pytest.raises(BackendError, match="FP8 has no torch equivalent"):
        buffers.torch_dtype(trt.DataType.FP8)
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    copied = buffers.copy_debug_tensor(source.ctypes.data, "FLOAT", (2, 3), 0, on_host=True)
    source[:] = -1  # the copy must not alias TensorRT's memory
    assert copied.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert buffers.to_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype == np.float32
    listener = buffers.make_debug_listener(trt)
    assert isinstance(listener, trt.IDebugListener) and listener.collector.tensors == {}
    empty, address = buffers.allocate((0, 3), torch.float32, torch.device("cpu"))
    assert tuple(empty.shape) == (0, 3) and address != 0  # TensorRT must never get a null address


def test_backend_executes_or_says_why_not(export_example: Callable[..., Path]) -> None:
    found = probe()
    graph = load_graph(export_example(17))
    if not found.can_run:
        with pytest.raises(BackendError, match=NO_EXECUTION):
            TensorRTBackend(graph)
        pytest.skip(f"{NO_EXECUTION}: {found.reason}")
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)
    backend = TensorRTBackend(graph)
    values = {k: v for chunk in backend.run({"x": x}, sorted(backend.available())) for k, v in chunk.items()}
    ref = ort.InferenceSession(str(graph.path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(values[graph.graph_outputs[0]] - ref).max() < 1e-3
