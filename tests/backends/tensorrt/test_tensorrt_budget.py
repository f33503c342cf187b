"""The mark budget: one marked engine whatever the budget, run groups from the shapes actually fed.

Every build here is a real TensorRT-RTX build on the CPU. The budget only sets how many runs
of the same engine a sample takes: the plans built under different budgets are byte for
byte the same engine (one fusion, one answer). Running the groups needs a supported GPU
(the last test).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import pairwise
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

import trtdiff.pipeline.build  # noqa: E402
from trtdiff.backends.tensorrt import (  # noqa: E402
    DEFAULT_MARK_BUDGET,
    NO_EXECUTION,
    BuildSettings,
    TensorRTBackend,
    budget,
    budget_of,
    build_engine,
    parse_onnx,
    probe,
    run_groups,
)
from trtdiff.backends.tensorrt.marking import plan_marks  # noqa: E402
from trtdiff.errors import OptionError  # noqa: E402
from trtdiff.source.onnx_graph import GraphInfo, load_graph  # noqa: E402

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
SHAPE = (("x", (1, 3, 64, 64)),)


@pytest.fixture(scope="module")
def deeplab(export_example: Callable[..., Path]) -> GraphInfo:
    return load_graph(export_example(17))


@pytest.fixture(scope="module")
def whole(deeplab: GraphInfo):
    """The default build: one engine under the fixed default budget (1 GiB: one run for this model)."""
    return build_engine(deeplab, BuildSettings(input_shapes=SHAPE))


def chain(tmp_path: Path, length: int, shape: tuple[int | str, ...] = (1, 3, 8, 8)) -> GraphInfo:
    """x -> Neg/Relu/... `length` times -> y (768 bytes a value by default; a str dimension is dynamic)."""
    names = ["x", *(f"v{i:04d}" for i in range(length - 1)), "y"]
    nodes = [
        helper.make_node("Relu" if i % 2 else "Neg", [a], [b], name=f"n{i:04d}")
        for i, (a, b) in enumerate(pairwise(names))
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TP.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TP.FLOAT, list(shape))],
    )
    path = tmp_path / f"chain{length}_{'x'.join(map(str, shape))}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return load_graph(path)


def test_one_engine_whatever_the_budget_and_the_runs_follow_it(deeplab: GraphInfo, whole) -> None:
    plan = whole.mark_plan
    assert plan.budget is not None and plan.budget.bytes == DEFAULT_MARK_BUDGET and plan.budget.source == "default"
    assert plan.runs_per_sample == 1 and len(plan.groups) == 1 and plan.groups[0] == plan.debug
    assert plan.debug_bytes() == sum(deeplab.tensor_type(plan.trt_to_onnx[t]).nbytes() for t in plan.debug)
    small = plan.debug_bytes() // 4
    tight = build_engine(deeplab, BuildSettings(input_shapes=SHAPE, mark_budget_bytes=small))
    groups = tight.mark_plan.groups
    assert tight.mark_plan.runs_per_sample == len(groups) >= 4 and tight.mark_plan.budget.source == "given"
    # One engine, the same one: the budget changes the runs, never the plan (so never the fusion or the answer).
    assert tight.plan == whole.plan and tight.plain_plan == whole.plain_plan
    # Contiguous groups in topological order, each tensor in exactly one of them.
    assert [t for group in groups for t in group] == list(plan.debug)
    assert set(Counter(t for group in groups for t in group).values()) == {1}
    for group in groups:
        assert len(group) == 1 or sum(tight.mark_plan.sizes[t] or 0 for t in group) <= small
    assert set(tight.mark_plan.group_of().values()) == set(range(len(groups)))


def test_the_default_budget_is_fixed_and_bad_budgets_say_so(tmp_path: Path, deeplab: GraphInfo) -> None:
    assert budget_of(None) == budget.Budget(1 << 30, "default")  # never the GPU's free memory
    assert not hasattr(budget, "default_budget")
    with pytest.raises(OptionError, match="mark_budget_bytes 0: must be a positive number of bytes"):
        build_engine(deeplab, BuildSettings(mark_budget_bytes=0))
    tiny = build_engine(chain(tmp_path, 6), BuildSettings(mark_budget_bytes=1))
    assert [len(g) for g in tiny.mark_plan.groups] == [1] * 5  # each tensor over the budget: a run of its own
    for mode in ("none", "unfused"):  # nothing marked by name: one run (unfused: the listener bounds each run)
        built = build_engine(deeplab, BuildSettings(outputs=mode, mark_budget_bytes=1, input_shapes=SHAPE))
        assert built.mark_plan.debug == ()
    assert run_groups(["a", "b", "c", "d"], {"a": 2, "b": 2, "c": 5, "d": 1}, 4) == [("a", "b"), ("c",), ("d",)]
    assert run_groups(["a", "b", "c"], {"a": 2, "b": None, "c": 2}, 4) == [("a", "b"), ("c",)]  # unknown: largest


def test_budgets_come_from_the_shapes_fed_for_dynamic_models(tmp_path: Path) -> None:
    """Defect: with dynamic dimensions every size was unknown (counted as 0), so the budget did nothing."""
    dynamic = chain(tmp_path, 8, ("N", 3, 8, 8))
    assert all(dynamic.tensor_type(t).nbytes() is None for t in dynamic.node_outputs)
    sizes = budget.resolved_sizes(dynamic, {"x": (4, 3, 8, 8)})
    assert set(sizes.values()) == {4 * 3 * 8 * 8 * 4}  # dynamic dimension resolved from the feed
    built = build_engine(dynamic, BuildSettings(input_shapes=(("x", (4, 3, 8, 8)),), mark_budget_bytes=3 * 3072))
    plan = built.mark_plan
    assert len(plan.debug) == 7 and [len(g) for g in plan.groups] == [3, 3, 1] and plan.unknown_sizes() == 0
    static = chain(tmp_path, 8)
    assert budget.resolved_sizes(static, {"x": (1, 3, 8, 8)}) == {t: 768 for t in static.node_outputs}


def test_a_model_of_thousands_of_tensors_plans_its_runs(tmp_path: Path) -> None:
    """The plan alone (no build) for 3,000 tensors of 256 KiB: 750 MiB marked, a 96 MiB budget: 8 runs."""
    graph = chain(tmp_path, 3000, (1, 64, 32, 32))
    parsed = parse_onnx(graph.path, graph.model)
    sizes = {name: graph.tensor_type(name).nbytes() for name in graph.node_outputs}
    plan = plan_marks(trt, parsed.index, parsed.parser, parsed.model, "all", budget_of(96 << 20), sizes=sizes)
    assert len(plan.debug) == 2999 and plan.outputs == ("y",) and plan.debug_bytes() == 2999 * 64 * 32 * 32 * 4
    assert plan.runs_per_sample == 8  # 384 tensors of 256 KiB a run
    assert [t for group in plan.groups for t in group] == list(plan.debug)
    assert all(len(group) * (256 << 10) <= 96 << 20 for group in plan.groups)


def test_the_engine_cache_keeps_both_engines_and_the_budget_changes_no_key(tmp_path: Path, deeplab: GraphInfo) -> None:
    cache = tmp_path / "cache"
    first = build_engine(deeplab, BuildSettings(input_shapes=SHAPE), cache_dir=cache)
    again = build_engine(deeplab, BuildSettings(input_shapes=SHAPE, mark_budget_bytes=1 << 16), cache_dir=cache)
    assert not first.from_cache and again.from_cache and again.mark_plan.runs_per_sample > 1
    assert first.plain is not None and again.plain is not None
    assert again.cache_key == first.cache_key and again.plain.cache_key == first.plain.cache_key
    assert again.plan == first.plan and again.plain_plan == first.plain_plan
    assert {p.name for p in cache.glob("*.engine")} == {f"{first.cache_key}.engine", f"{first.plain.cache_key}.engine"}
    none = build_engine(deeplab, BuildSettings(input_shapes=SHAPE, outputs="none"), cache_dir=cache)
    assert none.from_cache and none.cache_key == first.plain.cache_key  # the plain engine is a build marking nothing
    written = first.write_engines(tmp_path / "model.engine")
    assert [p.name for p in written] == ["model.engine", "model.marked.engine"]
    assert [p.read_bytes() for p in written] == [first.plain_plan, first.plan]


def test_build_command_reports_one_engine_and_the_runs(export_example: Callable[..., Path], whole) -> None:
    small = whole.mark_plan.debug_bytes() // 3
    report = trtdiff.pipeline.build.build(
        FACTORY, onnx=export_example(17), input_shapes=["1x3x64x64"], tensorrt=BuildSettings(mark_budget_bytes=small)
    )
    trt_summary = report.tensorrt
    assert trt_summary.status == "built" and trt_summary.engines == 1 and trt_summary.runs_per_sample >= 3
    assert trt_summary.mark_budget_bytes == small and trt_summary.budget_source == "given"
    assert trt_summary.plan_bytes == whole.plan_nbytes  # one engine: the budget adds no plan


def test_groups_run_one_after_another_on_a_supported_gpu(deeplab: GraphInfo, whole) -> None:
    found = probe()
    if not found.can_run:
        pytest.skip(f"{NO_EXECUTION}: {found.reason}")
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)
    small = whole.mark_plan.debug_bytes() // 4
    with (
        TensorRTBackend(deeplab, BuildSettings(input_shapes=SHAPE)) as one,
        TensorRTBackend(deeplab, BuildSettings(input_shapes=SHAPE, mark_budget_bytes=small)) as grouped,
    ):
        assert grouped.available() == one.available() and grouped.build.mark_plan.runs_per_sample >= 4
        names = sorted(one.available())
        expected = {k: v for chunk in one.run({"x": x}, names) for k, v in chunk.items()}
        got = {k: v for chunk in grouped.run({"x": x}, names, max_bytes=1 << 16) for k, v in chunk.items()}
        assert set(got) == set(expected)
        assert max(float(np.abs(got[k] - expected[k]).max()) for k in expected) == 0.0  # the same engine
