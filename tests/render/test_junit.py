"""JUnit XML of real comparisons, read back by junitparser (what CI plugins use) and xml.etree."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml, Skipped

from trtdiff.render.junit import render_junit, write_junit
from trtdiff.report import Report

SHAPES = ["1x3x64x64"]


@pytest.fixture(scope="module")
def reports(gated_reports: dict[str, Report]) -> dict[str, Report]:
    """Here the failing report is opset 10 on one input: layer, output and mIoU checks fail."""
    return {"failing": gated_reports["single"], "passing": gated_reports["passing"]}


def _cases(xml: str) -> list:
    suites = list(JUnitXml.fromstring(xml))
    assert [suite.name for suite in suites] == ["trtdiff"]
    return list(suites[0])


@pytest.mark.parametrize("name", ["failing", "passing"])
def test_one_testcase_per_check_and_counts_agree(reports: dict[str, Report], name: str) -> None:
    report = reports[name]
    xml = render_junit(report)
    skipped = int(report.tensorrt is not None and report.tensorrt.status == "skipped")
    cases = _cases(xml)
    assert [c.name for c in cases if c.classname != "trtdiff.tensorrt"] == [check.id for check in report.checks]
    assert len(cases) == len(report.checks) + skipped
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None and suite.get("name") == "trtdiff"
    assert int(suite.get("tests")) == len(cases)
    assert int(suite.get("failures")) == len(report.failed_checks) == sum(c.is_failure for c in cases)
    assert int(suite.get("errors")) == 0 and int(suite.get("skipped")) == skipped
    assert float(suite.get("time")) > 0
    for case, check in zip(cases, report.checks):
        assert case.classname == f"trtdiff.{check.scope}.{check.pair}"


def test_failures_carry_figures_and_the_first_divergence(reports: dict[str, Report]) -> None:
    report = reports["failing"]
    failures = [(case, result) for case in _cases(render_junit(report)) for result in case.result
                if isinstance(result, Failure)]
    assert {case.name for case, _ in failures} == {check.id for check in report.failed_checks}
    assert {check.scope for check in report.failed_checks} == {"layers", "outputs", "agreement"}
    by_id = {check.id: check for check in report.checks}
    for case, failure in failures:
        check = by_id[case.name]
        assert "/decoder/Resize" in failure.message
        text = failure.text
        if check.metric != "divergence":  # the layer check's limit is in words (test below)
            assert f"limit: {check.metric}" in text and f"{check.limit:g}" in text
        assert f"(sample {check.worst_sample})" in text
        assert "failing samples (1 of 1): input" in text
        assert "first divergence on torch~onnxruntime: /decoder/Resize (Resize, module decoder)" in text
        assert "cosine 0.9997" in text and "max-abs" in text
        assert "suspects: " + ", ".join(report.first_divergence.suspects) in text


def test_single_comparison_fails_the_layer_check(reports: dict[str, Report]) -> None:
    cases = {case.name: case for case in _cases(render_junit(reports["failing"]))}
    layer = cases["layers/torch~onnxruntime"]
    assert layer.is_failure
    assert "no diverged layer (min-cosine 0.9999, rtol 0.001)" in layer.result[0].text
    assert "/decoder/Resize" in layer.result[0].message


def test_passing_report_has_no_failures(reports: dict[str, Report]) -> None:
    cases = _cases(render_junit(reports["passing"]))
    assert not any(case.is_failure or case.is_error for case in cases)
    assert sum(case.is_passed for case in cases) == len(reports["passing"].checks)


def test_tensorrt_skip_is_a_skipped_testcase_with_reason(reports: dict[str, Report]) -> None:
    report = reports["passing"]
    assert report.tensorrt is not None
    cases = [case for case in _cases(render_junit(report)) if case.classname == "trtdiff.tensorrt"]
    if report.tensorrt.status != "skipped":
        assert not cases
        return
    (case,) = cases
    assert case.is_skipped and isinstance(case.result[0], Skipped)
    assert report.tensorrt.reason in case.result[0].message


def test_properties_name_opset_exporter_and_versions(reports: dict[str, Report]) -> None:
    report = reports["failing"]
    suite = ET.fromstring(render_junit(report)).find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["opset"] == "10" and properties["exporter"] == report.exporter
    assert properties["environment.torch"] == report.environment["torch"]
    assert properties["environment.onnxruntime"] == report.environment["onnxruntime"]
    assert properties["first_divergence"] == "/decoder/Resize"
    assert properties["passed"] == "false"


def test_write_junit_and_text_xml_cannot_hold(reports: dict[str, Report], tmp_path: Path) -> None:
    report = reports["failing"]
    odd = dataclasses.replace(report.checks[0], message="bad \x01 byte <&> \"quoted\"")
    report = dataclasses.replace(report, checks=(odd, *report.checks[1:]), model="model <&>")
    path = tmp_path / "junit.xml"
    write_junit(report, path)
    parsed = JUnitXml.fromfile(str(path))
    case = next(iter(next(iter(parsed))))
    assert case.result[0].message.startswith('bad ? byte <&> "quoted"')
    assert ET.parse(path).getroot().tag == "testsuites"
