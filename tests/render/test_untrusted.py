"""Issue 30: every renderer writes a name from a file as text, never as a line, an escape sequence or markup.

The culprit report of culprit_reports.py with its node and module names replaced by hostile
ones (through its JSON, so every place that holds a name holds the hostile one), rendered in
every format: the terminal (on a real terminal, with colour), the quiet verdict, the sweep
table, the build view, Markdown (report and sweep), JUnit (report and sweep) and HTML.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import xml.etree.ElementTree as ET

import pytest
from conftest import build_report
from rich.console import Console

from trtdiff.hypotheses.sweep import Sweep, SweepEntry
from trtdiff.render.html import render_html
from trtdiff.render.junit import render_junit
from trtdiff.render.markdown import render_markdown
from trtdiff.render.sweep_files import render_sweep_html, render_sweep_junit, render_sweep_markdown
from trtdiff.render.sweep_text import render_sweep
from trtdiff.render.terminal import render_build, render_terminal, render_verdict
from trtdiff.report import BuildReport, Report

RESIZE = "/decoder/Resize\n::add-mask::secret\x1b]8;;http://evil\x07click\x1b]8;;\x07"
CONV = "/head/Conv\r# heading[red]x[/red]\x1b[31m![img](http://x)<script>"
MODULE = "decoder\n::set-output name=x::y"
# What the terminal shows of them: each control character as a visible escape.
SHOWN = ("\\n::add-mask::secret\\x1b]8;;http://evil\\x07click", "\\r# heading[red]x[/red]\\x1b[31m")


def _hostile(text: str) -> str:
    """A report's JSON with every node and module name replaced by a hostile one."""
    for name, evil in (("/decoder/Resize", RESIZE), ("/head/Conv", CONV)):
        text = text.replace(name, json.dumps(evil)[1:-1])
    return text.replace('"decoder"', json.dumps(MODULE))


@pytest.fixture
def hostile(advised: Report) -> Report:
    report = Report.from_json(_hostile(advised.to_json()))
    assert report.culprits[0].onnx_node == RESIZE and report.culprits[1].onnx_node == CONV
    return dataclasses.replace(report, model=f"model{CONV}", notes=(f"note {RESIZE}",))


def _terminal(render: object, *args: object, color: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=color, width=100, color_system="truecolor" if color else None)
    render(*args, console)  # type: ignore[operator]
    return out.getvalue()


def _lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def _assert_terminal(text: str, *, color: bool) -> None:
    assert not [line for line in _lines(text) if line.lstrip().startswith("::")]
    assert "\x07" not in text and "\x1b]" not in text, "no OSC 8 link, no BEL"
    assert "[/red]\x1b[31m" not in text and "\\x1b[31m" in text, "the name's colour code is shown, not obeyed"
    own = re.sub(r"\x1b\[[0-9;]*m", "", text) if color else text  # rich's own colours on a terminal
    assert "\x1b" not in own
    assert "[red]x[/red]" in text, "markup shown as written"


@pytest.mark.parametrize("color", [False, True])
def test_the_terminal_shows_names_as_text(hostile: Report, color: bool) -> None:
    full = _terminal(lambda r, c: render_terminal(r, c, show_all=True), hostile, color=color)
    _assert_terminal(full, color=color)
    assert SHOWN[0] in full.replace("\n", "")
    quiet = _terminal(render_verdict, hostile, color=color)
    _assert_terminal(quiet, color=color)
    assert "CULPRIT 2" in quiet


def test_the_sweep_table_and_the_build_view_show_names_as_text(hostile: Report) -> None:
    sweep = Sweep(
        (
            SweepEntry(10, "torchscript", hostile),
            SweepEntry(11, "dynamo", failed=f"export failed at {CONV}"),
        )
    )
    text = _terminal(render_sweep, sweep, color=False)
    _assert_terminal(text, color=False)
    build = BuildReport.from_json(_hostile(build_report().to_json()).replace("model.pt", json.dumps(CONV)[1:-1]))
    text = _terminal(render_build, build, color=False)
    assert not [line for line in _lines(text) if line.lstrip().startswith("::")] and "\x1b" not in text
    for document in (render_sweep_markdown(sweep), render_sweep_html(sweep), render_sweep_junit(sweep)):
        assert "\x1b" not in document and "\r" not in document
    ET.fromstring(render_sweep_junit(sweep))
    assert "<script>" not in render_sweep_html(sweep)


def test_markdown_holds_no_heading_link_image_or_tag_from_a_name(hostile: Report) -> None:
    text = render_markdown(hostile)
    assert "\r" not in text and "\x1b" not in text and "\x07" not in text
    assert not [line for line in _lines(text) if line.lstrip().startswith(("#", "!", "::", "["))][1:]  # ### trtdiff
    prose = re.sub(r"`[^`]*`", "", text)  # inside a code span everything is shown as written
    assert "![img](" not in prose and "<script>" not in prose and "[red]" not in prose


def test_junit_is_xml_with_the_names_escaped(hostile: Report) -> None:
    text = render_junit(hostile)
    root = ET.fromstring(text)  # an ESC or BEL in XML 1.0 would not parse
    failures = "\n".join(failure.text or "" for failure in root.iter("failure"))
    assert "\\n::add-mask::secret\\x1b]8" in failures
    assert not [line for line in failures.splitlines() if line.lstrip().startswith(("::", "#"))]
    messages = [failure.get("message", "") for failure in root.iter("failure")]
    assert messages and all("\n" not in message for message in messages)


def test_html_holds_no_tag_or_control_character_from_a_name(hostile: Report) -> None:
    text = render_html(hostile)
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
