"""The culprit wording every view shares (trtdiff.render.culprits; tests/analysis/test_culprits.py holds the
finding): one paragraph per node naming the pairs it diverges on (issue 40, item 3), and the attribution and
the exclusion check each saying what it measures (item 4)."""

from __future__ import annotations

import dataclasses
import io
import re
import xml.etree.ElementTree as ET
from html import unescape

from rich.console import Console

from trtdiff.render.culprits import attribution_summary, culprit_groups, exclusion_text
from trtdiff.render.html import render_html
from trtdiff.render.junit import render_junit
from trtdiff.render.markdown import render_markdown
from trtdiff.render.terminal import render_terminal, render_verdict
from trtdiff.report import Report

ALL_THREE = "torch~onnxruntime, torch~onnx-reference and torch~openvino"


def terminal(report: Report) -> str:
    """The terminal's text at 80 columns, its wrapping undone."""
    out = io.StringIO()
    render_terminal(report, Console(file=out, width=80, color_system=None))
    return " ".join(line.strip() for line in out.getvalue().splitlines())


def test_groups_hold_each_node_once_with_its_pairs(four: Report) -> None:
    groups = culprit_groups(four)
    assert [g.first.onnx_node for g in groups] == ["/decoder/Resize", "/head/Conv"]
    assert [str(pair) for pair in groups[0].pairs] == ALL_THREE.replace(" and", ",").split(", ")


def test_one_paragraph_per_node_naming_its_pairs_in_every_view(four: Report) -> None:
    """Two nodes diverging on three pairs each: two culprit paragraphs, not six, in each view."""
    text = terminal(four)
    assert text.count("CULPRIT") == 2
    assert f"CULPRIT: /decoder/Resize (Resize, module decoder) on {ALL_THREE}: local rel-err 2.64e-02" in text
    assert "CULPRIT 2: /head/Conv (Conv, module head): local rel-err 7.10e-03 vs accumulated 1.14e-01" in text
    quiet = io.StringIO()
    render_verdict(four, Console(file=quiet, width=2000, color_system=None))
    assert quiet.getvalue().count("CULPRIT") == 2
    assert f"CULPRIT: /decoder/Resize (Resize, module decoder) on {ALL_THREE}, export problem" in quiet.getvalue()

    markdown = render_markdown(four)
    assert len(re.findall(r"^[0-9]+\. `", markdown, flags=re.M)) == 2
    assert f"1. `/decoder/Resize` (Resize, module `decoder`) on {ALL_THREE}: local rel-err" in markdown

    html = render_html(four)
    finding = html[html.index('<div class="box find">') :]
    finding = finding[: finding.index("</div>")]
    assert finding.count("<li>") == 2 and f"on {ALL_THREE}: local rel-err 2.64e-02" in finding

    suite = ET.fromstring(render_junit(four)).find("testsuite")
    assert suite is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["culprits"] == "/decoder/Resize,/head/Conv"
    failure = next(f.text or "" for f in suite.iter("failure") if "culprit 1 of 2" in (f.text or ""))
    assert "culprit 3 of" not in failure and f"on {ALL_THREE}:" in failure


def test_a_figure_that_differs_between_pairs_is_said_per_pair(four: Report) -> None:
    """The mIoU lost differs between the pairs (only torch~onnxruntime has the labels' figure): said per pair,
    the pairs where it is the same together; the closing sentence too."""
    text = terminal(four)
    assert (
        "injecting torch's value recovers 0.1450 of 0.1540 mIoU (final rel-err 1.14e-01 -> 7.10e-03) on "
        "torch~onnxruntime; injecting torch's value recovers 0.1450 of 0.1960 mIoU (final rel-err 1.14e-01 -> "
        "7.10e-03) on torch~onnx-reference and torch~openvino"
    ) in text
    assert attribution_summary(four) == [
        "/decoder/Resize alone carries 94% of the 0.1540 mIoU lost on torch~onnxruntime",
        "/decoder/Resize alone carries 74% of the 0.1960 mIoU lost on torch~onnx-reference and torch~openvino",
    ]


EXCLUSION = (
    "exclusion list checked: with /decoder/Resize, /head/Conv kept in FP32 (--keep-fp32 /decoder/Resize,/head/Conv) "
    "the final outputs pass every check"
)


def nothing_alone(advised: Report) -> Report:
    """`advised` where injecting torch's value at either culprit alone recovers nothing measurable, and keeping
    both in FP32 makes the outputs pass (the exclusion check's note)."""
    first, second = advised.attribution
    first = dataclasses.replace(
        first, miou_after=0.8041, miou_recovered=0.0001, miou_after_alone=0.8041, miou_recovered_alone=0.0001,
        final_rel_err_after=0.11, final_rel_err_after_alone=0.11, measurable=False, measurable_alone=False,
    )  # fmt: skip
    return dataclasses.replace(advised, attribution=(first, second), notes=(*advised.notes, EXCLUSION))


def test_the_attribution_and_the_exclusion_check_each_say_what_they_measure(advised: Report) -> None:
    """ "No culprit alone recovers a measurable part" beside "the final outputs pass every check" read as a
    contradiction: one injects one reference value at a time, the other keeps all the listed nodes in higher
    precision; each view says so, the exclusion check beside the attribution (not among the notes above)."""
    report = nothing_alone(advised)
    alone = (
        "injecting torch's value at any one culprit alone, the rest of the graph as it ran, recovers no measurable "
        "part of the 0.1540 mIoU lost."
    )
    kept = (
        "keeping the listed nodes in higher precision, all at once (the exclusion list, converted and compared "
        "again): with /decoder/Resize, /head/Conv kept in FP32 (--keep-fp32 /decoder/Resize,/head/Conv) the final "
        "outputs pass every check."
    )
    assert exclusion_text(report) + "." == kept
    text = terminal(report)
    assert f"{alone} {kept} FIRST DIVERGENCE" in text
    assert "no culprit alone recovers" not in text.lower() and "note: exclusion list checked" not in text
    markdown = " ".join(render_markdown(report).split())
    assert alone in markdown and kept in markdown and "no culprit alone" not in markdown.lower()
    html = " ".join(unescape(render_html(report)).split())
    assert alone in html and kept in html

    without = dataclasses.replace(advised, notes=(*advised.notes, EXCLUSION), culprit=None, culprits=(), attribution=())
    assert "note: exclusion list checked: with /decoder/Resize" in terminal(without)  # no culprits: a note as before
