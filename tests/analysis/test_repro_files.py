"""trtdiff.analysis.repro_files: a bundle someone else wrote can neither remove nor read anything outside itself.

`--save-repro DIR` over a crafted repro.json removes only trtdiff's own culprit folders;
`trtdiff repro` refuses, in one line and exit 2, paths that leave the bundle, symbolic links,
pickled arrays and a malformed manifest.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from culprit_models import SmallCNN

import trtdiff
from trtdiff.analysis.repro import MANIFEST, check_repro_dir
from trtdiff.cli.app import main
from trtdiff.errors import OptionError


def _compare_into(folder: Path) -> trtdiff.Report:
    return trtdiff.compare(SmallCNN().eval(), opset=10, input_shapes=["1x3x16x16"], save_repro=str(folder))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real bundle written by --save-repro: the opset-10 Resize of a tiny CNN."""
    out = tmp_path_factory.mktemp("bundle") / "repro"
    _compare_into(out)
    return out / "1-Resize"


def _repro(folder: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["repro", str(folder)])
    return result.exit_code, result.stderr


def test_a_crafted_manifest_cannot_make_save_repro_remove_anything_but_its_own_folders(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    parent = tmp_path / "parent"
    top = parent / "repro"
    top.mkdir(parents=True)
    (parent / "sibling.txt").write_text("keep")
    (top / "notes.txt").write_text("keep")  # the user's own file in the bundle folder
    (top / "1-earlier").mkdir()  # an earlier repro's folder: trtdiff's to replace
    names = ["..", ".", str(outside), "../parent", "not-a-culprit", "1-earlier"]
    (top / MANIFEST).write_text(json.dumps({"kind": "trtdiff-repro", "culprits": names}))
    (parent / "not-a-culprit").mkdir()
    _compare_into(top)
    assert (outside / "keep.txt").read_text() == "keep" and (parent / "sibling.txt").read_text() == "keep"
    assert (top / "notes.txt").read_text() == "keep" and (parent / "not-a-culprit").is_dir()
    assert not (top / "1-earlier").exists()  # only the earlier repro's own folder went
    assert json.loads((top / MANIFEST).read_text())["culprits"] == ["1-Resize"]
    assert sorted(p.name for p in parent.iterdir()) == ["not-a-culprit", "repro", "sibling.txt"]  # no scratch left


def test_an_earlier_repro_holding_a_culprit_folder_it_does_not_list_is_refused_before_any_work(tmp_path: Path) -> None:
    """A folder or link named like a culprit folder (1-Resize) that the manifest does not list as one of its own
    would be in the way of the new bundle (before: exit 3, FileExistsError, after the whole comparison)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    top = tmp_path / "repro"
    top.mkdir()
    (top / "2-link").symlink_to(outside, target_is_directory=True)
    (top / "1-Resize").mkdir()
    (top / MANIFEST).write_text(json.dumps({"kind": "trtdiff-repro", "culprits": ["2-link"]}))
    with pytest.raises(OptionError, match=r"1-Resize, which its repro\.json does not list") as caught:
        check_repro_dir(str(top))
    assert caught.value.parameter == "save_repro"
    assert (top / "2-link").is_symlink() and (top / "1-Resize").is_dir()


@pytest.mark.parametrize("force", [False, True])
def test_a_project_folder_is_refused_with_or_without_force(tmp_path: Path, force: bool) -> None:
    """Before: --force --save-repro . replaced the project's README.md and repro.json, and exited 3
    (FileExistsError) where a 1-Resize/ was there already."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# my project\n")
    (project / MANIFEST).write_text('{"name": "my reproduction"}\n')
    (project / "1-Resize").mkdir()
    args = ["compare", "tests.cli.test_process:small_cnn", "--input-shape", "1x3x8x8", "--save-repro", str(project)]
    result = CliRunner().invoke(main, [*args, *(["--force"] if force else [])])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "not empty and holds no earlier trtdiff repro" in result.stderr and "--force" not in result.stderr
    assert (project / "README.md").read_text() == "# my project\n"
    assert (project / MANIFEST).read_text() == '{"name": "my reproduction"}\n'
    assert sorted(p.name for p in project.iterdir()) == ["1-Resize", "README.md", MANIFEST]


