"""The TensorRT parts of a report: what was built or run, marked, not returned, fused; `trtdiff build`'s report.

Split from report.py to keep each module readable; report.py re-exports every name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from trtdiff.report.serialization import from_jsonable, to_jsonable

TensorRTStatus = Literal["skipped", "built", "ran"]
OutputsMode = Literal["all", "unfused", "none"]


@dataclass(frozen=True)
class NotReturned:
    """A tensor the TensorRT engine does not return, and why (from the mark plan)."""

    tensor: str
    reason: str


@dataclass(frozen=True)
class EngineLayerInfo:
    """An engine layer that computes several ONNX nodes (a fusion)."""

    name: str
    onnx_nodes: tuple[str, ...]


@dataclass(frozen=True)
class TensorRTSummary:
    """What TensorRT did: skipped (and why), built, or ran; how outputs were marked; what fused.

    `outputs_mode` matters when reading the numbers: "all" marks every tensor, which disables
    fusion and can hide the very error being chased; "unfused" keeps fusion and returns what
    survives it as debug tensors; "none" returns the final outputs only.
    """

    status: TensorRTStatus
    reason: str | None = None
    version: str | None = None
    gpu: str | None = None
    outputs_mode: OutputsMode | None = None
    precision: str | None = None
    tf32: bool = False
    flags: tuple[str, ...] = ()
    marked: int = 0
    not_returned: tuple[NotReturned, ...] = ()
    fused_layers: tuple[EngineLayerInfo, ...] = ()
    fusion_source: str | None = None
    engine_layers: int = 0
    plan_bytes: int = 0
    build_seconds: float = 0.0
    cache_key: str | None = None
    from_cache: bool = False
    name_map: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    engines: int = 1
    mark_budget_bytes: int | None = None


@dataclass(frozen=True)
class BuildReport:
    """What `trtdiff build` did: the ONNX file, the TensorRT mark plan and name map, the plan."""

    model: str
    onnx_path: str | None
    opset: int
    exporter: str
    inputs: dict[str, tuple[int, ...]]
    tensorrt: TensorRTSummary
    saved_engine: str | None = None
    notes: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    trtdiff_version: str = "unknown"

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self), indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> BuildReport:
        return from_jsonable(cls, json.loads(text))
