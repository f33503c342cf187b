"""The terminal view: exact lines at 80 columns without colour, for hand-built reports and a real one."""

from __future__ import annotations

import dataclasses
import io
import re
from types import SimpleNamespace

from rich.console import Console

from trtdiff.render.terminal import render_build, render_terminal, render_verdict
from trtdiff.report import Report


def _console(out: io.StringIO) -> Console:
    return Console(file=out, width=80, color_system=None)


def render(report: Report, *, show_all: bool = False) -> str:
    out = io.StringIO()
    render_terminal(report, _console(out), show_all=show_all)
    return out.getvalue()


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def flat(text: str) -> str:
    """The text with rich's wrapping at 80 columns undone, to compare whole sentences."""
    return " ".join(line.strip() for line in text.splitlines())


def test_passing_report_exactly(passing: Report) -> None:
    assert lines(render(passing)) == [
        "trtdiff examples:tiny  (inputs: x 1x3x32x32)",
        "ONNX: opset 13 as written, exporter torchscript",
        "backends: torch 2.13.0+cpu (reference), onnxruntime 1.32.0",
        "(CPUExecutionProvider)",
        "paired 3 of 3 float tensors with PyTorch (3 op); others: 2 shape; 2 not compared",
        "note: 1 reference tensors were spilled to disk (over the memory limit)",
        "# op   module / ONNX node      cos rel≤1e-3",
        "1 Conv backbone.stem.0    1.000000 2.30e-07 ok",
        "2 Relu backbone.stem.1    1.000000 2.20e-07 ok",
        "3 Conv head               1.000000 3.10e-07 ok",
        "PASS: all 3 compared tensors agree (torch~onnxruntime).",
    ]


def test_diverged_report_stops_at_the_first_divergence(diverged: Report) -> None:
    text = render(diverged)
    rows = lines(text)
    assert "3 Resize decoder            0.999854 2.64e-02 DIVERGED" in rows
    assert not any(row.startswith("4 ") for row in rows)
    assert "… 1 more compared layers after the first divergence (--all shows them)" in rows
    assert (
        "FIRST DIVERGENCE: /decoder/Resize (Resize, module decoder) on torch~onnxruntime: cosine 0.999854, "
        "max-abs 1.04e-02, rel-err 2.64e-02 (cosine 0.999854 < 0.9999; rel-err 2.64e-02 > 0.001) "
        "suspects: /decoder/Resize, then /decoder/Concat, /decoder/Div, /decoder/Cast, /decoder/Slice, /decoder/Shape "
        "FAIL: 3 of 3 checks failed: layers/torch~onnxruntime, outputs/min-cosine/torch~onnxruntime, "
        "outputs/rtol/torch~onnxruntime"
    ) in flat(text)
    assert "ok" not in flat(text).split("FIRST DIVERGENCE")[1], "one sample: checks are not listed one by one"


def test_show_all_lists_every_layer(diverged: Report) -> None:
    rows = lines(render(diverged, show_all=True))
    assert "4 Conv   head               0.999225 1.14e-01 DIVERGED" in rows
    assert not any("more compared layers" in row for row in rows)


def test_gate_lists_every_check_and_segmentation(gated: Report) -> None:
    text = flat(render(gated))
    assert (
        "FAIL outputs/min-cosine/torch~onnxruntime: min-cosine 0.9999 on final outputs of 3 sample(s): "
        "worst cosine 0.99942 (sample-2) "
        "ok   outputs/rtol/torch~onnxruntime: rtol 0.001 on final outputs of 3 sample(s): "
        "worst rel_err 0.0005 (sample-0) "
        "FAIL agreement/min-miou/torch~onnxruntime: mIoU 0.8875 agreement with torch (min 0.9); "
        "worst sample sample-2 0.8100 "
        "ok   labels/min-miou/onnxruntime: mIoU 0.7000 against labels (min 0.6); worst sample sample-2 0.7100 "
        "FAIL labels/max-miou-drop/onnxruntime: mIoU drop 0.1000 relative to torch (max 0.05): 0.8000 -> 0.7000 "
        "segmentation: agreement mIoU torch~onnxruntime 0.8875 (0.10% pixels changed); mIoU vs labels torch 0.8000; "
        "mIoU vs labels onnxruntime 0.7000; drop onnxruntime 0.1000"
    ) in text
    assert text.endswith(
        "FAIL: 3 of 5 checks failed: outputs/min-cosine/torch~onnxruntime, agreement/min-miou/torch~onnxruntime, "
        "labels/max-miou-drop/onnxruntime"
    )


