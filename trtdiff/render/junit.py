"""JUnit XML of a Report: one test case per threshold check, so CI shows which gate failed and why.

CI systems (GitLab, Jenkins, GitHub test-report actions) read JUnit XML and list failures by
name; each failure's text carries the figures and the first diverging layer, so the reason is
readable there without opening the full report. A TensorRT comparison that could not run is a
skipped test case with its reason rather than a silent absence.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from trtdiff import __version__
from trtdiff.report import FirstDivergence, Report, ThresholdCheck

SUITE = "trtdiff"
# Characters XML 1.0 cannot hold at all; ElementTree would write them and produce a broken file.
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_MINIMUM_METRICS = {"cosine", "miou", "divergence"}


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (testsuites > testsuite "trtdiff" > one testcase per check)."""
    checks = list(report.checks)
    skipped_trt = report.tensorrt is not None and report.tensorrt.status == "skipped"
    failures = sum(not check.passed for check in checks)
    counts = {
        "tests": str(len(checks) + int(skipped_trt)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(int(skipped_trt)),
        "time": f"{sum(report.timings.values()):.3f}",
    }
    root = ET.Element("testsuites", {"name": SUITE, **counts})
    suite = ET.SubElement(root, "testsuite", {"name": SUITE, **counts})
    _properties(ET.SubElement(suite, "properties"), report)
    for check in checks:
        case = ET.SubElement(suite, "testcase", {"classname": classname(check), "name": _clean(check.id), "time": "0"})
        if not check.passed:
            failure = ET.SubElement(case, "failure", {"message": _clean(failure_message(check, report.first_divergence)),
                                                      "type": f"threshold.{check.scope}"})
            failure.text = _clean(failure_text(check, report))
    if skipped_trt:
        case = ET.SubElement(suite, "testcase", {"classname": f"{SUITE}.tensorrt", "name": "tensorrt", "time": "0"})
        reason = report.tensorrt.reason or "no reason given"  # type: ignore[union-attr]
        ET.SubElement(case, "skipped", {"message": _clean(f"TensorRT skipped: {reason}")})
    if report.notes:
        ET.SubElement(suite, "system-out").text = _clean("\n".join(report.notes))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: Report, path: str | Path) -> None:
    """Write `render_junit(report)` to `path` (UTF-8)."""
    Path(path).write_text(render_junit(report), encoding="utf-8")


def classname(check: ThresholdCheck) -> str:
    """`trtdiff.<scope>.<pair>`, e.g. trtdiff.outputs.torch~onnxruntime: groups checks by what they gate."""
    return _clean(f"{SUITE}.{check.scope}.{check.pair}")


def failure_message(check: ThresholdCheck, first: FirstDivergence | None) -> str:
    """One line: the check's own message, then where the numbers first changed."""
    message = check.message or f"{check.id}: worst {format_value(check.metric, check.worst)}"
    if first is not None and "first divergence" not in message:
        message += f"; first divergence {first.onnx_node} ({first.op_type})"
    return message


def failure_text(check: ThresholdCheck, report: Report) -> str:
    """The figures of a failed check and the first diverging layer, one fact a line."""
    worst = format_value(check.metric, check.worst)
    lines = [
        f"{check.id}: {check.message}" if check.message else check.id,
        f"limit: {limit_text(check, report)}",
        f"worst: {worst}" + (f" (sample {check.worst_sample})" if check.worst_sample else ""),
    ]
    if check.failing_samples:
        total = f" of {len(report.samples)}" if report.samples else ""
        lines.append(f"failing samples ({len(check.failing_samples)}{total}): {', '.join(check.failing_samples)}")
    first = report.first_divergence
    if first is None:
        lines.append("first divergence: none among the compared layers")
        return "\n".join(lines)
    module = f"module {first.module}" if first.module else "no PyTorch module"
    lines += [
        f"first divergence on {first.pair}: {first.onnx_node} ({first.op_type}, {module}), tensor {first.tensor}",
        f"  cosine {format_value('cosine', first.cosine)}, max-abs {_sci(first.max_abs)}, rel-err {_sci(first.rel_err)}"
        + (f" ({'; '.join(first.reasons)})" if first.reasons else ""),
    ]
    if first.suspects:
        lines.append(f"  suspects: {', '.join(first.suspects)}")
    return "\n".join(lines)


def limit_text(check: ThresholdCheck, report: Report) -> str:
    """The threshold in words, e.g. "cosine >= 0.9999" or "no diverged layer (min-cosine 0.9999, rtol 0.001)"."""
    if check.metric == "divergence":
        thresholds = report.thresholds
        extra = f", max-abs {thresholds.max_abs:g}" if thresholds.max_abs is not None else ""
        return f"no diverged layer (min-cosine {thresholds.min_cosine:g}, rtol {thresholds.rtol:g}{extra})"
    sign = ">=" if check.metric in _MINIMUM_METRICS else "<="
    return f"{check.metric} {sign} {check.limit:g}"


def format_value(metric: str, value: float) -> str:
    """A check figure at the precision its metric needs (cosines near 1 need six places)."""
    if math.isnan(value):
        return "nan"
    if metric in ("cosine", "divergence"):
        return f"{value:.6f}"
    if metric in ("miou", "miou_drop"):
        return f"{value:.4f}"
    return _sci(value)


def _properties(parent: ET.Element, report: Report) -> None:
    """Run facts CI keeps with the results: model, ONNX opset and exporter, thresholds, versions."""
    thresholds = report.thresholds
    facts: list[tuple[str, object]] = [
        ("trtdiff", __version__),
        ("model", report.model),
        ("opset", report.opset),
        ("exporter", report.exporter),
        ("reference", report.reference),
        ("backends", ",".join(report.backends)),
        ("inputs", ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in report.inputs.items())),
        ("samples", len(report.samples)),
        ("min_cosine", thresholds.min_cosine),
        ("rtol", thresholds.rtol),
        ("max_abs", thresholds.max_abs),
        ("passed", str(report.passed).lower()),
    ]
    if report.onnx_path:
        facts.append(("onnx_path", report.onnx_path))
    if report.first_divergence is not None:
        facts.append(("first_divergence", report.first_divergence.onnx_node))
    facts += [(f"environment.{key}", value) for key, value in report.environment.items()]
    if report.tensorrt is not None:
        facts += [("tensorrt.status", report.tensorrt.status), ("tensorrt.version", report.tensorrt.version)]
    for name, value in facts:
        if value is not None:
            ET.SubElement(parent, "property", {"name": name, "value": _clean(str(value))})


def _sci(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if value == 0:
        return "0"
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"


def _clean(text: str) -> str:
    return _ILLEGAL_XML.sub("?", text)
