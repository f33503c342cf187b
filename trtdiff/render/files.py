"""Where the reports go: report file paths checked before a comparison, each format written after it.

Report files are overwritten (CI reruns write them again), but a JSON path that holds
something other than an earlier trtdiff report is refused, so nothing the user made is lost.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trtdiff.errors import OptionError

if TYPE_CHECKING:
    from trtdiff.report import Report

JsonKind = Literal["report", "build", "inspection"]


@dataclass(frozen=True)
class ReportFiles:
    """Files to write the report to, by format (None: not written)."""

    json: str | None = None
    junit: str | None = None
    markdown: str | None = None
    html: str | None = None

    def validate(self, kind: JsonKind = "report") -> None:
        """Refuse paths in missing folders, folders, and JSON files that are not earlier reports."""
        check_json_path(self.json, kind)
        for name in ("junit", "markdown", "html"):
            check_output_path(getattr(self, name), name)
        if self.html and importlib.util.find_spec("matplotlib") is None:
            raise OptionError(
                "the HTML report draws its plots with matplotlib, which is not installed: "
                "pip install 'trtdiff[html]', or drop the option",
                parameter="html",
                value=self.html,
            )

    def write(self, report: Report) -> None:
        """Write every asked-for format of `report`."""
        if self.json:
            report.write_json(self.json)
        if self.junit:
            from trtdiff.render.junit import write_junit

            write_junit(report, self.junit)
        if self.markdown:
            from trtdiff.render.markdown import write_markdown

            write_markdown(report, self.markdown)
        if self.html:
            from trtdiff.render.html import write_html

            write_html(report, self.html)


def check_output_path(path: str | None, parameter: str) -> None:
    """A report file's folder must exist and the path must not be a folder."""
    if not path:
        return
    target = Path(path)
    if not target.parent.is_dir():
        raise OptionError(f"folder {target.parent} does not exist; create it first", parameter=parameter, value=target)
    if target.is_dir():
        raise OptionError("is a folder; give a file path", parameter=parameter, value=target)


def _is_kind(earlier: dict[str, Any], kind: JsonKind) -> bool:
    """Whether an earlier JSON file is a trtdiff report of this kind (a sweep counts as a report)."""
    if kind == "report":
        return "sweep" in earlier or ("opset" in earlier and "layers" in earlier)
    if kind == "inspection":
        return "findings" in earlier and "resizes" in earlier
    return "opset" in earlier and "tensorrt" in earlier and "layers" not in earlier


def check_json_path(path: str | None, kind: JsonKind = "report") -> None:
    """Refuse to overwrite a file that is not an earlier trtdiff report of this kind."""
    if not path:
        return
    check_output_path(path, "json")
    target = Path(path)
    if target.exists():
        try:
            earlier = json.loads(target.read_text())
            ours = isinstance(earlier, dict) and _is_kind(earlier, kind)
        except (OSError, ValueError):
            ours = False
        if not ours:
            raise OptionError(
                f"the file exists and is not a trtdiff {kind}; choose another path", parameter="json", value=target
            )
