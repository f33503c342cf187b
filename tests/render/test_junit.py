"""JUnit XML, read back by junitparser (what CI plugins use) and xml.etree."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

from junitparser import Failure, JUnitXml, Skipped

from trtdiff.render.junit import render_junit, write_junit
from trtdiff.report import Report


def _cases(xml: str) -> list:
    suites = list(JUnitXml.fromstring(xml))
    assert [suite.name for suite in suites] == ["trtdiff"]
    return list(suites[0])


def _suite(xml: str) -> ET.Element:
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None
    return suite


def _failures(report: Report) -> dict[str, Failure]:
    return {
        case.name: result
        for case in _cases(render_junit(report))
        for result in case.result
        if isinstance(result, Failure)
    }


def test_one_testcase_per_check_and_counts(gated: Report) -> None:
    xml = render_junit(gated)
    cases = _cases(xml)
    assert [(case.classname, case.name) for case in cases] == [
        ("trtdiff.outputs.torch~onnxruntime", "outputs/min-cosine/torch~onnxruntime"),
        ("trtdiff.outputs.torch~onnxruntime", "outputs/rtol/torch~onnxruntime"),
        ("trtdiff.agreement.torch~onnxruntime", "agreement/min-miou/torch~onnxruntime"),
        ("trtdiff.labels.onnxruntime", "labels/min-miou/onnxruntime"),
        ("trtdiff.labels.onnxruntime", "labels/max-miou-drop/onnxruntime"),
    ]
    suite = _suite(xml)
    assert {key: suite.get(key) for key in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "5",
        "failures": "3",
        "errors": "0",
        "skipped": "0",
        "time": "0.750",
    }
    assert [case.is_failure for case in cases] == [True, False, True, False, True]


def test_failure_message_and_text(gated: Report) -> None:
    failures = _failures(gated)
    cosine = failures["outputs/min-cosine/torch~onnxruntime"]
    assert cosine.message == (
        "min-cosine 0.9999 on final outputs of 3 sample(s): worst cosine 0.99942 (sample-2); "
        "first divergence /decoder/Resize (Resize)"
    )
    assert cosine.type == "threshold.outputs"
    assert cosine.text.splitlines() == [
        "outputs/min-cosine/torch~onnxruntime: min-cosine 0.9999 on final outputs of 3 sample(s): "
        "worst cosine 0.99942 (sample-2)",
        "limit: cosine >= 0.9999",
        "worst: 0.999420 (sample sample-2)",
        "failing samples (2 of 3): sample-1, sample-2",
        "first divergence on torch~onnxruntime: /decoder/Resize (Resize, module decoder), "
        "tensor /decoder/Resize_output_0",
        "  cosine 0.999854, max-abs 1.04e-02, rel-err 2.64e-02 (cosine 0.999854 < 0.9999; rel-err 2.64e-02 > 0.001)",
        "  suspects: /decoder/Resize, then /decoder/Concat, /decoder/Div, /decoder/Cast, /decoder/Slice, "
        "/decoder/Shape",
    ]
    assert failures["agreement/min-miou/torch~onnxruntime"].message == (
        "mIoU 0.8875 agreement with torch (min 0.9); worst sample sample-2 0.8100; "
        "first divergence /decoder/Resize (Resize)"
    )
    drop = failures["labels/max-miou-drop/onnxruntime"]
    assert drop.text.splitlines()[1:3] == ["limit: miou_drop <= 0.05", "worst: 0.1000"]


def test_layer_check_names_the_divergence_once(diverged: Report) -> None:
    layer = _failures(diverged)["layers/torch~onnxruntime"]
    assert layer.message == "2 of 4 layers diverge; lowest cosine 0.999225; first divergence /decoder/Resize (Resize)"
    assert "limit: no diverged layer (min-cosine 0.9999, rtol 0.001)" in layer.text
    assert "failing samples (1 of 1): input" in layer.text


def test_failure_without_a_divergence(gated: Report) -> None:
    report = dataclasses.replace(gated, first_divergence=None)
    text = _failures(report)["outputs/min-cosine/torch~onnxruntime"].text
    assert text.splitlines()[-1] == "first divergence: none among the compared layers"


def test_passing_report_has_no_failures(passing: Report) -> None:
    cases = _cases(render_junit(passing))
    assert len(cases) == 3 and all(case.is_passed for case in cases)


def test_tensorrt_skip_is_a_skipped_testcase_with_reason(trt_skipped: Report) -> None:
    xml = render_junit(trt_skipped)
    (case,) = [case for case in _cases(xml) if case.classname == "trtdiff.tensorrt"]
    assert case.is_skipped and isinstance(case.result[0], Skipped)
    assert case.result[0].message == "TensorRT skipped: no CUDA GPU: torch.cuda.is_available() is False"
    suite = _suite(xml)
    assert suite.get("tests") == "4" and suite.get("skipped") == "1"


def test_tensorrt_that_ran_is_no_testcase(trt_ran: Report) -> None:
    cases = _cases(render_junit(trt_ran))
    assert [case.classname for case in cases] == [
        "trtdiff.layers.torch~onnxruntime",
        "trtdiff.layers.torch~tensorrt",
        "trtdiff.layers.onnxruntime~tensorrt",
    ]


def test_properties_name_the_run(diverged: Report, trt_ran: Report) -> None:
    properties = {p.get("name"): p.get("value") for p in _suite(render_junit(diverged)).iter("property")}
    assert properties["trtdiff"] == "9.8.7", "the version that made the report, not the one rendering it"
    assert properties["opset"] == "10" and properties["exporter"] == "torchscript"
    assert properties["inputs"] == "x 1x3x32x32"
    assert properties["environment.torch"] == "2.13.0+cpu"
    assert properties["first_divergence"] == "/decoder/Resize"
    assert properties["passed"] == "false" and "max_abs" not in properties
    properties = {p.get("name"): p.get("value") for p in _suite(render_junit(trt_ran)).iter("property")}
    assert properties["tensorrt.status"] == "ran" and properties["tensorrt.version"] == "tensorrt 10.9.0"


def test_write_junit_and_text_xml_cannot_hold(diverged: Report, tmp_path: Path) -> None:
    report = dataclasses.replace(
        diverged,
        model="model <&> \x01",
        notes=("bad \x02 byte",),
        first_divergence=dataclasses.replace(diverged.first_divergence, op_type='Re"size\x01'),
    )
    path = tmp_path / "junit.xml"
    write_junit(report, path)
    parsed = JUnitXml.fromfile(str(path))
    case = next(iter(next(iter(parsed))))
    # issue 30: a control character is written as a visible escape (it was "?")
    assert case.result[0].message.endswith('first divergence /decoder/Resize (Re"size\\x01)')
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert properties["model"] == "model <&> \\x01"


def test_real_comparison(real_report: Report) -> None:
    """End to end: every check of a real comparison is a test case, and failures name the decoder Resize."""
    cases = _cases(render_junit(real_report))
    assert [case.name for case in cases if case.classname != "trtdiff.tensorrt"] == [c.id for c in real_report.checks]
    failures = [result for case in cases for result in case.result if isinstance(result, Failure)]
    assert failures and len(failures) == len(real_report.failed_checks)
    assert all("/decoder/Resize" in failure.message for failure in failures)


def test_failures_name_the_culprits(culprits: Report) -> None:
    failure = _failures(culprits)["outputs/rtol/torch~onnxruntime"]
    assert failure.message == (
        "rtol 0.001 on final outputs of 1 sample(s): worst rel_err 0.114 (input); first divergence /decoder/Resize "
        "(Resize); culprits /decoder/Resize (Resize, export problem), /head/Conv (Conv, runtime problem)"
    )
    assert failure.text.splitlines()[4:7] == [
        "culprit 1 of 2: /decoder/Resize (Resize, module decoder) on torch~onnxruntime: local rel-err 2.64e-02 vs "
        "accumulated 2.64e-02, cosine 0.999854; export problem (the ONNX spec computes the same); injecting torch's "
        "value recovers 0.1450 of 0.1540 mIoU (final rel-err 1.14e-01 -> 7.10e-03)",
        "culprit 2 of 2: /head/Conv (Conv, module head) on torch~onnxruntime: local rel-err 7.10e-03 vs accumulated "
        "1.14e-01, cosine 0.999900; runtime problem (onnxruntime deviates from the ONNX spec); injecting torch's "
        "values here and at the 1 earlier culprit recovers 0.1540 of 0.1540 mIoU (final rel-err 1.14e-01 -> 2.00e-07)",
        "first divergence on torch~onnxruntime: /decoder/Resize (Resize, module decoder), "
        "tensor /decoder/Resize_output_0",
    ]
    properties = {p.get("name"): p.get("value") for p in _suite(render_junit(culprits)).iter("property")}
    assert properties["culprit"] == "/decoder/Resize"
    assert properties["culprits"] == "/decoder/Resize,/head/Conv"


def test_inherited_and_drift_in_failure_text(inherited: Report, drift: Report) -> None:
    text = _failures(inherited)["layers/torch~onnxruntime"].text.splitlines()
    assert text[4:6] == [
        "culprit: /decoder/Resize (Resize, module decoder) on torch~onnxruntime: local rel-err 2.64e-02 vs "
        "accumulated 2.64e-02, cosine 0.999854; export problem (the ONNX spec computes the same)",
        "first divergence on torch~onnxruntime: /head/Conv (Conv, module head), tensor /head/Conv_output_0 "
        "(inherited from /decoder/Resize)",
    ]
    failure = _failures(drift)["outputs/rtol/torch~onnxruntime"]
    assert "culprit" not in failure.message
    assert failure.text.splitlines()[4] == (
        "drift on torch~onnxruntime: accumulated drift, no single culprit; largest local contributors: "
        "/backbone/Conv (rel-err 4.00e-04), /decoder/Resize (3.00e-04), /head/Conv (2.00e-04), /backbone/Relu (1.00e-04)"
    )


def test_non_finite_failures_name_where_they_first_appear(passing: Report) -> None:
    from nonfinite_reports import nan_report, trt_nan_report

    nan = nan_report(passing)
    failure = _failures(nan)["outputs/finite/torch~onnxruntime"]
    assert failure.message == (
        "no NaN/Inf in final outputs of 1 sample(s): worst 256 NaN/Inf values (input); "
        "NaN/Inf first appear at /root/Sqrt (Sqrt) in torch"
    )
    assert failure.text.splitlines()[1:5] == [
        "limit: no NaN/Inf",
        "worst: 256 (sample input)",
        "failing samples (1 of 1): input",
        "non-finite: the outputs of torch and onnxruntime hold NaN/Inf; they first appear at /root/Sqrt "
        "(Sqrt, module root): 256 NaN; tensor /root/Sqrt_output_0",
    ]
    properties = {p.get("name"): p.get("value") for p in _suite(render_junit(nan)).iter("property")}
    assert properties["allow_nonfinite"] == "false"
    assert properties["first_non_finite.torch"] == properties["first_non_finite.onnxruntime"] == "/root/Sqrt"
    trt = _failures(trt_nan_report(passing))
    assert set(trt) == {
        "layers/torch~tensorrt",
        "layers/onnxruntime~tensorrt",
        "outputs/finite/torch~tensorrt",
        "outputs/finite/onnxruntime~tensorrt",
    }
    assert trt["outputs/finite/onnxruntime~tensorrt"].message.endswith(
        "NaN/Inf first appear at /norm/Pow (Pow) in tensorrt; first divergence /norm/Pow (Pow)"
    )