def test_gate_that_holds_despite_a_diverged_layer(gated: Report) -> None:
    checks = tuple(dataclasses.replace(check, passed=True, failing_samples=()) for check in gated.checks)
    text = flat(render(dataclasses.replace(gated, checks=checks, passed=True)))
    assert "FIRST DIVERGENCE: /decoder/Resize" in text
    assert text.endswith(
        "PASS: all 5 checks hold (layers of the first sample are shown, not gated; the per-layer gate checks them)."
    )


def test_verdict_alone(diverged: Report, passing: Report) -> None:
    out = io.StringIO()
    render_verdict(passing, _console(out))
    assert lines(out.getvalue()) == ["PASS: all 3 compared tensors agree (torch~onnxruntime)."]
    out = io.StringIO()
    render_verdict(diverged, _console(out))
    assert flat(out.getvalue()) == (  # the verdict first; without a culprit, the first divergence stands in for it
        "FAIL: 3 of 3 checks failed: layers/torch~onnxruntime, outputs/min-cosine/torch~onnxruntime, "
        "outputs/rtol/torch~onnxruntime FIRST DIVERGENCE: /decoder/Resize (Resize, module decoder) on torch~onnxruntime"
    )


def test_tensorrt_skipped_is_a_note(trt_skipped: Report) -> None:
    rows = lines(render(trt_skipped))
    assert "note: TensorRT skipped: no CUDA GPU: torch.cuda.is_available() is False" in rows
    assert not any(row.startswith("TensorRT:") for row in rows)


def test_tensorrt_ran_three_pairs_fit_80_columns(trt_ran: Report) -> None:
    text = render(trt_ran)
    rows = lines(text)
    assert (
        "TensorRT: tensorrt 10.9.0, fp32, TF32 off, outputs unfused: 2 marked, 1 not returned "
        "1 engine, at most 1 run per sample marked engine: 123,456 bytes, 3 engine layers, built in 1.50s "
        "3 executed layers; fused 2 ONNX nodes into 1 layer (largest: 2 nodes) (source: engine inspector)"
    ) in flat(text)
    head = rows.index("# op   module / ONNX node                            pair        cos rel≤1e-3")
    assert rows[head : head + 4] == [  # a row per layer, with the pair furthest from its limits
        "# op   module / ONNX node                            pair        cos rel≤1e-3",
        "1 Conv backbone.stem.0                               pt~trt 0.999998 8.00e-06 ok",
        "2 Relu backbone.stem.1                               pt~ort 1.000000 2.30e-07 ok",
        "3 Conv …y.long.module.name.that.is.cut.from.the.left pt~trt 0.999998 8.00e-06 ok",
    ]


