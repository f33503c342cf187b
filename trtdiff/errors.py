"""Errors a user can act on. Each message says which parameter or file, what is wrong, what to try.

The library names its own parameters (`input_shapes`, `save_onnx`); a message marks each
name with `param(...)`, so a Python caller reads the parameter and the CLI, which renders
the same error with its flag table, reads the flag that sets the parameter. The
CLI turns every `TrtdiffError` into one line and exit code 2; anything else is a bug.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

_MARK = "\x1f"
_PARAM = re.compile(f"{_MARK}([A-Za-z_][A-Za-z0-9_]*){_MARK}")


def param(name: str) -> str:
    """`name` marked as a parameter inside a message (rendered as a flag by the CLI)."""
    return f"{_MARK}{name}{_MARK}"


def render_names(text: str, name_of: Callable[[str], str]) -> str:
    """`text` with every `param(...)` mark replaced by `name_of(parameter)`."""
    return _PARAM.sub(lambda match: name_of(match.group(1)), text)


class TrtdiffError(Exception):
    """A problem with the user's model, inputs, options or environment (exit code 2).

    With `parameter` (and `value`) the message starts with them: "save_onnx out.onnx: the
    file exists; ..." in Python, the same with the flag's name on the command line.
    """

    def __init__(self, message: str, *, parameter: str | None = None, value: object = None) -> None:
        if parameter is not None:
            head = param(parameter) + ("" if value is None else f" {value}")
            message = f"{head}: {message}"
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    @property
    def template(self) -> str:
        """The message with parameter marks kept (to quote it inside another error)."""
        return str(self.args[0]) if self.args else ""

    def render(self, name_of: Callable[[str], str] = str) -> str:
        """The message with each marked parameter written as `name_of(parameter)`."""
        return render_names(self.template, name_of)

    def __str__(self) -> str:
        return self.render()


class ModelLoadError(TrtdiffError):
    """The model file or spec could not be loaded."""


class InputError(TrtdiffError):
    """Input shapes or input files are missing, malformed or do not fit the model."""


class ExportError(TrtdiffError):
    """ONNX export failed or did not write what was asked for."""


class OnnxFileError(TrtdiffError):
    """An ONNX file given by the user is missing, corrupt or unusable."""


class BackendError(TrtdiffError):
    """A backend could not build or run the model."""


class ModelRunError(TrtdiffError):
    """The PyTorch model raised while running on the given inputs."""


class OptionError(TrtdiffError):
    """An option value is invalid or conflicts with another."""


class ConfigError(TrtdiffError):
    """A config file (pyproject.toml's [tool.trtdiff], --config) is unreadable or holds a key trtdiff refuses."""


class MissingPackageError(TrtdiffError):
    """An optional package a feature needs is not installed (the message names the extra to install)."""


class ReportFileError(TrtdiffError):
    """A saved report cannot be read: missing, not JSON, not a trtdiff report, or a schema this trtdiff cannot read."""


def first_line(what: object, limit: int = 300) -> str:
    """The first non-empty line of `str(what)`, cut to `limit` characters ("" when there is none).

    Library and backend messages run over many lines; trtdiff's errors quote one.
    """
    for line in str(what).splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


_ERROR_LINE = re.compile(r"^\s*(?:\w+\.)*\w*(?:Error|Exception): \S")
_BANNERS = ("The following operation failed in the TorchScript interpreter",)


def cause_line(error: BaseException, limit: int = 300) -> str:
    """The line that says what went wrong: the first line, or past a banner (TorchScript's
    "The following operation failed...") the last "SomethingError: ..." line of the message,
    without its "SomethingError: " prefix."""
    text = str(error)
    first = first_line(text, limit)
    if first and not first.startswith(_BANNERS):
        return first
    causes = [line.strip() for line in text.splitlines() if _ERROR_LINE.match(line)]
    return first_line(causes[-1].split(": ", 1)[1], limit) if causes else first


def describe_error(error: BaseException, limit: int = 200) -> str:
    """'ValueError: its first line', or the type name alone, for messages that quote an exception."""
    text = first_line(error, limit)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextmanager
def interrupts_kept() -> Iterator[None]:
    """Let Ctrl-C out of code that wraps what it raises, as itself.

    TorchScript's interpreter turns a KeyboardInterrupt raised inside it (by the recorder's
    Python dispatch) into a RuntimeError with its own banner, which would read as the
    model's error. An exception that leaves this block after SIGINT arrived, or whose text
    names KeyboardInterrupt, is raised again as KeyboardInterrupt.
    """
    seen: list[int] = []
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if callable(previous):
        forward = previous

        def noticed(signum: int, frame: FrameType | None) -> None:
            seen.append(signum)
            forward(signum, frame)

        signal.signal(signal.SIGINT, noticed)
    try:
        yield
    except Exception as error:
        if seen or "KeyboardInterrupt" in str(error):
            raise KeyboardInterrupt from error
        raise
    finally:
        if callable(previous):
            signal.signal(signal.SIGINT, previous)
