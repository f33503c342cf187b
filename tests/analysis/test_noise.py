"""Noise-level local errors: defined once (trtdiff.analysis.noise), marked on culprits, grouped by the views."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from trtdiff.analysis.noise import FLOAT32, is_noise, noise_level
from trtdiff.cli.app import main
from trtdiff.report import ErrorFigures, Report


def test_float32_noise_is_4_ulp_of_the_largest_magnitude() -> None:
    assert FLOAT32.rel_err == 4 * 2.0**-23
    assert is_noise(ErrorFigures(1.0, 4.0e-7, 4 * 2.0**-23), "float32")
    assert not is_noise(ErrorFigures(1.0, 1.0e-6, 5 * 2.0**-23), "float32")
    assert not is_noise(ErrorFigures(None, None, None), "float32")  # n/a: no figure to call noise
    assert not is_noise(ErrorFigures(1.0, 0.0, 0.0, non_finite_mismatches=1), "float32")
    assert noise_level("float16") is None and not is_noise(ErrorFigures(1.0, 0.0, 0.0), "int64")


def test_culprits_of_float_noise_under_a_tight_threshold_are_one_line(tmp_path: Path) -> None:
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    tight = ("--rtol", "1e-9", "--min-cosine", "0.99999999999")
    args = ["compare", "tests.culprit_models:small_cnn", "--input-shape", "1x3x16x16", *tight]
    result = CliRunner().invoke(main, [*args, "--json", str(out), "--markdown", str(md)])
    assert result.exit_code == 1, result.stdout
    report = Report.from_json(out.read_text())
    assert len(report.culprits) >= 3 and all(c.noise_level for c in report.culprits)  # every one stays in the JSON
    text = " ".join(result.stdout.split())
    assert text.count("CULPRIT") == 1 and "noise-level (rounding, a few ULP)" in text
    found = re.search(r"(\d+) more nodes with noise-level local error \(rounding, a few ULP\): (\S+)", text)
    assert found and int(found.group(1)) == len(report.culprits) - 1
    assert found.group(2) == f"{report.culprits[1].onnx_node},"
    assert f"- {found.group(1)} more nodes with noise-level local error" in md.read_text()
    assert "cause unknown" not in text[text.index("more nodes") :]
    older = json.loads(out.read_text())  # a report written before the field reads it as False
    for culprit in older["culprits"]:
        del culprit["noise_level"]
    assert not any(c.noise_level for c in Report.from_dict(older).culprits)
