"""JUnit XML of a Report: one test case per threshold check, so CI shows which gate failed and why.

CI systems (GitLab, Jenkins, GitHub test-report actions) read JUnit XML and list failures by
name; each failure's text carries the figures and the first diverging layer, so the reason is
readable there without opening the full report. A TensorRT comparison that could not run is a
skipped test case with its reason rather than a silent absence.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from trtdiff import outputs
from trtdiff.render.culprits import (
    culprit_groups,
    culprit_text,
    culprits_brief,
    drift_text,
    inherited_text,
)
from trtdiff.render.format import (
    check_message,
    divergence_figures,
    divergence_node,
    format_value,
    inputs_text,
    limit_text,
    non_finite_groups,
    non_finite_text,
    suspects_text,
)
from trtdiff.render.runtimes import compiled_runtimes
from trtdiff.report import Report, ThresholdCheck
from trtdiff.report.text import plain

SUITE = "trtdiff"
# Characters XML 1.0 cannot hold at all; ElementTree would write them and produce a broken file.
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (testsuites > testsuite "trtdiff" > one testcase per check)."""
    checks = list(report.checks)
    skipped = [runtime for runtime in compiled_runtimes(report) if runtime.status == "skipped"]
    failures = sum(not check.passed for check in checks)
    counts = {
        "tests": str(len(checks) + len(skipped)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(len(skipped)),
        "time": f"{sum(report.timings.values()):.3f}",
    }
    root = ET.Element("testsuites", {"name": SUITE, **counts})
    suite = ET.SubElement(root, "testsuite", {"name": SUITE, **counts})
    _properties(ET.SubElement(suite, "properties"), report)
    for check in checks:
        case = ET.SubElement(suite, "testcase", {"classname": classname(check), "name": _clean(check.id), "time": "0"})
        if not check.passed:
            failure = ET.SubElement(
                case, "failure", {"message": _clean(failure_message(check, report)), "type": f"threshold.{check.scope}"}
            )
            failure.text = _ILLEGAL_XML.sub("?", failure_text(check, report))
        elif check.screened:  # passed, but some layers on statistics alone: said where a CI reader looks
            ET.SubElement(case, "system-out").text = _clean(f"screened: {check_message(check, report)}")
    for runtime in skipped:  # a compiled runtime asked for and not run here
        case = ET.SubElement(
            suite, "testcase", {"classname": _clean(f"{SUITE}.{runtime.backend}"), "name": runtime.backend, "time": "0"}
        )
        message = f"{runtime.title} skipped: {runtime.reason or 'no reason given'}"
        ET.SubElement(case, "skipped", {"message": _clean(message)})
    if report.notes:
        ET.SubElement(suite, "system-out").text = "\n".join(_clean(note) for note in report.notes)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: Report, path: str | Path) -> None:
    """Write `render_junit(report)` to `path` (UTF-8; a new file renamed over the name, trtdiff.outputs)."""
    outputs.write_text(path, render_junit(report))


def classname(check: ThresholdCheck) -> str:
    """`trtdiff.<scope>.<pair or backend>`, e.g. trtdiff.outputs.torch~onnxruntime: groups checks by what they gate."""
    return _clean(f"{SUITE}.{check.scope}.{check.subject}")


def failure_message(check: ThresholdCheck, report: Report) -> str:
    """One line: the check's own message, then where the numbers first changed."""
    message = check_message(check, report)
    first = report.first_divergence
    names_it = check.threshold == "layers" and check.failed > 0  # the layer check's message already names it
    if check.threshold == "finite" and check.pair is not None:
        sides = (check.pair.reference, check.pair.candidate)
        entry = next((e for e in report.non_finite if e.backend in sides), None)
        if entry is not None:
            message += f"; NaN/Inf first appear at {entry.onnx_node} ({entry.op_type}) in {entry.backend}"
    if first is not None and not names_it:
        message += f"; first divergence {first.onnx_node} ({first.op_type})"
    culprits = culprits_brief(report)
    return message + (f"; {culprits}" if culprits else "")


