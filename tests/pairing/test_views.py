"""trtdiff.pairing.views: which shapes are views of one another (merged or split adjacent dimensions)."""

from __future__ import annotations

import pytest

from trtdiff.pairing.views import view_compatible


@pytest.mark.parametrize(
    ("a", "b", "compatible"),
    [
        ((192, 49, 49), (64, 3, 49, 49), True),  # bmm against the attention MatMul
        ((784, 192), (1, 28, 28, 192), True),  # mm against a 4-D Linear input
        ((1, 3, 8, 8), (3, 8, 8), True),
        ((1, 192, 28, 28), (784, 192), False),  # same count, transposed layout
        ((2, 3), (3, 2), False),
        ((4,), (5,), False),
    ],
)
def test_view_compatible_shapes(a: tuple[int, ...], b: tuple[int, ...], compatible: bool) -> None:
    assert view_compatible(a, b) is compatible and view_compatible(b, a) is compatible
