"""The plain-vs-marked check and the bisection of marks, executed on OpenVINO's CPU plugin (shared with TensorRT)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino")

from tests.culprit_models import BLOCK_SHAPE, export, transformer_block
from trtdiff.analysis.metrics import compare_tensors
from trtdiff.backends.base import fetch
from trtdiff.backends.openvino.runtime import OpenVINOBackend
from trtdiff.report import Thresholds
from trtdiff.source.inputs import make_inputs
from trtdiff.source.onnx_graph import GraphInfo, load_graph

FEEDS = make_inputs(["x"], shapes=[BLOCK_SHAPE], seed=0)


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> GraphInfo:
    """The transformer block at opset 13: LayerNorm decomposed, which OpenVINO fuses back into MVN."""
    return load_graph(export(transformer_block(), BLOCK_SHAPE, tmp_path_factory.mktemp("block") / "b13.onnx", 13))


def _checked(graph: GraphInfo, wanted: list[str], strict: bool | None) -> OpenVINOBackend:
    backend = OpenVINOBackend(graph, compare=compare_tensors, bisect_marks=strict)
    fetch(backend, FEEDS, wanted)
    return backend


def test_marking_every_tensor_moves_the_bits_but_not_the_answer_and_no_bisection_runs(block: GraphInfo) -> None:
    with _checked(block, sorted(OpenVINOBackend(block).available()), None) as backend:
        assert backend.answer is not None and backend.answer.differs()  # bitwise, the outputs moved
        check = backend.marking_check(Thresholds())
    assert check.status == "same" and check.max_abs is not None and 0 < check.max_abs < 1e-6
    assert check.bisected == () and check.bisect_builds == 0  # within the thresholds: nothing to bisect


def test_strict_bisection_names_a_mark_that_alone_moves_the_bits(block: GraphInfo) -> None:
    """--trt-bisect's semantics on OpenVINO: real compilations with half the marks, on the sample that differed.

    The search names a small set whose marking alone changes the outputs (minimal_marks), not every such set.
    """
    everything = sorted(OpenVINOBackend(block).available())
    with _checked(block, everything, True) as backend:
        check = backend.marking_check(Thresholds())
    # Which mark it names depends on the exported graph (here the residual Add or a LayerNorm Mul, both around
    # the LayerNorm OpenVINO fuses back into MVN); what must hold is that the marks named change it alone.
    assert check.status == "same" and 1 <= len(check.bisected) <= 2 and 0 < check.bisect_builds <= 16
    assert set(check.bisected) <= set(everything)
    with _checked(block, list(check.bisected), True) as alone:  # confirmed apart from the search
        assert alone.answer is not None and alone.answer.differs()


@pytest.mark.slow
def test_qdq_marks_on_dequantize_outputs_do_not_change_openvinos_answer(tmp_path: Path) -> None:
    """What was tried (docs/openvino.md): marking a QDQ model's DequantizeLinear outputs moves OpenVINO off its
    int8 Add, yet the final outputs stay bit for bit the same on the CPU plugin 2026.4.1."""
    from tests.quant_models import quantized, small_cnn

    graph = load_graph(quantized(small_cnn(), tmp_path))
    dequantized = sorted(t for t in OpenVINOBackend(graph).available() if "DequantizeLinear" in t)
    assert dequantized
    backend = OpenVINOBackend(graph, compare=compare_tensors)
    with backend:
        for seed in range(4):
            feeds = {"x": np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)}
            fetch(backend, feeds, dequantized)
        check = backend.marking_check(Thresholds())
    assert check.status == "same" and check.samples == 4 and check.max_abs == 0.0
