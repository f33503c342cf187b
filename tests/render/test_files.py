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


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("junit", '<?xml version="1.0"?>\n<testsuites name="pytest"/>\n'),
        ("markdown", "# my notes\n"),
        ("html", "<!DOCTYPE html>\n<title>my page</title>\n"),
        ("exclude_list", "# nodes to keep in FP16, by hand\n^/Add$\n/Conv.*\n"),
    ],
)
def test_a_report_file_is_written_only_over_one_trtdiff_wrote(tmp_path: Path, name: str, content: str) -> None:
    """Before: --junit, --markdown, --html and --exclude-list overwrote any file (a hand-written list with 0 bytes)."""
    target = tmp_path / "mine"
    target.write_text(content)
    with pytest.raises(OptionError, match="the file exists and is not") as caught:
        ReportFiles(**{name: str(target)}).validate()
    assert (caught.value.parameter, caught.value.value) == (name, target)
    assert target.read_text() == content


@pytest.mark.parametrize("name", ["json", "junit", "markdown", "html", "exclude_list", "model_explorer"])
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "to-nothing"])
def test_a_report_path_that_is_a_symbolic_link_is_refused(tmp_path: Path, name: str, dangling: bool) -> None:
    """A pull request can plant reports/summary.md -> ~/somefile, or a link to a file that does not exist yet
    (before: followed, or for --json the missing target created, round the rule of earlier reports only)."""
    victim = tmp_path / "victim"
    if not dangling:
        victim.write_text("the user's")
    (tmp_path / "reports").mkdir()
    link = tmp_path / "reports" / "out.json"
    link.symlink_to(victim)
    with pytest.raises(OptionError, match="is a symbolic link") as caught:
        ReportFiles(**{name: str(link)}).validate()
    assert caught.value.parameter == name
    assert victim.read_text() == "the user's" if not dangling else not victim.exists()


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


def test_written_reports_replace_a_link_at_their_name_and_never_follow_it(tmp_path: Path, report: Report) -> None:
    """A link that appears after the check, or a library caller that skips it: the link is replaced, never followed."""
    victim = tmp_path / "victim"
    victim.write_text("the user's")
    names = {"json": "r.json", "junit": "r.xml", "markdown": "r.md", "exclude_list": "exclude.txt"}
    for index, file in enumerate(names.values()):
        (tmp_path / file).symlink_to(victim if index % 2 else tmp_path / f"missing{index}")
    explorer = tmp_path / "me.json"
    explorer.symlink_to(victim)
    ReportFiles(**{name: str(tmp_path / file) for name, file in names.items()}, model_explorer=str(explorer)).write(
        report
    )
    assert victim.read_text() == "the user's" and not list(tmp_path.glob("missing*"))
    for file in [*names.values(), "me.json"]:
        assert not (tmp_path / file).is_symlink() and (tmp_path / file).is_file(), file
    assert not list(tmp_path.glob(".*")), "no temporary file left"


def test_every_format_trtdiff_writes_may_be_written_again(tmp_path: Path, report: Report) -> None:
    from trtdiff.hypotheses.sweep import Sweep, SweepEntry

    files = ReportFiles(
        json=str(tmp_path / "r.json"),
        junit=str(tmp_path / "r.xml"),
        markdown=str(tmp_path / "r.md"),
        html=str(tmp_path / "r.html"),
        exclude_list=str(tmp_path / "exclude.txt"),
    )
    files.write(report)
    files.validate()
    files.write_sweep(Sweep((SweepEntry(opset=13, exporter="torchscript", report=report),)))
    files.validate()  # a sweep's files over a report's, and the other way round
    (tmp_path / "exclude.txt").write_text("^/Add$\n^/decoder/Resize$\n")  # a list an earlier trtdiff wrote
    files.validate()
    from trtdiff.pairing.qdq import exclude_pattern

    lines = [exclude_pattern(name) for name in ("/decoder/Resize", "evil\nname", "::error x")]
    (tmp_path / "exclude.txt").write_text("".join(f"{line}\n" for line in lines))  # as trtdiff writes them now
    files.validate()


def test_a_sweeps_node_data_is_written_only_over_earlier_node_data(tmp_path: Path, report: Report) -> None:
    """A sweep names its node-data files by combination (me.opset13-torchscript.json), known only once it ran:
    before, they were written over whatever was there; now each is checked before any is written."""
    from trtdiff.hypotheses.sweep import Sweep, SweepEntry

    mine = tmp_path / "me.opset13-torchscript.local.json"
    mine.write_text('{"mine": true}')
    sweep = Sweep((SweepEntry(opset=13, exporter="torchscript", report=report),))
    files = ReportFiles(model_explorer=str(tmp_path / "me.json"))
    files.validate()
    with pytest.raises(OptionError, match="is not trtdiff node data") as caught:
        files.write_sweep(sweep)
    assert caught.value.parameter == "model_explorer"
    assert mine.read_text() == '{"mine": true}' and sorted(p.name for p in tmp_path.iterdir()) == [mine.name]
    mine.unlink()
    files.write_sweep(sweep)
    files.write_sweep(sweep)  # and again, over its own
    assert len(list(tmp_path.glob("me.opset13-torchscript*.json"))) == 4
