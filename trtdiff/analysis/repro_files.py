"""Reading a repro bundle that anyone may have written: names checked, paths kept inside, arrays without pickle.

A bundle (`--save-repro DIR`) travels: it is attached to a bug report, unpacked from an
archive, handed to `trtdiff repro` or written over by a later `--save-repro DIR`. Nothing read
from its `repro.json` is trusted as a path: a culprit folder's name must have the form trtdiff
gives it (`N-NODE`, a direct child of the bundle, not a symbolic link), every file the manifest
names must be a relative path that stays inside the folder through no symbolic link, and
arrays are loaded with `allow_pickle=False` (a pickled .npy runs code when loaded). Anything
else is one `ReportFileError` naming the file and what is wrong: exit 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from trtdiff.errors import ReportFileError

MANIFEST = "repro.json"
README = "README.md"
SUBGRAPH = "subgraph.onnx"
MARKER = "trtdiff-repro"
# A culprit folder as write_repros names it: its number, a dash, the node's name made safe for a file name.
_FOLDER = re.compile(r"[0-9]+-[A-Za-z0-9._-]+")


def is_culprit_name(name: str) -> bool:
    """Whether `name` has the form trtdiff gives a culprit folder: N-NODE."""
    return _FOLDER.fullmatch(name) is not None


def culprit_folders(top: Path, names: object) -> list[Path]:
    """The culprit folders of `top` among `names` (read from its manifest) that trtdiff itself could have written.

    Only a name of the form `N-NODE` counts, only as a direct child of `top` that is a real
    folder (not a symbolic link): "..", ".", "/etc" or a link to elsewhere are never returned.
    """
    if not isinstance(names, list):
        return []
    found = []
    for name in names:
        if not isinstance(name, str) or not is_culprit_name(name):
            continue
        folder = top / name
        if folder.is_symlink() or not folder.is_dir() or folder.resolve().parent != top.resolve():
            continue
        found.append(folder)
    return found


def read_manifest(folder: Path) -> dict[str, Any]:
    """The bundle's `repro.json`; ReportFileError for a folder that is no repro, or is a symbolic link."""
    if folder.is_symlink():
        raise ReportFileError(f"{folder}: is a symbolic link; give the repro folder itself")
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError) as error:
        raise ReportFileError(
            f"{folder}: no trtdiff repro here ({MANIFEST} missing or unreadable); give a folder --save-repro wrote"
        ) from error
    if not isinstance(data, dict) or data.get("kind") != MARKER:
        raise ReportFileError(f"{folder}: {MANIFEST} is not a trtdiff repro")
    return data


def manifest_field(data: Mapping[str, Any], key: str, kind: type, folder: Path, *, files: bool = False) -> Any:
    """`data[key]`, which must be a `kind`; with `files`, a mapping of names to file paths (text to text)."""
    value = data.get(key)
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if ok and files:
        ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    if not ok:
        raise ReportFileError(
            f"{folder / MANIFEST}: {key!r} is missing or not a {kind.__name__}; the file was edited or is damaged: "
            "write the repro again with --save-repro"
        )
    return value


def inside(folder: Path, relative: object) -> Path:
    """`folder / relative`, refused unless `relative` is a relative path that stays in `folder` through no link."""
    if not isinstance(relative, str) or not relative:
        raise ReportFileError(f"{folder / MANIFEST}: a file it names is not a path: {relative!r}")
    path = folder / relative
    expected = os.path.normpath(os.path.join(os.path.realpath(folder), relative))
    if Path(relative).is_absolute() or ".." in Path(relative).parts or os.path.realpath(path) != expected:
        raise ReportFileError(
            f"{folder / MANIFEST}: {relative!r} leaves the repro folder (an absolute path, '..' or a symbolic link); "
            "trtdiff repro reads only the files inside it"
        )
    return path


def load_array(path: Path) -> np.ndarray:
    """A .npy array written by numpy, never unpickled; ReportFileError naming the file otherwise."""
    try:
        value = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise ReportFileError(
            f"{path}: not a plain numpy array ({error}); trtdiff repro loads no pickled or object arrays"
        ) from error
    if not isinstance(value, np.ndarray):  # an .npz archive where an .npy was named
        raise ReportFileError(f"{path}: not a .npy array")
    return value
