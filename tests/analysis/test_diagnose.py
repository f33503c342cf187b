"""The culprit step on the pipeline: verdicts, attribution on the trained example, the TensorRT shadow engine."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

import trtdiff
from trtdiff.analysis.culprits import Reference, local_errors
from trtdiff.analysis.judge import Judge
from trtdiff.analysis.shadow import build_shadow, embed
from trtdiff.backends.base import fetch
from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
from trtdiff.cli.app import main
from trtdiff.errors import BackendError
from trtdiff.render.culprits import (
    attribution_summary,
)
from trtdiff.report import BackendPair
from trtdiff.source.onnx_graph import load_graph

FACTORY = "trtdiff.examples.deeplabv3plus:deeplabv3plus_resnet"
ORT = BackendPair("torch", "onnxruntime")


@pytest.fixture(scope="module")
def shapes_opset10() -> trtdiff.Report:
    from trtdiff.examples.shapes import EVAL_DIR, deeplabv3plus_shapes

    return trtdiff.compare(
        deeplabv3plus_shapes(), opset=10, inputs_dir=str(EVAL_DIR / "images"), labels_dir=str(EVAL_DIR / "labels")
    )


@pytest.mark.slow
def test_trained_example_names_both_resizes_and_what_fixing_them_recovers(shapes_opset10: trtdiff.Report) -> None:
    report = shapes_opset10
    assert [(c.onnx_node, c.module, c.verdict) for c in report.culprits] == [
        ("/decoder/Resize", "decoder", "export"),
        ("/Resize", "", "export"),
    ]  # "": the model itself
    assert report.culprit == report.culprits[0]
    decoder, final = report.attribution
    seg = report.segmentation
    assert seg is not None
    # Before: ONNX Runtime's mIoU on the 24 labelled images; after both injections: PyTorch's exactly.
    assert decoder.miou_before == pytest.approx(seg.label_miou["onnxruntime"])
    assert 0.0 < decoder.miou_recovered < final.miou_recovered
    assert final.miou_after == pytest.approx(seg.label_miou["torch"])
    assert final.miou_recovered == pytest.approx(seg.miou_drop["onnxruntime"])
    assert final.final_rel_err_after == 0.0 and decoder.final_rel_err_after < decoder.final_rel_err_before


@pytest.mark.slow
def test_each_culprit_carries_the_re_export_at_opset_11(shapes_opset10: trtdiff.Report) -> None:
    for culprit in shapes_opset10.culprits:  # a Python caller reads parameter names; the CLI, flags (below)
        assert culprit.advice_code == "resize-no-coordinate-mode"
        assert culprit.advice.startswith("re-export at opset 11 or higher (opset 11): align_corners=False is then")


def test_what_fixing_each_resize_alone_recovers(shapes_opset10: trtdiff.Report) -> None:
    """The decoder Resize feeds the final one: fixing the final one alone is what it adds to fixing the decoder's."""
    decoder, final = shapes_opset10.attribution
    assert decoder.miou_recovered_alone == decoder.miou_recovered  # nothing feeds the first culprit
    assert final.miou_recovered_alone == pytest.approx(final.miou_recovered - decoder.miou_recovered)
    assert final.miou_after_alone == pytest.approx(final.miou_before + final.miou_recovered_alone)
    assert 0.0 < decoder.miou_recovered_alone < final.miou_recovered_alone < final.miou_recovered
    assert all(a.measurable and a.measurable_alone for a in shapes_opset10.attribution)
    # One pixel's share: 5 classes, 24 labelled 64x64 images.
    assert final.miou_pixel_share == pytest.approx(1 / (5 * 24 * 64 * 64))
    lost = final.miou_recovered
    share = final.miou_recovered_alone / lost
    assert 0.9 < share < 1.0
    assert attribution_summary(shapes_opset10) == [
        f"/Resize alone carries {100 * share:.0f}% of the {lost:.4f} mIoU lost"
    ]
    assert [layer.index for layer in shapes_opset10.layers] == list(range(1, len(shapes_opset10.layers) + 1))


