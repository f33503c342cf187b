"""Errors a user can act on. Each message says which file or option, what is wrong, what to try.

The CLI turns every `TrtdiffError` into one line and exit code 2; anything else is a bug.
"""

from __future__ import annotations


class TrtdiffError(Exception):
    """A problem with the user's model, inputs, options or environment (exit code 2)."""


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


def first_line(what: object, limit: int = 300) -> str:
    """The first non-empty line of `str(what)`, cut to `limit` characters ("" when there is none).

    Library and backend messages run over many lines; trtdiff's errors quote one.
    """
    for line in str(what).splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def describe_error(error: BaseException, limit: int = 200) -> str:
    """'ValueError: its first line', or the type name alone, for messages that quote an exception."""
    text = first_line(error, limit)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
