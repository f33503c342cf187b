"""Every Resize/Upsample as written: attributes with the opset's defaults, constant scales or sizes
(folded from static shapes where a simplifier would), shapes, and the PyTorch call behind it.

`read_resizes` reads the rows; `with_calls` gives each row the upsampling call one forward
pass recorded (align_corners, module, source line), which the graph alone cannot show.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtdiff.report.inspection import Interpolation, ResizeInfo
from trtdiff.source.onnx_graph import GraphInfo, NodeInfo, attributes

STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n[ \t]*([^\n]*)')
_FOLD_LIMIT = 1 << 16  # elements: shape arithmetic is tiny; bigger tensors are not folded
_TORCH_DIR = str(Path(spec.origin).parent) if (spec := importlib.util.find_spec("torch")) and spec.origin else "torch"
_RESIZE_DEFAULTS: dict[str, Any] = {
    "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor",
}
_RESIZE_DEFAULTS |= {"cubic_coeff_a": -0.75, "exclude_outside": 0}  # Resize-11 on; none of them exists before


def guess_module(pieces: Iterable[str]) -> str:
    """A module path from TorchScript scope pieces without the model: ("stem", "stem.0") -> "stem.0"."""
    parts: list[str] = []
    for piece in pieces:
        if parts and piece.startswith(parts[-1] + "."):
            parts[-1] = piece
        else:
            parts.append(piece)
    return ".".join(parts)


def source_of(stack_trace: str) -> str | None:
    """ "model.py:12: F.interpolate(...)": the innermost frame outside torch of a dynamo stack trace."""
    frames = [f for f in _FRAME.findall(stack_trace) if _TORCH_DIR not in f[0]]
    return f"{frames[-1][0]}:{frames[-1][1]}: {frames[-1][2].strip()}" if frames else None


class _Folder:
    """Values of tensors computed from constants and static shapes only (what a simplifier folds)."""

    def __init__(self, graph: GraphInfo) -> None:
        self.graph = graph
        self.memo: dict[str, np.ndarray | None] = {}
        self.initializers = {init.name: init for init in graph.model.graph.initializer}

    def value(self, tensor: str) -> np.ndarray | None:
        if tensor not in self.memo:
            self.memo[tensor] = None  # a cycle reads None
            self.memo[tensor] = self._compute(tensor)
        return self.memo[tensor]

    def _compute(self, tensor: str) -> np.ndarray | None:
        graph, node = self.graph, self.graph.node_of(tensor)
        if tensor in self.initializers:
            return numpy_helper.to_array(self.initializers[tensor])
        if node is None or tensor in graph.data_tensors:
            return None
        if node.op_type == "Shape":
            shape, attrs = graph.tensor_type(node.inputs[0]).shape, attributes(graph, node)
            known = shape is not None and all(d is not None for d in shape)
            return np.array(shape, dtype=np.int64)[attrs.get("start", 0) : attrs.get("end")] if known else None
        values = [self.value(t) if t else None for t in node.inputs]
        missing = any(v is None for t, v in zip(node.inputs, values, strict=True) if t)
        if missing or sum(v.size for v in values if v is not None) > _FOLD_LIMIT:
            return None
        try:
            return _evaluate(graph, node, values)[node.outputs.index(tensor)]
        except Exception:  # noqa: BLE001 -- folding is best effort: what the evaluator cannot run stays unknown
            return None


def _evaluate(graph: GraphInfo, node: NodeInfo, values: Sequence[np.ndarray | None]) -> list[np.ndarray]:
    """Run one node with the ONNX reference evaluator at the file's opsets."""
    from onnx.reference import ReferenceEvaluator

    feeds = {t: v for t, v in zip(node.inputs, values, strict=True) if t and v is not None}
    typed = [
        helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for t, v in feeds.items()
    ]
    outputs = [onnx.ValueInfoProto(name=t) for t in node.outputs if t]
    one = helper.make_graph([graph.model.graph.node[node.index]], "fold", typed, outputs)
    model = helper.make_model(one, opset_imports=list(graph.model.opset_import))
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]