def test_marking_changed_the_answer_is_said_first(trt_ran: Report) -> None:
    """Issue 18: where the plain engine's outputs differ from the marked engine's, that comes before the rest."""
    from trtdiff.report import MarkingCheck

    check = MarkingCheck(
        status="changed", samples=2, runs=4, worst_output="y", cosine=0.99, max_abs=0.5, rel_err=0.25,
        bisected=("/backbone/Relu_output_0",), bisect_builds=3,
    )  # fmt: skip
    assert trt_ran.tensorrt is not None
    report = dataclasses.replace(trt_ran, tensorrt=dataclasses.replace(trt_ran.tensorrt, marking_check=check))
    text = flat(render(report))
    changed = text.index("marking changed the answer: the plain engine's outputs differ from the marked engine's")
    assert changed < text.index("TensorRT: tensorrt 10.9.0")
    assert "rel err 2.50e-01" in text and "marking /backbone/Relu_output_0 changes it (bisected in 3 builds)" in text
    assert all(len(row) <= 80 for row in render(report).splitlines())
    missing = dataclasses.replace(check, cosine=None, max_abs=None, rel_err=None)  # outputs with no finite value
    report = dataclasses.replace(trt_ran, tensorrt=dataclasses.replace(trt_ran.tensorrt, marking_check=missing))
    assert "worst on y: rel err n/a, cosine n/a" in flat(render(report))


def test_every_report_fits_80_columns(passing: Report, diverged: Report, gated: Report, trt_ran: Report) -> None:
    many = tuple(dataclasses.replace(trt_ran.layers[0], tensor=f"t{i}", is_output=False) for i in range(120))
    wide = dataclasses.replace(trt_ran, layers=many)
    for report in (passing, diverged, gated, trt_ran, wide):
        table = [
            row
            for row in render(report, show_all=True).splitlines()
            if re.fullmatch(r" *[0-9]+ .* (ok|DIV|DIVERGED) *", row)
        ]
        assert len(table) == len(report.layers) and all(len(row) <= 80 for row in table)
    assert "  1 Conv backbone.stem.0    pt~trt 0.999998 8.00e-06 ok" in lines(render(wide))


def test_names_are_not_read_as_markup(passing: Report) -> None:
    odd = dataclasses.replace(passing, model="[bold]m[/bold]", notes=("a [/dim] b",))
    text = render(odd)
    assert "trtdiff [bold]m[/bold]  (inputs" in text and "note: a [/dim] b" in text


def test_build_report(build: SimpleNamespace) -> None:
    out = io.StringIO()
    render_build(build.build_report(), _console(out))
    text = out.getvalue()
    rows = lines(text)
    assert rows[:3] == [
        "trtdiff build examples:tiny  (inputs: x 1x3x32x32)",
        "ONNX: opset 17 as written, exporter torchscript, tiny.onnx",
        "GPU: none (built on the CPU; this engine cannot be run here)",
    ]
    assert "           1 fused into a Conv layer (e.g. /backbone/Relu_output_0)" in rows
    assert "marked engine: 123,456 bytes; built in 1.50s in all (from the engine cache); saved to tiny.plan" in flat(
        text
    )
    assert "1 engine, at most 1 run per sample planned" in rows
    assert "ONNX-to-TensorRT name map: 2 tensors (the JSON report holds it)" in rows
    assert rows[-1] == "note: built with 1 GiB workspace"


def test_real_comparison(real_report: Report) -> None:
    """End to end: the embedded DeepLabV3+ at opset 10 first diverges at the decoder Resize."""
    text = render(real_report)
    assert "FIRST DIVERGENCE: /decoder/Resize (Resize, module decoder) on torch~onnxruntime" in flat(text)
    assert all(len(row) <= 80 for row in text.splitlines())
    assert "more compared layers after the first divergence (--all shows them)" in text


def test_culprit_lines_come_first(culprits: Report) -> None:
    text = flat(render(culprits))
    findings = text[text.index("CULPRIT") :]
    assert findings.startswith(
        "CULPRIT: /decoder/Resize (Resize, module decoder) on torch~onnxruntime: local rel-err 2.64e-02 vs "
        "accumulated 2.64e-02, cosine 0.999854; export problem (the ONNX spec computes the same); injecting torch's "
        "value recovers 0.1450 of 0.1540 mIoU (final rel-err 1.14e-01 -> 7.10e-03) "
        "CULPRIT 2: /head/Conv (Conv, module head): local rel-err 7.10e-03 vs accumulated 1.14e-01, runtime problem; "
        "with the earlier ones injected: 0.1540 of 0.1540 mIoU recovered, final rel-err 2.00e-07 "
        "FIRST DIVERGENCE: /decoder/Resize (Resize, module decoder) on torch~onnxruntime: cosine 0.999854, "
        "max-abs 1.04e-02, rel-err 2.64e-02 (cosine 0.999854 < 0.9999; rel-err 2.64e-02 > 0.001) suspects: "
    )
    assert "inherited" not in findings, "the first divergence is the first culprit"


