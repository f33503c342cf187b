"""The process's standard streams: always open, and a reader that has gone is no failure.

`trtdiff ... 2>&-` starts the process with descriptor 2 closed. The first descriptor trtdiff
then opens takes number 2 (a copy of stdout made to silence the exporter, a scratch file),
and what is meant for the terminal goes there instead, while Python's `sys.stderr` is None
and the last flush raises. So descriptors 0, 1 and 2 are held open on the null device when
the caller closed them, before anything else is opened.

`trtdiff compare ... | head -1`: the reader leaves after one line, and every later write to
stdout raises BrokenPipeError, wherever it happens. Writes to stdout and stderr go through
`_Outliving`, which discards what a reader that has gone would have read: the command runs
to its end, writes its files and exits with its own verdict.
"""

from __future__ import annotations

import contextlib
import io
import locale
import os
import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


def hold_standard_streams() -> None:
    """Descriptors 0, 1 and 2 open (on the null device where closed); stdout and stderr that outlive their reader."""
    for fd in (0, 1, 2):
        if not _is_open(fd):
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one, the lower ones are open
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    sys.stdout = _outliving(sys.stdout, 1)
    sys.stderr = _outliving(sys.stderr, 2)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _outliving(stream: IO[str] | None, fd: int) -> io.TextIOWrapper:
    """A text stream on `fd` like Python's own (encoding, buffering), that discards writes once its reader has gone."""
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    encoding = getattr(stream, "encoding", None) or locale.getpreferredencoding(False)
    errors = getattr(stream, "errors", None) or "backslashreplace"
    return io.TextIOWrapper(
        io.BufferedWriter(_Outliving(fd)),
        encoding=encoding,
        errors=errors,
        line_buffering=fd == 2 or os.isatty(fd),  # as Python's: stderr by line, stdout on a terminal
        write_through=bool(getattr(stream, "write_through", False)),
    )


class _Outliving(io.RawIOBase):
    """A standard descriptor whose reader may leave (`| head -1`): what follows is discarded, not an error."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self.gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: ReadableBuffer) -> int:
        size = memoryview(data).nbytes
        if not self.gone:
            try:
                return os.write(self._fd, data)
            except BrokenPipeError:
                self.gone = True
        return size
