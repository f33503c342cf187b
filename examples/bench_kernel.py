"""The comparison kernel against torch's own reductions on the same float32 arrays (issue 39).

Each figure is the median of `--repeat` runs of one pair's moments (cosine, max-abs, rel-err,
NaN/Inf counts): the compiled kernel with numpy where it steps aside (the host path every
comparison of host arrays takes), against `_torch_moments` (the path a reference held on a GPU
takes) on CPU tensors viewing the same memory, with torch's own threads. Both give the same
figures (checked here). Run: python examples/bench_kernel.py [--sizes 1,16,64] [--repeat 5]
(sizes in millions of elements).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from trtdiff.analysis.metrics import _kernel, _numpy_moments, _torch_moments, threads


def _timed(moments: Callable[[Any, Any], object], ref: Any, cand: Any, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        moments(ref, cand)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64", help="millions of elements, comma-separated")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"kernel built: {_kernel() is not None}; metrics threads {threads()}; torch threads {torch.get_num_threads()}"
    )
    print("| elements | kernel + numpy | torch | torch / kernel |")
    print("| --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    for millions in (float(s) for s in args.sizes.split(",")):
        n = int(millions * 1e6)
        ref = rng.standard_normal(n, dtype=np.float32)
        cand = ref + rng.standard_normal(n, dtype=np.float32) * np.float32(1e-3)
        ours = _numpy_moments(ref, cand)
        theirs = _torch_moments(torch.from_numpy(ref), torch.from_numpy(cand))
        assert abs(ours.dot - theirs.dot) <= 1e-9 * abs(ours.dot) and ours.max_abs == theirs.max_abs
        kernel = _timed(_numpy_moments, ref, cand, args.repeat)
        torch_time = _timed(_torch_moments, torch.from_numpy(ref), torch.from_numpy(cand), args.repeat)
        print(f"| {millions:g}M | {kernel * 1e3:.1f} ms | {torch_time * 1e3:.1f} ms | {torch_time / kernel:.2f}x |")


if __name__ == "__main__":
    main()
