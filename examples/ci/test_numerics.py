"""A pytest gate on deployed numerics: copy it into your test suite and point it at your model.

OPSET=13 pytest examples/ci/test_numerics.py    # passes
OPSET=10 pytest examples/ci/test_numerics.py    # fails: bilinear Resize drifts at opset 10
"""

from __future__ import annotations

import os

import trtdiff
from trtdiff.examples.shapes import EVAL_DIR, deeplabv3plus_shapes
from trtdiff.render.format import check_message


def test_deployed_numerics_hold() -> None:
    report = trtdiff.compare(
        deeplabv3plus_shapes(),
        opset=int(os.environ.get("OPSET", "13")),
        inputs_dir=str(EVAL_DIR / "images"),
        labels_dir=str(EVAL_DIR / "labels"),
        min_miou=0.95,
        max_miou_drop=0.01,
        min_cosine=0.999,
        rtol=0.05,
    )
    failed = [f"{check.id}: {check_message(check, report)}" for check in report.failed_checks]
    assert report.passed, "\n".join(failed) + (
        f"\nfirst divergence: {report.first_divergence.onnx_node}" if report.first_divergence else ""
    )
