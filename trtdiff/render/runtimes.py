"""Every compiled runtime's summary (`compiled_runtimes`) in words: one function, for every renderer.

TensorRT's run stays the report's own `tensorrt` part (reports of every schema hold it); it is
read as one of these here (`tensorrt_runtime`), its sentences worded here too: its first line
(`tensorrt_headline`, which heads `trtdiff build`'s view as well) and its details.

The terminal, Markdown and HTML views print these lines, each escaping them its own way, so a
runtime added to the report needs no renderer code. The first line is the alarm when marking
changed the answer (said before anything else about the runtime); a runtime skipped here has
one line, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtdiff.render.format import cosine, engines_line, plural, precision_text, sci
from trtdiff.report import MarkingCheck, Report, RuntimeSummary, TensorRTSummary

LISTED = 5  # names quoted in one line


@dataclass(frozen=True)
class RuntimeLine:
    """One line about a runtime; `alarm`: say it loudly (marking changed the answer)."""

    text: str
    alarm: bool = False


def compiled_runtimes(report: Report) -> tuple[RuntimeSummary, ...]:
    """Every compiled runtime's summary, TensorRT's (the report's `tensorrt` part, kept as it is for JSON) first:
    what renderers show, each through `runtime_lines`."""
    trt = () if report.tensorrt is None else (tensorrt_runtime(report.tensorrt),)
    return (*trt, *report.runtimes)


def tensorrt_headline(trt: TensorRTSummary) -> str:
    """TensorRT's first line: version, precision, outputs mode, what the engine returns and what it does not."""
    returned = f"{trt.marked} marked"
    if trt.debug_marked:
        returned = f"{trt.debug_marked} debug tensors + {plural(trt.marked - trt.debug_marked, 'output')}"
    return (
        f"TensorRT: {trt.version}, {precision_text(trt.precision, trt.tf32)}, outputs "
        f"{trt.outputs_mode}: {returned}, {len(trt.not_returned)} not returned"
    )


def tensorrt_runtime(trt: TensorRTSummary) -> RuntimeSummary:
    """TensorRT's summary as a compiled runtime's: the shared parts as they are, the rest in words (its headline
    and details) and facts."""
    headline = tensorrt_headline(trt)
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


def runtime_lines(summary: RuntimeSummary) -> list[RuntimeLine]:
    """What the runtime compiled, fused, split, ran in and left unmapped, and the marking check, in words."""
    title = summary.title
    if summary.status == "skipped":
        return [RuntimeLine(f"{title}: skipped — {summary.reason or 'no reason given'}")]
    check = summary.marking_check
    lines: list[RuntimeLine] = []
    if check is not None and check.status == "changed":
        lines.append(RuntimeLine(f"{title}: {marking_changed(check, summary)}", alarm=True))
    lines.append(RuntimeLine(summary.headline or _headline(summary)))
    lines += [RuntimeLine(detail) for detail in summary.details]
    lines.append(RuntimeLine(_fusion(summary)))
    if summary.layer_precisions:
        lines.append(RuntimeLine(_precision(summary)))
    unmapped = _unmapped(summary)
    if unmapped:
        lines.append(RuntimeLine(unmapped))
    if check is not None and check.status != "changed":
        why = f": {check.reason}" if check.reason else ""
        figures = f" over {plural(check.samples, 'sample')} (worst rel err {sci(check.rel_err)})" if check.runs else ""
        lines.append(RuntimeLine(f"marking check (plain vs marked outputs): {check.status}{figures}{why}"))
    lines += [RuntimeLine(f"note: {note}") for note in summary.notes]
    return lines


def marking_changed(check: MarkingCheck, summary: RuntimeSummary) -> str:
    """The plain model's outputs differ from the marked one's beyond the thresholds: by how much, and which marks."""
    figures = f"worst on {check.worst_output}: rel err {sci(check.rel_err)}, cosine {cosine(check.cosine)}"
    named = ""
    if check.bisected:
        builds = plural(check.bisect_builds, summary.build_word)
        named = f"; marking {_listed(check.bisected)} changes it (bisected in {builds})"
    elif check.bisect_note:
        named = f"; {check.bisect_note}"
    artifact = summary.artifact
    return (
        f"marking changed the answer: the plain {artifact}'s outputs differ from the marked {artifact}'s "
        f"({figures}){named}"
    )


def _headline(summary: RuntimeSummary) -> str:
    precision = summary.precision_asked or "?"
    if summary.precision_compiled and summary.precision_compiled != summary.precision_asked:
        precision += f" asked, {summary.precision_compiled} compiled"
    return (
        f"{summary.title} {summary.version or '?'} on {summary.device or '?'}: inference precision {precision}; "
        f"{plural(summary.compiled_models, 'compiled ' + summary.artifact)} ({summary.compile_seconds:.2f}s), "
        f"{summary.marked} tensors returned through added outputs"
    )


def _fusion(summary: RuntimeSummary) -> str:
    fused = summary.fused_layers
    text = plural(summary.runtime_layers, "executed layer")
    if fused:
        nodes = sum(len(layer.onnx_nodes) for layer in fused)
        biggest = max(len(layer.onnx_nodes) for layer in fused)
        text += f"; fused {nodes} ONNX nodes into {plural(len(fused), 'layer')} (largest: {biggest} nodes)"
    split = len(summary.fusions_split)
    text += f"; the marked {summary.artifact}s split {split} of them" if fused and summary.compiled_models > 1 else ""
    return f"{text} (source: {summary.fusion_source or 'none'})"


def _precision(summary: RuntimeSummary) -> str:
    rows = summary.layer_precisions
    lower = [r for r in rows if r.flag == "lower"]
    higher = sum(1 for r in rows if r.flag == "higher")
    unknown = sum(1 for r in rows if r.missing)
    same = len(rows) - len(lower) - higher - unknown
    kinds = ", ".join(sorted({r.built for r in rows if r.built and not r.flag and not r.missing})) or "-"
    text = (
        f"precision as run: {plural(same, 'layer')} as asked ({kinds}), {len(lower)} lower, {higher} higher, "
        f"{unknown} unknown"
    )
    if lower:
        shown = "; ".join(f"{r.layer} {r.built} for {r.asked}" for r in lower[:LISTED])
        text += f" (lower: {shown}{'; …' if len(lower) > LISTED else ''})"
    return text


def _unmapped(summary: RuntimeSummary) -> str:
    parts = []
    if summary.unmapped_tensors:
        parts.append(
            f"{plural(len(summary.unmapped_tensors), 'ONNX tensor')} with no {summary.title} tensor, not compared "
            f"({_listed(summary.unmapped_tensors)})"
        )
    if summary.unmapped_ops:
        parts.append(
            f"{plural(len(summary.unmapped_ops), 'runtime op name')} no ONNX node answers to "
            f"({_listed(summary.unmapped_ops)})"
        )
    return "unmapped: " + "; ".join(parts) if parts else ""


def _listed(names: tuple[str, ...]) -> str:
    more = f" and {len(names) - LISTED} more" if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more
