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