def test_local_column(culprits: Report) -> None:
    rows = lines(render(culprits, show_all=True))
    assert rows[6:11] == [
        "# op     module / ONNX node      cos rel≤1e-3    local",
        "1 Conv   backbone.stem.0    1.000000 2.30e-07 2.30e-07 ok",
        "2 Relu   backbone.stem.1    1.000000 2.20e-07 2.30e-07 ok",
        "3 Resize decoder            0.999854 2.64e-02 2.64e-02 DIVERGED",
        "4 Conv   head               0.999225 1.14e-01 7.10e-03 DIVERGED",
    ]
    no_local = dataclasses.replace(culprits.layers[0], local=None)
    rows = lines(render(dataclasses.replace(culprits, layers=(no_local, *culprits.layers[1:]))))
    assert "1 Conv   backbone.stem.0    1.000000 2.30e-07        - ok" in rows


def test_drift_line(drift: Report) -> None:
    text = flat(render(drift))
    assert (
        "FIRST DIVERGENCE: /head/Conv (Conv, module head) on torch~onnxruntime: cosine 0.999950, max-abs 6.00e-07, "
        "rel-err 3.00e-03 (rel-err 3.00e-03 > 0.001) (inherited: local rel-err 2.00e-04 holds) "
        "suspects: /head/Conv, then /decoder/Resize "
        "accumulated drift, no single culprit; largest local contributors: /backbone/Conv (rel-err 4.00e-04), "
        "/decoder/Resize (3.00e-04), /head/Conv (2.00e-04), … 1 more "
        "FAIL: 2 of 3 checks failed"
    ) in text
    assert "CULPRIT" not in text


def test_inherited_first_divergence(inherited: Report) -> None:
    text = flat(render(inherited))
    assert (
        "CULPRIT: /decoder/Resize (Resize, module decoder) on torch~onnxruntime: local rel-err 2.64e-02 vs "
        "accumulated 2.64e-02, cosine 0.999854; export problem (the ONNX spec computes the same) "
        "FIRST DIVERGENCE: /head/Conv (Conv, module head) on torch~onnxruntime: cosine 0.999225, max-abs 3.10e-01, "
        "rel-err 1.14e-01 (cosine 0.999225 < 0.9999; rel-err 1.14e-01 > 0.001) (inherited from /decoder/Resize)"
    ) in text


def test_local_column_fits_80_columns(culprits: Report, trt_ran: Report, build: SimpleNamespace) -> None:
    """The local column takes its room from the name column, with one pair and with three."""
    long = dataclasses.replace(
        culprits.layers[2], op_type="BatchNormalization", module="a.very.long.module.name.that.is.cut.from.the.left"
    )
    many = tuple(dataclasses.replace(long, tensor=f"t{i}") for i in range(120))
    local = {pair: build.agree(rel_err=3e-6) for pair in trt_ran.layers[0].pairs}
    diverged_cell = build.differ(0.99, 0.5, 0.2)
    bn = dataclasses.replace(trt_ran.layers[0], op_type="BatchNormalization", pairs={build.TORCH_ORT: diverged_cell})
    three = tuple(
        dataclasses.replace(layer, local=local, tensor=f"t{i}") for i, layer in enumerate((bn, *trt_ran.layers) * 30)
    )
    for report in (culprits, dataclasses.replace(culprits, layers=many), dataclasses.replace(trt_ran, layers=three)):
        text = render(report, show_all=True)
        table = [row for row in text.splitlines() if re.fullmatch(r" *[0-9]+ .* (ok|DIV|DIVERGED) *", row)]
        assert len(table) == len(report.layers) and all(len(row) <= 80 for row in table)
        assert any(row.rstrip().endswith("local") for row in text.splitlines())
    rows = lines(render(dataclasses.replace(culprits, layers=many), show_all=True))
    assert "120 BatchNormalization …is.cut.from.the.left 0.999854 2.64e-02 2.64e-02 DIVERGED" in rows
    rows = lines(render(dataclasses.replace(trt_ran, layers=three), show_all=True))
    head = rows.index("  # op       module / ONNX node           pair         cos rel≤1e-3    local")
    assert rows[head + 1 : head + 6] == [  # --all: a line per pair
        "  1 BatchNormalization backbone.stem.0    pt~ort  0.990000 2.00e-01 3.00e-06 DIV",
        "  2 Conv     backbone.stem.0              pt~ort  1.000000 2.30e-07 3.00e-06 ok",
        "                                          pt~trt  0.999998 8.00e-06 3.00e-06 ok",
        "                                          ort~trt 0.999998 8.00e-06 3.00e-06 ok",
        "  3 Relu     backbone.stem.1              pt~ort  1.000000 2.30e-07 3.00e-06 ok",
    ]


