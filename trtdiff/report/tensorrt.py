"""The TensorRT parts of a report: what was built or run, marked, not returned, fused; `trtdiff build`'s report.

They live beside the Report model (model.py), which re-exports every name.
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
class FusionSplit:
    """A fused layer of the plain engine (the one that ships) that the marked engine computes in several layers."""

    layer: str
    onnx_nodes: tuple[str, ...]
    split_into: tuple[str, ...]


@dataclass(frozen=True)
class LayerPrecision:
    """The precision one engine layer runs in (as built) against what the model asked for.

    `flag`: "lower" or "higher" where the built float type differs from the asked one; None
    where they agree or either is not known (`missing` then says which figure and why), and for a
    layer that only converts types (a Cast a runtime kept at an FP32 boundary).
    """

    layer: str
    onnx_nodes: tuple[str, ...]
    asked: str | None
    built: str | None
    flag: Literal["lower", "higher"] | None = None
    missing: str | None = None


@dataclass(frozen=True)
class PlainEngine:
    """The engine without marks: what a user ships, built (or taken from the cache) beside the marked one."""

    plan_bytes: int
    build_seconds: float
    cache_key: str
    from_cache: bool
    fusion_source: str | None = None
    engine_layers: int = 0


@dataclass(frozen=True)
class MarkingCheck:
    """Whether marking changed the answer: the plain engine's final outputs against the marked engine's.

    `status`: "same" (within the thresholds on every sample), "changed" (beyond them: said first
    in the report), "not run" (`reason` says why: `build` runs nothing, no engine runs here).
    `bisected`: the marked tensors (ONNX names) whose marking alone changes the answer, found by
    rebuilding with half the marks at a time (`bisect_builds` builds); empty when not bisected.
    """

    status: Literal["same", "changed", "not run"]
    reason: str | None = None
    samples: int = 0
    runs: int = 0
    worst_output: str | None = None
    cosine: float | None = None
    max_abs: float | None = None
    rel_err: float | None = None
    bisected: tuple[str, ...] = ()
    bisect_builds: int = 0
    bisect_note: str | None = None


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
    budget_source: str | None = None  # "given" or "default" (a fixed number, never the GPU's free memory)
    runs_per_sample: int = 1
    debug_marked: int = 0
    tensors_returned: int = 0  # ONNX tensors computed from the inputs' values that the engine returns
    tensors_computed: int = 0  # ONNX tensors computed from the inputs' values
    plain_engine: PlainEngine | None = None
    fusions_split: tuple[FusionSplit, ...] = ()
    fusions_split_source: str | None = None
    layer_precisions: tuple[LayerPrecision, ...] = ()
    precision_source: str | None = None
    precision_missing: str | None = None
    tf32_built: bool | None = None
    marking_check: MarkingCheck | None = None


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
