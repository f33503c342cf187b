"""`trtdiff report`: a saved report or sweep rendered without running a model; unreadable files exit 2 in one line."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from junitparser import JUnitXml

from trtdiff.cli.app import main
from trtdiff.hypotheses.sweep import Sweep, SweepEntry
from trtdiff.render.saved import read_saved
from trtdiff.render.sweep_files import render_sweep_junit, render_sweep_markdown
from trtdiff.report import Report


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def saved(tmp_path: Path, diverged: Report) -> Path:
    path = tmp_path / "r.json"
    diverged.write_json(path)
    return path


def test_a_saved_report_becomes_markdown_html_and_junit(saved: Path, tmp_path: Path, diverged: Report) -> None:
    pytest.importorskip("matplotlib", reason="the HTML report needs the html extra")
    md, page, xml = tmp_path / "r.md", tmp_path / "r.html", tmp_path / "j.xml"
    start = time.perf_counter()
    code, stdout, _ = _run("report", str(saved), "--markdown", str(md), "--html", str(page), "--junit", str(xml))
    assert time.perf_counter() - start < 30
    assert code == 1 and "FAIL" in stdout  # the saved report failed: so does its rendering's exit code
    assert md.read_text().startswith("### trtdiff: ❌ FAIL")
    assert "<svg" in page.read_text() and "/decoder/Resize" in page.read_text()
    suite = JUnitXml.fromfile(str(xml))
    assert sum(1 for s in suite for case in s for r in case.result if type(r).__name__ == "Failure") >= 1


def test_the_schema_before_is_read_and_others_exit_2_in_one_line(saved: Path, tmp_path: Path) -> None:
    data = json.loads(saved.read_text())
    older = {k: v for k, v in data.items() if k != "options"} | {"schema_version": 2}
    (tmp_path / "v2.json").write_text(json.dumps(older))
    report = read_saved(tmp_path / "v2.json")
    assert isinstance(report, Report) and report.schema_version == 2 and report.options == {}
    code, _, _ = _run("report", str(tmp_path / "v2.json"), "--markdown", str(tmp_path / "v2.md"))
    assert code == 1 and (tmp_path / "v2.md").exists()
    for version in (1, 99):
        (tmp_path / f"v{version}.json").write_text(json.dumps(data | {"schema_version": version}))
        code, _, stderr = _run("report", str(tmp_path / f"v{version}.json"), "--markdown", str(tmp_path / "x.md"))
        assert code == 2 and stderr.count("\n") == 1
        assert (
            f"report schema version {version}, written by trtdiff 9.8.7" in stderr
            and "reads versions 2 and 3" in stderr
        )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("not json", "not a JSON file"),
        ('{"findings": [], "resizes": []}', "not a trtdiff comparison report (an inspection: trtdiff inspect --json)"),
        ('{"opset": 13, "layers": "nope", "schema_version": 3}', "a schema-3 report that cannot be read"),
    ],
)
def test_a_file_that_is_no_report_exits_2_in_one_line(tmp_path: Path, content: str | None, expected: str) -> None:
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    code, _, stderr = _run("report", str(path), "--markdown", str(tmp_path / "out.md"))
    assert code == 2 and stderr.count("\n") == 1 and expected in stderr and stderr.startswith("Error: ")
    assert not (tmp_path / "out.md").exists()


def test_nothing_to_write_is_one_line(saved: Path) -> None:
    code, _, stderr = _run("report", str(saved))
    assert code == 2 and "nothing to write; give --html, --markdown, --junit or --model-explorer" in stderr


def _sweep(passing: Report, diverged: Report) -> Sweep:
    return Sweep(
        (
            SweepEntry(10, "torchscript", report=diverged),
            SweepEntry(13, "torchscript", report=dataclasses.replace(passing, opset=13)),
            SweepEntry(13, "dynamo", skipped="the dynamo exporter writes opsets from 18"),
            SweepEntry(17, "torchscript", failed="the torchscript exporter failed: no symbolic for aten::foo"),
        )
    )


def test_a_saved_sweep_renders_every_combination(tmp_path: Path, passing: Report, diverged: Report) -> None:
    sweep = _sweep(passing, diverged)
    path = tmp_path / "sweep.json"
    sweep.write_json(path)
    md, xml, me = tmp_path / "s.md", tmp_path / "s.xml", tmp_path / "me.json"
    code, stdout, _ = _run("report", str(path), "--markdown", str(md), "--junit", str(xml), "--model-explorer", str(me))
    assert code == 1 and "FAIL" in stdout
    text = md.read_text()
    assert text.startswith("### trtdiff sweep: ❌ FAIL — 2 of 4 combinations failed")
    assert "| opset 10 · torchscript | FAIL | /decoder/Resize (Resize) |" in text
    assert "| opset 13 · dynamo | skipped | the dynamo exporter writes opsets from 18 |" in text
    assert "#### opset 10 · torchscript" in text and "##### trtdiff: ✅ PASS" in text
    suites = list(JUnitXml.fromfile(str(xml)))
    assert [s.name for s in suites] == [
        "trtdiff[opset10-torchscript]",
        "trtdiff[opset13-torchscript]",
        "trtdiff[opset13-dynamo]",
        "trtdiff[opset17-torchscript]",
    ]
    outcomes = {s.name: [type(r).__name__ for case in s for r in case.result] for s in suites}
    assert "Failure" in outcomes["trtdiff[opset10-torchscript]"] and outcomes["trtdiff[opset13-torchscript]"] == []
    assert outcomes["trtdiff[opset13-dynamo]"] == ["Skipped"] and outcomes["trtdiff[opset17-torchscript]"] == [
        "Failure"
    ]
    assert (tmp_path / "me.opset10-torchscript.json").exists() and (
        tmp_path / "me.opset13-torchscript.cosine.json"
    ).exists()
    assert render_sweep_markdown(sweep) == text and render_sweep_junit(sweep) == xml.read_text()


def test_a_saved_sweep_becomes_one_html_page(tmp_path: Path, passing: Report, diverged: Report) -> None:
    pytest.importorskip("matplotlib", reason="the HTML report needs the html extra")
    path = tmp_path / "sweep.json"
    _sweep(passing, diverged).write_json(path)
    code, _, _ = _run("report", str(path), "--html", str(tmp_path / "s.html"))
    page = (tmp_path / "s.html").read_text()
    assert code == 1 and page.count('<section id="combination-') == 2 and page.count("</html>") == 1
    assert '<a href="#combination-0">opset 10 · torchscript</a>' in page


def _one_line_error(code: int, stderr: str, *expected: str) -> None:
    assert code == 2 and stderr.startswith("Error: ") and stderr.count("\n") == 1, stderr
    assert all(text in stderr for text in expected), stderr


def test_a_report_edited_to_pass_is_refused_not_rendered_as_pass(saved: Path, tmp_path: Path) -> None:
    data = json.loads(saved.read_text())
    assert not data["passed"] and sum(not c["passed"] for c in data["checks"]) == 3
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data | {"passed": True}))
    md = tmp_path / "e.md"
    code, _, stderr = _run("report", str(edited), "--markdown", str(md), "--junit", str(tmp_path / "e.xml"))
    _one_line_error(code, stderr, str(edited), "it says passed but 3 of 3 checks failed", "edited by hand")
    assert not md.exists()


def test_a_check_edited_to_hold_over_its_threshold_is_refused(saved: Path, tmp_path: Path) -> None:
    data = json.loads(saved.read_text())
    cosine = next(c for c in data["checks"] if c["threshold"] == "min_cosine")
    assert cosine["worst"] < cosine["limit"]
    cosine.update(passed=True, failed=0, failing_samples=[])
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(data))
    code, _, stderr = _run("report", str(path), "--markdown", str(tmp_path / "f.md"))
    _one_line_error(code, stderr, f"check {cosine['id']} says passed with worst", "against limit 0.9999")


def test_a_sweep_with_an_edited_report_is_refused(tmp_path: Path, passing: Report, diverged: Report) -> None:
    data = json.loads(_sweep(passing, diverged).to_json())
    data["sweep"][0]["report"]["passed"] = True
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(data))
    code, _, stderr = _run("report", str(path), "--markdown", str(tmp_path / "s.md"))
    _one_line_error(code, stderr, "the opset 10 torchscript report: it says passed but 3 of 3 checks failed")


def test_json_nested_200000_deep_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"opset": 13, "layers": ' + "[" * 200_000 + "]" * 200_000 + "}")
    code, _, stderr = _run("report", str(path), "--markdown", str(tmp_path / "d.md"))
    _one_line_error(code, stderr, str(path), "nested too deep")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("min_cosine", None, "threshold min_cosine is nan, not a number"),
        ("rtol", "nan", "threshold rtol is nan, not a number"),
        ("rtol", -1, "threshold rtol -1.0: must be a finite number, 0 or more"),
    ],
)
def test_thresholds_that_are_no_numbers_are_one_line(
    saved: Path, tmp_path: Path, field: str, value: object, expected: str
) -> None:
    data = json.loads(saved.read_text())
    data["thresholds"][field] = value
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    code, _, stderr = _run(
        "report", str(path), "--markdown", str(tmp_path / "t.md"), "--html", str(tmp_path / "t.html")
    )
    _one_line_error(code, stderr, str(path), expected)


@pytest.mark.parametrize("content", [b"not an onnx file", b""])
def test_an_onnx_path_that_is_no_onnx_file_is_one_line(saved: Path, tmp_path: Path, content: bytes) -> None:
    fake = tmp_path / "model.onnx"
    fake.write_bytes(content)
    path = tmp_path / "with_onnx.json"
    path.write_text(json.dumps(json.loads(saved.read_text()) | {"onnx_path": str(fake)}))
    code, _, stderr = _run("report", str(path), "--model-explorer", str(tmp_path / "me.json"))
    _one_line_error(code, stderr, str(path), f"its ONNX file {fake} is not an ONNX model")
    pytest.importorskip("model_explorer", reason="trtdiff view needs the explorer extra")
    code, _, stderr = _run("view", str(path), "--no-browser")
    _one_line_error(code, stderr, str(path), f"its ONNX file {fake} is not an ONNX model")


def test_a_threshold_near_the_float_limit_still_draws(saved: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the HTML report needs the html extra")
    data = json.loads(saved.read_text())
    data["thresholds"]["rtol"] = 1e308  # a number a comparison takes: the page draws it, no internal error
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data))
    code, _, stderr = _run("report", str(path), "--html", str(tmp_path / "h.html"))
    assert code in (0, 1) and "internal error" not in stderr, stderr
