"""`trtdiff.inspect_model`: confirm or rule out the usual suspects without running a comparison.

Export (or read the ONNX file) as `compare` would; report the opset and exporter as written,
every Resize/Upsample (attributes, constant scales or sizes, shapes, the PyTorch call behind
it: one forward pass records align_corners, module and source line) and the findings of
`trtdiff.source.pitfalls`, with each tensor's magnitude from one ONNX Runtime run.
"""

from __future__ import annotations

import importlib.util
import json
import re
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtdiff import __version__
from trtdiff.errors import BackendError, ModelRunError, first_line, param, render_names
from trtdiff.options import BackendOptions, CompareOptions
from trtdiff.pairing.pairs import node_module
from trtdiff.pipeline.prepare import prepare
from trtdiff.report.serialization import from_jsonable, to_jsonable
from trtdiff.source import pitfalls as rules
from trtdiff.source.onnx_graph import GraphInfo, NodeInfo
from trtdiff.source.pitfalls import Finding, ResizeInfo, Severity

if TYPE_CHECKING:
    import torch

__all__ = ["Finding", "Inspection", "Interpolation", "ResizeInfo", "Severity", "inspect_graph", "inspect_model"]

STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n[ \t]*([^\n]*)')
_FOLD_LIMIT = 1 << 16  # elements: shape arithmetic is tiny; bigger tensors are not folded
_TORCH_DIR = str(Path(spec.origin).parent) if (spec := importlib.util.find_spec("torch")) and spec.origin else "torch"
_TORCH_MODES = ("nearest_exact", "nearest", "bicubic", "linear")
_RESIZE_DEFAULTS: dict[str, Any] = {
    "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor",
}
_RESIZE_DEFAULTS |= {"cubic_coeff_a": -0.75, "exclude_outside": 0}  # Resize-11 on; none of them exists before


@dataclass(frozen=True)
class Inspection:
    """The file as written (`exporter`: the one trtdiff ran, or "given"), its Resize rows, the findings.

    `worst` is the most severe finding's severity (None without findings). Advice names
    parameters with `param(...)` marks; `named()` writes them as names (or flags).
    """

    model: str
    onnx_path: str | None
    opset: int
    opset_imports: dict[str, int]
    exporter: str
    producer_name: str
    producer_version: str
    inputs: dict[str, str]
    resizes: tuple[ResizeInfo, ...]
    findings: tuple[Finding, ...]
    worst: Severity | None
    notes: tuple[str, ...] = ()
    trtdiff_version: str = __version__

    @property
    def producer(self) -> str:
        """ "pytorch 2.13.0"."""
        return f"{self.producer_name} {self.producer_version}".strip()

    @property
    def clean(self) -> bool:
        """No finding above "info" (the command's exit code 0)."""
        return self.worst is None or rules.SEVERITY_RANK[self.worst] == 0

    def named(self, name_of: Callable[[str], str] = str) -> Inspection:
        """A copy whose messages and advice write each marked parameter as `name_of(parameter)`."""
        findings = tuple(
            replace(f, message=render_names(f.message, name_of), advice=render_names(f.advice, name_of))
            for f in self.findings
        )
        return replace(self, findings=findings, notes=tuple(render_names(n, name_of) for n in self.notes))

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self), indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Inspection:
        return from_jsonable(cls, json.loads(text))


@dataclass(frozen=True)
class Interpolation:
    """One PyTorch upsampling call, as one forward pass saw it."""

    op: str
    mode: str
    align_corners: bool | None
    output_shape: tuple[int, ...]
    module: str | None
    source: str | None = None


