"""What a build produced: one engine, or one per slice of the marks when the mark budget split it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.backends.tensorrt.fusion import fusion_from_plans

if TYPE_CHECKING:
    from trtdiff.backends.tensorrt.fusion import FusionReport
    from trtdiff.backends.tensorrt.importing import TensorRTInfo
    from trtdiff.backends.tensorrt.marking import MarkPlan
    from trtdiff.options import BuildSettings
    from trtdiff.source.onnx_graph import GraphInfo


@dataclass(frozen=True)
class EnginePlan:
    """One engine of a build: its plan, the tensors it marks besides the network outputs, its cache key."""

    plan: bytes = field(repr=False)
    marked: tuple[str, ...]
    cache_key: str
    build_seconds: float
    from_cache: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan_nbytes": len(self.plan),
            "marked": len(self.marked),
            "cache_key": self.cache_key,
            "build_seconds": self.build_seconds,
            "from_cache": self.from_cache,
        }


@dataclass(frozen=True)
class BuildResult:
    """A built (or cached) plan and what went into it; `to_dict()` leaves the plan bytes out.

    `plan` is the first engine's; a build split by the mark budget has one `engines` entry per
    slice (`mark_plan.slices`), in order.
    """

    plan: bytes = field(repr=False)
    build_seconds: float
    flags: tuple[str, ...]
    settings: BuildSettings
    mark_plan: MarkPlan
    info: TensorRTInfo
    onnx_path: str
    parsed: str  # "the given ONNX file" or what it was converted to
    cache_key: str
    from_cache: bool
    notes: tuple[str, ...] = ()
    engines: tuple[EnginePlan, ...] = ()

    @property
    def plans(self) -> tuple[bytes, ...]:
        return tuple(engine.plan for engine in self.engines) or (self.plan,)

    @property
    def plan_nbytes(self) -> int:
        """Bytes of every engine's plan together."""
        return sum(len(plan) for plan in self.plans)

    def fusion_hint(self, graph: GraphInfo) -> FusionReport:
        """Engine layers read from the plan bytes (CPU, best effort; see fusion.py), of every engine."""
        return fusion_from_plans(self.plans, graph)

    def write_engines(self, path: Path) -> tuple[Path, ...]:
        """Write the engine to `path`; a split build's further engines beside it as `NAME.2of3.engine`..."""
        plans = self.plans
        written = [path]
        path.write_bytes(plans[0])
        for index, plan in enumerate(plans[1:], start=2):
            sibling = path.with_name(f"{path.stem}.{index}of{len(plans)}{path.suffix}")
            sibling.write_bytes(plan)
            written.append(sibling)
        return tuple(written)

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan_nbytes": self.plan_nbytes,
            "build_seconds": self.build_seconds,
            "flags": list(self.flags),
            "settings": self.settings.to_dict(),
            "mark_plan": self.mark_plan.to_dict(),
            "tensorrt": self.info.to_dict(),
            "onnx_path": self.onnx_path,
            "parsed": self.parsed,
            "cache_key": self.cache_key,
            "from_cache": self.from_cache,
            "notes": list(self.notes),
            "engines": [engine.to_dict() for engine in self.engines],
        }
