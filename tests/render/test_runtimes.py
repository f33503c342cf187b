"""Every compiled runtime's summary (report.runtimes) in every view through one function, the alarm first."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

from click.testing import CliRunner
from conftest import base_report
from rich.console import Console

from trtdiff.cli.app import main
from trtdiff.render.format import escape_html
from trtdiff.render.html import render_html
from trtdiff.render.junit import render_junit
from trtdiff.render.markdown import render_markdown
from trtdiff.render.runtimes import compiled_runtimes, runtime_lines
from trtdiff.render.terminal import render_terminal
from trtdiff.report import EngineLayerInfo, FusionSplit, LayerPrecision, MarkingCheck, Report, RuntimeSummary

SUMMARY = RuntimeSummary(
    backend="openvino",
    title="OpenVINO",
    version="2026.4.1",
    device="CPU: AMD EPYC",
    precision_asked="f32",
    precision_compiled="f32",
    compiled_models=2,
    compile_seconds=0.25,
    marked=2,
    unmapped_ops=("Reshape_15_flatten_reshape",),
    fusion_source="OpenVINO runtime graph",
    runtime_layers=3,
    fused_layers=(EngineLayerInfo("conv/WithoutBiases", ("conv", "relu")),),
    fusions_split=(FusionSplit("conv/WithoutBiases", ("conv", "relu"), ("conv/WithoutBiases", "relu")),),
    layer_precisions=(
        LayerPrecision("conv/WithoutBiases", ("conv", "relu"), "FP32", "BF16", "lower"),
        LayerPrecision("y", ("add",), "FP32", "FP32"),
    ),
    marking_check=MarkingCheck(status="same", samples=1, runs=1, worst_output="y", rel_err=0.0, cosine=1.0),
)
CHANGED = dataclasses.replace(
    SUMMARY,
    marking_check=MarkingCheck(
        status="changed",
        samples=1,
        runs=1,
        worst_output="y",
        rel_err=0.02,
        cosine=0.999,
        max_abs=0.1,
        bisected=("dq_out",),
        bisect_builds=3,
    ),
)


def _terminal(report: Report) -> str:
    out = io.StringIO()
    render_terminal(report, Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_the_lines_say_what_was_compiled_fused_split_run_and_left_unmapped() -> None:
    lines = [line.text for line in runtime_lines(SUMMARY)]
    assert lines[0].startswith("OpenVINO 2026.4.1 on CPU: AMD EPYC: inference precision f32; 2 compiled models")
    assert "fused 2 ONNX nodes into 1 layer" in lines[1] and "the marked models split 1 of them" in lines[1]
    assert "1 layer as asked (FP32), 1 lower" in lines[2] and "conv/WithoutBiases BF16 for FP32" in lines[2]
    assert lines[3] == "unmapped: 1 runtime op name no ONNX node answers to (Reshape_15_flatten_reshape)"
    assert lines[4].startswith("marking check (plain vs marked outputs): same over 1 sample")
    assert not any(line.alarm for line in runtime_lines(SUMMARY))


def test_a_changed_answer_is_said_first_with_the_bisected_marks() -> None:
    first = runtime_lines(CHANGED)[0]
    assert first.alarm and first.text.startswith("OpenVINO: marking changed the answer")
    assert "marking dq_out changes it (bisected in 3 compilations)" in first.text


def test_every_view_shows_every_runtime_through_the_one_function() -> None:
    report = dataclasses.replace(base_report(), runtimes=(CHANGED,))
    terminal, markdown, html = _terminal(report), render_markdown(report), render_html(report)
    assert all(line.text[:60] in terminal for line in runtime_lines(CHANGED))
    assert "**OpenVINO: marking changed the answer" in markdown and "precision as run" in markdown
    assert "<h2>OpenVINO</h2>" in html and "<p class='fail'><b>OpenVINO: marking changed the answer" in html
    assert '<property name="openvino.marking_check" value="changed" />' in render_junit(report)
    assert "OpenVINO" not in _terminal(base_report()) and "OpenVINO" not in render_markdown(base_report())


def test_tensorrt_and_openvino_in_one_run_both_render_through_the_one_function(trt_ran: Report) -> None:
    """Issue 31: TensorRT's summary is one of the compiled runtimes, shown by the same lines as OpenVINO's."""
    report = dataclasses.replace(trt_ran, runtimes=(CHANGED,))
    assert [r.backend for r in compiled_runtimes(report)] == ["tensorrt", "openvino"]
    trt = compiled_runtimes(report)[0]
    assert trt.title == "TensorRT" and trt.status == "ran" and ("gpu", "NVIDIA H200") in trt.facts
    assert trt.unmapped_tensors == ("/backbone/Relu_output_0: fused into a Conv layer",)
    terminal, markdown, html = _terminal(report), render_markdown(report), render_html(report)
    for summary in compiled_runtimes(report):
        for line in runtime_lines(summary):
            assert line.text[:60] in terminal and escape_html(line.text) in html
    assert "TensorRT: tensorrt 10.9.0, fp32, TF32 off, outputs unfused: 2 marked, 1 not returned" in markdown
    assert "**OpenVINO: marking changed the answer" in markdown
    assert html.index("<h2>TensorRT</h2>") < html.index("<h2>OpenVINO</h2>")
    junit = render_junit(report)
    for fact in ("tensorrt.status", "tensorrt.gpu", "openvino.status", "openvino.marking_check"):
        assert f'<property name="{fact}"' in junit


def test_tensorrt_marking_changed_speaks_of_engines_and_builds(trt_ran: Report) -> None:
    check = CHANGED.marking_check
    assert trt_ran.tensorrt is not None and check is not None
    report = dataclasses.replace(trt_ran, tensorrt=dataclasses.replace(trt_ran.tensorrt, marking_check=check))
    first = runtime_lines(compiled_runtimes(report)[0])[0]
    assert first.alarm and first.text.startswith(
        "TensorRT: marking changed the answer: the plain engine's outputs differ from the marked engine's"
    )
    assert first.text.endswith("marking dq_out changes it (bisected in 3 builds)")


def test_a_saved_report_of_the_schema_before_runtimes_renders_tensorrt(trt_ran: Report, tmp_path: Path) -> None:
    """A report written before `runtimes` existed (TensorRT in `tensorrt` alone) loads and renders the same way."""
    data = json.loads(trt_ran.to_json())
    del data["runtimes"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    markdown = tmp_path / "old.md"
    result = CliRunner().invoke(main, ["report", str(path), "--markdown", str(markdown)])
    assert result.exit_code == 0, result.output
    assert "TensorRT: tensorrt 10.9.0" in markdown.read_text()
    assert compiled_runtimes(Report.from_json(path.read_text()))[0].backend == "tensorrt"


def test_a_skipped_tensorrt_still_names_its_installed_version_in_the_environment(trt_skipped: Report) -> None:
    """As before the move onto compiled runtimes: the version installed is an environment fact, run or not."""
    assert trt_skipped.tensorrt is not None
    installed = dataclasses.replace(trt_skipped.tensorrt, version="tensorrt_rtx 1.7.1")
    report = dataclasses.replace(trt_skipped, tensorrt=installed)
    assert "· tensorrt\\_rtx 1.7.1 ·" in render_markdown(report)
    assert "<dt>tensorrt</dt><dd>tensorrt_rtx 1.7.1</dd>" in render_html(report)
