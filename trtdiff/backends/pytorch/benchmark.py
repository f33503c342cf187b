"""The benchmark of a reduced-precision comparison: the PyTorch model itself run in that precision.

How much error does FP16 (or BF16) make at each layer of *this* model? Ascend msProbe's answer,
taken here: beside the candidate, a run in the same precision by an implementation trusted to
compute in it (PyTorch's own float16/bfloat16 kernels, which accumulate in float32), and a
golden run in higher precision (the reference recorded in float64). `benchmark_errors` records
the model once more in the precision and, as each value is produced, measures its error against
the golden value of the same op: max-abs error over the golden's largest magnitude (the rel-err
of trtdiff.analysis.metrics), per recorded key. Nothing of the benchmark is kept but these figures.

A value where the benchmark is not finite and the golden is (FP16 overflows in PyTorch too) has
no figure: the candidate is then judged against the precision's rounding alone, and its own
NaN/Inf stand as they always do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trtdiff.backends.store import to_host
from trtdiff.errors import ModelRunError, cause_line

if TYPE_CHECKING:
    import torch

    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.backends.pytorch.reference import TorchReference

TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
"""The torch dtype each reduced precision's benchmark computes in."""


def benchmark_errors(
    golden: TorchReference, recorded: TorchCapture, precision: str
) -> tuple[dict[str, float], list[str]]:
    """Per recorded key, the benchmark's rel-err against the golden `recorded` (its values all held), and notes.

    The benchmark is `golden`'s module in `precision` on the same inputs, attention recorded as
    the golden was, so that both record the same ops in the same order (checked: keys of ops
    that differ are dropped). A forward that cannot run in the precision gives no figures and a note.
    """
    dtype = TORCH_DTYPES[precision]
    errors: dict[str, float] = {}

    def visit(key: str, tensor: torch.Tensor) -> None:
        if key in recorded.store:
            error = _rel_err(to_host(recorded.value(key)), to_host(tensor))
            if error is not None:
                errors[key] = error

    bench = golden.as_recorded(recorded).at(dtype)
    feeds = dict(zip(recorded.input_keys, recorded.inputs, strict=True))
    try:
        with bench.store() as store:
            measured = bench.record(feeds, store=store, visit=visit, keep=())
    except ModelRunError as error:
        cause = error.__cause__
        why = f"{type(cause).__name__}: {cause_line(cause)}" if cause is not None else error.template
        return {}, [
            f"{precision}: the {dtype} benchmark of the PyTorch model could not run on {bench.device} ({why}); "
            f"each tensor is judged against {dtype}'s rounding alone"
        ]
    same = _same_ops(recorded, measured)
    return {key: error for key, error in errors.items() if key in same}, []


def _same_ops(golden: TorchCapture, bench: TorchCapture) -> set[str]:
    """The keys of records both forwards made alike (same op, same shape), up to the first that differs."""
    keys: set[str] = set()
    for ours, theirs in zip(golden.records, bench.records, strict=False):
        if ours.op != theirs.op or ours.shape != theirs.shape:
            break
        keys.add(ours.key)
    keys.update(
        key for key in golden.output_keys if key in bench.output_keys and len(golden.records) == len(bench.records)
    )
    return keys


def _rel_err(golden: np.ndarray, bench: np.ndarray) -> float | None:
    """max |golden - bench| / max |golden| over positions finite in both; None where the sizes differ,
    the values are not floating, or the benchmark is not finite where the golden is. A value seen
    as produced may be the flat tensor the golden holds as a view (a Linear's (16, 32) for (1, 16, 32))."""
    if golden.size != bench.size or golden.dtype.kind != "f":
        return None
    bench = bench.reshape(golden.shape)
    g, b = np.asarray(golden, dtype=np.float64), np.asarray(bench, dtype=np.float64)
    finite = np.isfinite(g)
    if not np.isfinite(b[finite]).all():
        return None
    both = finite & np.isfinite(b)
    if not both.any():
        return None
    scale = float(np.abs(g[both]).max())
    delta = float(np.abs(g[both] - b[both]).max())
    return delta / scale if scale > 0 else (0.0 if delta == 0 else None)
