"""Which ONNX nodes each engine layer computes, in what type: from the engine inspector or from the plan.

Engine layer names read `a + b`, `PWN(a, PWN(b, c))` or `{ForeignNode[first...last]}`; with
ProfilingVerbosity.DETAILED each layer's metadata lists `[ONNX Layer: node]` entries (joined
by \\x1e), which is exact where names are only a summary. The inspector needs a deserialized
engine, so a GPU the TensorRT supports. Without one, `fusion_from_plan` reads the serialized
plan: an undocumented layout (seen in TensorRT-RTX 1.7.1), so it is best effort and says so in
its `source`. Two things are read there:

- the framed strings: each top-level layer's name followed by its metadata;
- the compiled program of a `{ForeignNode[...]}` region (TensorRT-RTX plans carry it as
  text): one line per kernel (`corrltn={ name="/conv" output={...} layers="[ONNX Layer:
  /conv]\\x1e[ONNX Layer: /relu]" }`) and a descriptor per tensor (`tensor={ ... name="t"
  ... type=float }`). Kernels are the real fusion unit inside the region, and the
  descriptors give the type each kernel writes (precision as built).

Every lookup goes through `NodeIndex`, built once per graph: reading thousands of layers is
linear. Fusion information never fails a comparison: the inspector's JSON is read leniently
(real metadata holds raw \\x1e separators, which strict JSON forbids), and on any error the
plan scan is used instead; on an error there too, the report is empty and says why.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from itertools import pairwise
from typing import TYPE_CHECKING

from trtdiff.backends.compiled.fusion import EngineLayer, FusionReport
from trtdiff.errors import describe_error

if TYPE_CHECKING:
    from trtdiff.backends.tensorrt.api import Engine, TrtModule
    from trtdiff.source.onnx_graph import GraphInfo

SOURCE_INSPECTOR = "engine-inspector"
SOURCE_PLAN = "plan-scan (undocumented plan layout; best effort)"
_FOREIGN = re.compile(r"\{ForeignNode\[(.*?)\]\}")
_META = re.compile(r"\[ONNX Layer: ([^\]|]*?)(?: \|[^\]]*)?\]")
_FRAME = re.compile(rb"\x01\x80\x0c\x80\x01\x00(.{8})", re.S)
_PROGRAM = re.compile(rb"\nmain \{\n(.*?)\n\}\n", re.S)
_OP = re.compile(rb'^  ([a-z_]+)=\{ name=("([^"]*)"|(\S+)) (.*)\}$', re.M)
_LAYERS = re.compile(rb'layers="([^"]*)"')
_OP_OUTPUTS = re.compile(rb"(?:^| )(?:output|output_args)=\{ ?((?:\"[^\"]*\" ?)*)\}")
_DESCRIPTOR = re.compile(rb"^  (tensor|sub_tensor)=\{ (.*)\}$", re.M)
_QUOTED = re.compile(rb'"([^"]*)"')
_FIELD_NAME = re.compile(rb' name="([^"]*)"')
_FIELD_TYPE = re.compile(rb" type=(\w+)")
_FIELD_BASE = re.compile(rb' base="([^"]*)"')
_HEADER_TF32 = re.compile(rb"\n  tf32=(\d)\n")
_INSPECTOR_TYPE = re.compile(
    r"\b(FP32|FP16|BF16|FP8|FP4|INT8|INT32|INT64|INT4|UINT8|BOOL|Float|Half|Int8|Int32|Int64|Int4|UInt8|Bool)\b"
)
# Type names in plan descriptors and inspector formats -> the names the report uses.
PRECISION_NAMES = {
    "float": "FP32",
    "fp32": "FP32",
    "half": "FP16",
    "fp16": "FP16",
    "bf16": "BF16",
    "bfloat16": "BF16",
    "fp8": "FP8",
    "e4m3": "FP8",
    "fp4": "FP4",
    "int8": "INT8",
    "int4": "INT4",
    "int32": "INT32",
    "int64": "INT64",
    "uint8": "UINT8",
    "bool": "BOOL",
}

TRT_API = (
    "ICudaEngine.create_engine_inspector",
    "EngineInspector.get_engine_information",
    "LayerInformationFormat.JSON",
    "ProfilingVerbosity.DETAILED",
)
TRT_OPTIONAL_API: tuple[str, ...] = ()


class NodeIndex:
    """The graph's node names, their order and the node of each value, built once (linear lookups)."""

    def __init__(self, graph: GraphInfo) -> None:
        self.graph = graph
        self.order = [node.name for node in graph.nodes]
        self.position = {name: index for index, name in enumerate(self.order)}

    def node(self, token: str) -> str | None:
        """Map a TensorRT layer name piece to an ONNX node name (`node_of_X`, `name_N` included)."""
        if token in self.position:
            return token
        if token.startswith("node_of_"):
            node = self.graph.node_of(token[len("node_of_") :])
            return node.name if node else None
        base = re.sub(r"_\d+$", "", token)
        return base if base in self.position else None


