"""Where the reports go: report file paths checked before a comparison, each format written after it.

Report files are overwritten (CI reruns write them again), but a JSON path that holds
something other than an earlier trtdiff report is refused, so nothing the user made is lost.
Model Explorer's node data is written the same way: over earlier trtdiff node data only, and
the ONNX file beside it (me.json -> me.onnx) only where it belongs to earlier node data.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trtdiff.errors import OptionError

if TYPE_CHECKING:
    from trtdiff.hypotheses.sweep import Sweep
    from trtdiff.report import Report

JsonKind = Literal["report", "build", "inspection"]


@dataclass(frozen=True)
class ReportFiles:
    """Files to write the report to, by format (None: not written)."""

    json: str | None = None
    junit: str | None = None
    markdown: str | None = None
    html: str | None = None
    model_explorer: str | None = None
    exclude_list: str | None = None

    def validate(self, kind: JsonKind = "report") -> None:
        """Refuse paths in missing folders, folders, and JSON files that are not earlier reports."""
        check_json_path(self.json, kind)
        for name in ("junit", "markdown", "html", "model_explorer", "exclude_list"):
            check_output_path(getattr(self, name), name)
        if self.model_explorer:
            check_overlay_paths(self.model_explorer)
        if self.html and importlib.util.find_spec("matplotlib") is None:
            raise OptionError(
                "the HTML report draws its plots with matplotlib, which is not installed: "
                "pip install 'trtdiff[html]', or drop the option",
                parameter="html",
                value=self.html,
            )

    def write(self, report: Report, report_path: str | None = None) -> None:
        """Write every asked-for format of `report` (read from `report_path`, where the ONNX file is looked for too)."""
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
        if self.model_explorer:
            from trtdiff.render.explorer import load_onnx, write_model_explorer

            write_model_explorer(report, self.model_explorer, load_onnx(report, report_path or self.json))
        if self.exclude_list:
            patterns = dict.fromkeys(p for culprit in report.culprits for p in culprit.exclude)
            Path(self.exclude_list).write_text("".join(f"{p}\n" for p in patterns), encoding="utf-8")

    def write_sweep(self, sweep: Sweep) -> None:
        """Write every asked-for format of a sweep: one document for all combinations (node data: one set each)."""
        from trtdiff.render import sweep_files

        if self.json:
            sweep.write_json(self.json)
        if self.junit:
            sweep_files.write_sweep_junit(sweep, self.junit)
        if self.markdown:
            sweep_files.write_sweep_markdown(sweep, self.markdown)
        if self.html:
            sweep_files.write_sweep_html(sweep, self.html)
        if self.model_explorer:
            sweep_files.write_sweep_explorer(sweep, self.model_explorer)

    def explorer_onnx(self) -> Path | None:
        """Where the ONNX file the node data belongs to is kept (me.json -> me.onnx), or None without node data."""
        if not self.model_explorer:
            return None
        from trtdiff.render.explorer import onnx_beside

        return onnx_beside(self.model_explorer)


def check_output_path(path: str | None, parameter: str) -> None:
    """A report file's folder must exist and the path must not be a folder."""
    if not path:
        return
    target = Path(path)
    if not target.parent.is_dir():
        raise OptionError(f"folder {target.parent} does not exist; create it first", parameter=parameter, value=target)
    if target.is_dir():
        raise OptionError("is a folder; give a file path", parameter=parameter, value=target)


def check_overlay_paths(path: str) -> None:
    """Node data overwrites only earlier trtdiff node data; the ONNX file beside it, only beside earlier node data."""
    from trtdiff.render.explorer import is_overlay, onnx_beside, overlay_paths

    files = overlay_paths(path)
    for target in files:
        if target.is_dir():
            raise OptionError(f"{target} is a folder; give another path", parameter="model_explorer", value=path)
        if target.exists() and not is_overlay(target):
            raise OptionError(
                f"{target} exists and is not trtdiff node data; choose another path",
                parameter="model_explorer",
                value=path,
            )
    beside = onnx_beside(path)
    if beside.exists() and not (files[0].exists() and is_overlay(files[0])):
        raise OptionError(
            f"{beside} exists and belongs to no earlier trtdiff node data here; choose another path",
            parameter="model_explorer",
            value=path,
        )


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
