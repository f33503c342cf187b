"""What `--memory-limit` (L) bounds, how it is shared out (`MemoryBudget`), and the refusal where a
comparison cannot fit in it here.

The promise: peak memory stays under the runtimes and the weights each backend holds, plus
the largest frontier of the ONNX graph (the live tensors between the segments it runs in,
backends.segments), plus L. L is shared out once per comparison, in `MemoryBudget`, and every
store, chunk and pass reads its share there: any recording of the reference holds half of L in
memory (`store`; past it values are spilled to disk, or dropped where nothing reads them back),
and the other half holds the chunks compared (`chunk`). A streamed comparison (the default)
holds one chunk of every ONNX backend in that half while the reference is recorded again and
compared as it comes; its first recording keeps only what fits in its store, for the pairing. A
comparison whose culprit pass reads the reference (`--culprit`, a sweep, a reduced precision's
layer check) holds the reference's values in its store and compares one chunk of every source,
the reference's read back, in the other half. A reference on a GPU holds nothing on the host: a chunk may take all of L.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trtdiff.backends.base import chunk_names
from trtdiff.errors import OptionError, param

if TYPE_CHECKING:
    from trtdiff.options import BackendOptions
    from trtdiff.source.onnx_graph import GraphInfo


def store_bytes(limit: int) -> int:
    """The reference's share of `--memory-limit` held in memory: half (the other half: the chunks compared)."""
    return max(1, limit // 2)


@dataclass(frozen=True)
class MemoryBudget:
    """`--memory-limit` shared out once for one comparison; every store, chunk and pass reads its share here.

    `store`: what any recording of the reference holds in memory (or on its GPU) before spilling,
    and what attribution's store holds: half of the limit. `chunk`: what one source returns at
    once (the engine's chunks, and the culprit pass's, whose reference values sit in a store):
    on a GPU reference (nothing of it on the host) up to the limit; where nothing of the
    reference is read back (streamed, or by statistics) one chunk of each ONNX backend in the
    other half; else that half shared by one chunk of each ONNX backend and the reference's
    values of that chunk read back from its store. `--chunk-bytes` caps it.
    """

    limit: int
    store: int
    chunk: int

    @classmethod
    def plan(cls, runtime: BackendOptions, backends: int, *, on_host: bool, read_back: bool) -> MemoryBudget:
        """The shares for `backends` ONNX backends and a reference held `on_host` (or not: none, or on a GPU),
        its values `read_back` from its store (held for the culprit pass) or not (streamed, statistics)."""
        limit, cap = runtime.memory_bytes, runtime.chunk_bytes
        half = store_bytes(limit)
        if not on_host:
            chunk = min(cap, limit)
        else:
            chunk = max(1, min(cap, half // (max(1, backends) + (1 if read_back else 0))))
        return cls(limit, half, chunk)


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