def inspect_model(
    model: str | Path | torch.nn.Module,
    options: CompareOptions | None = None,
    *,
    name_of: Callable[[str], str] = str,
    **fields: Any,
) -> Inspection:
    """Export `model` (or read the ONNX file) as `compare` would and report what may break its numbers.

    Options as for `compare` (the model, inputs, export and ONNX Runtime provider are read),
    e.g. `inspect_model("model.pt", opset=10, input_shapes=["1x3x512x512"])`. Advice names
    parameters as `name_of` writes them (the parameter itself; the CLI passes its flags).
    """
    options = (options or CompareOptions()).with_fields(**fields)
    options.export.validate()
    options.runtime.validate()
    with prepare(model, options, backends=()) as prepared:
        graph, module = prepared.graph, prepared.loaded.module
        calls = record_interpolations(module, prepared.model_feeds) if prepared.has_torch and module is not None else []
        magnitudes, note = tensor_magnitudes(graph, prepared.feeds, options.runtime)
        names = {name for name, _ in module.named_modules()} if module is not None else None
        resizes, findings = inspect_graph(graph, calls=calls, magnitudes=magnitudes, module_names=names)
        declared = graph.model
        return Inspection(
            model=prepared.loaded.source,
            onnx_path=prepared.onnx_path,
            opset=graph.opset,
            opset_imports={entry.domain or "ai.onnx": int(entry.version) for entry in declared.opset_import},
            exporter=prepared.exporter,
            producer_name=declared.producer_name,
            producer_version=declared.producer_version,
            inputs=_input_shapes(graph),
            resizes=tuple(resizes),
            findings=tuple(findings),
            worst=rules.worst_severity(findings),
            notes=(*prepared.notes, *([note] if note else [])),
        ).named(name_of)


def inspect_graph(
    graph: GraphInfo,
    *,
    calls: Sequence[Interpolation] = (),
    magnitudes: Mapping[str, float] | None = None,
    module_names: set[str] | None = None,
) -> tuple[list[ResizeInfo], list[Finding]]:
    """The Resize rows and findings of `graph`; `calls`: the model's upsampling calls, when it was given."""
    known: dict[str, tuple[str | None, str | None]] = {}

    def origin(node: NodeInfo) -> tuple[str | None, str | None]:
        if node.name in known:
            return known[node.name]
        module = node_module(node, module_names) if module_names else node.module_path
        if module is None and node.scope_pieces is not None:
            module = _guess_module(node.scope_pieces)
        meta = {p.key: p.value for p in graph.model.graph.node[node.index].metadata_props}
        return module, _source_of(meta.get(STACK_TRACE_KEY, ""))

    rows = _with_calls(read_resizes(graph, origin), calls)
    known.update({row.node: (row.module, row.source) for row in rows})
    return rows, rules.find_all(rules.Context(graph, {row.node: row for row in rows}, origin, magnitudes))


def _guess_module(pieces: Iterable[str]) -> str:
    """A module path from TorchScript scope pieces without the model: ("stem", "stem.0") -> "stem.0"."""
    parts: list[str] = []
    for piece in pieces:
        if parts and piece.startswith(parts[-1] + "."):
            parts[-1] = piece
        else:
            parts.append(piece)
    return ".".join(parts)


def _source_of(stack_trace: str) -> str | None:
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
            shape, attrs = graph.tensor_type(node.inputs[0]).shape, rules.attributes(graph, node)
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
        attrs = rules.attributes(graph, node)
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
    if in_shape is None or (out_shape is not None and all(d is not None for d in out_shape)):
        return out_shape
    if sizes is not None and len(sizes) == len(in_shape):
        return tuple(int(s) for s in sizes)
    if scales is not None and len(scales) == len(in_shape):
        return tuple(None if d is None else int(np.floor(d * s + 1e-6)) for d, s in zip(in_shape, scales, strict=True))
    return out_shape


def _with_calls(rows: list[ResizeInfo], calls: Sequence[Interpolation]) -> list[ResizeInfo]:
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