def test_the_aspp_pooling_resize_is_not_a_culprit_and_its_local_error_is_tiny(shapes_opset10: trtdiff.Report) -> None:
    by_node = {layer.onnx_node: layer for layer in shapes_opset10.layers}
    aspp = by_node["/aspp/branches.4/Resize"]
    assert aspp.local is not None and aspp.local[ORT].rel_err < 1e-5
    decoder = by_node["/decoder/Resize"]
    assert decoder.local is not None and decoder.local[ORT].diverged


@pytest.mark.slow
def test_no_culprit_skips_the_step_and_culprit_forces_it() -> None:
    skipped = trtdiff.compare(FACTORY, input_shapes=["1x3x32x32"], opset=10, culprit=False)
    assert skipped.culprits == () and all(layer.local is None for layer in skipped.layers)
    assert skipped.first_divergence is not None
    forced = trtdiff.compare(FACTORY, input_shapes=["1x3x32x32"], opset=13, culprit=True)
    assert forced.passed and forced.culprits == () and forced.drift is None
    assert all(layer.local is not None and not layer.local[ORT].diverged for layer in forced.layers)


@pytest.mark.slow
def test_cli_culprit_flags_reach_the_library(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = CliRunner().invoke(
        main,
        ["compare", FACTORY, "--input-shape", "1x3x32x32", "--opset", "10", "--no-culprit", "--json", str(out), "-q"],
    )
    assert result.exit_code == 1, result.output
    assert trtdiff.Report.from_json(out.read_text()).culprits == ()
    result = CliRunner().invoke(
        main, ["compare", FACTORY, "--input-shape", "1x3x32x32", "--opset", "10", "--json", str(out), "-q"]
    )
    report = trtdiff.Report.from_json(out.read_text())
    assert result.exit_code == 1 and [c.onnx_node for c in report.culprits] == ["/decoder/Resize", "/Resize"]
    assert report.culprits[0].advice.startswith("re-export at opset 11 or higher (--opset 11)"), "the CLI's flags"
    # --quiet: the verdict, then each culprit and its fix; no table, no check lines, no first divergence.
    text = " ".join(line.strip() for line in result.output.splitlines())
    assert text.startswith("FAIL: 3 of 4 checks failed: layers/torch~onnxruntime, ")
    assert (
        "CULPRIT: /decoder/Resize (Resize, module decoder) on torch~onnxruntime, export problem; fix: re-export at "
        "opset 11 or higher (--opset 11): align_corners=False is then written as half_pixel "
        "CULPRIT 2: /Resize (Resize, the model itself) on torch~onnxruntime, export problem; fix: as for culprit 1"
    ) in text
    assert text.endswith("fix: as for culprit 1") and len(result.output.splitlines()) <= 8


@pytest.mark.slow
def test_onnx_runtime_is_a_reference_for_the_spec_evaluator(export_example: Callable[..., Path]) -> None:
    # onnxruntime~onnx-reference: ONNX Runtime follows the spec at opset 10, so nothing is a culprit there.
    report = trtdiff.compare(
        FACTORY,
        onnx=export_example(10),
        input_shapes=["1x3x64x64"],
        backends=["torch", "onnxruntime", "onnx-reference"],
    )
    pairs = {c.pair for c in report.culprits}
    assert pairs == {ORT, BackendPair("torch", "onnx-reference")}
    assert all(c.verdict == "export" for c in report.culprits)


def test_tensorrt_shadow_model_uses_the_comparisons_capture_and_budget(
    export_example: Callable[..., Path], example_feeds: dict[str, np.ndarray], tmp_path: Path
) -> None:
    """The shadow engine: every local output a debug tensor of one engine under the mark budget, not a network output."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX is not installed (the tensorrt-rtx extra)")
    from trtdiff.backends.onnxruntime_backend import OnnxRuntimeBackend
    from trtdiff.backends.tensorrt.builder import build_engine
    from trtdiff.backends.tensorrt.rewritten import SINK, rewritten_model
    from trtdiff.options import BackendOptions, BuildSettings
    from trtdiff.source.onnx_graph import graph_from_model

    graph = load_graph(export_example(13))
    tensors = [t for t in graph.node_outputs if graph.tensor_type(t).is_float and t in graph.data_tensors]
    shadow = build_shadow(graph, tensors, lambda tensor: True)
    wanted = [*shadow.reference_inputs, *shadow.exact_inputs]
    values = {**example_feeds, **fetch(OnnxRuntimeBackend(graph), example_feeds, wanted)}
    shadow = embed(shadow, values)  # shape arithmetic as constants, as the culprit step does
    onnx.save(shadow.model, tmp_path / "shadow.onnx")
    shadow_graph = load_graph(tmp_path / "shadow.onnx")
    runtime = BackendOptions(tensorrt=BuildSettings(precision="fp32", mark_budget_bytes=1 << 16), tf32=False)
    feeds = {name: values[name] for name in shadow_graph.graph_inputs}
    model, settings = rewritten_model(shadow_graph, feeds, runtime)
    assert settings.outputs == "all" and settings.mark_budget_bytes == 1 << 16
    assert [o.name for o in model.graph.output] == [SINK]  # one network output; the local outputs are inside
    assert {name for name, _ in settings.input_shapes} == set(shadow_graph.graph_inputs)
    path = tmp_path / "sinked.onnx"
    onnx.save(model, path)
    result = build_engine(graph_from_model(model, path), settings, plain=False)
    plan = result.mark_plan
    assert result.plain is None and plan.outputs == (SINK,) and result.plan_nbytes > 100_000
    assert set(shadow.outputs.values()) <= set(plan.returned_onnx())  # every local output is a debug tensor
    assert plan.runs_per_sample > 1  # the comparison's budget bounds each run of the shadow engine too
    assert len(shadow.outputs) == len(tensors) and all(len(s) == 1 for s in shadow.subgraphs.values())


def test_shadow_inputs_take_the_types_of_the_values_fed(export_example: Callable[..., Path]) -> None:
    """Defect: the shadow model's input types came from shape inference alone."""
    from trtdiff.source.onnx_graph import typed_inputs

    graph = load_graph(export_example(13))
    model = onnx.ModelProto()
    model.CopyFrom(graph.model)
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.DOUBLE  # what inference got wrong
    del model.graph.input[0].type.tensor_type.shape.dim[:]
    typed = typed_inputs(model, {"x": np.zeros((1, 3, 64, 64), np.float32)})
    value = typed.graph.input[0].type.tensor_type
    assert value.elem_type == onnx.TensorProto.FLOAT and [d.dim_value for d in value.shape.dim] == [1, 3, 64, 64]
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE  # the model given is kept


@pytest.mark.slow
def test_a_tensorrt_failure_in_the_culprit_step_is_a_note(export_example: Callable[..., Path]) -> None:
    """Defect: a TensorRT failure on the shadow or injected model threw away the finished comparison.

    The failure here is real: the TensorRT backend, opened on the rewritten model on this machine, raises
    the BackendError it raises wherever no engine can run (the same path as any TensorRT error there).
    """
    from trtdiff.analysis.attribution import AttributionInputs, attribute
    from trtdiff.backends.tensorrt import probe
    from trtdiff.backends.tensorrt.rewritten import reopen
    from trtdiff.options import BackendOptions
    from trtdiff.report import Culprit, ErrorFigures
    from trtdiff.source.samples import Sample

    if probe().can_run:
        pytest.skip("checks the failure path; TensorRT can run here")
    report = trtdiff.compare(FACTORY, onnx=export_example(10), input_shapes=["1x3x64x64"], culprit=False)
    graph = load_graph(export_example(10))
    trt_pair = BackendPair("torch", "tensorrt")
    layers = [dataclasses.replace(layer, pairs={**layer.pairs, trt_pair: layer.pairs[ORT]}) for layer in report.layers]
    runtime = BackendOptions()

    def open_tensorrt(name: str, rewritten, feeds):
        return reopen(rewritten, feeds, runtime)

    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)}
    ort = OnnxRuntimeBackend(graph)
    reference = Reference("onnxruntime", lambda names: {**feeds, **fetch(ort, feeds, list(names))}, lambda t: True)

    def local(*notes: list[str]) -> object:
        judge = Judge(report.thresholds)
        return local_errors(
            graph, layers, [trt_pair], {"torch": reference}, reference.values, open_tensorrt, judge, 1 << 30, *notes
        )

    notes: list[str] = []
    runs = local(notes)
    assert runs == [] and len(notes) == 1
    assert notes[0].startswith("culprits: TensorRT failed on the shadow model, so torch~tensorrt has no local errors")
    assert "BackendError: no machine here can execute a TensorRT engine" in notes[0]
    with pytest.raises(BackendError):  # without a place for notes the error is not swallowed
        local()
    last = layers[-1]
    figures = ErrorFigures(cosine=0.9, max_abs=1.0, rel_err=0.5)
    culprit = Culprit(
        last.tensor, last.onnx_node, last.op_type, last.module, trt_pair, figures, figures, "runtime", (last.onnx_node,)
    )
    samples = lambda: iter([(Sample("s0", ()), feeds, reference.values)])  # noqa: E731
    inputs = AttributionInputs(graph, samples, open_tensorrt, (), None, report.thresholds)
    attribution_notes: list[str] = []
    assert attribute(inputs, [culprit], attribution_notes) == ()
    assert len(attribution_notes) == 1 and attribution_notes[0].startswith("attribution: TensorRT failed")


