"""What a culprit at a node with subgraphs (If, Loop, Scan) says about the inside.

The recording holds the aten ops of the branch an If took, not the If; pairing compares the
If's output with the taken branch's last value, so a fault inside a branch is a culprit at
the If. This module adds what the culprit alone does not say: which branch ran (the
condition, as the graph computed it) and, where the branch's nodes can be paired with the
recorded ops (walking back from the If's output through each op's sources), which inner
node diverges when each runs alone on the reference's values (the branch's own shadow
model, run on the candidate). A Loop or a Scan is named as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from trtdiff.analysis.metrics import compare_tensors
from trtdiff.analysis.shadow import build_shadow
from trtdiff.backends.pytorch.records import RECORD_PREFIX
from trtdiff.source.onnx_graph import graph_from_model, outer_names, subgraphs

if TYPE_CHECKING:
    from trtdiff.analysis.culprits import LocalRun, OpenLike, ValuesOf
    from trtdiff.analysis.engine import CapturedValues
    from trtdiff.backends.pytorch.records import TorchCapture, TorchRecord
    from trtdiff.pairing.pairs import Pairing
    from trtdiff.report import Culprit, Thresholds
    from trtdiff.source.onnx_graph import GraphInfo

LOOPS = frozenset({"Loop", "Scan"})


def subgraph_notes(
    graph: GraphInfo,
    culprits: Sequence[Culprit],
    runs: Sequence[LocalRun],
    captured: CapturedValues | None,
    exact: ValuesOf,
    open_like: OpenLike,
    thresholds: Thresholds,
) -> list[str]:
    """One line per culprit at an If (the branch taken, the inner node where shown), Loop or Scan."""
    notes: list[str] = []
    for culprit in culprits:
        if culprit.op_type in LOOPS:
            notes.append(
                f"culprits: {culprit.onnx_node} is a {culprit.op_type}, named as a whole: "
                "the nodes of its body are not compared one by one"
            )
        elif culprit.op_type == "If":
            run = next((r for r in runs if r.pair == culprit.pair), None)
            notes.append(_if_note(graph, culprit, run, captured, exact, open_like, thresholds))
    return notes


def _if_note(
    graph: GraphInfo,
    culprit: Culprit,
    run: LocalRun | None,
    captured: CapturedValues | None,
    exact: ValuesOf,
    open_like: OpenLike,
    thresholds: Thresholds,
) -> str:
    index = graph.producer_of[culprit.tensor]
    node = graph.model.graph.node[index]
    condition = _condition(node.input[0], run, exact)
    head = f"culprits: {culprit.onnx_node} is an If"
    if condition is None:
        return f"{head}; which branch ran is unknown (its condition could not be read)"
    taken = "then_branch" if condition else "else_branch"
    head += f" that ran its {taken} (condition {str(condition).lower()})"
    branch = next(a.g for a in node.attribute if a.name == taken)
    if captured is None:
        return f"{head}; its nodes are run alone against PyTorch only"
    try:
        return f"{head}; {_inner_culprit(graph, culprit, branch, captured, exact, open_like, thresholds)}"
    except Exception as error:  # noqa: BLE001 -- a finer name is an aid; the culprit at the If stands
        return f"{head}; its nodes could not be run alone ({type(error).__name__})"


def _condition(name: str, run: LocalRun | None, exact: ValuesOf) -> bool | None:
    """The If's condition as the graph computed it (the shadow model holds it, else the original graph)."""
    value: np.ndarray | None = None
    if run is not None:
        value = run.feeds.get(name)
        if value is None:
            found = [i for i in run.shadow.model.graph.initializer if i.name == name]
            value = onnx.numpy_helper.to_array(found[0]) if found else None
    if value is None:
        value = exact([name]).get(name)
    return None if value is None or np.asarray(value).size != 1 else bool(np.asarray(value).reshape(()))


def inner_keys(branch: onnx.GraphProto, records: Sequence[TorchRecord], start: int) -> dict[str, str]:
    """Branch tensor -> recorded value key, walking back from the branch's output (record `start`).

    A node's inputs made inside the branch (Constants aside) are paired with the op's sources
    (records it flows from, parameters and constants left out) when both have as many, in order.
    """
    producer = {out: n for n in branch.node for out in n.output if out}
    keys: dict[str, str] = {}
    stack = [(branch.output[0].name, start)]
    while stack:
        tensor, index = stack.pop()
        node = producer.get(tensor)
        if node is None or tensor in keys or node.op_type == "Constant":
            continue
        record = records[index]
        keys[tensor] = f"{RECORD_PREFIX}{index}"
        sources = [s for s in (record.sources or record.inputs) if s is not None]
        inside = [t for t in node.input if t in producer and producer[t].op_type != "Constant"]
        if inside and len(inside) == len(sources) and all(s >= 0 for s in sources):
            stack.extend(zip(inside, sources, strict=True))
    return keys


