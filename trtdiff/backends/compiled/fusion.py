"""A compiled runtime's layers and the ONNX nodes each computes: the fusion map TensorRT and OpenVINO share.

Each runtime reads its own layers (TensorRT: the engine inspector or the plan, tensorrt/fusion.py;
OpenVINO: the runtime graph, openvino/fusion.py) into one `FusionReport`; what fused, which
fusions of the plain model the marked one splits (`fusions_split`) and precision as built
(precision.py) are then computed here the same way for both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trtdiff.report import FusionSplit


@dataclass(frozen=True)
class EngineLayer:
    """One engine layer (or kernel of a fused region, or OpenVINO runtime layer), its ONNX nodes and its types.

    `how`: where the ONNX nodes came from ("metadata" or "name" for TensorRT,
    "originalLayersNames" for OpenVINO). `output_types`: precision as built (as run), e.g.
    ("FP32",), where the source says; () where it does not. `tactic`: TensorRT's tactic, or
    OpenVINO's primitive (the kernel, e.g. brgconv_avx512_f32).
    """

    name: str
    onnx_nodes: tuple[str, ...]
    how: str
    layer_type: str | None = None
    tactic: str | None = None
    output_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class FusionReport:
    """Engine layers with their ONNX nodes, and where that information came from.

    `tf32`: whether the engine may use TF32 (the plan header's flag, where the plan carries it).
    """

    layers: tuple[EngineLayer, ...]
    source: str
    note: str | None = None  # why the source is not the engine inspector, where it was asked first
    tf32: bool | None = None

    def fused(self) -> tuple[EngineLayer, ...]:
        """Layers that compute more than one ONNX node."""
        return tuple(layer for layer in self.layers if len(layer.onnx_nodes) > 1)

    def layer_of(self) -> dict[str, str]:
        """ONNX node name -> the engine layer that computes it."""
        return {node: layer.name for layer in self.layers for node in layer.onnx_nodes}

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "note": self.note,
            "tf32": self.tf32,
            "layers": [asdict(layer) for layer in self.layers],
        }


def fusions_split(plain: FusionReport, marked: FusionReport) -> tuple[FusionSplit, ...]:
    """The fused layers of the plain engine whose ONNX nodes the marked engine computes in several layers."""
    marked_layer = marked.layer_of()
    split: list[FusionSplit] = []
    for layer in plain.fused():
        into = tuple(dict.fromkeys(marked_layer[n] for n in layer.onnx_nodes if n in marked_layer))
        if len(into) > 1:
            split.append(FusionSplit(layer.name, layer.onnx_nodes, into))
    return tuple(split)