def test_local_errors_skip_a_candidate_that_cannot_be_reopened(export_example: Callable[..., Path]) -> None:
    report = trtdiff.compare(FACTORY, onnx=export_example(10), input_shapes=["1x3x64x64"], culprit=False)
    graph = load_graph(export_example(10))
    runs = local_errors(
        graph, report.layers, [ORT], {}, lambda names: {}, lambda *args: None, Judge(report.thresholds), 1 << 30
    )
    assert runs == []


def test_the_culprit_step_opens_one_candidate_at_a_time(export_example: Callable[..., Path]) -> None:
    """Each shadow and injected model is opened, run on every sample and closed before the next one opens."""
    from trtdiff.analysis.attribution import AttributionInputs, attribute
    from trtdiff.report import Culprit, ErrorFigures
    from trtdiff.source.samples import Sample

    graph = load_graph(export_example(10))
    events: list[str] = []

    class Recorded(OnnxRuntimeBackend):  # the real ONNX Runtime backend, with its opening and closing recorded
        def close(self) -> None:
            events.append("close")

    def open_like(name: str, rewritten, feeds):
        events.append("open")
        return Recorded(rewritten)

    rng = np.random.default_rng(0)
    samples = [{"x": rng.standard_normal((1, 3, 64, 64), dtype=np.float32)} for _ in range(3)]
    ort = OnnxRuntimeBackend(graph)
    culprits = []
    for layer in [n for n in graph.nodes if n.op_type == "Resize"][:2]:
        figures = ErrorFigures(cosine=0.9, max_abs=1.0, rel_err=0.5)
        culprits.append(
            Culprit(layer.outputs[0], layer.name, "Resize", None, ORT, figures, figures, "export", (layer.name,))
        )

    def stream():
        for index, feeds in enumerate(samples):
            yield Sample(f"s{index}", ()), feeds, lambda names, feeds=feeds: {**feeds, **fetch(ort, feeds, list(names))}

    inputs = AttributionInputs(graph, stream, open_like, (), None, trtdiff.report.Thresholds())
    attributions = attribute(inputs, culprits, [])
    assert len(attributions) == 2 and events == ["open", "close", "open", "close"]
    assert attributions[-1].final_rel_err_after == 0.0  # the reference injected at the last Resize: no error left
