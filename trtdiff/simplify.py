"""The onnx-simplifier question: does simplifying the ONNX file change the numbers?

`simplify_model` runs onnxslim (the `simplify` extra) on the exact file compared; `compare`
then compares the simplified file too, with the same options, side by side. Pairing
follows the node names the simplifier keeps, never positions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtdiff.errors import BackendError, OptionError, describe_error

if TYPE_CHECKING:
    import onnx

EXTRA_HINT = "pip install 'trtdiff[simplify]' (onnxslim)"


def simplify_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The simplified model and what simplified it ("onnxslim 0.1.98: 81 -> 51 nodes")."""
    try:
        import onnxslim
    except ImportError:
        raise OptionError(f"needs onnxslim; {EXTRA_HINT}", parameter="simplify") from None
    try:
        simplified = onnxslim.slim(model)
    except Exception as error:
        raise BackendError(f"onnxslim could not simplify the model: {describe_error(error)}") from error
    version = getattr(onnxslim, "__version__", "?")
    return simplified, f"onnxslim {version}: {len(model.graph.node)} -> {len(simplified.graph.node)} nodes"