def nodes_from_metadata(metadata: str) -> tuple[str, ...]:
    """ONNX node names in a layer's metadata, outermost subgraph context dropped."""
    return tuple(dict.fromkeys(m.strip() for m in _META.findall(metadata or "")))


def nodes_from_name(name: str, graph: GraphInfo | NodeIndex) -> tuple[str, ...]:
    """ONNX node names an engine layer name mentions; a ForeignNode range expands in graph order."""
    index = graph if isinstance(graph, NodeIndex) else NodeIndex(graph)
    foreign = _FOREIGN.search(name)
    if foreign:
        ends = foreign.group(1).split("...", 1)
        first, last = (index.node(part) for part in (ends[0], ends[-1]))
        if first is not None and last is not None and index.position[first] <= index.position[last]:
            return tuple(index.order[index.position[first] : index.position[last] + 1])
        return tuple(n for n in (first, last) if n)
    pieces = re.split(r"\s\+\s|,\s*|PWN\(|\)", name)
    return tuple(dict.fromkeys(n for n in (index.node(p.strip()) for p in pieces if p.strip()) if n))


def fusion_from_inspector(text: str, graph: GraphInfo) -> FusionReport:
    """Parse `get_engine_information(LayerInformationFormat.JSON)` output (control characters allowed)."""
    index = NodeIndex(graph)
    data = json.loads(text, strict=False)
    entries = data.get("Layers", []) if isinstance(data, dict) else []
    layers = []
    for entry in entries:
        if isinstance(entry, str):
            layers.append(_layer(entry, "", index))
        elif isinstance(entry, dict):
            tactic = entry.get("TacticName")
            layers.append(
                _layer(
                    str(entry.get("Name", "")),
                    str(entry.get("Metadata", "") or ""),
                    index,
                    entry.get("LayerType"),
                    tactic if tactic is not None else entry.get("TacticValue"),
                    _inspector_types(entry.get("Outputs")),
                )
            )
    return FusionReport(tuple(layers), SOURCE_INSPECTOR)


def _inspector_types(outputs: object) -> tuple[str, ...]:
    """The data types in a DETAILED inspector entry's outputs ("Format/Datatype": "Row major linear FP32")."""
    if not isinstance(outputs, list):
        return ()
    found: list[str] = []
    for output in outputs:
        text = str(output.get("Format/Datatype", "")) if isinstance(output, dict) else str(output)
        match = _INSPECTOR_TYPE.search(text)
        if match:
            found.append(PRECISION_NAMES.get(match.group(1).lower(), match.group(1).upper()))
    return tuple(found)


def fusion_from_text_or_plans(text: str, plans: Iterable[bytes], graph: GraphInfo) -> FusionReport:
    """The inspector's JSON `text`, or the plan scan of `plans` when it cannot be read (never raises)."""
    try:
        return fusion_from_inspector(text, graph)
    except Exception as error:  # noqa: BLE001 -- fusion is information; it must never fail a comparison
        return fusion_fallback(plans, graph, f"the engine inspector's JSON could not be read ({describe_error(error)})")


def fusion_fallback(plans: Iterable[bytes], graph: GraphInfo, why: str) -> FusionReport:
    """The plan scan, noting `why` the inspector was not used; an empty report when the scan fails too."""
    try:
        report = fusion_from_plans(plans, graph)
    except Exception as error:  # noqa: BLE001 -- see fusion_from_text_or_plans
        return FusionReport((), "none", f"{why}; reading the plan failed too ({describe_error(error)})")
    return FusionReport(report.layers, report.source, why, report.tf32)


def fusion_from_plan(plan: bytes, graph: GraphInfo | NodeIndex) -> FusionReport:
    """Best effort on the CPU: the layers (and the kernels of fused regions) a serialized plan describes."""
    index = graph if isinstance(graph, NodeIndex) else NodeIndex(graph)
    strings = list(_framed_strings(plan))
    top = [
        _layer(name, following, index)
        for name, following in pairwise(strings)  # the last string has no metadata after it
        if following.startswith("[ONNX Layer:") and not name.startswith("[ONNX Layer:")
    ]
    kernels = _program_kernels(plan, index)
    if kernels:  # a fused region's kernels replace the region's one summary layer
        top = [layer for layer in top if not _FOREIGN.search(layer.name)]
    header = _HEADER_TF32.search(plan)
    return FusionReport((*top, *kernels), SOURCE_PLAN, tf32=bool(int(header.group(1))) if header else None)


