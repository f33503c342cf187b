"""Which ONNX nodes each engine layer computes: from the engine inspector, or from the plan.

Engine layer names read `a + b`, `PWN(a, PWN(b, c))` or `{ForeignNode[first...last]}`;
with ProfilingVerbosity.DETAILED each layer's metadata lists `[ONNX Layer: node]` entries
(joined by \\x1e), which is exact where names are only a summary. The inspector needs a
deserialized engine, so a GPU. Without one, `fusion_from_plan` reads the same names and
metadata from the serialized plan's strings: an undocumented layout (seen in TensorRT-RTX
1.7.1), so it is a best-effort hint and says so in its `source`.

Fusion information never fails a comparison: the inspector's JSON is read leniently (real
metadata holds raw \x1e separators, which strict JSON forbids), and on any error the plan
scan is used instead; on an error there too, the report is empty and says why.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from trtdiff.errors import describe_error

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo

SOURCE_INSPECTOR = "engine-inspector"
SOURCE_PLAN = "plan-scan (undocumented plan layout; best effort)"
_FOREIGN = re.compile(r"\{ForeignNode\[(.*?)\]\}")
_META = re.compile(r"\[ONNX Layer: ([^\]|]*?)(?: \|[^\]]*)?\]")
_FRAME = re.compile(rb"\x01\x80\x0c\x80\x01\x00(.{8})", re.S)

TRT_API = (
    "ICudaEngine.create_engine_inspector",
    "EngineInspector.get_engine_information",
    "LayerInformationFormat.JSON",
    "ProfilingVerbosity.DETAILED",
)
TRT_OPTIONAL_API: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineLayer:
    """One engine layer and the ONNX nodes it computes (`how`: "metadata" or "name")."""

    name: str
    onnx_nodes: tuple[str, ...]
    how: str
    layer_type: str | None = None
    tactic: str | None = None


@dataclass(frozen=True)
class FusionReport:
    """Engine layers with their ONNX nodes, and where that information came from."""

    layers: tuple[EngineLayer, ...]
    source: str
    note: str | None = None  # why the source is not the engine inspector, where it was asked first

    def fused(self) -> tuple[EngineLayer, ...]:
        """Layers that compute more than one ONNX node."""
        return tuple(layer for layer in self.layers if len(layer.onnx_nodes) > 1)

    def layer_of(self) -> dict[str, str]:
        """ONNX node name -> the engine layer that computes it."""
        return {node: layer.name for layer in self.layers for node in layer.onnx_nodes}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "note": self.note, "layers": [asdict(layer) for layer in self.layers]}


def nodes_from_metadata(metadata: str) -> tuple[str, ...]:
    """ONNX node names in a layer's metadata, outermost subgraph context dropped."""
    return tuple(dict.fromkeys(m.strip() for m in _META.findall(metadata or "")))


def nodes_from_name(name: str, graph: GraphInfo) -> tuple[str, ...]:
    """ONNX node names an engine layer name mentions; a ForeignNode range expands in graph order."""
    order = [node.name for node in graph.nodes]
    foreign = _FOREIGN.search(name)
    if foreign:
        ends = foreign.group(1).split("...", 1)
        first, last = (_onnx_node(part, graph) for part in (ends[0], ends[-1]))
        if first in order and last in order and order.index(first) <= order.index(last):
            return tuple(order[order.index(first) : order.index(last) + 1])
        return tuple(n for n in (first, last) if n)
    pieces = re.split(r"\s\+\s|,\s*|PWN\(|\)", name)
    return tuple(dict.fromkeys(n for n in (_onnx_node(p.strip(), graph) for p in pieces if p.strip()) if n))


def fusion_from_inspector(text: str, graph: GraphInfo) -> FusionReport:
    """Parse `get_engine_information(LayerInformationFormat.JSON)` output (control characters allowed)."""
    data = json.loads(text, strict=False)
    entries = data.get("Layers", []) if isinstance(data, dict) else []
    layers = []
    for entry in entries:
        if isinstance(entry, str):
            layers.append(_layer(entry, "", graph))
        elif isinstance(entry, dict):
            tactic = entry.get("TacticName")
            layers.append(
                _layer(
                    str(entry.get("Name", "")),
                    str(entry.get("Metadata", "") or ""),
                    graph,
                    entry.get("LayerType"),
                    tactic if tactic is not None else entry.get("TacticValue"),
                )
            )
    return FusionReport(tuple(layers), SOURCE_INSPECTOR)


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
    return FusionReport(report.layers, report.source, why)


def fusion_from_plan(plan: bytes, graph: GraphInfo) -> FusionReport:
    """Best effort on the CPU: the layer names and metadata strings a serialized plan carries."""
    strings = list(_framed_strings(plan))
    layers = []
    for name, following in pairwise(strings):  # the last string has no metadata after it
        if following.startswith("[ONNX Layer:") and not name.startswith("[ONNX Layer:"):
            layers.append(_layer(name, following, graph))
    return FusionReport(tuple(layers), SOURCE_PLAN)


def fusion_from_plans(plans: Iterable[bytes], graph: GraphInfo) -> FusionReport:
    """`fusion_from_plan` over every engine of a build, each layer once."""
    layers = {layer.name: layer for plan in plans for layer in fusion_from_plan(plan, graph).layers}
    return FusionReport(tuple(layers.values()), SOURCE_PLAN)


def engine_fusion(engine: Any, trt: Any, graph: GraphInfo, plans: Iterable[bytes] = ()) -> FusionReport:
    """Ask a deserialized engine's inspector (built with DETAILED verbosity); else scan `plans` (never raises)."""
    plans = tuple(plans)
    try:
        inspector = engine.create_engine_inspector()
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    except Exception as error:  # noqa: BLE001 -- see fusion_from_text_or_plans
        return fusion_fallback(plans, graph, f"the engine inspector failed ({describe_error(error)})")
    return fusion_from_text_or_plans(text, plans, graph)


def _layer(name: str, metadata: str, graph: GraphInfo, layer_type: Any = None, tactic: Any = None) -> EngineLayer:
    kind = None if layer_type is None else str(layer_type)
    chosen = None if tactic is None else str(tactic)
    from_meta = tuple(n for n in (_onnx_node(m, graph) for m in nodes_from_metadata(metadata)) if n)
    if from_meta:
        return EngineLayer(name, from_meta, "metadata", kind, chosen)
    return EngineLayer(name, nodes_from_name(name, graph), "name", kind, chosen)


def _onnx_node(token: str, graph: GraphInfo) -> str | None:
    """Map a TensorRT layer name piece to an ONNX node name (`node_of_X`, `name_N` included)."""
    names = {node.name for node in graph.nodes}
    if token in names:
        return token
    if token.startswith("node_of_"):
        node = graph.node_of(token[len("node_of_") :])
        return node.name if node else None
    base = re.sub(r"_\d+$", "", token)
    return base if base in names else None


def _framed_strings(plan: bytes) -> Iterator[str]:
    for match in _FRAME.finditer(plan):
        (length,) = struct.unpack("<Q", match.group(1))
        if 0 < length < 1 << 20:
            try:
                yield plan[match.end() : match.end() + length].decode("utf-8")
            except UnicodeDecodeError:
                continue
