"""examples/ci: the gate script fails on the opset 10 export of the trained example and passes at 13."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml

from trtdiff.report import Report

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize(("opset", "code"), [("10", 1), ("13", 0)])
def test_gate_script(tmp_path: Path, opset: str, code: int) -> None:
    env = {
        **os.environ,
        "OPSET": opset,
        "REPORTS": str(tmp_path),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = subprocess.run(
        ["bash", str(ROOT / "examples" / "ci" / "gate.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == code, result.stdout + result.stderr
    report = Report.from_json((tmp_path / "report.json").read_text())
    xml = JUnitXml.fromfile(str(tmp_path / "junit.xml"))
    suites = xml if isinstance(xml, JUnitXml) else [xml]
    failures = sum(
        1 for suite in suites for case in suite for outcome in case.result if type(outcome).__name__ == "Failure"
    )
    summary = (tmp_path / "summary.md").read_text()
    assert (tmp_path / "report.html").read_text().count("<svg") >= 2
    if code:
        assert failures >= 1 and not report.passed
        assert {"labels/min-miou/onnxruntime", "labels/max-miou-drop/onnxruntime"} & {
            c.id for c in report.failed_checks
        }
        assert report.first_divergence is not None and report.first_divergence.op_type == "Resize"
        assert report.segmentation.miou_drop["onnxruntime"] > 0.03
    else:
        assert failures == 0 and report.passed
        assert report.segmentation.label_miou["torch"] > 0.95
    assert "onnxruntime" in summary