def failure_text(check: ThresholdCheck, report: Report) -> str:
    """The figures of a failed check and the first diverging layer, one fact a line."""
    lines = [
        f"{check.id}: {check_message(check, report)}",
        f"limit: {limit_text(check, report.thresholds)}",
        f"worst: {format_value(check.metric, check.worst)}"
        + (f" (sample {check.worst_sample})" if check.worst_sample else ""),
    ]
    if check.failing_samples:
        total = f" of {len(report.samples)}" if report.samples else ""
        lines.append(f"failing samples ({len(check.failing_samples)}{total}): {', '.join(check.failing_samples)}")
    lines += [
        f"non-finite: {non_finite_text(report, backends, entry)}; tensor {entry.tensor}"
        for backends, entry in non_finite_groups(report)
    ]
    lines += _finding_lines(report)
    first = report.first_divergence
    if first is None:
        lines.append("first divergence: none among the compared layers")
        return _lines(lines)
    lines += [
        f"first divergence on {first.pair}: {divergence_node(first)}, tensor {first.tensor}{inherited_text(report)}",
        f"  {divergence_figures(first)}",
    ]
    suspects = suspects_text(first, limit=None)
    if suspects:
        lines.append(f"  suspects: {suspects}")
    return _lines(lines)


def _finding_lines(report: Report) -> list[str]:
    """A line per culprit (node and pair, local vs accumulated, verdict, attribution), or the drift line."""
    groups = culprit_groups(report)
    if not groups and report.drift is not None:
        return [f"drift on {report.drift.pair}: {drift_text(report.drift, limit=None)}"]
    many = len(groups) > 1
    return [
        f"culprit{f' {number} of {len(groups)}' if many else ''}: {culprit_text(report, g)}"
        for number, g in enumerate(groups, start=1)
    ]


def _properties(parent: ET.Element, report: Report) -> None:
    """Run facts CI keeps with the results: model, ONNX opset and exporter, thresholds, versions."""
    thresholds = report.thresholds
    facts: list[tuple[str, object]] = [
        ("trtdiff", report.trtdiff_version),
        ("model", report.model),
        ("opset", report.opset),
        ("exporter", report.exporter),
        ("reference", report.reference),
        ("backends", ",".join(report.backends)),
        ("inputs", inputs_text(report.inputs)),
        ("samples", len(report.samples)),
        ("min_cosine", thresholds.min_cosine),
        ("rtol", thresholds.rtol),
        ("max_abs", thresholds.max_abs),
        ("allow_nonfinite", str(thresholds.allow_nonfinite).lower()),
        ("passed", str(report.passed).lower()),
    ]
    if report.onnx_path:
        facts.append(("onnx_path", report.onnx_path))
    if report.first_divergence is not None:
        facts.append(("first_divergence", report.first_divergence.onnx_node))
    facts += [(f"first_non_finite.{entry.backend}", entry.onnx_node) for entry in report.non_finite]
    culprits = [g.first.onnx_node for g in culprit_groups(report)]  # each node once, whatever its pairs
    facts += [("culprit", culprits[0]), ("culprits", ",".join(culprits))] if culprits else []
    facts += [(f"environment.{key}", text) for key, text in report.environment.items()]
    for runtime in compiled_runtimes(report):
        check = runtime.marking_check
        facts += [
            (f"{runtime.backend}.status", runtime.status),
            (f"{runtime.backend}.version", runtime.version),
            (f"{runtime.backend}.precision", runtime.precision_compiled),
        ]
        facts += [(f"{runtime.backend}.marking_check", check.status if check is not None else None)]
        facts += [(f"{runtime.backend}.{name}", value) for name, value in runtime.facts if name != "status"]
    for name, fact in facts:
        if fact is not None:
            ET.SubElement(parent, "property", {"name": name, "value": _clean(str(fact))})


def _lines(lines: list[str]) -> str:
    """The facts one a line: a name's line break or control character in a fact is written as an escape
    (`trtdiff.report.text.plain`), so no name makes a line of its own."""
    return "\n".join(plain(line) for line in lines)


def _clean(text: str) -> str:
    """One line XML 1.0 can hold: control characters as escapes (ESC as `\\x1b`), other illegal ones as `?`."""
    return _ILLEGAL_XML.sub("?", plain(text))