def test_non_finite_outputs_fail_and_name_where_nan_first_appears(passing: Report) -> None:
    from nonfinite_reports import allowed_report, nan_report

    text = render(nan_report(passing))
    assert lines(text)[-7:] == [
        "# op   module / ONNX node      cos rel≤1e-3",
        "1 Conv conv               1.000000 2.30e-07 ok",
        "2 Sqrt root               1.000000 0.00e+00 NaN",
        "3 Conv head               1.000000 0.00e+00 NaN",
        "NON-FINITE: the outputs of torch and onnxruntime hold NaN/Inf; they first appear",
        "at /root/Sqrt (Sqrt, module root): 256 NaN",
        "FAIL: 1 of 2 checks failed: outputs/finite/torch~onnxruntime",
    ]
    assert "PASS" not in text
    allowed = flat(render(allowed_report(nan_report(passing))))
    assert allowed.endswith(
        "NON-FINITE: the outputs of torch and onnxruntime hold NaN/Inf; they first appear at /root/Sqrt "
        "(Sqrt, module root): 256 NaN PASS: all 3 compared tensors agree (torch~onnxruntime). "
        "NaN/Inf allowed, at the same positions."
    )


def test_non_finite_in_one_backend_only(passing: Report) -> None:
    from nonfinite_reports import trt_nan_report

    text = render(trt_nan_report(passing))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert (
        "NON-FINITE: the outputs of tensorrt hold NaN/Inf; they first appear at /norm/Pow (Pow, module norm): 12 Inf "
        "FIRST DIVERGENCE: /norm/Pow (Pow, module norm) on torch~tensorrt"
    ) in flat(text)
    assert "torch and" not in text and "onnxruntime hold" not in text


def test_culprit_lines_carry_the_fix_and_close_with_who_carries_the_loss(advised: Report) -> None:
    text = flat(render(advised))
    findings = text[text.index("CULPRIT") : text.index("FIRST DIVERGENCE")]
    assert findings == (
        "CULPRIT: /decoder/Resize (Resize, module decoder) on torch~onnxruntime: local rel-err 2.64e-02 vs "
        "accumulated 2.64e-02, cosine 0.999854; export problem (the ONNX spec computes the same); injecting torch's "
        "value recovers 0.1450 of 0.1540 mIoU (final rel-err 1.14e-01 -> 7.10e-03); fix: re-export at opset 11 or "
        "higher (--opset 11): align_corners=False is then written as half_pixel "
        "CULPRIT 2: /head/Conv (Conv, module head): local rel-err 7.10e-03 vs accumulated 1.14e-01, runtime problem; "
        "fixing it alone: no measurable mIoU recovered, final rel-err 1.14e-01; with the earlier ones injected: "
        "0.1540 of 0.1540 mIoU recovered, final rel-err 2.00e-07 "
        "/decoder/Resize alone carries 94% of the 0.1540 mIoU lost. "
    )
    assert "-0.0004" not in text, "a recovery below one pixel's share is nothing measurable, never negative"


