"""Writing the files trtdiff is asked for: whole, under their own name, never through a symbolic link.

trtdiff runs in CI on checked-out pull requests, which can hold a symbolic link where a report
goes (`reports/summary.md -> ~/.bashrc`, or a link to a file that does not exist yet). So no
output is opened by its name: each is written as a new file in the folder it names (created
exclusively, under a hidden name of its own) and renamed over the name (`os.replace`). A link
at the name is then replaced itself, never followed, a missing target is never created, and a
reader never sees half a file. What an existing file at the name may be is each writer's rule
(only an earlier report of trtdiff's, or only with `force`); `found` and `head` read it without
following a link.

Every file and folder being written is listed until it is in place, so that a process stopped
on the way (Ctrl-C, SIGTERM: trtdiff.cli.interrupt) removes them with `remove_in_progress`; and
a block of writes that must not stop half-way (the report files, a repro bundle moved into its
folder) is `whole()`: the interrupt handler then `defer`s the end of the process to the block's end.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from trtdiff.errors import OptionError

Found = Literal["missing", "file", "link", "folder", "other"]
_PART = ".trtdiff-part"
_in_progress: set[Path] = set()  # mutated in the main thread; read whole (one C call) by the interrupt handler
_whole_blocks = 0
_deferred: list[Callable[[], None]] = []


def found(path: str | Path) -> Found:
    """What is at `path`, a symbolic link counted as itself (a link to a missing file is a "link")."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "other"


def check_path(path: str | Path, parameter: str) -> None:
    """OptionError (naming `parameter`) unless `path` is a file trtdiff may write: its folder exists, and it is
    neither a folder nor a symbolic link (which trtdiff would replace, but a link where an output goes is no
    file of trtdiff's: removing it is the user's call)."""
    target = Path(path)
    if not target.parent.is_dir():
        raise OptionError(f"folder {target.parent} does not exist; create it first", parameter=parameter, value=target)
    there = found(target)
    if there == "folder":
        raise OptionError("is a folder; give a file path", parameter=parameter, value=target)
    if there == "link":
        raise OptionError(
            "is a symbolic link; trtdiff writes a report only over one it wrote, never through a link: "
            "remove the link or choose another path",
            parameter=parameter,
            value=target,
        )


def head(path: str | Path, limit: int) -> bytes | None:
    """The first `limit` bytes of the regular file at `path`; None for anything else (missing, a link, a pipe)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        return None
    with os.fdopen(descriptor, "rb") as stream:
        return stream.read(limit)


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` as a new file renamed over the name."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` as a new file renamed over the name: a link there is replaced, never followed."""
    with replacing(path) as temporary, open(temporary, "wb") as stream:
        stream.write(data)


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A new, empty file beside `path` for the block to write (it keeps `path`'s suffix, so np.save adds none);
    renamed over `path` when the block ends, removed if it raises. For writers that need a path (onnx, zipfile)."""
    target = Path(path)
    temporary = _new_file(target)
    try:
        yield temporary
        os.replace(temporary, target)
    finally:
        _discard(temporary)


def publish(source: str | Path, path: str | Path) -> None:
    """Move a finished file (made in a temporary folder) to `path`, renamed over the name like any output."""
    with replacing(path) as temporary:
        try:
            os.replace(source, temporary)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            shutil.copyfile(source, temporary)  # another file system: copied into the file made for it


def append_text(path: str | Path, text: str, parameter: str) -> None:
    """Append `text` to the file at `path` (created if missing), separated by a blank line from what is there.

    For a file many writers add to, such as `$GITHUB_STEP_SUMMARY`: nothing there is lost, so
    any file may be appended to, but never through a symbolic link (refused as `parameter`).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    if found(path) == "link":
        raise OptionError("is a symbolic link; give the file itself", parameter=parameter, value=path)
    with os.fdopen(os.open(path, flags, 0o666), "a", encoding="utf-8") as stream:
        stream.write(("\n" if os.fstat(stream.fileno()).st_size else "") + text)


@contextlib.contextmanager
def folder_beside(path: str | Path) -> Iterator[Path]:
    """A new, empty folder on the file system of `path`, so that it or its entries move there by renaming: in
    the same folder as `path`, or inside `path` (an existing folder) where that one is not writable. Removed,
    with whatever is left in it, when the block ends."""
    target = Path(os.path.abspath(path))
    try:
        folder = _new_folder(target.parent, target.name)
    except PermissionError:
        if found(target) != "folder":
            raise
        folder = _new_folder(target, target.name)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        _in_progress.discard(folder)


def _new_folder(parent: Path, name: str) -> Path:
    """Create a new folder in `parent` under a hidden name of its own, listed as in progress."""
    for _ in range(100):
        folder = parent / f".{name}.{secrets.token_hex(4)}{_PART}"
        _in_progress.add(folder)
        try:
            folder.mkdir()
        except FileExistsError:
            _in_progress.discard(folder)
            continue
        except BaseException:
            _in_progress.discard(folder)
            raise
        return folder
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(parent))


@contextlib.contextmanager
def whole() -> Iterator[None]:
    """Writes that an interrupt lets finish: an end `defer`red meanwhile runs when the outermost block ends."""
    global _whole_blocks
    _whole_blocks += 1
    try:
        yield
    finally:
        _whole_blocks -= 1
        if not _whole_blocks and _deferred:
            _deferred.pop()()


def defer(end: Callable[[], None]) -> bool:
    """Inside `whole()`: keep `end` for the block's end and say True (the first one kept); outside: False."""
    if not _whole_blocks:
        return False
    if not _deferred:
        _deferred.append(end)
    return True


def remove_in_progress() -> None:
    """Remove every file and folder being written (an interrupted process leaves none of them behind)."""
    for path in tuple(_in_progress):
        with contextlib.suppress(OSError):
            if found(path) == "folder":
                shutil.rmtree(path)
            else:
                os.unlink(path)


def _new_file(target: Path) -> Path:
    """Create a new file beside `target` (exclusively: never an existing name, never through a link), listed
    as in progress; with the mode of the regular file it will replace, else the umask's."""
    for _ in range(100):
        temporary = target.parent / f".{target.name}.{secrets.token_hex(4)}{_PART}{target.suffix}"
        _in_progress.add(temporary)  # listed first: an interrupt right after the file appears still finds it
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            descriptor = os.open(temporary, flags, 0o666)
        except FileExistsError:
            _in_progress.discard(temporary)
            continue
        except BaseException:
            _in_progress.discard(temporary)
            raise
        try:
            earlier = os.lstat(target)
            if stat.S_ISREG(earlier.st_mode):
                os.fchmod(descriptor, stat.S_IMODE(earlier.st_mode))
        except OSError:
            pass
        finally:
            os.close(descriptor)
        return temporary
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target.parent))


def _discard(temporary: Path) -> None:
    """Remove a temporary file that was not renamed into place, and stop listing it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    _in_progress.discard(temporary)
