"""A sweep's report files: one Markdown summary, one JUnit file and one HTML page for every combination.

Each format starts with the sweep's table (opset, exporter, precision, result, the first
culprit or divergence, the final output's cosine and relative error, mIoU) and then holds
each combination's own report as that format writes it alone; a combination that failed
or was skipped is a line with its reason (in JUnit, a failing or skipped test case). Model
Explorer's node data is written once per compared combination, named after it
(me.json -> me.opset10-torchscript.json).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from trtdiff import outputs
from trtdiff.render.format import cosine, escape_html, plural, sci
from trtdiff.render.sweep_text import _finding, _miou, _output_metrics
from trtdiff.report.text import markdown, plain

if TYPE_CHECKING:
    from trtdiff.hypotheses.sweep import Sweep, SweepEntry


def entry_label(entry: SweepEntry) -> str:
    """ "opset 10 · torchscript · fp16": the combination asked for (the report's own opset where it ran)."""
    report = entry.report
    parts = [f"opset {report.opset if report else entry.opset}", report.exporter if report else entry.exporter]
    return " · ".join([*parts, *([entry.precision] if entry.precision else [])])


def entry_slug(entry: SweepEntry) -> str:
    """ "opset10-torchscript-fp16": the combination in a file name or a JUnit class name."""
    return "-".join([f"opset{entry.opset}", entry.exporter, *([entry.precision] if entry.precision else [])])


def _result(entry: SweepEntry) -> str:
    if entry.report is not None:
        return "PASS" if entry.report.passed else "FAIL"
    return "skipped" if entry.skipped else "FAILED"


def _cells(entry: SweepEntry) -> list[str]:
    report = entry.report
    if report is None:
        return [entry_label(entry), _result(entry), entry.skipped or entry.failed or "", "-", "-", "-"]
    output = _output_metrics(report)
    return [
        entry_label(entry),
        _result(entry),
        _finding(report),
        cosine(output[0]) if output else "-",
        sci(output[1]) if output else "-",
        _miou(report),
    ]


HEAD = ("combination", "result", "first culprit / divergence", "out cos", "rel", "mIoU")


def _verdict(sweep: Sweep) -> tuple[bool, str]:
    failing = [e for e in sweep.entries if not e.passed]
    total = plural(len(sweep.entries), "combination")
    return sweep.passed, (f"{total} pass" if sweep.passed else f"{len(failing)} of {total} failed")


def render_sweep_markdown(sweep: Sweep) -> str:
    """The sweep's table, then each compared combination's own summary."""
    from trtdiff.render.markdown import render_markdown

    passed, summary = _verdict(sweep)
    lines = [f"### trtdiff sweep: {'✅ PASS' if passed else '❌ FAIL'} — {summary}", ""]
    lines += ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(_md(cell) for cell in _cells(entry)) + " |" for entry in sweep.entries]
    parts = ["\n".join(lines)]
    for entry in sweep.entries:
        if entry.report is not None:
            own = render_markdown(entry.report).rstrip("\n")
            parts.append(f"#### {_md(entry_label(entry))}\n\n" + own.replace("### trtdiff:", "##### trtdiff:", 1))
    return "\n\n".join(parts) + "\n"


def write_sweep_markdown(sweep: Sweep, path: str | Path) -> None:
    outputs.write_text(path, render_sweep_markdown(sweep))


def render_sweep_junit(sweep: Sweep) -> str:
    """testsuites > one testsuite per combination: its checks (the report's own cases), or why it did not run."""
    from trtdiff.render.junit import SUITE, render_junit

    root = ET.Element("testsuites", {"name": f"{SUITE} sweep"})
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for entry in sweep.entries:
        name = f"{SUITE}[{entry_slug(entry)}]"
        if entry.report is not None:
            suite = ET.fromstring(render_junit(entry.report)).find("testsuite")
            assert suite is not None
            suite.set("name", name)
            for case in suite.iter("testcase"):
                case.set("classname", case.get("classname", SUITE).replace(SUITE, name, 1))
        else:
            suite = ET.Element("testsuite", {"name": name, "tests": "1", "errors": "0", "time": "0"})
            case = ET.SubElement(suite, "testcase", {"classname": name, "name": "combination", "time": "0"})
            if entry.skipped:
                ET.SubElement(case, "skipped", {"message": plain(entry.skipped)})
                suite.attrib.update(failures="0", skipped="1")
            else:
                why = plain(entry.failed or "failed")  # an error's text can name a file: no control character in XML
                failure = ET.SubElement(case, "failure", {"message": why, "type": "combination"})
                failure.text = why
                suite.attrib.update(failures="1", skipped="0")
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
        root.append(suite)
    root.attrib.update({key: str(value) for key, value in totals.items()})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_sweep_junit(sweep: Sweep, path: str | Path) -> None:
    outputs.write_text(path, render_sweep_junit(sweep))


def render_sweep_html(sweep: Sweep) -> str:
    """One page: the sweep's table, then each compared combination's report sections."""
    from trtdiff.render.html import html_body, html_document

    passed, summary = _verdict(sweep)
    verdict = '<span class="verdict pass">PASS</span>' if passed else '<span class="verdict fail">FAIL</span>'
    head = "".join(f"<th>{escape_html(h)}</th>" for h in HEAD)
    rows = []
    for index, entry in enumerate(sweep.entries):
        cells = [escape_html(c) for c in _cells(entry)]
        if entry.report is not None:
            cells[0] = f'<a href="#combination-{index}">{cells[0]}</a>'
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    parts = [
        f"<h1>{verdict}trtdiff sweep</h1>\n<p><b>{escape_html(summary)}</b></p>",
        f"<table><tr>{head}</tr>{''.join(rows)}</table>",
    ]
    for index, entry in enumerate(sweep.entries):
        if entry.report is not None:
            parts.append(
                f'<section id="combination-{index}"><h2>{escape_html(entry_label(entry))}</h2>\n'
                f"{html_body(entry.report)}</section>"
            )
    return html_document(f"trtdiff sweep {'PASS' if passed else 'FAIL'}", "\n".join(parts))


def write_sweep_html(sweep: Sweep, path: str | Path) -> None:
    outputs.write_text(path, render_sweep_html(sweep))


def write_sweep_explorer(sweep: Sweep, path: str | Path) -> tuple[Path, ...]:
    """Node data per compared combination: me.json -> me.opset10-torchscript.json (and its .local, ... files)."""
    from trtdiff.render.explorer import check_overlay_paths, write_model_explorer

    target = Path(path)
    stem = target.with_suffix("") if target.suffix == ".json" else target
    paths = {f"{stem}.{entry_slug(entry)}.json": entry.report for entry in sweep.entries if entry.report is not None}
    for each in paths:  # named by the combinations, known only now: each over earlier node data only, or none
        check_overlay_paths(each)
    written: list[Path] = []
    for each, report in paths.items():
        written += write_model_explorer(report, each)
    return tuple(written)


def _md(text: str) -> str:
    """A table cell: Markdown-safe text (`trtdiff.report.text.markdown`), its pipes escaped."""
    return markdown(text).replace("|", "\\|")
