"""What a build produced: the marked engine that is measured and the plain engine that ships."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff import outputs
from trtdiff.backends.tensorrt.fusion import fusion_from_plan

if TYPE_CHECKING:
    from trtdiff.backends.compiled.fusion import FusionReport
    from trtdiff.backends.tensorrt.importing import TensorRTInfo
    from trtdiff.backends.tensorrt.marking import MarkPlan
    from trtdiff.options import BuildSettings
    from trtdiff.source.onnx_graph import GraphInfo


def marked_engine_path(path: Path) -> Path:
    """Where the marked engine is written beside the one that ships: model.engine -> model.marked.engine."""
    return path.with_name(f"{path.stem}.marked{path.suffix}")


@dataclass(frozen=True)
class EnginePlan:
    """One serialized engine and how it was obtained."""

    plan: bytes = field(repr=False)
    cache_key: str
    build_seconds: float
    from_cache: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan_nbytes": len(self.plan),
            "cache_key": self.cache_key,
            "build_seconds": self.build_seconds,
            "from_cache": self.from_cache,
        }


@dataclass(frozen=True)
class BuildResult:
    """The marked engine (one, whatever the budget), the plain engine beside it, and what went into them.

    `plain` is None in mode "none", where nothing is marked and the marked engine is the plain
    one. `asked` maps ONNX node names to the precision the parsed model asks of them;
    `parsed_graph` is that model (the FP16 conversion where one was made, with its Casts).
    Exactly two plans are held, however many runs a sample takes.
    """

    marked: EnginePlan
    plain: EnginePlan | None
    flags: tuple[str, ...]
    settings: BuildSettings
    mark_plan: MarkPlan
    info: TensorRTInfo
    onnx_path: str
    parsed: str  # "the given ONNX file" or what it was converted to
    notes: tuple[str, ...] = ()
    asked: Mapping[str, str] = field(default_factory=dict, repr=False)
    parsed_graph: GraphInfo | None = field(default=None, repr=False)  # the model TensorRT parsed (FP16: converted)

    @property
    def plan(self) -> bytes:
        """The marked engine's plan (the one the comparison runs)."""
        return self.marked.plan

    @property
    def plain_plan(self) -> bytes:
        """The plan of the engine that ships: the plain engine, or the marked one where nothing is marked."""
        return self.plain.plan if self.plain is not None else self.marked.plan

    @property
    def plan_nbytes(self) -> int:
        return len(self.marked.plan)

    @property
    def build_seconds(self) -> float:
        return round(self.marked.build_seconds + (self.plain.build_seconds if self.plain else 0.0), 4)

    @property
    def cache_key(self) -> str:
        return self.marked.cache_key

    @property
    def from_cache(self) -> bool:
        return self.marked.from_cache and (self.plain is None or self.plain.from_cache)

    def fusion_hint(self, graph: GraphInfo) -> FusionReport:
        """The marked engine's layers read from its plan (CPU, best effort; see fusion.py)."""
        return fusion_from_plan(self.marked.plan, graph)

    def plain_fusion_hint(self, graph: GraphInfo) -> FusionReport:
        """The plain engine's layers read from its plan."""
        return fusion_from_plan(self.plain_plan, graph)

    def write_engines(self, path: Path) -> tuple[Path, ...]:
        """Write the engine that ships to `path` and, where one was built, the marked engine as `NAME.marked.engine`."""
        outputs.write_bytes(path, self.plain_plan)
        if self.plain is None:
            return (path,)
        marked = marked_engine_path(path)
        outputs.write_bytes(marked, self.marked.plan)
        return (path, marked)

    def to_dict(self) -> dict[str, Any]:
        return {
            "marked": self.marked.to_dict(),
            "plain": self.plain.to_dict() if self.plain else None,
            "flags": list(self.flags),
            "settings": self.settings.to_dict(),
            "mark_plan": self.mark_plan.to_dict(),
            "tensorrt": self.info.to_dict(),
            "onnx_path": self.onnx_path,
            "parsed": self.parsed,
            "notes": list(self.notes),
        }
