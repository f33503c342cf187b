"""trtdiff: find where a model's numbers change between PyTorch, ONNX Runtime and TensorRT."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trtdiff.version import __version__

if TYPE_CHECKING:
    from trtdiff.api import build, compare, inspect_model, run, sweep
    from trtdiff.report import Report

__all__ = ["Report", "__version__", "build", "compare", "inspect_model", "run", "sweep"]

_FACADE = frozenset({"build", "compare", "inspect_model", "run", "sweep"})


def __getattr__(name: str) -> Any:
    # Lazy, so that `import trtdiff` and `trtdiff --help` do not pay for importing the stages.
    if name in _FACADE:
        from trtdiff import api

        return getattr(api, name)
    if name == "Report":
        from trtdiff.report import Report

        return Report
    raise AttributeError(f"module 'trtdiff' has no attribute {name!r}")
