"""compare_tensors' figures against a plain float64 implementation (within 1e-6 relative).

The fast metrics read float32 pairs with the compiled kernel, other blocks into float64 scratch
buffers with numpy, on several threads, or with torch (the GPU path, exercised here on the
CPU); `plain` below is the straightforward version:
every tensor copied whole to float64, numpy reductions. The two must agree on every figure,
on hand-made tensors (NaN/Inf, integers, float16, sizes across blocks and threads) and on
the tensors real test models produce in PyTorch and ONNX Runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.culprit_models import small_cnn, transformer_block
from tests.nonfinite_models import IMAGE_SHAPE, SEQUENCE_SHAPE, masked_attention, nan_in_the_middle
from trtdiff.analysis import metrics
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.pytorch.capture import capture
from trtdiff.pairing.pairs import pair
from trtdiff.report import PairMetrics, Thresholds
from trtdiff.source.export import export_onnx
from trtdiff.source.inputs import make_inputs
from trtdiff.source.loading import from_module
from trtdiff.source.onnx_graph import load_graph

DEFAULT = Thresholds()


def plain(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float | None]:
    """The figures the simple way: whole float64 copies, then numpy (the implementation before blocks)."""
    ref = np.asarray(reference).reshape(-1)
    cand = np.asarray(candidate).reshape(-1)
    floating = any(np.issubdtype(a.dtype, np.floating) for a in (ref, cand))
    ref, cand = ref.astype(np.float64), cand.astype(np.float64)
    nan_r, nan_c, inf_r, inf_c = np.isnan(ref), np.isnan(cand), np.isinf(ref), np.isinf(cand)
    differ = int(np.count_nonzero((nan_r != nan_c) | ((inf_r | inf_c) & (ref != cand))))
    finite = ~(nan_r | nan_c | inf_r | inf_c)
    r, c = ref[finite], cand[finite]
    diff = np.abs(r - c)
    max_abs = float(diff.max()) if diff.size else 0.0
    ref_max = float(np.abs(r).max()) if r.size else 0.0
    norm_r, norm_c = float(np.linalg.norm(r)), float(np.linalg.norm(c))
    if norm_r == 0 and norm_c == 0:
        cosine = 1.0
    elif norm_r == 0 or norm_c == 0:
        cosine = 0.0
    else:
        cosine = float(np.clip(np.dot(r, c) / (norm_r * norm_c), -1, 1))
    figures: dict[str, float | None] = {
        "max_abs": max_abs,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "ref_max_abs": ref_max,
        "rel_err": max_abs / ref_max if ref_max > 0 else (0.0 if max_abs == 0 else float("inf")),
        "nan_ref": int(nan_r.sum()),
        "nan_cand": int(nan_c.sum()),
        "inf_ref": int(inf_r.sum()),
        "inf_cand": int(inf_c.sum()),
        "non_finite_mismatches": differ,
    }
    if floating:
        figures["cosine"] = cosine
        if ref.size and not r.size:  # values, none finite on both sides: no figures (n/a), not cosine 1 and error 0
            figures.update(cosine=None, max_abs=None, mean_abs=None, rel_err=None)
    else:
        mismatches = int(np.count_nonzero(np.asarray(reference).reshape(-1) != np.asarray(candidate).reshape(-1)))
        figures.update(mismatches=mismatches, cosine=1.0 - mismatches / max(ref.size, 1))
    return figures


def assert_figures(got: PairMetrics, reference: np.ndarray, candidate: np.ndarray) -> None:
    for name, want in plain(reference, candidate).items():
        value = getattr(got, name)
        if isinstance(want, int) or want is None:
            assert value == want, name
        else:
            assert value == pytest.approx(want, rel=1e-6, abs=1e-12, nan_ok=True), name


@contextmanager
def numpy_blocks() -> Iterator[None]:
    """Compare as an install without the compiled kernel does: numpy's blocks alone."""
    kernel = metrics._kernel
    metrics._kernel = lambda: None  # type: ignore[assignment]
    try:
        yield
    finally:
        metrics._kernel = kernel


def both_ways(reference: np.ndarray, candidate: np.ndarray) -> None:
    """The kernel and numpy on the CPU, numpy alone, and torch (the GPU path) on CPU tensors, against the plain figures."""
    assert_figures(compare_tensors(reference, candidate, DEFAULT), reference, candidate)
    with numpy_blocks():
        assert_figures(compare_tensors(reference, candidate, DEFAULT), reference, candidate)
    native = metrics._compare_torch(torch.from_numpy(np.ascontiguousarray(reference)), candidate, DEFAULT)
    assert_figures(native, reference, candidate)
    on_cpu = compare_tensors(torch.from_numpy(np.ascontiguousarray(reference)), candidate, DEFAULT)  # read in place
    assert_figures(on_cpu, reference, candidate)


