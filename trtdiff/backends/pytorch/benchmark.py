"""The benchmark of a reduced-precision comparison: the PyTorch model itself run in that precision.

How much error does FP16 (or BF16) make at each layer of *this* model? Ascend msProbe's answer,
taken here: beside the candidate, a run in the same precision by an implementation trusted to
compute in it (PyTorch's own float16/bfloat16 kernels, which accumulate in float32), and a
golden run in higher precision (the reference, recorded in float32). `benchmark_errors` records
the model once more in the precision and, as each value is produced, measures its error against
the golden value of the same op: max-abs error over the golden's largest magnitude (the rel-err
of trtdiff.analysis.metrics), per recorded key. Nothing of the benchmark is kept but these figures.

On the CPU the float16 benchmark is computed in float32 with every value rounded to float16
(`RoundedOutputs`): what PyTorch's own float16 CPU kernels compute (float32 inside each op,
float16 between ops), at float32's speed instead of 9x it. Measured: per-op figures within 15%
of `.half()`'s (median 1.00) on the tests' transformer block and DeepLabV3+ at 128x128, and
2.5 s instead of 8.6 s for DeepLabV3+ at 512x512. BF16 and every precision on a GPU run as
`.to(dtype)`.

A value where the benchmark is not finite and the golden is (FP16 overflows in PyTorch too) has
no figure: the candidate is then judged against the precision's rounding alone, and its own
NaN/Inf stand as they always do.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils._pytree import tree_map

from trtdiff.backends.pytorch.capture import QuietMode, resolve_device
from trtdiff.backends.store import TensorStore
from trtdiff.errors import ModelRunError, cause_line

if TYPE_CHECKING:
    from trtdiff.backends.pytorch.records import TorchCapture
    from trtdiff.backends.pytorch.reference import TorchReference

RelErr = Callable[[Any, torch.Tensor], float | None]
"""How the benchmark's error at one op is measured: the golden's value and the benchmark's -> rel-err or None."""

TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
"""The torch dtype each reduced precision's benchmark computes in."""


def benchmark_errors(
    golden: TorchReference, recorded: TorchCapture, precision: str, rel_err: RelErr
) -> tuple[dict[str, float], list[str]]:
    """Per recorded key, the benchmark's rel-err against the golden `recorded` (its values all held), and notes.

    `rel_err(golden_value, benchmark_value)`: the figure, None where there is none (analysis.metrics.finite_rel_err,
    given by the caller: the comparison's arithmetic lives there).

    The benchmark is `golden`'s module in `precision` on the same inputs, attention recorded as
    the golden was, so that both record the same ops in the same order (checked: keys of ops
    that differ are dropped). A forward that cannot run in the precision gives no figures and a note.
    """
    dtype = TORCH_DTYPES[precision]
    errors: dict[str, float] = {}

    def visit(key: str, tensor: torch.Tensor) -> None:
        if key in recorded.store:
            error = rel_err(recorded.value(key), tensor)
            if error is not None:
                errors[key] = error

    like = golden.as_recorded(recorded)  # attention recorded as the golden's was
    feeds = dict(zip(recorded.input_keys, recorded.inputs, strict=True))
    emulated = dtype == "float16" and resolve_device(like.device) == "cpu"
    if emulated:  # PyTorch's float16 kernels on the CPU take 9x float32's time: the same rounding, in float32
        bench, feeds = _rounded(like, feeds)
    else:
        bench = like.at(dtype)
    try:
        with TensorStore() as store, RoundedOutputs(torch.float16) if emulated else nullcontext():
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


class RoundedOutputs(QuietMode):
    """Every floating op output rounded to `dtype` and back: float16 storage, float32 arithmetic inside each op.

    That is how PyTorch computes float16 on the CPU (each kernel accumulates in float32 and writes
    float16) and how GPUs' float16 kernels accumulate, at float32's speed: the CPU's float16
    kernels take about 9x as long (DeepLabV3+ at 512x512: 8.1 s against 0.9 s). A value past
    float16's range becomes inf as in float16. Entered outside the recorder, so that the
    recorder sees each value rounded.
    """

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch declares no types here
        self.dtype = dtype

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        result = func(*args, **(kwargs or {}))
        return tree_map(self._round, result)

    def _round(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            return value.to(self.dtype).to(torch.float32)
        return value


def _rounded(bench: TorchReference, feeds: dict[str, np.ndarray]) -> tuple[TorchReference, dict[str, np.ndarray]]:
    """The float32 benchmark of float16 emulated: a copy of the module with float16-rounded parameters and
    buffers, and the inputs rounded (RoundedOutputs rounds every value computed from them)."""
    module = copy.deepcopy(bench.module)
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            if tensor.dtype == torch.float32:
                tensor.copy_(tensor.to(torch.float16))
    rounded = {  # a float16 input (an AutoCast file without --keep_io_types) is fed as the float32 it holds
        name: value.astype(np.float16).astype(np.float32) if value.dtype in (np.float32, np.float16) else value
        for name, value in feeds.items()
    }
    return dataclasses.replace(bench, module=module, dtype="float32", cast=None), rounded


def _same_ops(golden: TorchCapture, bench: TorchCapture) -> set[str]:
    """The keys of records both forwards made alike, up to the first that differs: the same shape, and the same
    op, or the same kind of op in the same module (a golden on CUDA may record `native_batch_norm` where its
    float16 benchmark records `cudnn_batch_norm`: taken for different ops, every figure after the first BatchNorm
    was dropped, and each tensor judged against one ULP alone)."""
    keys: set[str] = set()
    for ours, theirs in zip(golden.records, bench.records, strict=False):
        alike = ours.op == theirs.op or (ours.kind == theirs.kind and ours.module_path == theirs.module_path)
        if not alike or ours.shape != theirs.shape:
            break
        keys.add(ours.key)
    keys.update(
        key for key in golden.output_keys if key in bench.output_keys and len(golden.records) == len(bench.records)
    )
    return keys
