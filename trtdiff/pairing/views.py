"""Shapes that hold the same elements in the same order: a value and its reshaped view pair as one.

PyTorch and the exporter often disagree only on how dimensions are grouped (bmm's
192x49x49 against MatMul's 64x3x49x49): pairing accepts such a pair, and the metrics
compare through the reshape.
"""

from __future__ import annotations

import numpy as np


def view_compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether one shape only merges or splits adjacent dimensions of the other (a reshape that is a view).

    Then both hold the same elements in the same row-major order: PyTorch's bmm output
    192x49x49 and ONNX's MatMul output 64x3x49x49, or 784x192 and 1x28x28x192. A transpose
    with the same element count (1x192x28x28 against 784x192) is not.
    """
    if int(np.prod(a, dtype=np.int64)) != int(np.prod(b, dtype=np.int64)):
        return False
    coarse, fine = sorted((_boundaries(a), _boundaries(b)), key=len)
    return coarse <= fine


def _boundaries(shape: tuple[int, ...]) -> set[int]:
    """The running products of a shape's dimensions (where a row-major reshape may cut)."""
    cuts, total = set(), 1
    for dim in shape:
        total *= int(dim)
        cuts.add(total)
    return cuts
