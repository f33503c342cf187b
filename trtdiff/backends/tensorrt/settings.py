"""The TensorRT engine settings of a comparison, derived from its options in one place.

`BackendOptions.tensorrt` holds what the user chose for TensorRT alone (outputs, workspace,
mark budget, ...); three things an engine depends on are not among them: the precision and
TF32, options shared with the other backends (`BackendOptions.precision`, `BackendOptions.tf32`),
and the input shapes, those of the inputs fed. `engine_settings` adds them. The comparison derives
them once when it is prepared and hands the result to whoever builds an engine: the
backend it opens, `trtdiff build`, the culprit step's engines on rewritten models.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trtdiff.backends.tensorrt.builder import input_shapes_from

if TYPE_CHECKING:
    import numpy as np

    from trtdiff.options import BackendOptions, BuildSettings


def engine_settings(options: BackendOptions, feeds: Mapping[str, np.ndarray] | None = None) -> BuildSettings:
    """The engine settings of `options`: its TensorRT part with precision, TF32 and, given `feeds`, their shapes.

    A precision TensorRT is not built at here (bf16) is refused when the settings are validated,
    where TensorRT opens or builds, so it stops only a run that has TensorRT in it.
    """
    settings = dataclasses.replace(options.tensorrt, precision=options.precision, tf32=options.tf32)
    if feeds is None:
        return settings
    return dataclasses.replace(settings, input_shapes=input_shapes_from(feeds))
