"""Align two ordered sequences so that one edited element costs only its own pair.

Pairing ONNX nodes with recorded PyTorch ops (pairing.pairs), and the ops of a TorchScript
graph with the ops it dispatched (script.py, the lowest user: so it lives here), is a sequence
alignment: both sides list computing ops in execution
order, and an edited file inserts, deletes or swaps a few. Matching by position breaks at
the first difference; matching longest common runs (difflib) can shift a repeated op onto
its twin. Here an alignment costs 0 per pair of equal tokens, 1 per pair of different
tokens (a swapped op) and 1 per element left alone, and only the pairs that *every*
alignment of minimal cost makes are kept: where two placements are equally good (a
repeated op deleted next to its twin), neither is taken.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Sequence
from itertools import pairwise

import numpy as np

MAX_CELLS = 4_000_000
"""Largest len(left) * len(right) aligned at once (two int64 tables of this size are kept)."""


def certain_pairs(
    left: Sequence[Hashable],
    right: Sequence[Hashable],
    pairable: np.ndarray | None = None,
    *,
    swaps: bool = True,
    max_cells: int = MAX_CELLS,
) -> list[tuple[int, int]]:
    """The pairs (i, j) that every minimal-cost alignment of `left` with `right` makes, in order.

    `pairable[i, j]` False forbids pairing left[i] with right[j] (shapes that cannot agree);
    by default any two elements may pair, and only equal ones without `swaps`. Sequences
    larger than `max_cells` give no pairs.
    """
    n, m = len(left), len(right)
    if n == 0 or m == 0 or n * m > max_cells:
        return []
    ids: dict[Hashable, int] = {}
    left_ids = np.array([ids.setdefault(t, len(ids)) for t in left], dtype=np.int64)
    right_ids = np.array([ids.setdefault(t, len(ids)) for t in right], dtype=np.int64)
    differ = left_ids[:, None] != right_ids[None, :]
    cost = differ.astype(np.int64)
    if pairable is not None:
        cost[~pairable] = n + m + 1  # dearer than leaving both alone: never chosen
    if not swaps:
        cost[differ] = n + m + 1
    before = _prefix_costs(cost)
    after = _prefix_costs(cost[::-1, ::-1])[::-1, ::-1]
    total = before[n, m]
    on_diagonal = before[:-1, :-1] + cost + after[1:, 1:] == total
    left_alone = (before[:-1, :] + 1 + after[1:, :] == total).any(axis=1)
    certain = ~left_alone & (on_diagonal.sum(axis=1) == 1)
    return [(int(i), int(on_diagonal[i].argmax())) for i in np.flatnonzero(certain)]


def _prefix_costs(cost: np.ndarray) -> np.ndarray:
    """table[i, j]: the least cost of aligning the first i left with the first j right elements."""
    n, m = cost.shape
    steps = np.arange(m + 1, dtype=np.int64)
    table = np.empty((n + 1, m + 1), dtype=np.int64)
    table[0] = steps
    row = np.empty(m + 1, dtype=np.int64)
    for i in range(1, n + 1):
        row[0] = i
        np.minimum(table[i - 1, 1:] + 1, table[i - 1, :-1] + cost[i - 1], out=row[1:])
        # leaving right elements alone along the row: table[i, j] = min over k <= j of row[k] + (j - k)
        table[i] = np.minimum.accumulate(row - steps) + steps
    return table


def monotonic(anchors: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of (i, j) pairs increasing in both i and j (pairs that cross are dropped)."""
    ordered = sorted(anchors)
    tails: list[int] = []
    tail_at: list[int] = []
    parent: list[int] = []
    for k, (_, j) in enumerate(ordered):
        pos = bisect_left(tails, j)
        parent.append(tail_at[pos - 1] if pos else -1)
        if pos == len(tails):
            tails.append(j)
            tail_at.append(k)
        else:
            tails[pos], tail_at[pos] = j, k
    chain: list[tuple[int, int]] = []
    k = tail_at[-1] if tail_at else -1
    while k >= 0:
        chain.append(ordered[k])
        k = parent[k]
    return chain[::-1]


def segments(
    left_free: Sequence[int], right_free: Sequence[int], anchors: Sequence[tuple[int, int]]
) -> list[tuple[list[int], list[int]]]:
    """Split the free positions (ascending) of both sides into the stretches between consecutive anchors.

    Anchors are pairs already made; those that cross others are ignored (see `monotonic`).
    """
    bounds = [(-1, -1), *monotonic(anchors), (1 << 62, 1 << 62)]
    found: list[tuple[list[int], list[int]]] = []
    for (i0, j0), (i1, j1) in pairwise(bounds):
        lefts = list(left_free[bisect_right(left_free, i0) : bisect_left(left_free, i1)])
        rights = list(right_free[bisect_right(right_free, j0) : bisect_left(right_free, j1)])
        if lefts and rights:
            found.append((lefts, rights))
    return found