def test_quiet_prints_the_verdict_and_each_culprit_with_its_fix(advised: Report) -> None:
    out = io.StringIO()
    render_verdict(advised, _console(out))
    assert lines(out.getvalue()) == [
        "FAIL: 3 of 3 checks failed: layers/torch~onnxruntime,",
        "outputs/min-cosine/torch~onnxruntime, outputs/rtol/torch~onnxruntime",
        "CULPRIT: /decoder/Resize (Resize, module decoder) on torch~onnxruntime, export",
        "problem; fix: re-export at opset 11 or higher (--opset 11): align_corners=False",
        "is then written as half_pixel",
        "CULPRIT 2: /head/Conv (Conv, module head) on torch~onnxruntime, runtime problem",
    ]


def test_the_name_column_fits_its_content_where_the_console_has_room(culprits: Report) -> None:
    name = "a.very.long.module.name.that.is.cut.from.the.left"
    long = dataclasses.replace(culprits.layers[2], module=name)
    report = dataclasses.replace(culprits, layers=(*culprits.layers[:2], long, culprits.layers[3]))
    out = io.StringIO()
    render_terminal(report, Console(file=out, width=120, color_system=None))
    wide = lines(out.getvalue())
    assert f"3 Resize {name} 0.999854 2.64e-02 2.64e-02 DIVERGED" in wide
    assert "1 Conv   backbone.stem.0" + " " * (len(name) - len("backbone.stem.0") + 1) + "1.000000" in wide[6]
    assert "3 Resize …ule.name.that.is.cut.from.the.left 0.999854 2.64e-02 2.64e-02 DIVERGED" in lines(render(report))


def test_the_opset_is_stated_once(real_report: Report) -> None:
    text = render(real_report)
    assert text.count("opset 10") == 1 and "ONNX: opset 10 as written, exporter torchscript" in text


def test_quiet_says_where_nan_first_appears_when_the_finite_check_fails(passing: Report) -> None:
    """With no culprit and no divergence, the NaN's origin is the one thing a CI log needs besides the verdict."""
    from nonfinite_reports import nan_report

    out = io.StringIO()
    render_verdict(nan_report(passing), _console(out))
    text = flat(out.getvalue())
    assert text.startswith("FAIL: 1 of")
    assert "NON-FINITE: the outputs of torch and onnxruntime hold NaN/Inf; they first appear at /root/Sqrt" in text
    quiet_passing = io.StringIO()
    render_verdict(passing, _console(quiet_passing))
    assert "NON-FINITE" not in quiet_passing.getvalue()


def test_a_culprit_whose_output_has_no_finite_value_reads_n_a(diverged: Report) -> None:
    from culprit_reports import drift_report

    from trtdiff.render.markdown import render_markdown
    from trtdiff.report import Attribution, Culprit, ErrorFigures

    base = drift_report(diverged)
    head = base.layers[3]
    missing = ErrorFigures(None, None, None, non_finite_mismatches=64)  # the candidate's output: NaN everywhere
    pair = next(iter(head.pairs))
    culprit = Culprit(
        head.tensor, head.onnx_node, head.op_type, head.module, pair, missing, missing, "unknown", (head.onnx_node,)
    )
    attribution = Attribution(head.onnx_node, head.tensor, pair, None, None, None, None)
    report = dataclasses.replace(base, drift=None, culprit=culprit, culprits=(culprit,), attribution=(attribution,))
    for text in (render(report), render_markdown(report)):
        assert "final rel-err n/a -> n/a, cosine n/a -> n/a" in " ".join(text.split())
        assert "1.000000 -> 1.000000" not in text


