"""What a compiled runtime did, in one shape every compiled runtime fills: the report's `runtimes`.

A compiled (fusing) runtime compiles the model twice, the plain model that ships and marked
ones that return intermediates, so the report says for each: which device and precision it
compiled for and what precision it reports back, what it fused (each executed layer's ONNX
nodes), which of the plain model's fusions the marked ones split, precision as run per
layer against what the model asks, what stays unmapped, and whether marking changed the
answer. OpenVINO fills one; TensorRT's own `tensorrt` summary (report/tensorrt.py) stays the
JSON form of its run (reports of every schema hold it) and is read as one of these through
`tensorrt_runtime` (`Report.compiled_runtimes` lists them all). Renderers show every entry
through one function (render/runtimes.py), never per runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trtdiff.report.tensorrt import EngineLayerInfo, FusionSplit, LayerPrecision, MarkingCheck, TensorRTSummary


@dataclass(frozen=True)
class RuntimeSummary:
    """One compiled runtime's run: settings as asked and as compiled, fusion, precision as run, the marking check.

    `backend`: its registry name (e.g. "openvino"); `title`: its name in sentences.
    `precision_asked`/`precision_compiled`: the inference precision asked for and the one the
    compiled model reports. `compiled_models`: compilations made (the plain one and one per
    group of marks); `marked`: tensors returned through added outputs. `unmapped_tensors`:
    ONNX tensors the runtime has no tensor for (not compared); `unmapped_ops`: names in its
    runtime graph that no ONNX node answers to (ops it generated). `fused_layers`,
    `runtime_layers` and `layer_precisions` describe the plain model (what ships);
    `fusions_split` its fused layers that a marked model computes in several layers.
    What one runtime says and no other does lives in generic fields: `status` "skipped" with
    `reason` (asked for, not run here); `artifact`/`build_word`, what it compiles and how
    ("model"/"compilation", TensorRT's "engine"/"build"); `headline`, its own first line in
    place of the generic one; `details`, further lines in words; `facts`, (name, value) pairs
    for machines (JUnit properties `<backend>.<name>`, the environment's `gpu`).
    """

    backend: str
    title: str
    status: Literal["skipped", "built", "ran"] = "ran"
    reason: str | None = None
    version: str | None = None
    device: str | None = None
    precision_asked: str | None = None
    precision_compiled: str | None = None
    compiled_models: int = 0
    compile_seconds: float = 0.0
    marked: int = 0
    unmapped_tensors: tuple[str, ...] = ()
    unmapped_ops: tuple[str, ...] = ()
    fusion_source: str | None = None
    runtime_layers: int = 0
    fused_layers: tuple[EngineLayerInfo, ...] = ()
    fusions_split: tuple[FusionSplit, ...] = ()
    layer_precisions: tuple[LayerPrecision, ...] = ()
    marking_check: MarkingCheck | None = None
    notes: tuple[str, ...] = ()
    artifact: str = "model"
    build_word: str = "compilation"
    headline: str | None = None
    details: tuple[str, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()


def tensorrt_runtime(trt: TensorRTSummary) -> RuntimeSummary:
    """TensorRT's summary as a compiled runtime's: the shared parts as they are, the rest in words and facts."""
    returned = f"{trt.marked} marked"
    if trt.debug_marked:
        returned = f"{trt.debug_marked} debug tensors + {_plural(trt.marked - trt.debug_marked, 'output')}"
    headline = (
        f"TensorRT: {trt.version}, {precision_text(trt.precision, trt.tf32)}, outputs "
        f"{trt.outputs_mode}: {returned}, {len(trt.not_returned)} not returned"
    )
    details = [engines_line(trt)] if trt.outputs_mode is not None else []
    if trt.status != "skipped":
        details.append(
            f"marked engine: {trt.plan_bytes:,} bytes, {trt.engine_layers} engine layers, built in "
            f"{trt.build_seconds:.2f}s" + (" (from the engine cache)" if trt.from_cache else "")
        )
    plain = trt.plain_engine
    if plain is not None:
        built = " (from the engine cache)" if plain.from_cache else f", built in {plain.build_seconds:.2f}s"
        details.append(f"plain engine (what ships): {plain.plan_bytes:,} bytes{built}")
    if trt.layer_precisions or trt.precision_missing:
        tf32 = {True: "allowed", False: "off", None: "not read"}[trt.tf32_built]
        missing = f"; missing: {trt.precision_missing}" if trt.precision_missing else ""
        details.append(
            f"precision as built read from {trt.precision_source or 'no source'}; TF32 in the plan {tf32}{missing}"
        )
    facts = [("status", trt.status), *([("gpu", trt.gpu)] if trt.gpu else [])]
    facts += [("outputs_mode", trt.outputs_mode)] if trt.outputs_mode else []
    return RuntimeSummary(
        backend="tensorrt",
        title="TensorRT",
        status=trt.status,
        reason=trt.reason,
        version=trt.version,
        device=trt.gpu,
        precision_asked=precision_text(trt.precision, trt.tf32),
        compiled_models=trt.engines + (trt.plain_engine is not None),
        compile_seconds=trt.build_seconds,
        marked=trt.marked,
        unmapped_tensors=tuple(f"{n.tensor}: {n.reason}" for n in trt.not_returned),
        fusion_source=trt.fusion_source,
        runtime_layers=trt.engine_layers,
        fused_layers=trt.fused_layers,
        fusions_split=trt.fusions_split,
        layer_precisions=trt.layer_precisions,
        marking_check=trt.marking_check,
        notes=trt.notes,
        artifact="engine",
        build_word="build",
        headline=headline,
        details=tuple(details),
        facts=tuple(facts),
    )


def precision_text(precision: str | None, tf32: bool) -> str:
    """TensorRT's precision in words: "fp32, TF32 off", "fp32 with TF32", "fp16"."""
    base = precision or "fp32"
    if tf32:
        return f"{base} with TF32"
    return f"{base}, TF32 off" if base == "fp32" else base


def engines_line(trt: TensorRTSummary) -> str:
    """ "1 engine, N runs per sample", the budget and where it came from, and what the engine returns."""
    runs = _plural(trt.runs_per_sample, "run")
    budget = ""
    if trt.mark_budget_bytes is not None and trt.outputs_mode != "none":
        source = "given" if trt.budget_source == "given" else "fixed default"
        budget = f" (mark budget {trt.mark_budget_bytes:,} bytes, {source})"
    coverage = ""
    if trt.outputs_mode == "unfused":
        runs = f"at most {runs}"
        if trt.tensors_computed:
            coverage = f"; the engine reports those of the {trt.tensors_computed} tensors computed that survive fusion"
    elif trt.tensors_computed:
        share = 100.0 * trt.tensors_returned / trt.tensors_computed
        coverage = (
            f"; returns {trt.tensors_returned} of {trt.tensors_computed} tensors computed from the inputs "
            f"({share:.0f}%)"
        )
    planned = " planned" if trt.status == "built" else ""
    return f"{trt.engines} engine, {runs} per sample{planned}{budget}{coverage}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
