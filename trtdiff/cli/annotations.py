"""GitHub Actions annotations: a failing gate points at the check, its threshold and the culprit.

On GitHub Actions (`GITHUB_ACTIONS=true`) every failed check becomes an `::error` workflow
command on stdout, which the run page shows as an annotation: the check's id as the title;
the threshold, the worst figure, the culprit (node, op, module, export or runtime) and its
fix as the message. Elsewhere nothing is printed. Names from the model are made one line with
nothing a terminal acts on (`trtdiff.report.text.plain`) before the command's own escaping, and
the lines are written through the CLI's guard (`trtdiff.cli.guard.workflow_command`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trtdiff.render.culprits import (
    advice_text,
    culprit_groups,
    pairs_text,
    verdict_text,
)
from trtdiff.render.format import (
    check_message,
    limit_text,
    module_text,
)
from trtdiff.report.text import plain

if TYPE_CHECKING:
    from trtdiff.hypotheses.sweep import Sweep
    from trtdiff.report import Report


def on_github(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this runs as a GitHub Actions step."""
    return (os.environ if environ is None else environ).get("GITHUB_ACTIONS") == "true"


def report_annotations(report: Report, label: str = "") -> list[str]:
    """One `::error` line per failed check of `report` (`label` names a sweep's combination)."""
    where = _culprit_words(report)
    lines = []
    for check in report.failed_checks:
        title = f"trtdiff{f' {label}' if label else ''}: {check.id} failed"
        message = f"{check_message(check, report)}; limit {limit_text(check, report.thresholds, symbols=True)}"
        lines.append(_command(plain(title), plain(f"{message}; {where}" if where else message)))
    return lines


def sweep_annotations(sweep: Sweep) -> list[str]:
    """The annotations of every failing combination of a sweep (one that could not run: its reason)."""
    from trtdiff.render.sweep_files import entry_label

    lines: list[str] = []
    for entry in sweep.entries:
        label = entry_label(entry)
        if entry.report is not None:
            lines += report_annotations(entry.report, label)
        elif entry.failed:
            lines.append(_command(plain(f"trtdiff {label}: failed"), plain(entry.failed)))
    return lines


def _culprit_words(report: Report) -> str:
    """ "culprit /decoder/Resize (Resize, module decoder) on torch~onnxruntime, export problem (...); fix: ..."."""
    groups = culprit_groups(report)
    if groups:
        culprit = groups[0].first
        words = (
            f"culprit {culprit.onnx_node} ({culprit.op_type}, {module_text(culprit.module)}) on "
            f"{pairs_text(groups[0].pairs)}, {verdict_text(culprit)}"
        )
        fix = advice_text(report, culprit)
        more = f" (+{len(groups) - 1} more)" if len(groups) > 1 else ""
        return words + more + (f"; {fix}" if fix else "")
    first = report.first_divergence
    if first is not None:
        return f"first divergence {first.onnx_node} ({first.op_type}, {module_text(first.module)}) on {first.pair}"
    if report.non_finite:
        entry = report.non_finite[0]
        return f"NaN/Inf first appear at {entry.onnx_node} ({entry.op_type}) in {entry.backend}"
    return ""


def _command(title: str, message: str) -> str:
    """A workflow command with its property and message escaped as GitHub's toolkit does."""
    return f"::error title={_escape_property(title)}::{_escape_data(message)}"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