def read_resizes(graph: GraphInfo, origin: Callable[[NodeInfo], tuple[str | None, str | None]]) -> list[ResizeInfo]:
    """Every Resize/Upsample node with its attributes (opset defaults filled in), constants and shapes."""
    folder, rows = _Folder(graph), []
    for node in graph.nodes:
        if node.op_type not in ("Resize", "Upsample") or node.domain not in ("", "ai.onnx"):
            continue
        attrs = attributes(graph, node)
        modern = node.op_type == "Resize" and graph.opset >= 11  # coordinate attributes exist
        scales = attrs.get("scales") or _input_value(folder, node, 2 if modern else 1)
        sizes = _input_value(folder, node, 3) if modern else None
        in_shape = graph.tensor_type(node.inputs[0]).shape
        out_shape = _output_shape(in_shape, graph.tensor_type(node.outputs[0]).shape, scales, sizes)
        module, source = origin(node)
        fields = {key: attrs.get(key, default) if modern else None for key, default in _RESIZE_DEFAULTS.items()}
        fields |= {"scales": None if scales is None else tuple(float(s) for s in scales), "module": module}
        fields |= {"sizes": None if sizes is None else tuple(int(s) for s in sizes), "source": source}
        mode = str(attrs.get("mode", "nearest"))
        rows.append(ResizeInfo(node.name, node.op_type, mode, input_shape=in_shape, output_shape=out_shape, **fields))
    return rows


def _input_value(folder: _Folder, node: NodeInfo, position: int) -> list[float] | None:
    value = folder.value(node.inputs[position]) if position < len(node.inputs) and node.inputs[position] else None
    return None if value is None or value.size == 0 else value.reshape(-1).tolist()


def _output_shape(in_shape: Any, out_shape: Any, scales: Any, sizes: Any) -> tuple[int | None, ...] | None:
    """Shape inference's output shape, completed from constant sizes or scales where it left gaps."""
    inferred: tuple[int | None, ...] | None = None if out_shape is None else tuple(out_shape)
    if in_shape is None or (inferred is not None and all(d is not None for d in inferred)):
        return inferred
    if sizes is not None and len(sizes) == len(in_shape):
        return tuple(int(s) for s in sizes)
    if scales is not None and len(scales) == len(in_shape):
        return tuple(None if d is None else int(np.floor(d * s + 1e-6)) for d, s in zip(in_shape, scales, strict=True))
    return inferred


def with_calls(rows: list[ResizeInfo], calls: Sequence[Interpolation]) -> list[ResizeInfo]:
    """Each row with the PyTorch call it came from: per module in order, then the leftovers in order.

    Groups pair only when they are as long and each pair agrees on nearest-or-not and, where
    ONNX knows it, on the output shape.
    """
    paired: dict[int, Interpolation] = {}
    for key in [*{row.module for row in rows if row.module is not None}, None]:  # None: all that is left
        used = {id(call) for call in paired.values()}
        mine = [i for i, row in enumerate(rows) if i not in paired and key in (None, row.module)]
        theirs = [call for call in calls if id(call) not in used and key in (None, call.module)]
        if len(mine) == len(theirs) and all(_fits(rows[i], c) for i, c in zip(mine, theirs, strict=True)):
            paired.update(zip(mine, theirs, strict=True))
    return [
        replace(row, torch_op=c.op, align_corners=c.align_corners, source=row.source or c.source)
        if (c := paired.get(i)) is not None
        else row
        for i, row in enumerate(rows)
    ]


def _fits(row: ResizeInfo, call: Interpolation) -> bool:
    shape = row.output_shape
    same = shape is None or None in shape or tuple(shape) == call.output_shape
    return same and (row.mode == "nearest") == call.mode.startswith("nearest")
