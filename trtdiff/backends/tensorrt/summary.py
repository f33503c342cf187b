"""Turn TensorRT build results into the report's `TensorRTSummary` (plain, JSON-ready data)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trtdiff.report import EngineLayerInfo, NotReturned, TensorRTSummary

if TYPE_CHECKING:
    from trtdiff.backends.tensorrt.builder import BuildResult
    from trtdiff.backends.tensorrt.fusion import FusionReport
    from trtdiff.report import TensorRTStatus


def skipped(reason: str, version: str | None = None) -> TensorRTSummary:
    """TensorRT was not run; `reason` is the one line the report shows."""
    return TensorRTSummary(status="skipped", reason=reason, version=version)


def summarize(
    build: BuildResult,
    fusion: FusionReport | None,
    *,
    status: TensorRTStatus,
    gpu: str | None,
    include_name_map: bool = False,
    run_notes: Sequence[str] = (),
) -> TensorRTSummary:
    """What a build (and, for status "ran", a run) did, with the fusions the engine made.

    `run_notes`: what the runs found (`TensorRTBackend.notes()`). How many engines a build split
    by the mark budget made, and why, is among the mark plan's notes.
    """
    plan = build.mark_plan
    settings = build.settings
    not_returned = tuple(
        NotReturned(tensor=s.onnx_name or s.trt_name or s.layer or "?", reason=s.reason) for s in plan.skipped
    )
    fused = tuple(EngineLayerInfo(layer.name, layer.onnx_nodes) for layer in (fusion.fused() if fusion else ()))
    return TensorRTSummary(
        status=status,
        version=build.info.describe(),
        gpu=gpu,
        outputs_mode=plan.mode,
        precision=settings.precision,
        tf32=settings.tf32,
        flags=tuple(build.flags),
        marked=len(plan.marked),
        not_returned=not_returned,
        fused_layers=fused,
        fusion_source=fusion.source if fusion else None,
        engine_layers=len(fusion.layers) if fusion else 0,
        plan_bytes=build.plan_nbytes,
        build_seconds=build.build_seconds,
        cache_key=build.cache_key,
        from_cache=build.from_cache,
        name_map=dict(plan.onnx_to_trt) if include_name_map else {},
        engines=max(1, len(build.engines)),
        mark_budget_bytes=settings.mark_budget_bytes,
        notes=tuple(dict.fromkeys((*plan.notes, *build.notes, *_fusion_notes(fusion), *run_notes))),
    )


def _fusion_notes(fusion: FusionReport | None) -> tuple[str, ...]:
    """Why the fusion information is not the engine inspector's, where it was asked first."""
    return (f"fusion: {fusion.note}; read from {fusion.source}",) if fusion is not None and fusion.note else ()
