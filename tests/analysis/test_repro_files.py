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
    (top / "2-link").symlink_to(outside, target_is_directory=True)
    names = ["..", ".", str(outside), "../parent", "2-link", "not-a-culprit", "1-earlier"]
    (top / MANIFEST).write_text(json.dumps({"kind": "trtdiff-repro", "culprits": names}))
    (parent / "not-a-culprit").mkdir()
    _compare_into(top)
    assert (outside / "keep.txt").read_text() == "keep" and (parent / "sibling.txt").read_text() == "keep"
    assert (top / "notes.txt").read_text() == "keep" and (parent / "not-a-culprit").is_dir()
    assert (top / "2-link").is_symlink() and (outside / "keep.txt").exists()
    assert not (top / "1-earlier").exists()  # only the earlier repro's own folder went
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


def test_save_repro_with_force_writes_through_no_link_left_in_the_folder(tmp_path: Path) -> None:
    victim = tmp_path / "victim.md"
    victim.write_text("keep")
    top = tmp_path / "repro"
    top.mkdir()
    (top / "README.md").symlink_to(victim)  # a folder trtdiff did not write, filled with --force
    trtdiff.compare(SmallCNN().eval(), opset=10, input_shapes=["1x3x16x16"], save_repro=str(top), force=True)
    assert victim.read_text() == "keep"
    assert not (top / "README.md").is_symlink() and (top / "1-Resize").is_dir()
