"""Every compiled runtime's summary (report.runtimes) in every view through one function, the alarm first."""

from __future__ import annotations

import dataclasses
import io

from conftest import base_report
from rich.console import Console

from trtdiff.render.html import render_html
from trtdiff.render.junit import render_junit
from trtdiff.render.markdown import render_markdown
from trtdiff.render.runtimes import runtime_lines
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
