"""Where the reports go: report file paths checked before a comparison, each format written after it.

Report files are written again by CI reruns, but only over a file trtdiff wrote: a path that
holds anything else (the user's notes, a hand-written exclusion list, a JSON file of another
kind) is refused before any work, and so is a symbolic link, which a checked-out pull request
could plant where a report goes. Each format is recognised by what trtdiff writes at its head
(`_EARLIER`). Every file is then written as a new file renamed over its name (trtdiff.outputs),
so a link that appears in between is replaced, never followed. Model Explorer's node data is
written the same way: over earlier trtdiff node data only, and the ONNX file beside it
(me.json -> me.onnx) only where it belongs to earlier node data.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trtdiff import outputs
from trtdiff.errors import OptionError

if TYPE_CHECKING:
    from trtdiff.hypotheses.sweep import Sweep
    from trtdiff.report import Report

JsonKind = Literal["report", "build", "inspection"]
_HEAD = 4096  # what is read of an earlier Markdown, JUnit or HTML file to recognise it
_WHOLE = 256 << 20  # what is read of an earlier JSON report or exclusion list (anything larger is not trtdiff's)


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
        """Refuse, before any work, paths in missing folders, folders, symbolic links, and files trtdiff did not
        write (each format over an earlier one of its own only)."""
        check_json_path(self.json, kind)
        for name in ("junit", "markdown", "html", "exclude_list"):
            check_earlier(getattr(self, name), name)
        if self.model_explorer:
            from trtdiff.render.explorer import check_overlay_paths

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
            outputs.write_text(self.exclude_list, "".join(f"{p}\n" for p in patterns))

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


def check_output_path(path: str | Path | None, parameter: str) -> None:
    """A report file's folder must exist, and the path must be neither a folder nor a symbolic link."""
    if path:
        outputs.check_path(path, parameter)


def _junit(head: bytes) -> bool:
    """render_junit and render_sweep_junit: an XML declaration, then testsuites named "trtdiff" or "trtdiff sweep"."""
    return re.match(rb'<\?xml [^>]*\?>\s*<testsuites name="trtdiff(?: sweep)?"', head) is not None


def _markdown(head: bytes) -> bool:
    """render_markdown and render_sweep_markdown: the verdict's heading first."""
    return re.match(rb"### trtdiff(?: sweep)?: ", head) is not None


def _html(head: bytes) -> bool:
    """html_document: a page titled with trtdiff's verdict (a report's or a sweep's)."""
    titled = re.search(rb"<title>trtdiff (?:sweep )?(?:PASS|FAIL)", head)
    return head.startswith(b"<!DOCTYPE html>") and titled is not None


def _exclude_list(text: bytes) -> bool:
    """What --exclude-list writes: every line one anchored pattern, ^...\\Z (pairing.qdq.exclude_pattern; ^...$
    before it), and nothing at all on a passing run."""
    try:
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return False
    return all(len(line) >= 2 and line.startswith("^") and line.endswith(("\\Z", "$")) for line in lines)


_EARLIER: dict[str, tuple[Callable[[bytes], bool], int, str]] = {
    "junit": (_junit, _HEAD, "JUnit report"),
    "markdown": (_markdown, _HEAD, "Markdown summary"),
    "html": (_html, _HEAD, "HTML report"),
    "exclude_list": (_exclude_list, _WHOLE, "exclusion list (one anchored ^...\\Z pattern a line)"),
}
"""Per format: how an earlier file of trtdiff's is recognised from its first bytes, how many to read, its name."""


def check_earlier(path: str | None, parameter: str) -> None:
    """Refuse a path that holds anything but an earlier file of this format written by trtdiff."""
    if not path:
        return
    check_output_path(path, parameter)
    recognise, limit, what = _EARLIER[parameter]
    _check_ours(Path(path), parameter, what, recognise, limit)


def _check_ours(target: Path, parameter: str, what: str, ours: Callable[[bytes], bool], limit: int) -> None:
    """An existing file at `target` must be one `ours` recognises (read without following a link)."""
    if outputs.found(target) == "missing":
        return
    head = outputs.head(target, limit)
    if head is None or not ours(head):
        raise OptionError(
            f"the file exists and is not a trtdiff {what}; choose another path", parameter=parameter, value=target
        )


def _is_kind(earlier: dict[str, Any], kind: JsonKind) -> bool:
    """Whether an earlier JSON file is a trtdiff report of this kind (a sweep counts as a report)."""
    if kind == "report":
        return "sweep" in earlier or ("opset" in earlier and "layers" in earlier)
    if kind == "inspection":
        return "findings" in earlier and "resizes" in earlier
    return "opset" in earlier and "tensorrt" in earlier and "layers" not in earlier


def check_json_path(path: str | None, kind: JsonKind = "report") -> None:
    """Refuse to overwrite a file that is not an earlier trtdiff report of this kind (nor a symbolic link)."""
    if not path:
        return
    check_output_path(path, "json")

    def ours(text: bytes) -> bool:
        try:
            earlier = json.loads(text)
        except (ValueError, RecursionError):
            return False
        return isinstance(earlier, dict) and _is_kind(earlier, kind)

    _check_ours(Path(path), "json", kind, ours, _WHOLE)
