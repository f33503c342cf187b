"""Which ONNX nodes each engine layer computes: from the engine inspector, or from the plan.

Engine layer names read `a + b`, `PWN(a, PWN(b, c))` or `{ForeignNode[first...last]}`;
with ProfilingVerbosity.DETAILED each layer's metadata lists `[ONNX Layer: node]` entries
(joined by \\x1e), which is exact where names are only a summary. The inspector needs a
deserialized engine, so a GPU. Without one, `fusion_from_plan` reads the same names and
metadata from the serialized plan's strings: an undocumented layout (seen in TensorRT-RTX
1.7.1), so it is a best-effort hint and says so in its `source`.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trtdiff.onnx_graph import GraphInfo

SOURCE_INSPECTOR = "engine-inspector"
SOURCE_PLAN = "plan-scan (undocumented plan layout; best effort)"
_FOREIGN = re.compile(r"\{ForeignNode\[(.*?)\.\.\.(.*?)\]\}")
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

    def fused(self) -> tuple[EngineLayer, ...]:
        """Layers that compute more than one ONNX node."""
        return tuple(layer for layer in self.layers if len(layer.onnx_nodes) > 1)

    def layer_of(self) -> dict[str, str]:
        """ONNX node name -> the engine layer that computes it."""
        return {node: layer.name for layer in self.layers for node in layer.onnx_nodes}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "layers": [asdict(layer) for layer in self.layers]}


def nodes_from_metadata(metadata: str) -> tuple[str, ...]:
    """ONNX node names in a layer's metadata, outermost subgraph context dropped."""
    return tuple(dict.fromkeys(m.strip() for m in _META.findall(metadata or "")))


def nodes_from_name(name: str, graph: GraphInfo) -> tuple[str, ...]:
    """ONNX node names an engine layer name mentions; a ForeignNode range expands in graph order."""
    order = [node.name for node in graph.nodes]
    foreign = _FOREIGN.search(name)
    if foreign:
        first, last = (_onnx_node(part, graph) for part in foreign.groups())
        if first in order and last in order and order.index(first) <= order.index(last):
            return tuple(order[order.index(first) : order.index(last) + 1])
        return tuple(n for n in (first, last) if n)
    pieces = re.split(r"\s\+\s|,\s*|PWN\(|\)", name)
    return tuple(dict.fromkeys(n for n in (_onnx_node(p.strip(), graph) for p in pieces if p.strip()) if n))


def fusion_from_inspector(text: str, graph: GraphInfo) -> FusionReport:
    """Parse `get_engine_information(LayerInformationFormat.JSON)` output."""
    data = json.loads(text)
    layers = []
    for entry in data.get("Layers", []):
        if isinstance(entry, str):
            layers.append(_layer(entry, "", graph))
        else:
            layers.append(
                _layer(
                    str(entry.get("Name", "")),
                    str(entry.get("Metadata", "")),
                    graph,
                    entry.get("LayerType"),
                    entry.get("TacticName"),
                )
            )
    return FusionReport(tuple(layers), SOURCE_INSPECTOR)


def fusion_from_plan(plan: bytes, graph: GraphInfo) -> FusionReport:
    """Best effort on the CPU: the layer names and metadata strings a serialized plan carries."""
    strings = list(_framed_strings(plan))
    layers = []
    for name, following in zip(strings, [*strings[1:], ""], strict=True):
        if following.startswith("[ONNX Layer:") and not name.startswith("[ONNX Layer:"):
            layers.append(_layer(name, following, graph))
    return FusionReport(tuple(layers), SOURCE_PLAN)


def engine_fusion(engine: Any, trt: Any, graph: GraphInfo) -> FusionReport:
    """Ask a deserialized engine's inspector (needs the engine built with DETAILED verbosity)."""
    inspector = engine.create_engine_inspector()
    return fusion_from_inspector(inspector.get_engine_information(trt.LayerInformationFormat.JSON), graph)


def _layer(name: str, metadata: str, graph: GraphInfo, layer_type: Any = None, tactic: Any = None) -> EngineLayer:
    from_meta = tuple(n for n in (_onnx_node(m, graph) for m in nodes_from_metadata(metadata)) if n)
    if from_meta:
        return EngineLayer(name, from_meta, "metadata", layer_type and str(layer_type), tactic and str(tactic))
    return EngineLayer(
        name, nodes_from_name(name, graph), "name", layer_type and str(layer_type), tactic and str(tactic)
    )


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
