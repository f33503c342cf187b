"""Mark in batches: a device-memory budget for marked tensors, one engine per slice of the graph.

Every build here is a real TensorRT-RTX build on the CPU; the slices, the names, and that
each tensor is marked by exactly one engine are checked on the real parsed network and the
real plans. Running the engines slice by slice needs a supported GPU (the last test).
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
    NO_EXECUTION,
    BuildSettings,
    TensorRTBackend,
    build_engine,
    parse_onnx,
    probe,
    slicing,
    split_marks,
)
from trtdiff.backends.tensorrt.marking import mark_network  # noqa: E402
from trtdiff.backends.tensorrt.summary import summarize  # noqa: E402
from trtdiff.errors import OptionError  # noqa: E402
from trtdiff.source.onnx_graph import GraphInfo, load_graph  # noqa: E402

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"


@pytest.fixture(scope="module")
def deeplab(export_example: Callable[..., Path]) -> GraphInfo:
    return load_graph(export_example(17))


@pytest.fixture(scope="module")
def whole(deeplab: GraphInfo):
    """The unsplit build (no GPU visible here, so no default budget: one engine, as before)."""
    return build_engine(deeplab)


def chain(tmp_path: Path, length: int, shape: tuple[int, ...] = (1, 3, 8, 8)) -> GraphInfo:
    """x -> Neg/Relu/... `length` times -> y, every value float of `shape` (768 bytes by default)."""
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
    path = tmp_path / f"chain{length}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return load_graph(path)


def test_a_large_model_splits_under_a_small_budget_and_every_tensor_is_marked_once(deeplab: GraphInfo, whole) -> None:
    full = whole.mark_plan
    assert len(whole.engines) == 1 and full.slices == () and full.budget_bytes is None
    assert full.marked_bytes() == sum(deeplab.tensor_type(full.trt_to_onnx[t]).nbytes() for t in full.marked)
    budget = full.marked_bytes() // 4
    split = build_engine(deeplab, BuildSettings(mark_budget_bytes=budget))
    plan = split.mark_plan
    assert len(split.engines) == len(plan.slices) >= 4 and plan.budget_bytes == budget
    assert [e.marked for e in split.engines] == list(plan.slices)
    # Contiguous slices in topological order, each tensor in exactly one of them, the same tensors as unsplit.
    assert [t for part in plan.slices for t in part] == list(plan.extra_marks()) == list(full.extra_marks())
    assert set(plan.returned_onnx()) == set(full.returned_onnx()) and plan.outputs == full.outputs
    counts = Counter(t for part in plan.slices for t in part)
    assert set(counts.values()) == {1}
    order = [max(deeplab.producer_of[plan.trt_to_onnx[t]] for t in part) for part in plan.slices]
    starts = [min(deeplab.producer_of[plan.trt_to_onnx[t]] for t in part) for part in plan.slices]
    assert all(end < start for end, start in zip(order[:-1], starts[1:], strict=True))
    outputs_bytes = sum(plan.sizes[t] or 0 for t in plan.outputs)
    for part in plan.slices:
        assert len(part) == 1 or sum(plan.sizes[t] or 0 for t in part) + outputs_bytes <= budget
    owner = plan.owner_of()
    assert len(owner) == len(plan.extra_marks()) and set(owner.values()) == set(range(len(plan.slices)))
    # Real, distinct plans; the report says how many engines and why.
    assert all(len(e.plan) > 10_000 and not e.from_cache for e in split.engines)
    assert len({e.cache_key for e in split.engines}) == len(split.engines)
    assert split.plan_nbytes == sum(len(e.plan) for e in split.engines) and split.plan == split.engines[0].plan
    summary = summarize(split, split.fusion_hint(deeplab), status="built", gpu=None)
    assert any(f"built {len(plan.slices)} engines" in n and f"budget of {budget:,} bytes" in n for n in summary.notes)
    assert summary.marked == len(full.marked) and summary.fused_layers is not None


def test_a_model_of_thousands_of_tensors_plans_within_the_budget(tmp_path: Path) -> None:
    """The plan alone (no build) for 3,000 tensors of 256 KiB: 750 MiB marked, a 96 MiB budget."""
    graph = chain(tmp_path, 3000, (1, 64, 32, 32))
    parsed = parse_onnx(graph.path, graph.model)
    sizes = {name: graph.tensor_type(name).nbytes() for name in graph.node_outputs}
    plan = mark_network(trt, parsed.network, parsed.parser, parsed.model, "all", sizes=sizes)
    assert len(plan.marked) == 3000 and plan.marked_bytes() == 3000 * 64 * 32 * 32 * 4
    plan = split_marks(plan, 96 << 20, "as given")
    assert len(plan.slices) == 8  # 95.75 MiB of room beside the output: 383 tensors a slice
    assert [t for part in plan.slices for t in part] == list(plan.extra_marks())
    assert set(Counter(t for part in plan.slices for t in part).values()) == {1}
    assert all(len(part) * (256 << 10) + (256 << 10) <= 96 << 20 for part in plan.slices)


def test_each_engine_marks_exactly_its_slice_on_the_real_network(deeplab: GraphInfo) -> None:
    parsed = parse_onnx(deeplab.path, deeplab.model)
    sizes = {name: deeplab.tensor_type(name).nbytes() for name in deeplab.node_outputs}
    plan = mark_network(trt, parsed.network, parsed.parser, parsed.model, "all", sizes=sizes)
    plan = split_marks(plan, plan.marked_bytes() // 3, "a third")
    assert len(plan.slices) >= 3
    marked_by: Counter[str] = Counter()
    for index, part in enumerate(plan.slices):
        slicing.select_marks(parsed.network, plan, index)
        network = parsed.network
        outputs = {network.get_output(i).name for i in range(network.num_outputs)}
        assert outputs == set(part) | set(plan.outputs)
        marked_by.update(outputs - set(plan.outputs))
    assert set(marked_by) == set(plan.extra_marks()) and set(marked_by.values()) == {1}


def test_split_builds_cache_each_engine_and_the_budget_alone_changes_no_key(
    tmp_path: Path, deeplab: GraphInfo, whole
) -> None:
    roomy = build_engine(deeplab, BuildSettings(mark_budget_bytes=1 << 40))
    assert len(roomy.engines) == 1 and roomy.cache_key == whole.cache_key  # not split: the same engine and key
    settings = BuildSettings(mark_budget_bytes=whole.mark_plan.marked_bytes() // 2)
    first = build_engine(deeplab, settings, cache_dir=tmp_path / "cache")
    again = build_engine(deeplab, settings, cache_dir=tmp_path / "cache")
    assert len(first.engines) >= 2 and not first.from_cache and again.from_cache
    assert [e.cache_key for e in again.engines] == [e.cache_key for e in first.engines]
    assert [e.plan for e in again.engines] == [e.plan for e in first.engines]
    assert all((tmp_path / "cache" / f"{e.cache_key}.engine").is_file() for e in first.engines)
    written = first.write_engines(tmp_path / "model.engine")
    assert [p.name for p in written][:2] == ["model.engine", f"model.2of{len(first.engines)}.engine"]
    assert [p.read_bytes() for p in written] == [e.plan for e in first.engines]


def test_budget_limits_and_modes(tmp_path: Path, deeplab: GraphInfo) -> None:
    assert slicing.default_budget(None) == (None, "no GPU visible")
    import torch

    if not torch.cuda.is_available():
        assert slicing.default_budget(0)[0] is None  # no CUDA: no memory figure, no limit
    with pytest.raises(OptionError, match="mark_budget_bytes 0: must be a positive number of bytes"):
        build_engine(deeplab, BuildSettings(mark_budget_bytes=0))
    long = chain(tmp_path, slicing.MAX_ENGINES + 10)
    with pytest.raises(OptionError, match=r"mark_budget_bytes 1: .* would take \d+ engines \(at most 64\)"):
        build_engine(long, BuildSettings(mark_budget_bytes=1))
    tiny = build_engine(chain(tmp_path, 6), BuildSettings(mark_budget_bytes=1))
    assert [len(e.marked) for e in tiny.engines] == [1] * 5  # each tensor over the budget: an engine of its own
    for mode in ("none", "unfused"):  # nothing extra is marked: nothing to split
        assert len(build_engine(deeplab, BuildSettings(outputs=mode, mark_budget_bytes=1)).engines) == 1
    assert slicing.contiguous_slices(["a", "b", "c", "d"], {"a": 2, "b": 2, "c": 5, "d": 1}, 4) == [
        ("a", "b"),
        ("c",),
        ("d",),
    ]


def test_build_command_reports_the_engines(export_example: Callable[..., Path], whole) -> None:
    budget = whole.mark_plan.marked_bytes() // 3
    report = trtdiff.pipeline.build.build(
        FACTORY, onnx=export_example(17), input_shapes=["1x3x64x64"], tensorrt=BuildSettings(mark_budget_bytes=budget)
    )
    assert report.tensorrt.status == "built" and any(
        "engines, each marking a contiguous slice" in n for n in report.tensorrt.notes
    )
    assert report.tensorrt.plan_bytes > whole.plan_nbytes  # every engine's plan counts


def test_split_build_runs_slice_by_slice_on_a_supported_gpu(deeplab: GraphInfo, whole) -> None:
    found = probe()
    if not found.can_run:
        pytest.skip(f"{NO_EXECUTION}: {found.reason}")
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)
    one = TensorRTBackend(deeplab)
    split = TensorRTBackend(deeplab, BuildSettings(mark_budget_bytes=whole.mark_plan.marked_bytes() // 4))
    assert len(split.build.engines) >= 4 and split.available() == one.available()
    names = sorted(one.available())
    expected = {k: v for chunk in one.run({"x": x}, names) for k, v in chunk.items()}
    got = {k: v for chunk in split.run({"x": x}, names, max_bytes=1 << 16) for k, v in chunk.items()}
    assert set(got) == set(expected)
    assert max(float(np.abs(got[k] - expected[k]).max()) for k in expected) < 1e-3
