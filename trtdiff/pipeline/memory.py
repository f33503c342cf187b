"""What `--memory-limit` (L) bounds, and the refusal where a comparison cannot fit in it here.

The promise: peak memory stays under the runtimes and the weights each backend holds, plus
the largest frontier of the ONNX graph (the live tensors between the segments it runs in,
backends.segments), plus L. A streamed comparison (the default) holds one chunk of every ONNX
backend in half of L (`store_bytes`) while the reference is recorded again and compared as it
comes; its first recording keeps only what fits in that half, for the pairing. A comparison
whose culprit pass reads the reference (`--culprit`, a sweep) holds the reference's values in
half of L (the rest spilled to disk once) and compares one chunk of every source in the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from trtdiff.backends.base import chunk_names
from trtdiff.errors import OptionError, param

if TYPE_CHECKING:
    from trtdiff.source.onnx_graph import GraphInfo


def store_bytes(limit: int) -> int:
    """The reference's share of `--memory-limit` held in memory: half (the other half: the chunks compared)."""
    return max(1, limit // 2)


def check_frontier(
    graph: GraphInfo,
    tensors: Sequence[str],
    sizes: Mapping[str, int],
    chunk_bytes: int,
    limit: int,
    available: int | None = None,
) -> None:
    """Refuse, before any backend runs, a chunked comparison whose least memory does not fit here.

    Over several chunks the ONNX graph runs in segments: the frontier between two of them is
    held beside the limit. Where the largest frontier and the limit together pass the memory
    available (`available`, else `source.inputs.available_memory`), the run could only fail
    midway: an OptionError naming `memory_bytes` gives the figure it needs.
    """
    from trtdiff.backends.segments import largest_frontier, plan_segments
    from trtdiff.source.inputs import available_memory

    if len(chunk_names(tensors, sizes, chunk_bytes)) <= 1:
        return
    frontier = largest_frontier(plan_segments(graph, tensors, sizes, chunk_bytes))
    available = available_memory() if available is None else available
    if available is None or frontier + limit <= available:
        return
    lower = (
        f"lower {param('memory_bytes')} (to {_size(available - frontier)} at most) or " if available > frontier else ""
    )
    raise OptionError(
        f"the ONNX graph at these inputs holds up to {_size(frontier)} of live tensors between the segments it runs "
        f"in, beside the {_size(limit)} of the limit: {_size(frontier + limit)} in all, but {_size(available)} of "
        f"memory is available here; {lower}give a smaller input shape",
        parameter="memory_bytes",
        value=limit,
    )


def _size(count: int) -> str:
    """Bytes as --memory-limit reads them (GB = 2**30), rounded down: 1288490188 -> '1.1GB'."""
    if count >= (1 << 30) // 10:
        return f"{int(count * 10 / (1 << 30)) / 10}GB"
    return f"{count >> 20}MB" if count >= 1 << 20 else f"{count >> 10}KB"