def fusion_from_plans(plans: Iterable[bytes], graph: GraphInfo) -> FusionReport:
    """`fusion_from_plan` over several plans, each layer once."""
    index = NodeIndex(graph)
    reports = [fusion_from_plan(plan, index) for plan in plans]
    layers = {layer.name: layer for report in reports for layer in report.layers}
    tf32 = next((r.tf32 for r in reports if r.tf32 is not None), None)
    return FusionReport(tuple(layers.values()), SOURCE_PLAN, tf32=tf32)


def engine_fusion(engine: Engine | None, trt: TrtModule, graph: GraphInfo, plans: Iterable[bytes] = ()) -> FusionReport:
    """Ask a deserialized engine's inspector (built with DETAILED verbosity); else scan `plans` (never raises)."""
    plans = tuple(plans)
    try:
        if engine is None:
            raise ValueError("no engine is loaded")
        json_format = trt.LayerInformationFormat.__members__["JSON"]
        text = engine.create_engine_inspector().get_engine_information(json_format)
    except Exception as error:  # noqa: BLE001 -- see fusion_from_text_or_plans
        return fusion_fallback(plans, graph, f"the engine inspector failed ({describe_error(error)})")
    inspected = fusion_from_text_or_plans(text, plans, graph)
    if inspected.source == SOURCE_INSPECTOR and plans:  # the inspector has no TF32 flag; the plan header does
        header = _HEADER_TF32.search(plans[0])
        return FusionReport(
            inspected.layers, inspected.source, inspected.note, bool(int(header.group(1))) if header else None
        )
    return inspected


def _layer(
    name: str,
    metadata: str,
    index: NodeIndex,
    layer_type: object = None,
    tactic: object = None,
    output_types: tuple[str, ...] = (),
) -> EngineLayer:
    kind = None if layer_type is None else str(layer_type)
    chosen = None if tactic is None else str(tactic)
    from_meta = tuple(n for n in (index.node(m) for m in nodes_from_metadata(metadata)) if n)
    if from_meta:
        return EngineLayer(name, from_meta, "metadata", kind, chosen, output_types)
    return EngineLayer(name, nodes_from_name(name, index), "name", kind, chosen, output_types)


def _program_kernels(plan: bytes, index: NodeIndex) -> list[EngineLayer]:
    """The kernels of the plan's compiled programs that compute ONNX nodes, with the types they write."""
    kernels: list[EngineLayer] = []
    seen: dict[str, int] = {}
    for program in _PROGRAM.finditer(plan):
        body = program.group(1)
        types = _descriptor_types(plan, program.start())
        for op in _OP.finditer(body):
            rest = op.group(5)
            layers = _LAYERS.search(rest)
            if layers is None:
                continue  # copies, waits, signals: no ONNX node of their own
            metadata = layers.group(1).decode("utf-8", "replace")
            raw = (op.group(3) if op.group(3) is not None else op.group(4)).decode("utf-8", "replace")
            seen[raw] = seen.get(raw, 0) + 1
            name = raw if seen[raw] == 1 else f"{raw} #{seen[raw]}"
            outputs = _OP_OUTPUTS.search(rest)
            written = [q.decode("utf-8", "replace") for q in _QUOTED.findall(outputs.group(1))] if outputs else []
            kinds = tuple(dict.fromkeys(types[t] for t in written if t in types))
            kernel = _layer(name, metadata, index, op.group(1).decode(), None, kinds)
            if kernel.onnx_nodes:
                kernels.append(kernel)
    return kernels


def _descriptor_types(plan: bytes, before: int) -> Mapping[str, str]:
    """Myelin tensor name -> precision, from the descriptors that precede a program (sub-tensors take their base's)."""
    start = plan.rfind(b"\ndescriptors {\n", 0, before)
    if start < 0:
        return {}
    types: dict[str, str] = {}
    bases: dict[str, str] = {}
    for match in _DESCRIPTOR.finditer(plan, start, before):
        fields = match.group(2)
        named = _FIELD_NAME.search(fields)
        if named is None:
            continue
        key = named.group(1).decode("utf-8", "replace")
        kind = _FIELD_TYPE.search(fields)
        if kind is not None:
            raw = kind.group(1).decode().lower()
            types[key] = PRECISION_NAMES.get(raw, raw.upper())
        based = _FIELD_BASE.search(fields)
        if based is not None:
            bases[key] = based.group(1).decode("utf-8", "replace")
    for key, base in bases.items():
        if key not in types and base in types:
            types[key] = types[base]
    return types


def _framed_strings(plan: bytes) -> Iterator[str]:
    for match in _FRAME.finditer(plan):
        (length,) = struct.unpack("<Q", match.group(1))
        if 0 < length < 1 << 20:
            try:
                yield plan[match.end() : match.end() + length].decode("utf-8")
            except UnicodeDecodeError:
                continue