def _input_shapes(graph: GraphInfo) -> dict[str, str]:
    """Each graph input's shape as written: "1x3xheightxwidth" (symbolic dimensions by name, "?" unnamed)."""
    values = [v for v in graph.model.graph.input if v.name in graph.graph_inputs and v.type.HasField("tensor_type")]
    dims = {
        v.name: [
            str(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else d.dim_param or "?"
            for d in v.type.tensor_type.shape.dim
        ]
        for v in values
    }
    return {name: "x".join(shape) or "scalar" for name, shape in dims.items()}


def record_interpolations(module: torch.nn.Module, feeds: Mapping[str, np.ndarray]) -> list[Interpolation]:
    """Run `module` once on `feeds` (in order) and list its upsampling calls with module path and source line."""
    import torch

    eager = not isinstance(module, (torch.jit.ScriptModule, torch.fx.GraphModule))
    paths: list[str] | None = [] if eager else None
    recorder = _recorder_class()(paths, len(traceback.extract_stack()))
    handles = _hook_paths(module, paths) if paths is not None else []
    tensors = [torch.from_numpy(np.array(value, copy=True, order="C")) for value in feeds.values()]
    try:
        with torch.no_grad(), recorder:
            module(*tensors)
    except Exception as error:
        raise ModelRunError(
            f"the model's forward raised {type(error).__name__}: {first_line(error)}; check "
            f"{param('input_shapes')} / {param('input_files')} against what the model expects"
        ) from error
    finally:
        for handle in handles:
            handle.remove()
    return list(recorder.calls)


def _recorder_class() -> type:
    """A TorchDispatchMode that records aten upsample ops (defined on first use: torch is imported lazily)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self, paths: list[str] | None, depth: int) -> None:
            super().__init__()
            self.paths, self.depth, self.calls = paths, depth, list[Interpolation]()

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            out = func(*args, **(kwargs or {}))
            name = func._overloadpacket.__name__
            if "upsample" in name and hasattr(out, "shape"):
                flags = [a for a in args[1:] if isinstance(a, bool)]
                module = self.paths[-1] if self.paths else ("" if self.paths is not None else None)
                mode = next((m for m in _TORCH_MODES if m in name), name)
                aligned = flags[0] if flags else None
                call = Interpolation(name.strip("_"), mode, aligned, tuple(out.shape), module, _caller(self.depth))
                self.calls.append(call)
            return out

    return Recorder


def _caller(depth: int) -> str | None:
    """The innermost line of the model's own code: below the forward call, outside torch, this file and
    generated code (an ExportedProgram's "<eval_with_key>")."""
    skip = (_TORCH_DIR, __file__, "<")
    frames = [f for f in traceback.extract_stack()[depth:] if not any(f.filename.startswith(p) for p in skip)]
    return f"{frames[-1].filename}:{frames[-1].lineno}: {(frames[-1].line or '').strip()}" if frames else None


def _hook_paths(module: torch.nn.Module, paths: list[str]) -> list:
    """Forward hooks keeping `paths[-1]` the path of the submodule running now."""

    def leave(_module: Any, _args: Any, _output: Any) -> None:
        paths.pop()

    handles = []
    for path, sub in module.named_modules():
        if path:
            handles.append(sub.register_forward_pre_hook(lambda _m, _a, path=path: paths.append(path)))
            handles.append(sub.register_forward_hook(leave))
    return handles


def tensor_magnitudes(
    graph: GraphInfo, feeds: Mapping[str, np.ndarray], runtime: BackendOptions
) -> tuple[dict[str, float] | None, str | None]:
    """Largest |value| of each float tensor computed from the inputs (ONNX Runtime on `feeds`), or a note why not."""
    from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend

    wanted = [t for t in graph.node_outputs if t in graph.data_tensors]
    sizes = {t: n for t in wanted if (n := graph.tensor_type(t).nbytes()) is not None}
    magnitudes: dict[str, float] = {}
    try:
        backend = OnnxRuntimeBackend(graph, runtime.ort_provider)
        for chunk in backend.run(feeds, wanted, sizes=sizes, max_bytes=runtime.chunk_bytes):
            for name, value in chunk.items():
                if np.issubdtype(value.dtype, np.floating) and value.size and not np.isnan(value).all():
                    magnitudes[name] = float(np.nanmax(np.abs(value)))
    except BackendError as error:
        return None, f"FP16 range not checked: {error}"
    return magnitudes, None
