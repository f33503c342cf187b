"""A short Markdown summary of a Report, for a pull-request comment or $GITHUB_STEP_SUMMARY.

It answers, in a dozen lines, what a reviewer asks first: did the gate pass, which check
failed and by how much, where the numbers first changed, and what ran it. The full per-layer
detail stays in the HTML or JSON report.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from trtdiff import __version__
from trtdiff.render.junit import format_value, limit_text
from trtdiff.report import Report, ThresholdCheck

MAX_SUSPECTS = 8
_BACKEND_WORDS = {"onnxruntime": "onnxruntime", "tensorrt": "TensorRT"}


def render_markdown(report: Report) -> str:
    """The summary as GitHub-flavoured Markdown, ending with a newline."""
    parts = [_verdict(report), _checks(report.checks, report), _divergence(report),
             _segmentation(report), _tensorrt(report), _environment(report)]
    return "\n\n".join(part for part in parts if part) + "\n"


def write_markdown(report: Report, path: str | Path, *, append: bool = False) -> None:
    """Write `render_markdown(report)` to `path`; `append` adds it after what is there ($GITHUB_STEP_SUMMARY)."""
    target = Path(path)
    text = render_markdown(report)
    if append and target.exists() and target.stat().st_size:
        text = "\n" + text
    with target.open("a" if append else "w", encoding="utf-8") as out:
        out.write(text)


def _verdict(report: Report) -> str:
    failed, total = len(report.failed_checks), len(report.checks)
    if report.passed:
        head = f"### trtdiff: ✅ PASS — {total} check{'s' if total != 1 else ''} passed"
    else:
        head = f"### trtdiff: ❌ FAIL — {failed} of {total} check{'s' if total != 1 else ''} failed"
    inputs = ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in report.inputs.items())
    facts = [_code(report.model), f"inputs {_text(inputs)}", f"opset {report.opset} ({_text(report.exporter)})",
             " → ".join(_text(b) for b in report.backends) + f" (reference {_text(report.reference)})"]
    if len(report.samples) > 1:
        facts.append(f"{len(report.samples)} samples")
    return head + "\n" + " · ".join(facts)


def _checks(checks: tuple[ThresholdCheck, ...], report: Report) -> str:
    if not checks:
        return "_No threshold checks were made._"
    rows = ["| | check | worst | limit | worst sample |", "|---|---|---|---|---|"]
    for check in checks:
        sample = _code(check.worst_sample) if check.worst_sample else "—"
        if check.failing_samples and len(report.samples) > 1:
            sample += f" ({len(check.failing_samples)} of {len(report.samples)} fail)"
        worst = format_value(check.metric, check.worst)
        if check.metric == "divergence":
            worst = f"cosine {worst}"
        cells = ["✅" if check.passed else "❌", _code(check.id), worst, _text(limit_text(check, report).replace(">=", "≥").replace("<=", "≤")), sample]
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows)


def _divergence(report: Report) -> str:
    first = report.first_divergence
    if first is None:
        return f"**First divergence:** none — all {len(report.layers)} compared layers agree."
    module = f"module {_code(first.module)}" if first.module else "no PyTorch module"
    line = (f"**First divergence:** {_code(first.onnx_node)} ({_text(first.op_type)}, {module}) on "
            f"{_text(first.pair)} — cosine {format_value('cosine', first.cosine)}, "
            f"max-abs {format_value('max_abs', first.max_abs)}, rel-err {format_value('rel_err', first.rel_err)}")
    if first.reasons:
        line += f" ({_text('; '.join(first.reasons))})"
    diverged = sum(layer.diverged for layer in report.layers)
    line += f"; {diverged} of {len(report.layers)} layers diverge."
    others = [s for s in first.suspects if s != first.onnx_node]
    if others:
        shown = ", ".join(_code(s) for s in others[:MAX_SUSPECTS])
        more = f", … {len(others) - MAX_SUSPECTS} more" if len(others) > MAX_SUSPECTS else ""
        line += f"\nSuspects (nodes feeding it): {_code(first.onnx_node)}, then {shown}{more}"
    return line


def _segmentation(report: Report) -> str:
    summary = report.segmentation
    if summary is None:
        return ""
    items = [f"agreement mIoU {_text(key)} {_miou(value)} ({_percent(summary.changed_pixels.get(key))} pixels changed)"
             for key, value in summary.agreement_miou.items()]
    items += [f"mIoU vs labels {_text(backend)} {_miou(value)}" for backend, value in summary.label_miou.items()]
    items += [f"drop {_text(backend)} {_miou(value)}" for backend, value in summary.miou_drop.items()]
    if not items:
        return ""
    ignore = f", ignore index {summary.ignore_index}" if summary.ignore_index is not None else ""
    return f"**Segmentation** ({summary.num_classes} classes{ignore}): " + "; ".join(items)


def _tensorrt(report: Report) -> str:
    trt = report.tensorrt
    if trt is None:
        return ""
    if trt.status == "skipped":
        return f"**TensorRT:** skipped — {_text(trt.reason or 'no reason given')}"
    precision = f"{trt.precision or 'fp32'}{' with TF32' if trt.tf32 else ''}"
    details = [_text(trt.version or "version unknown"), _text(precision), f"outputs {_text(trt.outputs_mode or '?')}",
               f"{trt.marked} marked", f"{len(trt.not_returned)} not returned"]
    if trt.gpu:
        details.append(_text(trt.gpu))
    return f"**TensorRT:** {_text(trt.status)} — " + ", ".join(details)


def _environment(report: Report) -> str:
    env = report.environment
    parts = [f"trtdiff {__version__}"]
    parts += [f"{name} {_text(env[name])}" for name in ("torch", "onnx") if name in env]
    parts += [_text(env[name]) for name in report.backends if name != "torch" and name in env]
    if report.tensorrt is not None and report.tensorrt.version and "tensorrt" not in env:
        parts.append(_text(report.tensorrt.version))
    gpu = env.get("gpu") or (report.tensorrt.gpu if report.tensorrt else None)
    parts.append(f"GPU {_text(gpu)}" if gpu else f"CPU {_text(env.get('cpu', '?'))}, no GPU")
    if "python" in env:
        parts.append(f"python {_text(env['python'])}")
    return "<sub>" + " · ".join(parts) + "</sub>"


def _code(text: str) -> str:
    """An inline code span that survives backticks and table pipes in the text."""
    text = text.replace("\n", " ")
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _text(text: str) -> str:
    """Plain text safe in Markdown: no HTML, no accidental emphasis or links."""
    escaped = html.escape(text.replace("\n", " "), quote=False)
    for char in "\\*_[]`":
        escaped = escaped.replace(char, "\\" + char)
    return escaped


def _miou(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.4f}"


def _percent(value: float | None) -> str:
    return "?" if value is None or math.isnan(value) else f"{100 * value:.2f}%"
