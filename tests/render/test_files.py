"""trtdiff.render.files: report paths checked before a comparison (nothing the user made is overwritten), then written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from culprit_models import ConvReluHead

import trtdiff
from trtdiff.errors import OptionError
from trtdiff.render.files import ReportFiles, check_json_path, check_output_path
from trtdiff.report import Report


def test_nothing_asked_nothing_checked() -> None:
    ReportFiles().validate()
    check_json_path(None)
    check_json_path("")
    check_output_path(None, "junit")


def test_new_paths_in_existing_folders_are_accepted(tmp_path: Path) -> None:
    files = ReportFiles(
        json=str(tmp_path / "r.json"),
        junit=str(tmp_path / "r.xml"),
        markdown=str(tmp_path / "r.md"),
        html=str(tmp_path / "r.html"),
    )
    files.validate()
    files.validate(kind="build")
    assert list(tmp_path.iterdir()) == []  # validating writes nothing


@pytest.mark.parametrize(
    "content",
    [
        b'{"my": "settings"}',
        b"[1, 2, 3]",
        b"not json at all\n",
        b"\xff\xfe\x00binary",
        b"",
        b'{"layers": []}',
        b'{"opset": 13}',
    ],
    ids=["json-object", "json-list", "text", "binary", "empty", "layers-only", "opset-only"],
)
def test_a_json_path_holding_another_file_is_refused_and_kept(tmp_path: Path, content: bytes) -> None:
    target = tmp_path / "results.json"
    target.write_bytes(content)
    with pytest.raises(OptionError) as caught:
        ReportFiles(json=str(target)).validate()
    assert caught.value.parameter == "json" and caught.value.value == target
    assert "is not a trtdiff report" in str(caught.value)
    assert target.read_bytes() == content


def test_an_earlier_report_may_be_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text(json.dumps({"layers": [], "opset": 13, "passed": True}))
    ReportFiles(json=str(target)).validate()


def test_an_earlier_build_report_is_recognised_as_such(tmp_path: Path) -> None:
    target = tmp_path / "build.json"
    target.write_text(json.dumps({"tensorrt": {"status": "built"}, "opset": 17}))
    ReportFiles(json=str(target)).validate(kind="build")
    with pytest.raises(OptionError, match="not a trtdiff report") as caught:
        ReportFiles(json=str(target)).validate(kind="report")
    assert caught.value.parameter == "json"


def test_a_compare_report_is_not_taken_for_a_build_report(tmp_path: Path, report: Report) -> None:
    target = tmp_path / "report.json"
    report.write_json(str(target))
    with pytest.raises(OptionError):
        check_json_path(str(target), kind="build")


@pytest.mark.parametrize("name", ["json", "junit", "markdown", "html"])
def test_a_missing_folder_is_refused_naming_the_format(tmp_path: Path, name: str) -> None:
    target = tmp_path / "no-such-folder" / "report.out"
    with pytest.raises(OptionError, match="does not exist") as caught:
        ReportFiles(**{name: str(target)}).validate()
    assert (caught.value.parameter, caught.value.value) == (name, target)
    assert not target.parent.exists()


@pytest.mark.parametrize("name", ["json", "junit", "markdown", "html"])
def test_a_folder_path_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(OptionError, match="is a folder") as caught:
        ReportFiles(**{name: str(tmp_path / "out")}).validate()
    assert caught.value.parameter == name
    assert (tmp_path / "out").is_dir()


def test_other_formats_are_overwritten_whatever_they_hold(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_text("my notes")
    ReportFiles(markdown=str(target), junit=str(target), html=str(target)).validate()


@pytest.fixture(scope="module")
def report() -> Report:
    torch.manual_seed(0)
    return trtdiff.compare(ConvReluHead().eval(), input_shapes=["1x3x8x8"], opset=13, backends=["torch", "onnxruntime"])


def test_written_reports_and_a_rerun_over_them(tmp_path: Path, report: Report) -> None:
    files = ReportFiles(json=str(tmp_path / "r.json"), junit=str(tmp_path / "r.xml"), markdown=str(tmp_path / "r.md"))
    files.validate()
    files.write(report)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["passed"] is True and data["opset"] == 13
    assert [layer["tensor"] for layer in data["layers"]] == [layer.tensor for layer in report.layers]
    assert (tmp_path / "r.xml").read_text().lstrip().startswith("<?xml")
    assert (tmp_path / "r.md").read_text().strip()
    assert not (tmp_path / "r.html").exists()
    # CI reruns write the same paths again: a report trtdiff wrote is not refused.
    files.validate()
    files.write(report)