def test_recovered_says_what_it_measures_mIoU_or_the_output_error_alike_everywhere(advised: Report) -> None:
    """The labels' mIoU loses nothing (the argmax agrees) while the output's error is 8.38e-02: fixing the head
    Conv alone recovers no measurable mIoU, yet all of the output's error; no line may say it recovers nothing."""
    from trtdiff.render.culprits import (
        attribution_summary,
    )
    from trtdiff.render.markdown import render_markdown

    first, second = advised.attribution
    same = {"miou_before": 0.958, "miou_after": 0.958, "miou_recovered": 0.0, "final_rel_err_before": 0.0838}
    first = dataclasses.replace(
        first, **same, miou_after_alone=0.958, miou_recovered_alone=0.0, measurable=False, measurable_alone=False
    )
    second = dataclasses.replace(
        second,
        **same,
        final_rel_err_after=0.0,
        final_rel_err_after_alone=0.0,
        final_cosine_after_alone=1.0,
        miou_after_alone=0.958,
        miou_recovered_alone=0.0,
    )
    labels = dataclasses.replace(advised.segmentation, label_miou={"torch": 0.958, "onnxruntime": 0.958})
    report = dataclasses.replace(advised, attribution=(first, second), segmentation=labels)
    assert attribution_summary(report) == [
        "/head/Conv alone carries 100% of the final output's error (rel-err 8.38e-02)"
    ]
    for text in (flat(render(report)), " ".join(render_markdown(report).split())):
        assert "fixing it alone: no measurable mIoU recovered, final rel-err 0.00e+00" in text or (
            "fixing it alone recovers no measurable mIoU (final rel-err 8.38e-02 -> 0.00e+00)" in text
        )
        assert "nothing measurable" not in text and "no culprit alone recovers" not in text


def test_a_failing_report_never_says_pass_in_any_terminal_mode(
    passing: Report, diverged: Report, gated: Report, drift: Report, advised: Report
) -> None:
    """Issue 40, item 5: "PASS: all 51 compared tensors agree" above a failed gate. The original file's checks
    hold but the simplified file's fail (--simplify): the report failed, and every mode says FAIL, never PASS;
    the simplified file's line words its checks. And a failed layers check alone still ends with FAIL."""
    from nonfinite_reports import nan_report

    simplified_fails = dataclasses.replace(passing, passed=False, simplified=diverged)
    layers_only = dataclasses.replace(
        diverged, checks=(diverged.checks[0], *(dataclasses.replace(c, passed=True, failing_samples=(), failed=0)
                                                for c in diverged.checks[1:]))
    )  # fmt: skip
    contradicting = dataclasses.replace(passing, passed=False)  # a report put together by hand
    for report in (simplified_fails, layers_only, contradicting, diverged, gated, drift, advised, nan_report(passing)):
        for show_all in (False, True):
            assert "PASS" not in render(report, show_all=show_all)
            wide = io.StringIO()  # no line wrapped: the verdict is the last line
            render_terminal(report, Console(file=wide, width=2000, color_system=None), show_all=show_all)
            assert lines(wide.getvalue())[-1].startswith("FAIL: "), wide.getvalue()
        out = io.StringIO()
        render_verdict(report, _console(out))
        assert "PASS" not in out.getvalue() and out.getvalue().startswith("FAIL: "), out.getvalue()
    text = flat(render(simplified_fails))
    assert text.endswith(
        "FAIL: the simplified file's comparison failed: 3 of 3 checks failed: layers/torch~onnxruntime, "
        "outputs/min-cosine/torch~onnxruntime, outputs/rtol/torch~onnxruntime (the original's checks hold)"
    )
    assert "simplified (): 3 of 3 checks fail; first divergence /decoder/Resize (Resize); paired 3 of 3" in text
    assert flat(render(layers_only)).endswith("FAIL: 1 of 3 checks failed: layers/torch~onnxruntime")
    from trtdiff.render.markdown import render_markdown

    assert "❌ FAIL — the simplified file's comparison failed (3 of 3 checks)" in render_markdown(simplified_fails)