def test_a_bundle_that_fails_half_way_leaves_the_folder_as_it_was(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the culprit folders were written into DIR one by one, so a failure left half a bundle (no repro.json),
    which the next run refused. Now built beside DIR and moved in whole: here the disk fills at the last file."""
    import errno

    from trtdiff.analysis import repro

    top = tmp_path / "repro"
    shutil.copytree(bundle.parent, top)
    before = {p.relative_to(top): p.read_bytes() for p in top.rglob("*") if p.is_file()}

    def full(*_: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(repro, "top_readme", full)
    with pytest.raises(OSError, match="No space left"):
        _compare_into(top)
    assert {p.relative_to(top): p.read_bytes() for p in top.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repro"]  # the folder it was built in is gone
    monkeypatch.undo()
    _compare_into(top)  # and the next run is not refused
    assert json.loads((top / MANIFEST).read_text())["culprits"] == ["1-Resize"]


def test_save_repro_into_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(OptionError, match="is a symbolic link"):
        check_repro_dir(str(tmp_path / "link"))


def _edited(bundle: Path, tmp_path: Path, edit: Callable[[Path, dict[str, Any]], None]) -> Path:
    folder = tmp_path / "1-Resize"
    shutil.copytree(bundle, folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    edit(folder, manifest)
    if (folder / MANIFEST).exists() and not (folder / MANIFEST).read_text().startswith("{not"):
        (folder / MANIFEST).write_text(json.dumps(manifest))
    return folder


def _outside_input(folder: Path, manifest: dict[str, Any]) -> None:
    np.save(folder.parent / "outside.npy", np.zeros(3, np.float32))
    name = next(iter(manifest["inputs"]))
    manifest["inputs"][name] = "../outside.npy"


def _absolute_reference(folder: Path, manifest: dict[str, Any]) -> None:
    manifest["reference"]["file"] = str((folder / "outputs" / "reference.npy").resolve())


def _linked_input(folder: Path, manifest: dict[str, Any]) -> None:
    np.save(folder.parent / "secret.npy", np.zeros(3, np.float32))
    name = next(iter(manifest["inputs"]))
    (folder / "inputs" / "link.npy").symlink_to(folder.parent / "secret.npy")
    manifest["inputs"][name] = "inputs/link.npy"


def _pickled_input(folder: Path, manifest: dict[str, Any]) -> None:
    name = next(iter(manifest["inputs"]))
    np.save(folder / manifest["inputs"][name], np.array([{"a": 1}], dtype=object), allow_pickle=True)


def _not_json(folder: Path, manifest: dict[str, Any]) -> None:
    (folder / MANIFEST).write_text("{not json")


def _inputs_a_list(folder: Path, manifest: dict[str, Any]) -> None:
    manifest["inputs"] = ["inputs/0-x.npy"]


def _thresholds_text(folder: Path, manifest: dict[str, Any]) -> None:
    manifest["thresholds"] = {"min_cosine": "high", "rtol": 1e-3, "max_abs": None}


def _reference_missing(folder: Path, manifest: dict[str, Any]) -> None:
    del manifest["reference"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_outside_input, "leaves the repro folder"),
        (_absolute_reference, "leaves the repro folder"),
        (_linked_input, "leaves the repro folder"),
        (_pickled_input, "loads no pickled or object arrays"),
        (_not_json, "no trtdiff repro here"),
        (_inputs_a_list, "'inputs' is missing or not a dict"),
        (_thresholds_text, "thresholds.min_cosine is not a number"),
        (_reference_missing, "'reference' is missing or not a dict"),
    ],
)
def test_a_bad_bundle_is_one_line_and_exit_2(
    bundle: Path, tmp_path: Path, edit: Callable[[Path, dict[str, Any]], None], expected: str
) -> None:
    folder = _edited(bundle, tmp_path, edit)
    code, stderr = _repro(folder)
    assert code == 2 and stderr.count("\n") == 1 and expected in stderr, stderr


def test_a_symlinked_bundle_and_a_manifest_pointing_out_are_refused(bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(bundle, target_is_directory=True)
    code, stderr = _repro(tmp_path / "link")
    assert code == 2 and "is a symbolic link" in stderr
    top = tmp_path / "top"
    top.mkdir()
    (top / MANIFEST).write_text(json.dumps({"kind": "trtdiff-repro", "culprits": [str(bundle), "../1-Resize"]}))
    code, stderr = _repro(top)
    assert code == 2 and "holds no culprit folder" in stderr
    assert _repro(bundle)[0] == 1  # the real bundle, untouched, still shows its divergence


def test_save_repro_writes_through_no_link_left_in_an_earlier_bundle(tmp_path: Path) -> None:
    victim = tmp_path / "victim.md"
    victim.write_text("keep")
    top = tmp_path / "repro"
    top.mkdir()
    (top / MANIFEST).write_text(json.dumps({"kind": "trtdiff-repro", "culprits": []}))
    (top / "README.md").symlink_to(victim)
    trtdiff.compare(SmallCNN().eval(), opset=10, input_shapes=["1x3x16x16"], save_repro=str(top))
    assert victim.read_text() == "keep"
    assert not (top / "README.md").is_symlink() and (top / "1-Resize").is_dir()
