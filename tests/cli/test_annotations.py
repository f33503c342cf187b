"""trtdiff.cli.annotations: on GitHub Actions a failing gate prints ::error lines naming the check, the threshold
and the culprit; elsewhere nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from trtdiff.cli.annotations import _command, on_github
from trtdiff.cli.app import main

SMALL = "culprit_models:SmallCNN"  # bilinear x2 upsampling: its Resize diverges at opset 10


def _compare(*args: str, github: bool) -> tuple[int, str]:
    env = {"GITHUB_ACTIONS": "true" if github else ""}
    result = CliRunner(env=env).invoke(main, ["compare", SMALL, "--input-shape", "1x3x16x16", *args])
    return result.exit_code, result.stdout


def test_only_github_actions_gets_annotations() -> None:
    assert on_github({"GITHUB_ACTIONS": "true"}) and not on_github({"CI": "true"}) and not on_github({})
    assert _command("a: b, c", "50% of 1\nline") == "::error title=a%3A b%2C c::50%25 of 1%0Aline"


@pytest.mark.slow
def test_a_failing_gate_points_at_the_culprit_and_the_threshold(tmp_path: Path) -> None:
    code, stdout = _compare("--opset", "10", "--quiet", github=True)
    errors = [line for line in stdout.splitlines() if line.startswith("::error ")]
    assert code == 1 and len(errors) == 3  # layers, min-cosine and rtol on torch~onnxruntime
    rtol = next(line for line in errors if "outputs/rtol/torch~onnxruntime" in line)
    assert rtol.startswith(
        "::error title=trtdiff%3A outputs/rtol/torch~onnxruntime failed::rtol 0.001 on final outputs"
    )
    assert "limit rel_err ≤ 0.001" in rtol
    assert "culprit /Resize (Resize%2C" not in rtol  # the message is data: only `%` and newlines are escaped
    assert "culprit /Resize (Resize, the model itself) on torch~onnxruntime, export problem" in rtol
    assert "fix: re-export at opset 11 or higher (--opset 11)" in rtol
    code, stdout = _compare("--opset", "10", "--quiet", github=False)
    assert code == 1 and "::error" not in stdout
    code, stdout = _compare("--opset", "13", "--quiet", github=True)
    assert code == 0 and "::error" not in stdout
