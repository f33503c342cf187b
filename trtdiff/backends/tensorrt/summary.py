"""Turn TensorRT build results into the report's `TensorRTSummary` (plain, JSON-ready data)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from trtdiff.backends.compiled.fusion import fusions_split
from trtdiff.backends.compiled.precision import conversions, layer_precisions
from trtdiff.backends.tensorrt.fusion import SOURCE_INSPECTOR
from trtdiff.report import EngineLayerInfo, LayerPrecision, MarkingCheck, NotReturned, PlainEngine, TensorRTSummary

if TYPE_CHECKING:
    from trtdiff.backends.compiled.fusion import FusionReport
    from trtdiff.backends.tensorrt.builder import BuildResult
    from trtdiff.report import TensorRTStatus
    from trtdiff.source.onnx_graph import GraphInfo

NO_INSPECTOR = (
    "the engine inspector's figures (it needs a deserialized engine, so a GPU this TensorRT supports; none "
    "here): the plan's are shown"
)
NOT_RUN_HERE = "`trtdiff build` runs no engine; `compare` on a GPU this TensorRT supports runs both engines"


def skipped(reason: str, version: str | None = None) -> TensorRTSummary:
    """TensorRT was not run; `reason` is the one line the report shows."""
    return TensorRTSummary(status="skipped", reason=reason, version=version)


def summarize(
    build: BuildResult,
    fusion: FusionReport | None,
    *,
    status: TensorRTStatus,
    gpu: str | None,
    graph: GraphInfo | None = None,
    plain_fusion: FusionReport | None = None,
    include_name_map: bool = False,
    run_notes: Sequence[str] = (),
    marking_check: MarkingCheck | None = None,
    precision_fusion: FusionReport | None = None,
) -> TensorRTSummary:
    """What a build (and, for status "ran", a run) did: marks, runs, fusions, fusions split, precision as built.

    `plain_fusion`: the plain engine's layers (for `fusions_split`); `graph`: for the node order
    precision rows use. `marking_check`: what comparing the two engines' outputs found (a build
    that runs nothing gets "not run"). `precision_fusion`: the marked engine's layers read
    against the model TensorRT parsed (an FP16 conversion's Casts included), for precision.
    """
    plan = build.mark_plan
    split = fusions_split(plain_fusion, fusion) if fusion is not None and plain_fusion is not None else ()
    precisions = _precisions(build, graph, fusion, precision_fusion)
    returned = len(set(plan.returned_onnx()) & _data_tensors(graph)) if graph is not None else 0
    notes = (*plan.notes, *build.notes, *_fusion_notes(fusion), *_split_notes(plan.mode, split, fusion), *run_notes)
    return dataclasses.replace(
        _built(build, fusion, status=status, gpu=gpu, include_name_map=include_name_map),
        tensors_returned=returned,
        tensors_computed=plan.data_tensors,
        plain_engine=_plain_engine(build, plain_fusion),
        fusions_split=split,
        fusions_split_source=(fusion.source if fusion is not None and plain_fusion is not None else None),
        layer_precisions=precisions,
        precision_source=fusion.source if fusion else None,
        precision_missing=_precision_missing(fusion, precisions),
        tf32_built=fusion.tf32 if fusion else None,
        marking_check=marking_check,
        notes=tuple(dict.fromkeys(notes)),
    )


def _built(
    build: BuildResult, fusion: FusionReport | None, *, status: TensorRTStatus, gpu: str | None, include_name_map: bool
) -> TensorRTSummary:
    """What was built: settings, marks and runs, the marked engine's layers and plan (the rest is filled in after)."""
    plan, settings = build.mark_plan, build.settings
    return TensorRTSummary(
        status=status,
        version=build.info.describe(),
        gpu=gpu,
        outputs_mode=plan.mode,
        precision=settings.precision,
        tf32=settings.tf32,
        flags=tuple(build.flags),
        marked=len(plan.marked),
        not_returned=tuple(
            NotReturned(tensor=s.onnx_name or s.trt_name or s.layer or "?", reason=s.reason) for s in plan.skipped
        ),
        fused_layers=tuple(
            EngineLayerInfo(layer.name, layer.onnx_nodes) for layer in (fusion.fused() if fusion else ())
        ),
        fusion_source=fusion.source if fusion else None,
        engine_layers=len(fusion.layers) if fusion else 0,
        plan_bytes=build.plan_nbytes,
        build_seconds=build.build_seconds,
        cache_key=build.cache_key,
        from_cache=build.from_cache,
        name_map=dict(plan.onnx_to_trt) if include_name_map else {},
        engines=1,
        mark_budget_bytes=plan.budget.bytes if plan.budget else None,
        budget_source=plan.budget.source if plan.budget else None,
        runs_per_sample=1 if status == "ran" else plan.runs_per_sample,  # a run: once per sample, streamed
        debug_marked=len(plan.debug),
    )


def _plain_engine(build: BuildResult, plain_fusion: FusionReport | None) -> PlainEngine | None:
    """The engine that ships, as built beside the marked one (None where none was built)."""
    plain = build.plain
    if plain is None:
        return None
    return PlainEngine(
        len(plain.plan),
        plain.build_seconds,
        plain.cache_key,
        plain.from_cache,
        plain_fusion.source if plain_fusion else None,
        len(plain_fusion.layers) if plain_fusion else 0,
    )


def _precisions(
    build: BuildResult, graph: GraphInfo | None, fusion: FusionReport | None, precision_fusion: FusionReport | None
) -> tuple[LayerPrecision, ...]:
    """Each engine layer's precision as built against what was asked, in the order of the model TensorRT parsed."""
    parsed = build.parsed_graph if precision_fusion is not None and build.parsed_graph is not None else graph
    order = {node.name: node.index for node in parsed.nodes} if parsed is not None else {}
    layers = precision_fusion or fusion
    converts = conversions(parsed) if parsed is not None else frozenset()
    return layer_precisions(layers, build.asked, order, converts) if layers is not None else ()


def not_run_check() -> MarkingCheck:
    """The planned check of a build that runs nothing."""
    return MarkingCheck(status="not run", reason=NOT_RUN_HERE)


def _data_tensors(graph: GraphInfo) -> frozenset[str]:
    return frozenset(t for t in graph.data_tensors if t not in graph.graph_inputs)


def _fusion_notes(fusion: FusionReport | None) -> tuple[str, ...]:
    """Why the fusion information is not the engine inspector's, where it was asked first."""
    return (f"fusion: {fusion.note}; read from {fusion.source}",) if fusion is not None and fusion.note else ()


def _split_notes(mode: str, split: Sequence[object], fusion: FusionReport | None) -> tuple[str, ...]:
    """What marking did to fusion, in the words of what TensorRT did (never "disables fusion" where it did not)."""
    if mode != "all" or fusion is None:
        return ()
    if split:
        return (
            f"debug marks: the marked engine splits {len(split)} fused layers of the plain engine (fusions_split); "
            "the numbers of those layers may differ from what ships",
        )
    return (
        "debug marks: the marked engine keeps every fused layer of the plain engine "
        f"(read from {fusion.source}); a tensor inside a fused kernel reaches the listener only if TensorRT "
        "emits it at run time, which only a GPU it supports can show",
    )


def _precision_missing(fusion: FusionReport | None, precisions: Sequence[object]) -> str | None:
    """Which precision figure is missing and why (None when the engine inspector gave every one)."""
    if fusion is None:
        return "no layer information: neither the engine inspector nor the plan scan could be read"
    missing = sum(1 for row in precisions if getattr(row, "missing", None))
    parts = [] if fusion.source == SOURCE_INSPECTOR else [NO_INSPECTOR]
    if missing:
        parts.append(f"{missing} of {len(precisions)} layers miss a figure (see `missing` per layer)")
    return "; ".join(parts) or None