def _inner_culprit(
    graph: GraphInfo,
    culprit: Culprit,
    branch: onnx.GraphProto,
    captured: CapturedValues,
    exact: ValuesOf,
    open_like: OpenLike,
    thresholds: Thresholds,
) -> str:
    """What running each node of `branch` alone (on the reference's values) shows, as the end of a sentence."""
    key = captured.keys.get(culprit.tensor, "")
    start = key.removeprefix(RECORD_PREFIX)
    if not start.isdigit() or len(branch.output) != 1:
        return "its output is not one recorded op's, so its nodes are not run alone"
    keys = inner_keys(branch, captured.capture.records, int(start))
    keys = {t: k for t, k in keys.items() if k in captured.capture.store}  # a comparison keeps what it pairs
    inner = graph_from_model(_standalone(graph, branch), graph.path.with_suffix(".branch.onnx"))
    outer = set(inner.graph_inputs)
    tensors = [out for n in inner.nodes for out in n.outputs if out in keys]
    shadow = build_shadow(inner, tensors, lambda t: t in keys or t in outer)
    alone = [t for t in tensors if len(shadow.subgraphs[t]) == 1]
    if not alone or shadow.exact_inputs:  # shape arithmetic made inside the branch is not at hand
        return "PyTorch's values inside it are not held, so its nodes are not run alone"
    values = captured.values([t for t in shadow.reference_inputs if t in outer])
    values.update(exact([t for t in shadow.reference_inputs if t in outer and t not in values]))
    values.update({t: captured.pairing.value(captured.capture, keys[t]) for t in shadow.reference_inputs if t in keys})
    feeds = {t: _typed(inner, t, v) for t, v in values.items()}
    runner = open_like(culprit.pair.candidate, graph_from_model(shadow.model, inner.path), feeds)
    if runner is None:
        return f"{culprit.pair.candidate} cannot run its nodes alone"
    with runner:
        got: dict[str, np.ndarray] = {}
        for part in runner.run(feeds, [shadow.outputs[t] for t in alone], max_bytes=1 << 62):
            got.update(part)
    for tensor in alone:
        expected = _typed(inner, tensor, captured.pairing.value(captured.capture, keys[tensor]))
        local = got.get(shadow.outputs[tensor])
        if local is not None and compare_tensors(expected, local, thresholds).diverged:
            name = inner.nodes[inner.producer_of[tensor]].name
            return f"run alone on the reference's values, its node {name} diverges"
    return "no node inside it diverges alone where its nodes pair with PyTorch's ops"


def held_inside(graph: GraphInfo, capture: TorchCapture, pairing: Pairing) -> list[str]:
    """The recorded values inside the branches of every paired If, for a comparison to keep with its pairs.

    `capture.retain` keeps only the paired values; without these the culprit pass names the
    If and the branch taken, not the node inside.
    """
    keys: list[str] = []
    for node in graph.nodes:
        pair = pairing.pairs.get(node.outputs[0]) if node.op_type == "If" and node.outputs else None
        start = pair.key.removeprefix(RECORD_PREFIX) if pair is not None else ""
        if start.isdigit():
            for branch in subgraphs(graph.model.graph.node[node.index]):
                keys += inner_keys(branch, capture.records, int(start)).values()
    return list(dict.fromkeys(keys))


def _standalone(graph: GraphInfo, branch: onnx.GraphProto) -> onnx.ModelProto:
    """`branch` as a model of its own: what it reads from outside becomes inputs, initializers or Constants."""
    outer = outer_names(branch)
    source = graph.model.graph
    initializers = [i for i in source.initializer if i.name in outer]
    constants = [
        source.node[i]
        for name in outer
        if (i := graph.producer_of.get(name)) is not None and source.node[i].op_type == "Constant"
    ]
    carried = {i.name for i in initializers} | {o for c in constants for o in c.output}
    inputs = [_value_info(graph, name) for name in outer if name not in carried]
    body = helper.make_graph(
        [*constants, *branch.node], "branch", inputs, list(branch.output), initializer=initializers
    )
    model = helper.make_model(body, opset_imports=list(graph.model.opset_import), producer_name="trtdiff")
    model.ir_version = graph.model.ir_version
    return model


def _value_info(graph: GraphInfo, name: str) -> onnx.ValueInfoProto:
    tensor_type = graph.tensor_type(name)
    if tensor_type.dtype is None:
        return onnx.ValueInfoProto(name=name)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(tensor_type.dtype), tensor_type.shape)


def _typed(graph: GraphInfo, tensor: str, value: object) -> np.ndarray:
    """`value` on the host in the tensor's ONNX dtype and static shape (PyTorch may hold a squeezed view)."""
    array = np.asarray(value.cpu() if hasattr(value, "cpu") else value)
    tensor_type = graph.tensor_type(tensor)
    if tensor_type.dtype is not None and array.dtype != tensor_type.dtype:
        array = array.astype(tensor_type.dtype)
    static = tuple(d for d in tensor_type.shape or () if d is not None)
    if tensor_type.shape is not None and len(static) == len(tensor_type.shape) and static != array.shape:
        if int(np.prod(static, dtype=np.int64)) == array.size:
            array = array.reshape(static)
    return array
