"""An OpenVINO failure on a model trtdiff rewrote (culprit pass, attribution) is a note, as TensorRT's is (issue 31).

The failure is real: OpenVINO's CPU plugin refuses to compile the rewritten model when asked for an inference
precision it has no kernels for (`INFERENCE_PRECISION_HINT i8`: "Wrong value i8 ... Supported values: bf16, f16,
f32"), raised through the backend's own error path. No ONNX op tried here (dynamic Reshape/TopK/CumSum inputs,
Conv and ConvTranspose with runtime weights, QuantizeLinear with a runtime scale, float64, bfloat16, string
inputs, Unique) makes the CPU plugin refuse a shadow model that it compiled whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino")

import trtdiff
from tests.culprit_models import CNN_SHAPE, export, small_cnn
from trtdiff.analysis.attribution import AttributionInputs, attribute
from trtdiff.analysis.culprits import Reference, local_errors
from trtdiff.analysis.judge import Judge
from trtdiff.backends.base import fetch
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.backends.openvino.runtime import OpenVINOBackend
from trtdiff.errors import BackendError
from trtdiff.report import BackendPair, Culprit, ErrorFigures
from trtdiff.source.onnx_graph import GraphInfo, load_graph
from trtdiff.source.samples import Sample

OV = BackendPair("torch", "openvino")
ORT = BackendPair("torch", "onnxruntime")


def _refused(name: str, rewritten: GraphInfo, feeds: object) -> OpenVINOBackend:
    return OpenVINOBackend(rewritten, precision="i8")  # the CPU plugin compiles bf16, f16 or f32 only


def test_an_openvino_failure_in_the_culprit_step_and_attribution_is_a_note(tmp_path: Path) -> None:
    path = export(small_cnn(), CNN_SHAPE, tmp_path / "cnn.onnx", 17)
    report = trtdiff.compare(small_cnn(), onnx=path, input_shapes=[CNN_SHAPE], culprit=False)
    graph = load_graph(path)
    layers = [layer for layer in report.layers if ORT in layer.pairs]
    layers = [type(layer)(**{**vars(layer), "pairs": {**layer.pairs, OV: layer.pairs[ORT]}}) for layer in layers]
    shape = tuple(int(n) for n in CNN_SHAPE.split("x"))
    feeds = {graph.graph_inputs[0]: np.random.default_rng(0).standard_normal(shape, dtype=np.float32)}
    ort = OnnxRuntimeBackend(graph)
    reference = Reference("onnxruntime", lambda names: {**feeds, **fetch(ort, feeds, list(names))}, lambda t: True)
    judge = Judge(report.thresholds)
    notes: list[str] = []
    runs = local_errors(graph, layers, [OV], {"torch": reference}, reference.values, _refused, judge, 1 << 30, notes)
    assert runs == [] and len(notes) == 1
    assert notes[0].startswith("culprits: OpenVINO failed on the shadow model, so torch~openvino has no local errors")
    assert "INFERENCE_PRECISION_HINT" in notes[0] or "i8" in notes[0]
    for pair in (OV, ORT):  # without a place for notes, or for a runtime that compiles nothing, the error stands
        with pytest.raises(BackendError):
            local_errors(
                graph, layers, [pair], {"torch": reference}, reference.values, _refused, judge, 1 << 30,
                notes if pair == ORT else None,
            )  # fmt: skip
    last = layers[-1]
    figures = ErrorFigures(cosine=0.9, max_abs=1.0, rel_err=0.5)
    culprit = Culprit(
        last.tensor, last.onnx_node, last.op_type, last.module, OV, figures, figures, "runtime", (last.onnx_node,)
    )
    samples = lambda: iter([(Sample("s0", ()), feeds, reference.values)])  # noqa: E731
    inputs = AttributionInputs(graph, samples, _refused, (), None, report.thresholds)
    attribution_notes: list[str] = []
    assert attribute(inputs, [culprit], attribution_notes) == ()
    assert len(attribution_notes) == 1
    assert attribution_notes[0].startswith(f"attribution: OpenVINO failed on the model injected at {last.onnx_node}")
