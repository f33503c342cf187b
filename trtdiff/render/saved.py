"""Saved reports read back for rendering: a comparison's report or a sweep's, in a schema this trtdiff reads.

`trtdiff report REPORT.json` turns a CI artifact into a page later without running a model:
it reads what `--json` wrote (the current schema and the one before it) and anything else is
one clear error naming the file and what to do. A report's verdict is never taken on the
file's word: one whose `passed` contradicts its checks (or whose checks contradict their own
figures) was edited or damaged, and is refused (trtdiff.report.consistency).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtdiff.errors import OptionError, ReportFileError, first_line
from trtdiff.report import READABLE_SCHEMAS, Report
from trtdiff.report.consistency import contradiction
from trtdiff.version import __version__

if TYPE_CHECKING:
    from trtdiff.hypotheses.sweep import Sweep


def read_saved(path: str | Path) -> Report | Sweep:
    """The report or sweep saved at `path`; ReportFileError with the reason and a next step otherwise."""
    target = Path(path)
    if not target.is_file():
        what = "is a folder" if target.is_dir() else "no such file"
        raise ReportFileError(f"{target}: {what}; give a JSON report written by trtdiff compare --json")
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ReportFileError(
            f"{target}: not a JSON file ({first_line(error, 120)}); give a trtdiff --json report"
        ) from error
    except RecursionError as error:  # arrays or objects nested deeper than the interpreter's stack
        raise ReportFileError(
            f"{target}: JSON nested too deep to be a trtdiff report; give a trtdiff --json report"
        ) from error
    if isinstance(data, dict) and isinstance(data.get("sweep"), list):
        return _sweep(target, data)
    if not isinstance(data, dict) or "layers" not in data or "opset" not in data:
        kind = _other_kind(data)
        raise ReportFileError(
            f"{target}: not a trtdiff comparison report{kind}; `trtdiff report` renders what compare --json writes"
        )
    _check_schema(target, data)
    return _build(target, data)


def _sweep(target: Path, data: dict[str, Any]) -> Sweep:
    from trtdiff.hypotheses.sweep import Sweep

    for entry in data["sweep"]:
        report = entry.get("report") if isinstance(entry, dict) else None
        if isinstance(report, dict):
            _check_schema(target, report)
    try:
        swept = Sweep.from_json(json.dumps(data))
    except (TypeError, ValueError, KeyError) as error:
        raise ReportFileError(f"{target}: a sweep that cannot be read ({first_line(error, 120)})") from error
    for entry in swept.entries:
        if entry.report is not None:
            _check_verdict(target, entry.report, f"the opset {entry.opset} {entry.exporter} report: ")
    return swept


def _check_schema(target: Path, data: dict[str, Any]) -> None:
    version = data.get("schema_version")
    if version in READABLE_SCHEMAS:
        return
    readable = " and ".join(map(str, READABLE_SCHEMAS))
    writer = data.get("trtdiff_version", "an unknown version")
    raise ReportFileError(
        f"{target}: report schema version {version}, written by trtdiff {writer}; trtdiff {__version__} reads "
        f"versions {readable}: render it with the trtdiff that wrote it, or compare again"
    )


def _build(target: Path, data: dict[str, Any]) -> Report:
    try:
        report = Report.from_dict(data)
    except (TypeError, ValueError, KeyError) as error:
        raise ReportFileError(
            f"{target}: a schema-{data.get('schema_version')} report that cannot be read ({first_line(error, 120)}); "
            "was it edited by hand?"
        ) from error
    _check_verdict(target, report)
    return report


def _check_verdict(target: Path, report: Report, where: str = "") -> None:
    """ReportFileError when the report's thresholds are no numbers a comparison takes, or its verdict contradicts
    its checks (or a check its own figures)."""
    thresholds = report.thresholds
    for name in ("min_cosine", "rtol", "max_abs"):
        value = getattr(thresholds, name)
        if value is not None and not math.isfinite(value):
            raise ReportFileError(f"{target}: {where}threshold {name} is {value}, not a number; was it edited by hand?")
    try:
        thresholds.validate()
    except OptionError as error:
        raise ReportFileError(f"{target}: {where}threshold {error}; was it edited by hand?") from error
    problem = contradiction(report)
    if problem is not None:
        raise ReportFileError(
            f"{target}: {where}{problem}, which no comparison writes; was it edited by hand? compare again"
        )


def _other_kind(data: object) -> str:
    if isinstance(data, dict) and "findings" in data and "resizes" in data:
        return " (an inspection: trtdiff inspect --json)"
    if isinstance(data, dict) and "tensorrt" in data and "opset" in data:
        return " (a build: trtdiff build --json)"
    return ""
