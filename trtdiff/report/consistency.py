"""Whether a report read back from a file tells the truth about its own verdict.

A saved report is a file anyone can edit. Its `passed` is not a fact of its own: a comparison
writes it as the conjunction of its checks (and of the simplified file's report, when one was
compared), so a report whose `passed` says otherwise, or whose checks contradict themselves,
was edited or damaged. Renderers would otherwise word the forged verdict ("PASS") beside
figures that fail; `trtdiff report` refuses such a file instead.

Only what is cheap and certain is checked: the verdict against its checks; a check's
`passed` against its count of failures; and, where the check's figure alone decides it
(the outputs' thresholds, mIoU), against its worst figure and limit. A figure that is n/a
(None: computed over no finite values) never holds a threshold; a NaN figure is not judged
(earlier versions let a NaN mIoU pass its threshold, and their reports are still read).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trtdiff.report.model import Report, ThresholdCheck

_MINIMUMS = ("min_cosine", "min_miou", "quant_min_cosine")
"""Thresholds whose figure must reach the limit; the others must not exceed it."""


def verdict(report: Report) -> bool:
    """The verdict a comparison gives `report`: every check held, and so did the simplified file's report."""
    simplified = report.simplified is None or verdict(report.simplified)
    return simplified and all(check.passed for check in report.checks)


def contradiction(report: Report) -> str | None:
    """What in `report` cannot be true, in a few words; None when its verdict and checks agree."""
    for check in report.checks:
        problem = _check_contradiction(check)
        if problem is not None:
            return f"check {check.id} {problem}"
    if report.simplified is not None:
        problem = contradiction(report.simplified)
        if problem is not None:
            return f"the simplified file's report: {problem}"
    expected = verdict(report)
    if report.passed != expected:
        failed = len(report.failed_checks)
        why = f"{failed} of {len(report.checks)} checks failed" if failed else "the simplified file's report failed"
        if expected:
            why = f"all {len(report.checks)} checks passed"
        return f"it says {'passed' if report.passed else 'failed'} but {why}"
    return None


def _check_contradiction(check: ThresholdCheck) -> str | None:
    """What in one check cannot be true, or None."""
    if check.passed != (check.failed == 0) and check.threshold not in ("min_miou", "max_miou_drop"):
        return f"says {'passed' if check.passed else 'failed'} with {check.failed} failing"
    if check.threshold == "layers":  # a layer diverges by any reason, not by the worst cosine alone
        if not 0 <= check.screened <= check.compared - check.failed:
            return f"says {check.screened} of {check.compared} layers were screened with {check.failed} failing"
        return None
    if check.worst is not None and math.isnan(check.worst):  # NaN held an mIoU threshold in reports written before
        return None
    holds = _holds(check.worst, check.limit, check.threshold in _MINIMUMS)
    if check.passed != holds:
        figure = "n/a" if check.worst is None else f"{check.worst:g}"
        return f"says {'passed' if check.passed else 'failed'} with worst {figure} against limit {check.limit:g}"
    return None


def _holds(value: float | None, limit: float, is_minimum: bool) -> bool:
    """Whether `value` keeps to `limit` (n/a never does)."""
    if value is None:
        return False
    return value >= limit if is_minimum else value <= limit
