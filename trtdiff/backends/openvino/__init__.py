"""The OpenVINO backend: the same ONNX file compiled for an OpenVINO device, plain and with added outputs.

OpenVINO is a fusing runtime that installs and runs on every machine (its CPU plugin), so
what trtdiff does for TensorRT (capture a compiled model's intermediates, check that the
capture did not change the answer, map fused layers back to ONNX nodes, report the precision
each layer ran in) runs here for real. Nothing in this package imports openvino at import
time; `unavailable()` says why it cannot run without importing it.

    with open_backend("openvino", graph) as backend:  # backends.registry
        ...
"""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import TYPE_CHECKING

from trtdiff.errors import BackendError

if TYPE_CHECKING:
    from trtdiff.backends.base import Unavailable

MODULE = "openvino"
EXTRA = "openvino"
INSTALL_HINT = "pip install 'trtdiff[openvino]' (openvino==2026.4.1)"


def unavailable() -> str | None:
    """The one-line reason OpenVINO cannot run here (not installed), or None; imports nothing."""
    if importlib.util.find_spec(MODULE) is None:
        return f"OpenVINO is not installed (module {MODULE} not found); {INSTALL_HINT}"
    return None


def skipped_here() -> Unavailable | None:
    """Why OpenVINO cannot run here (not installed), or None; imports nothing (its spec's `unavailable` hook)."""
    from trtdiff.backends.base import Unavailable

    reason = unavailable()
    return None if reason is None else Unavailable(reason)


def import_openvino() -> ModuleType:
    """The openvino module, imported now; BackendError with the install hint where it is missing."""
    reason = unavailable()
    if reason is not None:
        raise BackendError(reason)
    import openvino

    module: ModuleType = openvino
    return module


def version() -> str:
    """The installed openvino distribution's version (e.g. 2026.4.1), read from its metadata."""
    import importlib.metadata

    try:
        return importlib.metadata.version(MODULE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
