"""examples/ci: the gate script fails on the opset 10 export of the trained example and passes at 13."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml

from trtdiff.render.explorer import onnx_file
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


GATE = ROOT / "examples" / "ci" / "gate.sh"
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
# This machine reaches no index but the package registry: the torch CPU wheel the CPU index serves lies here.
LOCAL_WHEELS = Path("/opt/wheels")


def test_the_gate_without_trtdiff_says_so_in_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "REPORTS": str(tmp_path / "reports")}
    result = subprocess.run(["bash", str(GATE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and not result.stdout
    assert result.stderr.splitlines() == [
        "gate.sh: trtdiff is not installed here (not on PATH, not in ./.venv, TRTDIFF unset): pip install 'trtdiff[html]'"
    ]


def _action() -> dict:
    yaml = pytest.importorskip("yaml", reason="reading the workflow needs PyYAML (the test extra)")
    return yaml.safe_load((ROOT / "examples" / "ci" / "action.yml").read_text())


def test_the_workflow_runs_the_composite_action_that_installs_trtdiff_with_its_html_extra() -> None:
    yaml = pytest.importorskip("yaml", reason="reading the workflow needs PyYAML (the test extra)")
    workflow = yaml.safe_load((ROOT / "examples" / "ci" / "numerics-gate.yml").read_text())
    steps = workflow["jobs"]["gate"]["steps"]
    assert [s.get("uses", "").split("@")[0] for s in steps[:2]] == ["actions/checkout", "./examples/ci"]
    action = _action()
    assert action["runs"]["using"] == "composite"
    assert "[html]" in action["inputs"]["trtdiff"]["default"]  # the gate writes --html: matplotlib must be there
    install = next(s for s in action["runs"]["steps"] if s.get("name") == "Install trtdiff")["run"]
    assert CPU_INDEX in install and "torch==" in install  # the CPU build, not the CUDA one
    upload = next(s for s in action["runs"]["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["with"]["path"] == "${{ inputs.reports }}" and upload["if"] == "always()"
    assert steps[2]["with"]["report_paths"] == f"{action['inputs']['reports']['default']}/junit.xml"


def _substituted(text: str, action: dict, action_path: Path) -> str:
    for name, spec in action["inputs"].items():
        text = text.replace("${{ inputs." + name + " }}", str(spec["default"]))
    return text.replace("${{ github.action_path }}", str(action_path))


@pytest.mark.slow
@pytest.mark.skipif(
    not LOCAL_WHEELS.is_dir(), reason="needs the local torch CPU wheel folder standing in for the index"
)
def test_a_fresh_runner_installs_what_the_workflow_installs_and_the_gate_runs(tmp_path: Path) -> None:
    """As a user's runner sees it: a fresh Python environment with only what the action installs."""
    action = _action()
    checkout = tmp_path / "checkout"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            (checkout / name).write_bytes((ROOT / name).read_bytes())
    runner = tmp_path / "runner"  # what actions/setup-python gives: a Python of its own, on PATH
    subprocess.run([sys.executable, "-m", "venv", str(runner)], check=True, timeout=300)
    env = {
        "PATH": f"{runner / 'bin'}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    install = next(s for s in action["runs"]["steps"] if s.get("name") == "Install trtdiff")["run"]
    for line in filter(None, _substituted(install, action, checkout / "examples" / "ci").splitlines()):
        command = line.replace(CPU_INDEX, f"--find-links {LOCAL_WHEELS}")
        done = subprocess.run(
            ["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, command + "\n" + done.stdout[-2000:] + done.stderr[-2000:]
    version = subprocess.run(
        [str(runner / "bin" / "python"), "-c", "import torch, matplotlib; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert version.strip().endswith("+cpu")
    gate = next(s for s in action["runs"]["steps"] if s.get("name") == "Gate")
    gate_env = {**env, **{k: _substituted(v, action, checkout) for k, v in gate["env"].items()}}
    run = _substituted(gate["run"], action, checkout / "examples" / "ci")
    done = subprocess.run(["bash", "-c", run], cwd=checkout, env=gate_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = checkout / action["inputs"]["reports"]["default"]
    for name in ("report.html", "report.json", "junit.xml", "summary.md", "model-explorer.json", "model-explorer.onnx"):
        assert (reports / name).is_file(), name
    saved = Report.from_json((reports / "report.json").read_text())
    assert saved.onnx_path == "reports/model-explorer.onnx" and saved.passed
    artifact = tmp_path / "downloaded"  # the artifact, downloaded elsewhere: the ONNX file is found beside the report
    artifact.mkdir()
    for name in ("report.json", "model-explorer.onnx"):
        (artifact / name).write_bytes((reports / name).read_bytes())
    assert onnx_file(saved, artifact / "report.json") == artifact / "model-explorer.onnx"
    # Without the environment on PATH (no activated venv), the gate finds ./.venv and fails at opset 10.
    (checkout / ".venv").symlink_to(runner)
    bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPSET": "10", "REPORTS": str(tmp_path / "r10")}
    done = subprocess.run(
        ["bash", str(checkout / "examples" / "ci" / "gate.sh")],
        cwd=checkout,
        env=bare,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert not Report.from_json((tmp_path / "r10" / "report.json").read_text()).passed
