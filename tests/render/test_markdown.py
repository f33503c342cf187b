"""The Markdown summary of real comparisons: verdict, checks table, divergence, segmentation, versions."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from trtdiff.render.markdown import render_markdown, write_markdown
from trtdiff.report import Report

SHAPES = ["1x3x64x64"]


@pytest.fixture(scope="module")
def reports(gated_reports: dict[str, Report]) -> dict[str, Report]:
    return gated_reports


def _table(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def test_failing_summary(reports: dict[str, Report]) -> None:
    report = reports["failing"]
    text = render_markdown(report)
    assert text.splitlines()[0] == "### trtdiff: ❌ FAIL — 3 of 3 checks failed"
    rows = _table(text)
    assert rows[0] == ["", "check", "worst", "limit", "worst sample"]
    assert all(len(row) == 5 for row in rows)
    body = rows[2:]
    assert [row[1] for row in body] == [f"`{check.id}`" for check in report.checks]
    assert all(row[0] == "❌" for row in body)
    cosine = body[0]
    assert cosine[2] == "0.999421" and cosine[3] == "cosine ≥ 0.9999" and cosine[4].startswith("`sample-2`")
    assert "(3 of 3 fail)" in cosine[4]
    assert "**First divergence:** `/decoder/Resize` (Resize, module `decoder`) on torch~onnxruntime" in text
    assert "Suspects (nodes feeding it): `/decoder/Resize`, then `/decoder/Concat`" in text
    miou = report.segmentation.agreement_miou["torch~onnxruntime"]
    assert f"agreement mIoU torch~onnxruntime {miou:.4f}" in text
    assert "**TensorRT:** " in text
    if report.tensorrt.status == "skipped":
        assert "skipped — " in text
    assert f"torch {report.environment['torch']}" in text and "onnxruntime 1." in text


def test_passing_summary(reports: dict[str, Report]) -> None:
    text = render_markdown(reports["passing"])
    assert text.splitlines()[0] == "### trtdiff: ✅ PASS — 3 checks passed"
    assert "❌" not in text
    assert "**First divergence:** none — all 51 compared layers agree." in text
    assert "agreement mIoU torch~onnxruntime 1.0000 (0.00% pixels changed)" in text
    assert len(text.splitlines()) < 25, "a PR comment stays short"


def test_names_cannot_break_the_markdown(reports: dict[str, Report]) -> None:
    report = reports["failing"]
    odd = dataclasses.replace(report.checks[0], id="outputs/a|b`c", worst_sample="s|1")
    text = render_markdown(dataclasses.replace(report, checks=(odd, *report.checks[1:]), model="<img src=x>|m"))
    assert text.count("<img") == 1 and "`<img src=x>|m`" in text, "raw HTML only inside a code span"
    assert all(len(row) == 5 for row in _table(text))


def test_write_markdown_writes_or_appends(reports: dict[str, Report], tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    path.write_text("# earlier step\n")
    write_markdown(reports["passing"], path, append=True)
    write_markdown(reports["failing"], path, append=True)
    text = path.read_text()
    assert text.startswith("# earlier step\n") and text.index("✅ PASS") < text.index("❌ FAIL")
    write_markdown(reports["passing"], path)
    assert path.read_text() == render_markdown(reports["passing"])
