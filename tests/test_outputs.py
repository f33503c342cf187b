"""trtdiff.outputs: every output is a new file renamed over its name, so a symbolic link there is never followed."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from trtdiff import outputs
from trtdiff.errors import OptionError


def _only(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def test_a_link_at_the_name_is_replaced_and_what_it_points_to_is_kept(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's")
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "summary.md").symlink_to(victim)
    outputs.write_text(reports / "summary.md", "report\n")
    assert victim.read_text() == "the user's"
    assert outputs.found(reports / "summary.md") == "file" and (reports / "summary.md").read_text() == "report\n"
    assert _only(reports) == ["summary.md"]  # no temporary file left


def test_a_link_to_a_missing_file_never_creates_it(tmp_path: Path) -> None:
    (tmp_path / "r.json").symlink_to(tmp_path / "elsewhere.json")
    outputs.write_bytes(tmp_path / "r.json", b"{}")
    assert not (tmp_path / "elsewhere.json").exists() and (tmp_path / "r.json").read_bytes() == b"{}"


def test_a_rewritten_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path: Path) -> None:
    kept = tmp_path / "kept.txt"
    kept.write_text("old")
    kept.chmod(0o640)
    outputs.write_text(kept, "new")
    assert kept.stat().st_mode & 0o777 == 0o640
    umask = os.umask(0o022)
    os.umask(umask)
    outputs.write_text(tmp_path / "new.txt", "new")
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_writer_that_fails_leaves_the_earlier_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    target.write_bytes(b"earlier")
    with pytest.raises(RuntimeError), outputs.replacing(target) as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"earlier" and _only(tmp_path) == ["model.onnx"]


def test_a_temporary_file_keeps_the_suffix_so_numpy_writes_where_it_is_told(tmp_path: Path) -> None:
    with outputs.replacing(tmp_path / "a.npy") as temporary:
        np.save(temporary, np.arange(3))
    assert np.load(tmp_path / "a.npy").tolist() == [0, 1, 2] and _only(tmp_path) == ["a.npy"]


def test_publish_moves_a_finished_file_in(tmp_path: Path) -> None:
    made = tmp_path / "scratch.onnx"
    made.write_bytes(b"onnx")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "model.onnx").symlink_to(tmp_path / "victim")
    outputs.publish(made, tmp_path / "out" / "model.onnx")
    assert (tmp_path / "out" / "model.onnx").read_bytes() == b"onnx" and not (tmp_path / "victim").exists()
    assert not made.exists()


def test_append_adds_after_a_blank_line_and_refuses_a_link(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    outputs.append_text(summary, "one\n", "markdown")
    outputs.append_text(summary, "two\n", "markdown")
    assert summary.read_text() == "one\n\ntwo\n"
    (tmp_path / "link.md").symlink_to(summary)
    with pytest.raises(OptionError, match="is a symbolic link") as caught:
        outputs.append_text(tmp_path / "link.md", "three\n", "markdown")
    assert caught.value.parameter == "markdown" and summary.read_text() == "one\n\ntwo\n"


def test_what_is_found_is_read_without_following_a_link(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"0123456789")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe")
    kinds = {name: outputs.found(tmp_path / name) for name in ("file", "link", "dangling", "folder", "pipe", "missing")}
    assert kinds == {
        "file": "file",
        "link": "link",
        "dangling": "link",
        "folder": "folder",
        "pipe": "other",
        "missing": "missing",
    }
    assert outputs.head(tmp_path / "file", 4) == b"0123"
    for name in ("link", "dangling", "folder", "pipe", "missing"):  # a pipe is not read: nothing blocks
        assert outputs.head(tmp_path / name, 4) is None, name


def test_what_is_being_written_is_removed_by_an_interrupt(tmp_path: Path) -> None:
    with outputs.folder_beside(tmp_path / "repro") as folder, outputs.replacing(tmp_path / "r.npz") as temporary:
        (folder / "subgraph.onnx").write_bytes(b"x")
        temporary.write_bytes(b"PK")
        assert folder.parent == tmp_path and len(_only(tmp_path)) == 2
        outputs.remove_in_progress()  # what the interrupt handler calls
        assert _only(tmp_path) == []
        temporary.write_bytes(b"PK")  # (the block goes on here; in the process, it would have ended)
    assert _only(tmp_path) == ["r.npz"]
