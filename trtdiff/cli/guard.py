"""The last guard on what the command writes: no line it did not mean as a workflow command reads as one.

On GitHub Actions the runner reads every line a step writes to stdout or stderr; a line that
starts with `::` (after leading white space, which the runner trims) is a workflow command
(`::add-mask::`, `::stop-commands::`, `::error::`), and `##[` anywhere in a line is one in the
legacy form. Names from a model are escaped where they are formatted (`trtdiff.report.text`),
so none carries a line break; but rich wraps long text, and a wrapped line can begin with
whatever the name held there. While a command runs, `sys.stdout` and `sys.stderr` are wrapped
in `CommandGuard`, which every writer goes through (click.echo, rich consoles, the progress
lines, the error line), and trtdiff's own annotations alone pass through `workflow_command`.

The mark is a backslash, written before the `::` that would start a command (`\\::add-mask::x`)
and inside `##[` (`##\\[`): a visible character, so the log shows that something was changed
and the text still reads as it was; not a space (the runner trims white space before looking
for `::`) and not a zero-width character (invisible in the log, and some are trimmed too).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

MARK = "\\"
_LINE_ENDS = "\r\n"  # what the runner splits lines on
_BLANK = "\u200b\ufeff"  # trimmed by some readers although Python's isspace says otherwise


class CommandGuard:
    """A text stream around `stream` that neutralises workflow commands in what is written to it.

    It holds back only the blank start of a line and a first `:` (until the next character says
    whether a command starts there); `flush` writes that too. It has no `buffer`, so click
    writes through it rather than around it.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._held = ""  # the start of the current line: blanks, then perhaps one ":"
        self._open = False  # the line has text that decided it is no command
        self._colon = False  # the line's first non-blank is a lone ":", already written
        self._tail = ""  # the last two characters written on the line (for "##[")

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.stream.write("".join(self._feed(char) for char in text))
        return len(text)

    def _feed(self, char: str) -> str:
        if char in _LINE_ENDS:
            held, self._held, self._open, self._colon, self._tail = self._held, "", False, False, ""
            return held + char
        if not self._open:
            out = self._start(char)
            if out is None:
                return ""
        else:
            out = char
        if char == "[" and self._tail == "##":
            out = out[:-1] + MARK + "["
        self._tail = (self._tail + out)[-2:]
        return out

    def _start(self, char: str) -> str | None:
        """What to write for `char` at the start of a line; None while it is held."""
        if char == ":" and (self._held.endswith(":") or self._colon):
            self._open = True
            if self._held.endswith(":"):
                held, self._held = self._held[:-1], ""
                return held + MARK + "::"
            return MARK + ":"
        if char == ":" or ((char.isspace() or char in _BLANK) and not self._held.endswith(":") and not self._colon):
            self._held += char
            return None
        self._open = True
        held, self._held = self._held, ""
        return held + char

    def command(self, line: str) -> None:
        """Write trtdiff's own workflow command `line` unchanged, on a line of its own."""
        if any(end in line for end in _LINE_ENDS) or not line.startswith("::"):
            raise ValueError(f"not one workflow command: {line!r}")
        if self._open or self._held or self._colon:
            self.write("\n")
        self.stream.write(line + "\n")

    def flush(self) -> None:
        if self._held:
            self._colon = self._colon or self._held.endswith(":")
            self._tail = (self._tail + self._held)[-2:]
            self.stream.write(self._held)
            self._held = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, reconfigure, ...: the stream's own
        if name == "buffer":  # click would write to the bytes underneath, around the guard
            raise AttributeError(name)
        return getattr(self.stream, name)


@contextmanager
def guarded_output() -> Iterator[None]:
    """`sys.stdout` and `sys.stderr` behind a `CommandGuard` while the block runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = CommandGuard(saved[0]), CommandGuard(saved[1])
    try:
        yield
    finally:
        for guard in (sys.stdout, sys.stderr):
            if isinstance(guard, CommandGuard):
                guard.flush()
        sys.stdout, sys.stderr = saved


def workflow_command(line: str) -> None:
    """Write trtdiff's own workflow command to stdout: through the guard's door when one is in place."""
    out: Any = sys.stdout
    if isinstance(out, CommandGuard):
        out.command(line)
        out.stream.flush()
    else:
        out.write(line + "\n")
        out.flush()