def _noisy(rng: np.random.Generator, shape: tuple[int, ...], dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    a = (rng.standard_normal(shape) * 3).astype(dtype)
    return a, (a + rng.standard_normal(shape) * 1e-3).astype(dtype)


@pytest.mark.parametrize("size", [1, 7, metrics.BLOCK - 1, metrics.BLOCK + 3, 4 * metrics.BLOCK + 5, 1_000_003])
def test_float32_figures_at_every_size_blocks_and_threads(size: int) -> None:
    both_ways(*_noisy(np.random.default_rng(size), (size,)))


def test_the_kernel_is_built_and_reads_every_contiguous_float32_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = metrics._kernel()
    assert kernel is not None, "pip install -e . compiles trtdiff/analysis/_kernel.c (a C compiler is needed)"
    read: list[int] = []

    def counted(ref: np.ndarray, cand: np.ndarray, start: int, stop: int, total: metrics._Moments) -> int:
        reached = kernel(ref, cand, start, stop, total)
        read.append(reached - start)
        return reached

    monkeypatch.setattr(metrics, "_kernel", lambda: counted)
    a, b = _noisy(np.random.default_rng(7), (3 * metrics._PARALLEL_FROM + 9,))
    assert_figures(compare_tensors(a, b, DEFAULT), a, b)
    assert sum(read) == a.size  # every element, over the threads' ranges
    read.clear()
    assert_figures(compare_tensors(a[::2], b[::2], DEFAULT), a[::2], b[::2])  # strided: numpy reads it
    assert_figures(compare_tensors(a, b.astype(np.float64), DEFAULT), a, b.astype(np.float64))  # mixed: numpy
    assert not read


def test_float16_float64_and_mixed_dtypes() -> None:
    rng = np.random.default_rng(1)
    both_ways(*_noisy(rng, (2, 150_001), np.float16))
    both_ways(*_noisy(rng, (300_001,), np.float64))
    a, b = _noisy(rng, (400_000,))
    both_ways(a, b.astype(np.float16))
    both_ways(a, np.round(b).astype(np.int32))


def test_uncorrelated_and_opposite_tensors() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(500_000).astype(np.float32), rng.standard_normal(500_000).astype(np.float32)
    both_ways(a, b)
    both_ways(a, -a)
    both_ways(np.zeros(300_000, np.float32), a[:300_000])


def test_nan_and_inf_scattered_over_blocks() -> None:
    rng = np.random.default_rng(3)
    a, b = _noisy(rng, (5 * metrics.BLOCK + 11,))
    for array, seed in ((a, 4), (b, 5)):
        where = np.random.default_rng(seed).choice(array.size, 60, replace=False)
        array[where[:20]] = np.nan
        array[where[20:40]] = np.inf
        array[where[40:]] = -np.inf
    b[:50] = a[:50]  # some shared positions: NaN on both sides agrees
    both_ways(a, b)
    both_ways(a, a.copy())
    both_ways(np.full(10, np.nan, np.float32), np.full(10, np.nan, np.float32))
    m = compare_tensors(a, b, DEFAULT)
    assert m.diverged and m.reasons[-1].metric == "non_finite"


def test_huge_float64_values_keep_their_cosine() -> None:
    a = np.array([1e200, 2e200, -3e200, 1.0])  # squares past float64: the plain version's cosine is NaN here
    for got in (compare_tensors(a, -a, DEFAULT), metrics._compare_torch(torch.from_numpy(a), -a, DEFAULT)):
        assert got.cosine == pytest.approx(-1.0) and got.rel_err == pytest.approx(2.0) and got.diverged


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_integer_and_bool_tensors(dtype: type) -> None:
    rng = np.random.default_rng(6)
    a = rng.integers(0, 2 if dtype is np.bool_ else 100, 300_000).astype(dtype)
    b = a.copy()
    b[::1000] = ~b[::1000] if dtype is np.bool_ else b[::1000] + 1
    for candidate in (a.copy(), b):
        got = compare_tensors(a, candidate, DEFAULT)
        assert_figures(got, a, candidate)
        assert got.mismatches == int(np.count_nonzero(a != candidate))
        assert_figures(metrics._compare_torch(torch.from_numpy(a), candidate, DEFAULT), a, candidate)


def _model_tensors(model: torch.nn.Module, shape: str, folder: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every paired (PyTorch, ONNX Runtime) value of a model, and ONNX Runtime's integer tensors against themselves."""
    feeds = make_inputs(["x"], shapes=[shape], seed=0)
    loaded = from_module(model)
    path = export_onnx(loaded, feeds, opset=17, exporter="torchscript", path=folder / "m.onnx").path
    graph = load_graph(path)
    recorded = capture(model, feeds)
    pairing = pair(graph, recorded, {name for name, _ in model.named_modules()})
    with OnnxRuntimeBackend(graph) as backend:
        ort = {}
        for part in backend.run({graph.graph_inputs[0]: feeds["x"]}, sorted(backend.available())):
            ort.update(part)
    found = [(np.asarray(pairing.value(recorded, p.key)), ort[t]) for t, p in pairing.pairs.items() if t in ort]
    integers = [v for v in ort.values() if v.dtype.kind in "iub" and v.size]
    found += [(v, v.copy()) for v in integers] + [(v, v + 1) for v in integers if v.dtype.kind == "i"]
    assert found
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("factory", "shape"),
    [
        (small_cnn, "1x3x32x32"),
        (transformer_block, SEQUENCE_SHAPE.replace("1x6x8", "1x16x32")),
        (masked_attention, SEQUENCE_SHAPE),
        (nan_in_the_middle, IMAGE_SHAPE),
    ],
)
def test_figures_on_the_test_models(factory: Callable[[], torch.nn.Module], shape: str, tmp_path: Path) -> None:
    pairs = _model_tensors(factory(), shape, tmp_path)
    for reference, candidate in pairs:
        both_ways(reference, candidate)
